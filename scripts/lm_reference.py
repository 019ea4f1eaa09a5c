#!/usr/bin/python3
"""A float64 numpy reference for the forward pass of `attnscope run --model` (src/lm/),
written from the published definitions, independent of attnscope's code:

  GPT-2   (Radford et al. 2019; Hugging Face modeling_gpt2): pre-norm blocks
          h += attn(LN_1(h)); h += c_proj(gelu_new(c_fc(LN_2(h)))), Conv1D weights
          stored (in, out), learned positions wpe, final ln_f, logits tied to wte.
  BERT    (Devlin et al. 2019; modeling_bert / modeling_roberta): post-norm blocks
          h = LN(h + attn(h)); h = LN(h + out(gelu(in(h)))), nn.Linear weights stored
          (out, in), word + position + token type 0 embeddings then LayerNorm; RoBERTa's
          positions start at padding_idx + 1; the masked-LM head LN(act(dense(h))) · Eᵀ + b.
  Llama   (Touvron et al. 2023; modeling_llama, modeling_mistral, modeling_qwen2):
          RMSNorm pre-norm blocks, RoPE with rotate_half on q and k, grouped K/V heads
          (repeat_kv), SwiGLU MLP down(silu(gate(x)) * up(x)), Mistral's sliding window
          (key j visible from i when i - W < j <= i), Qwen2's q/k/v biases.

forward(config, state, ids) returns every layer's attention input, every layer's
attention weights (H, T, T) and the logits (T, V); generate(config, state, ids, n) continues
ids by n greedy tokens, a full forward per token (no cache). `state` maps Hugging Face tensor names
to numpy arrays. make_model(arch, seed) builds a small random model of each architecture.
"""

import math

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def silu(x):
    return x / (1.0 + np.exp(-x))


ACT = {"gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "gelu_fast": gelu_tanh, "gelu": gelu_erf,
       "silu": silu, "swish": silu, "relu": lambda x: np.maximum(x, 0.0)}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased, as torch's layer_norm
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def softmax(s):
    m = np.max(s, -1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    return e / e.sum(-1, keepdims=True)


def sdpa(q, k, v, scale, visible):
    """q (H, T, d), k, v (H, T, d), visible (T, T) -> weights (H, T, T), context (H, T, d)."""
    s = q @ k.transpose(0, 2, 1) * scale
    s = np.where(visible[None], s, -np.inf)
    w = softmax(s)
    return w, w @ v


def heads(t, n):
    """(T, n·d) -> (n, T, d)"""
    T = t.shape[0]
    return t.reshape(T, n, -1).transpose(1, 0, 2)


def merge(t):
    """(n, T, d) -> (T, n·d)"""
    return t.transpose(1, 0, 2).reshape(t.shape[1], -1)


def causal(T, window=None):
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    ok = j <= i
    if window is not None:
        ok &= j > i - window
    return ok


# ---- GPT-2 -----------------------------------------------------------------------------

def gpt2_forward(c, s, ids):
    p = "transformer." if "transformer.wte.weight" in s else ""
    D, H, L = c["n_embd"], c["n_head"], c["n_layer"]
    eps = c.get("layer_norm_epsilon", 1e-5)
    act = ACT[c.get("activation_function", "gelu_new")]
    T = len(ids)
    h = s[p + "wte.weight"][ids] + s[p + "wpe.weight"][np.arange(T)]
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}h.{l}."
        a = layer_norm(h, s[q + "ln_1.weight"], s[q + "ln_1.bias"], eps)
        inputs.append(a)
        qkv = a @ s[q + "attn.c_attn.weight"] + s[q + "attn.c_attn.bias"]  # Conv1D: x W + b
        Q, K, V = (heads(t, H) for t in np.split(qkv, 3, axis=1))
        scale = 1.0 / math.sqrt(D // H) if c.get("scale_attn_weights", True) else 1.0
        if c.get("scale_attn_by_inverse_layer_idx", False):
            scale /= l + 1
        w, ctx = sdpa(Q, K, V, scale, causal(T))
        weights.append(w)
        h = h + merge(ctx) @ s[q + "attn.c_proj.weight"] + s[q + "attn.c_proj.bias"]
        m = layer_norm(h, s[q + "ln_2.weight"], s[q + "ln_2.bias"], eps)
        h = h + act(m @ s[q + "mlp.c_fc.weight"] + s[q + "mlp.c_fc.bias"]) @ s[q + "mlp.c_proj.weight"] + \
            s[q + "mlp.c_proj.bias"]
    h = layer_norm(h, s[p + "ln_f.weight"], s[p + "ln_f.bias"], eps)
    head = s[p + "wte.weight"] if c.get("tie_word_embeddings", True) else s["lm_head.weight"]
    return {"inputs": inputs, "weights": weights, "logits": h @ head.T}


# ---- BERT and RoBERTa ------------------------------------------------------------------

def linear(x, s, name):
    """nn.Linear: x Wᵀ + b, W stored (out, in)."""
    y = x @ s[name + ".weight"].T
    return y + s[name + ".bias"] if name + ".bias" in s else y


def bert_forward(c, s, ids):
    roberta = c["model_type"] == "roberta"
    root = "roberta." if roberta else "bert."
    p = root if root + "embeddings.word_embeddings.weight" in s else ""
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    eps = c.get("layer_norm_eps", 1e-12)
    act = ACT[c.get("hidden_act", "gelu")]
    ids = np.asarray(ids)
    T = len(ids)
    if roberta:  # create_position_ids_from_input_ids: padding_idx + cumsum(non-pad) on non-pad tokens
        pad = c.get("pad_token_id", 1)
        mask = (ids != pad).astype(np.int64)
        pos = np.cumsum(mask) * mask + pad
    else:
        pos = np.arange(T)
    e = p + "embeddings."
    h = s[e + "word_embeddings.weight"][ids] + s[e + "position_embeddings.weight"][pos] + \
        s[e + "token_type_embeddings.weight"][np.zeros(T, dtype=np.int64)]
    h = layer_norm(h, s[e + "LayerNorm.weight"], s[e + "LayerNorm.bias"], eps)
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}encoder.layer.{l}."
        inputs.append(h)
        Q, K, V = (heads(linear(h, s, q + "attention.self." + n), H) for n in ("query", "key", "value"))
        w, ctx = sdpa(Q, K, V, 1.0 / math.sqrt(D // H), np.ones((T, T), dtype=bool))
        weights.append(w)
        h = layer_norm(h + linear(merge(ctx), s, q + "attention.output.dense"),
                       s[q + "attention.output.LayerNorm.weight"], s[q + "attention.output.LayerNorm.bias"], eps)
        f = linear(act(linear(h, s, q + "intermediate.dense")), s, q + "output.dense")
        h = layer_norm(h + f, s[q + "output.LayerNorm.weight"], s[q + "output.LayerNorm.bias"], eps)
    if roberta:
        t = gelu_erf(linear(h, s, "lm_head.dense"))
        t = layer_norm(t, s["lm_head.layer_norm.weight"], s["lm_head.layer_norm.bias"], eps)
        bias, dec = s["lm_head.bias"], "lm_head.decoder.weight"
    else:
        t = act(linear(h, s, "cls.predictions.transform.dense"))
        t = layer_norm(t, s["cls.predictions.transform.LayerNorm.weight"],
                       s["cls.predictions.transform.LayerNorm.bias"], eps)
        bias, dec = s["cls.predictions.bias"], "cls.predictions.decoder.weight"
    E = s[e + "word_embeddings.weight"] if c.get("tie_word_embeddings", True) else s[dec]
    return {"inputs": inputs, "weights": weights, "logits": t @ E.T + bias}


# ---- Llama, Mistral, Qwen2 -------------------------------------------------------------

def rotate_half(t):
    half = t.shape[-1] // 2
    return np.concatenate([-t[..., half:], t[..., :half]], axis=-1)


def rope(t, theta):
    """t (n, T, d): rotated by position with rotate_half pairing (j with j + d/2)."""
    d, T = t.shape[-1], t.shape[1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return t * np.cos(emb)[None] + rotate_half(t) * np.sin(emb)[None]


def window_of(c, layer):
    if c["model_type"] == "mistral":
        return c.get("sliding_window")
    if c["model_type"] == "qwen2" and c.get("use_sliding_window") and layer >= c.get("max_window_layers", 0):
        return c.get("sliding_window")
    return None


def llama_forward(c, s, ids):
    p = "model." if "model.embed_tokens.weight" in s else ""
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G = c.get("num_key_value_heads", H)
    eps = c.get("rms_norm_eps", 1e-6)
    act = ACT[c.get("hidden_act", "silu")]
    theta = c.get("rope_theta", 10000.0)
    T = len(ids)
    h = s[p + "embed_tokens.weight"][ids]
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}layers.{l}."
        a = rms_norm(h, s[q + "input_layernorm.weight"], eps)
        inputs.append(a)
        Q = rope(heads(linear(a, s, q + "self_attn.q_proj"), H), theta)
        K = rope(heads(linear(a, s, q + "self_attn.k_proj"), G), theta)
        V = heads(linear(a, s, q + "self_attn.v_proj"), G)
        K, V = np.repeat(K, H // G, axis=0), np.repeat(V, H // G, axis=0)  # repeat_kv
        w, ctx = sdpa(Q, K, V, 1.0 / math.sqrt(Q.shape[-1]), causal(T, window_of(c, l)))
        weights.append(w)
        h = h + linear(merge(ctx), s, q + "self_attn.o_proj")
        m = rms_norm(h, s[q + "post_attention_layernorm.weight"], eps)
        h = h + linear(act(linear(m, s, q + "mlp.gate_proj")) * linear(m, s, q + "mlp.up_proj"), s,
                       q + "mlp.down_proj")
    h = rms_norm(h, s[p + "norm.weight"], eps)
    head = s[p + "embed_tokens.weight"] if c.get("tie_word_embeddings", False) else s["lm_head.weight"]
    return {"inputs": inputs, "weights": weights, "logits": h @ head.T}


def forward(config, state, ids):
    t = config["model_type"]
    if t == "gpt2":
        return gpt2_forward(config, state, ids)
    if t in ("bert", "roberta"):
        return bert_forward(config, state, ids)
    if t in ("llama", "mistral", "qwen2"):
        return llama_forward(config, state, ids)
    raise ValueError(t)


# ---- small random models in Hugging Face layout ----------------------------------------

def make_model(arch, seed=0, vocab=40, layers=3):
    """(config, state) of a small random model; `arch` one of gpt2, bert, roberta, llama,
    mistral, qwen2 (qwen2 with q/k/v biases and a window from layer 1 on)."""
    rng = np.random.default_rng(seed)
    st = {}

    def r(name, *shape, scale=0.3):
        st[name] = rng.standard_normal(shape) * scale

    def ln(name, d, bias=True):
        st[name + ".weight"] = 1.0 + 0.1 * rng.standard_normal(d)
        if bias:
            st[name + ".bias"] = 0.1 * rng.standard_normal(d)

    if arch == "gpt2":
        D, F, P = 8, 20, 32
        c = {"model_type": "gpt2", "n_embd": D, "n_head": 2, "n_layer": layers, "n_positions": P,
             "vocab_size": vocab, "n_inner": F, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
        r("transformer.wte.weight", vocab, D)
        r("transformer.wpe.weight", P, D)
        for l in range(layers):
            q = f"transformer.h.{l}."
            ln(q + "ln_1", D)
            ln(q + "ln_2", D)
            r(q + "attn.c_attn.weight", D, 3 * D)
            r(q + "attn.c_attn.bias", 3 * D, scale=0.1)
            r(q + "attn.c_proj.weight", D, D)
            r(q + "attn.c_proj.bias", D, scale=0.1)
            r(q + "mlp.c_fc.weight", D, F)
            r(q + "mlp.c_fc.bias", F, scale=0.1)
            r(q + "mlp.c_proj.weight", F, D)
            r(q + "mlp.c_proj.bias", D, scale=0.1)
        ln("transformer.ln_f", D)
        return c, st
    if arch in ("bert", "roberta"):
        D, F, P = 8, 16, 40
        root = arch + "."
        c = {"model_type": arch, "hidden_size": D, "num_attention_heads": 2, "num_hidden_layers": layers,
             "intermediate_size": F, "max_position_embeddings": P, "vocab_size": vocab, "type_vocab_size": 2,
             "layer_norm_eps": 1e-12, "hidden_act": "gelu", "position_embedding_type": "absolute"}
        if arch == "roberta":
            c["pad_token_id"] = 1
        e = root + "embeddings."
        r(e + "word_embeddings.weight", vocab, D)
        r(e + "position_embeddings.weight", P, D)
        r(e + "token_type_embeddings.weight", 2, D)
        ln(e + "LayerNorm", D)
        for l in range(layers):
            q = f"{root}encoder.layer.{l}."
            for n in ("query", "key", "value"):
                r(q + f"attention.self.{n}.weight", D, D)
                r(q + f"attention.self.{n}.bias", D, scale=0.1)
            r(q + "attention.output.dense.weight", D, D)
            r(q + "attention.output.dense.bias", D, scale=0.1)
            ln(q + "attention.output.LayerNorm", D)
            r(q + "intermediate.dense.weight", F, D)
            r(q + "intermediate.dense.bias", F, scale=0.1)
            r(q + "output.dense.weight", D, F)
            r(q + "output.dense.bias", D, scale=0.1)
            ln(q + "output.LayerNorm", D)
        h = "lm_head." if arch == "roberta" else "cls.predictions.transform."
        r(h + "dense.weight", D, D)
        r(h + "dense.bias", D, scale=0.1)
        ln(h + ("layer_norm" if arch == "roberta" else "LayerNorm"), D)
        r(("lm_head." if arch == "roberta" else "cls.predictions.") + "bias", vocab, scale=0.1)
        return c, st
    D, H, G, F = 16, 4, 2, 24
    c = {"model_type": arch, "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": G,
         "num_hidden_layers": layers, "intermediate_size": F, "vocab_size": vocab, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0, "tie_word_embeddings": False}
    if arch == "mistral":
        c.update(sliding_window=3, rope_theta=1e6)
    if arch == "qwen2":
        c.update(use_sliding_window=True, sliding_window=2, max_window_layers=1, tie_word_embeddings=True)
    dk = D // H
    r("model.embed_tokens.weight", vocab, D)
    for l in range(layers):
        q = f"model.layers.{l}."
        ln(q + "input_layernorm", D, bias=False)
        ln(q + "post_attention_layernorm", D, bias=False)
        r(q + "self_attn.q_proj.weight", H * dk, D)
        r(q + "self_attn.k_proj.weight", G * dk, D)
        r(q + "self_attn.v_proj.weight", G * dk, D)
        r(q + "self_attn.o_proj.weight", D, H * dk)
        if arch == "qwen2":
            for n, w in (("q", H), ("k", G), ("v", G)):
                r(q + f"self_attn.{n}_proj.bias", w * dk, scale=0.1)
        r(q + "mlp.gate_proj.weight", F, D)
        r(q + "mlp.up_proj.weight", F, D)
        r(q + "mlp.down_proj.weight", D, F)
    ln("model.norm", D, bias=False)
    if not c["tie_word_embeddings"]:
        r("lm_head.weight", vocab, D)
    return c, st


# ---- greedy generation -----------------------------------------------------------------

def generate(config, state, ids, n):
    """n tokens after `ids`, greedily: each the argmax of the last position's logits (ties:
    the lowest id, as np.argmax keeps the first), by a full forward over the whole sequence
    at every step (no cache). Returns (the new ids, their probabilities (softmax over the
    vocabulary), the forward of the final sequence ids + new ids)."""
    seq = list(ids)
    new, probs = [], []
    for _ in range(n):
        logits = forward(config, state, seq)["logits"][-1]
        top = int(np.argmax(logits))
        p = np.exp(logits - logits[top])
        new.append(top)
        probs.append(float(1.0 / p.sum()))
        seq.append(top)
    return new, probs, forward(config, state, seq)
