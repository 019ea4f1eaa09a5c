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


def rope(t, theta, inv_freq=None, factor=1.0, rotary=None):
    """t (n, T, d): its first `rotary` features (default d) rotated by position with
    rotate_half pairing (j with j + rotary/2), the rest passed through; inv_freq (rotary/2)
    default theta^(-2j/rotary); cos and sin times `factor` (a scaled RoPE's attention factor)."""
    d, T = t.shape[-1], t.shape[1]
    R = d if rotary is None else rotary
    if inv_freq is None:
        inv_freq = 1.0 / theta ** (np.arange(0, R, 2, dtype=np.float64) / R)
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    r, rest = t[..., :R], t[..., R:]
    out = r * (np.cos(emb) * factor)[None] + rotate_half(r) * (np.sin(emb) * factor)[None]
    return np.concatenate([out, rest], axis=-1)


def rope_parameters(c, R, T, theta=None, scaling=True):
    """(inv_freq (R/2), attention factor) of config c for R rotated features at T tokens, as
    transformers' modeling_rope_utils.py defines each rope_scaling type (ROPE_INIT_FUNCTIONS:
    default, linear, dynamic, yarn, longrope, llama3)."""
    base = c.get("rope_theta", 10000.0) if theta is None else theta
    j = np.arange(0, R, 2, dtype=np.float64) / R
    inv = 1.0 / base ** j
    rs = c.get("rope_scaling") if scaling else None
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    maxpos = c.get("max_position_embeddings", 2048)
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / rs["factor"], 1.0
    if kind == "dynamic":
        seq = max(T, maxpos)
        b = base * ((rs["factor"] * seq / maxpos) - (rs["factor"] - 1)) ** (R / (R - 2))
        return 1.0 / b ** j, 1.0
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return np.where(medium, (1 - smooth) * out / factor + smooth * out, out), 1.0
    if kind == "yarn":
        factor, orig = rs["factor"], maxpos
        if "original_max_position_embeddings" in rs:
            orig = rs["original_max_position_embeddings"]
            factor = maxpos / orig

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        att = rs.get("attention_factor")
        if att is None:
            m, mall = rs.get("mscale"), rs.get("mscale_all_dim")
            att = mscale(factor, m) / mscale(factor, mall) if m and mall else mscale(factor)
        fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

        def corr(rot):
            return R * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = corr(fast), corr(slow)
        if rs.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, R - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(R // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        return inv / factor * (1 - extra) + inv * extra, att
    if kind in ("longrope", "su"):
        factor, att = rs.get("factor"), rs.get("attention_factor")
        orig = c.get("original_max_position_embeddings")
        if orig:
            factor = maxpos / orig
        else:
            orig = maxpos
        if att is None:
            att = 1.0 if factor is None or factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = np.asarray(rs["long_factor"] if T > orig else rs["short_factor"], dtype=np.float64)
        return 1.0 / (ext * base ** j), att
    raise ValueError(kind)


def window_of(c, layer):
    """The layer's sliding window: config.layer_types when given, else each modeling file's rule."""
    t = c["model_type"]
    if c.get("layer_types"):
        return c.get("sliding_window") if c["layer_types"][layer] == "sliding_attention" else None
    if t in ("mistral", "mixtral", "phi3"):
        return c.get("sliding_window")
    if t in ("qwen2", "qwen3") and c.get("use_sliding_window") and layer >= c.get("max_window_layers", 0):
        return c.get("sliding_window")
    if t == "gemma2" and layer % 2 == 0:  # Gemma2Attention: is_sliding = not bool(layer_idx % 2)
        return c.get("sliding_window")
    if t == "gemma3_text" and (layer + 1) % c.get("sliding_window_pattern", 6):
        return c.get("sliding_window")
    return None


def head_rms(t, w, eps):
    """Qwen3RMSNorm over each head's features: t (n, T, d), w (d)."""
    return rms_norm(t, w, eps)


def moe(c, s, q, x, act):
    """MixtralSparseMoeBlock: softmax of the router's logits, the top num_experts_per_tok
    renormalized to sum 1, each expert w2(act(w1 x) * w3 x) weighted, summed."""
    logits = linear(x, s, q + "block_sparse_moe.gate")
    p = softmax(logits)
    k = c["num_experts_per_tok"]
    top = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        w = p[t, top[t]] / p[t, top[t]].sum()
        for e, we in zip(top[t], w):
            e_ = f"{q}block_sparse_moe.experts.{e}."
            y = linear(act(linear(x[t:t + 1], s, e_ + "w1")) * linear(x[t:t + 1], s, e_ + "w3"), s, e_ + "w2")
            out[t] += y[0] * we
    return out


def llama_forward(c, s, ids):
    """modeling_llama, and the families written as it is: mistral, qwen2, qwen3 (q_norm and
    k_norm per head before RoPE), phi3 (qkv_proj: q rows, then k, then v; gate_up_proj: gate
    then up), mixtral (a sparse MoE in place of the MLP)."""
    t = c["model_type"]
    p = "model." if "model.embed_tokens.weight" in s else ""
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G = c.get("num_key_value_heads", H)
    eps = c.get("rms_norm_eps", 1e-6)
    act = ACT[c.get("hidden_act", "silu")]
    theta = c.get("rope_theta", 10000.0)
    T = len(ids)
    dk = c.get("head_dim") or D // H
    R = int(dk * c.get("partial_rotary_factor", 1.0))
    inv, att = rope_parameters(c, R, T)
    h = s[p + "embed_tokens.weight"][ids]
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}layers.{l}."
        a = rms_norm(h, s[q + "input_layernorm.weight"], eps)
        inputs.append(a)
        if t == "phi3":
            qkv = linear(a, s, q + "self_attn.qkv_proj")
            Q, K, V = qkv[:, :H * dk], qkv[:, H * dk:(H + G) * dk], qkv[:, (H + G) * dk:]
            Q, K, V = heads(Q, H), heads(K, G), heads(V, G)
        else:
            Q = heads(linear(a, s, q + "self_attn.q_proj"), H)
            K = heads(linear(a, s, q + "self_attn.k_proj"), G)
            V = heads(linear(a, s, q + "self_attn.v_proj"), G)
        if t == "qwen3":
            Q = head_rms(Q, s[q + "self_attn.q_norm.weight"], eps)
            K = head_rms(K, s[q + "self_attn.k_norm.weight"], eps)
        Q, K = rope(Q, theta, inv, att, R), rope(K, theta, inv, att, R)
        K, V = np.repeat(K, H // G, axis=0), np.repeat(V, H // G, axis=0)  # repeat_kv
        w, ctx = sdpa(Q, K, V, 1.0 / math.sqrt(dk), causal(T, window_of(c, l)))
        weights.append(w)
        h = h + linear(merge(ctx), s, q + "self_attn.o_proj")
        m = rms_norm(h, s[q + "post_attention_layernorm.weight"], eps)
        if t == "mixtral":
            h = h + moe(c, s, q, m, act)
        elif t == "phi3":
            gate, up = np.split(linear(m, s, q + "mlp.gate_up_proj"), 2, axis=-1)
            h = h + linear(up * act(gate), s, q + "mlp.down_proj")
        else:
            h = h + linear(act(linear(m, s, q + "mlp.gate_proj")) * linear(m, s, q + "mlp.up_proj"), s,
                           q + "mlp.down_proj")
    h = rms_norm(h, s[p + "norm.weight"], eps)
    head = s[p + "embed_tokens.weight"] if c.get("tie_word_embeddings", False) else s["lm_head.weight"]
    return {"inputs": inputs, "weights": weights, "logits": h @ head.T}


# ---- GPT-NeoX ---------------------------------------------------------------------------

def gpt_neox_forward(c, s, ids):
    """modeling_gpt_neox: query_key_value (3·H·d, Dm) viewed per head as [q, k, v]; RoPE on
    the first int(d · rotary_pct) features (base rotary_emb_base); LayerNorms with biases;
    use_parallel_residual: h = h + attn(ln1(h)) + mlp(ln2(h)), else sequential."""
    p = "gpt_neox." if "gpt_neox.embed_in.weight" in s else ""
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    d = D // H
    R = int(d * c.get("rotary_pct", 1.0))
    eps = c.get("layer_norm_eps", 1e-5)
    act = ACT[c.get("hidden_act", "gelu")]
    T = len(ids)
    inv = 1.0 / c.get("rotary_emb_base", 10000.0) ** (np.arange(0, R, 2, dtype=np.float64) / R)
    h = s[p + "embed_in.weight"][ids]
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}layers.{l}."

        def ln(x, n):
            return layer_norm(x, s[q + n + ".weight"], s[q + n + ".bias"], eps)
        a = ln(h, "input_layernorm")
        inputs.append(a)
        qkv = linear(a, s, q + "attention.query_key_value").reshape(T, H, 3 * d).transpose(1, 0, 2)
        Q, K, V = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        Q, K = rope(Q, None, inv, 1.0, R), rope(K, None, inv, 1.0, R)
        w, ctx = sdpa(Q, K, V, 1.0 / math.sqrt(d), causal(T))
        weights.append(w)
        attn = linear(merge(ctx), s, q + "attention.dense")

        def mlp(x):
            return linear(act(linear(x, s, q + "mlp.dense_h_to_4h")), s, q + "mlp.dense_4h_to_h")
        if c.get("use_parallel_residual", True):
            h = mlp(ln(h, "post_attention_layernorm")) + attn + h
        else:
            h = attn + h
            h = mlp(ln(h, "post_attention_layernorm")) + h
    h = layer_norm(h, s[p + "final_layer_norm.weight"], s[p + "final_layer_norm.bias"], eps)
    head = s[p + "embed_in.weight"] if c.get("tie_word_embeddings", False) else s["embed_out.weight"]
    return {"inputs": inputs, "weights": weights, "logits": h @ head.T}


# ---- Gemma, Gemma 2, Gemma 3 (text) -----------------------------------------------------

def gemma_rms(x, w, eps):
    """GemmaRMSNorm: x / sqrt(mean(x²) + eps) · (1 + w)."""
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * (1.0 + w)


def gemma_forward(c, s, ids):
    """modeling_gemma / gemma2 / gemma3 (Gemma3ForCausalLM): h = embed · sqrt(hidden); GeGLU
    down(act(gate) * up) with hidden_activation; GemmaRMSNorm (1 + w). Gemma 2 and 3: norms
    after the attention and the MLP too (pre_/post_feedforward_layernorm), scale
    query_pre_attn_scalar^-0.5, attn_logit_softcapping on the scores, final_logit_softcapping
    on the logits, sliding layers (window_of). Gemma 3: q_norm and k_norm per head before
    RoPE; sliding layers rotate with rope_local_base_freq and no rope_scaling."""
    t = c["model_type"]
    two = t in ("gemma2", "gemma3_text")
    p = "model." if "model.embed_tokens.weight" in s else ""
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    G = c.get("num_key_value_heads", H)
    dk = c.get("head_dim") or D // H
    eps = c.get("rms_norm_eps", 1e-6)
    act = ACT[c.get("hidden_activation") or "gelu_pytorch_tanh"]
    T = len(ids)
    scale = c["query_pre_attn_scalar"] ** -0.5 if two and c.get("query_pre_attn_scalar") else dk ** -0.5
    cap = c.get("attn_logit_softcapping") if two else None
    h = s[p + "embed_tokens.weight"][ids] * np.float64(D ** 0.5)
    inputs, weights = [], []
    for l in range(L):
        q = f"{p}layers.{l}."
        a = gemma_rms(h, s[q + "input_layernorm.weight"], eps)
        inputs.append(a)
        Q = heads(linear(a, s, q + "self_attn.q_proj"), H)
        K = heads(linear(a, s, q + "self_attn.k_proj"), G)
        V = heads(linear(a, s, q + "self_attn.v_proj"), G)
        window = window_of(c, l) if two else None
        if t == "gemma3_text":
            Q = gemma_rms(Q, s[q + "self_attn.q_norm.weight"], eps)
            K = gemma_rms(K, s[q + "self_attn.k_norm.weight"], eps)
        if t == "gemma3_text" and window is not None:
            inv, att = rope_parameters(c, dk, T, theta=c.get("rope_local_base_freq", 10000.0), scaling=False)
        else:
            inv, att = rope_parameters(c, dk, T)
        Q, K = rope(Q, None, inv, att), rope(K, None, inv, att)
        K, V = np.repeat(K, H // G, axis=0), np.repeat(V, H // G, axis=0)
        sc = Q @ K.transpose(0, 2, 1) * scale
        if cap:
            sc = np.tanh(sc / cap) * cap
        w = softmax(np.where(causal(T, window)[None], sc, -np.inf))
        weights.append(w)
        o = linear(merge(w @ V), s, q + "self_attn.o_proj")
        if two:
            h = h + gemma_rms(o, s[q + "post_attention_layernorm.weight"], eps)
            m = gemma_rms(h, s[q + "pre_feedforward_layernorm.weight"], eps)
        else:
            h = h + o
            m = gemma_rms(h, s[q + "post_attention_layernorm.weight"], eps)
        f = linear(act(linear(m, s, q + "mlp.gate_proj")) * linear(m, s, q + "mlp.up_proj"), s, q + "mlp.down_proj")
        h = h + (gemma_rms(f, s[q + "post_feedforward_layernorm.weight"], eps) if two else f)
    h = gemma_rms(h, s[p + "norm.weight"], eps)
    head = s[p + "embed_tokens.weight"] if c.get("tie_word_embeddings", True) else s["lm_head.weight"]
    logits = h @ head.T
    if two and c.get("final_logit_softcapping"):
        logits = np.tanh(logits / c["final_logit_softcapping"]) * c["final_logit_softcapping"]
    return {"inputs": inputs, "weights": weights, "logits": logits}


def forward(config, state, ids):
    t = config["model_type"]
    if t == "gpt2":
        return gpt2_forward(config, state, ids)
    if t in ("bert", "roberta"):
        return bert_forward(config, state, ids)
    if t in ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral"):
        return llama_forward(config, state, ids)
    if t == "gpt_neox":
        return gpt_neox_forward(config, state, ids)
    if t in ("gemma", "gemma2", "gemma3_text"):
        return gemma_forward(config, state, ids)
    raise ValueError(t)


# ---- small random models in Hugging Face layout ----------------------------------------

def make_family(arch, seed=0, vocab=40, layers=3):
    """(config, state) of a small random model of the newer families: qwen3, gpt_neox,
    gemma, gemma2, gemma3_text, phi3, mixtral; each with the options its modeling file
    reads set to values that change the result (windows, caps, scales, fused matrices)."""
    rng = np.random.default_rng(seed)
    st = {}

    def r(name, *shape, scale=0.3):
        st[name] = rng.standard_normal(shape) * scale

    def norm(name, d, bias=False, center=1.0):
        st[name + ".weight"] = center + 0.1 * rng.standard_normal(d)
        if bias:
            st[name + ".bias"] = 0.1 * rng.standard_normal(d)

    if arch == "gpt_neox":
        D, H, F = 16, 2, 24
        c = {"model_type": arch, "hidden_size": D, "num_attention_heads": H, "num_hidden_layers": layers,
             "intermediate_size": F, "vocab_size": vocab, "max_position_embeddings": 64, "layer_norm_eps": 1e-5,
             "hidden_act": "gelu", "rotary_pct": 0.5, "rotary_emb_base": 100.0, "use_parallel_residual": True,
             "tie_word_embeddings": False}
        r("gpt_neox.embed_in.weight", vocab, D)
        for l in range(layers):
            q = f"gpt_neox.layers.{l}."
            norm(q + "input_layernorm", D, bias=True)
            norm(q + "post_attention_layernorm", D, bias=True)
            for n, o, i in (("attention.query_key_value", 3 * D, D), ("attention.dense", D, D),
                            ("mlp.dense_h_to_4h", F, D), ("mlp.dense_4h_to_h", D, F)):
                r(q + n + ".weight", o, i)
                r(q + n + ".bias", o, scale=0.1)
        norm("gpt_neox.final_layer_norm", D, bias=True)
        r("embed_out.weight", vocab, D)
        return c, st
    D, H, G, F, dk = 16, 4, 2, 24, 8
    c = {"model_type": arch, "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": G,
         "head_dim": dk, "num_hidden_layers": layers, "intermediate_size": F, "vocab_size": vocab,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0,
         "tie_word_embeddings": False}
    gemma = arch.startswith("gemma")
    center = 0.0 if gemma else 1.0  # Gemma's norms scale by 1 + w
    if gemma:
        c.update(hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
    if arch in ("gemma2", "gemma3_text"):
        c.update(sliding_window=3, query_pre_attn_scalar=12)
    if arch == "gemma2":
        c.update(attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    if arch == "gemma3_text":
        c.update(sliding_window_pattern=2, rope_local_base_freq=10.0, rope_theta=1e6,
                 rope_scaling={"rope_type": "linear", "factor": 8.0})
    if arch == "phi3":
        c.update(head_dim=4, sliding_window=5, original_max_position_embeddings=8,
                 rope_scaling={"type": "longrope", "short_factor": [1.0, 1.25], "long_factor": [3.0, 9.0]})
        dk = 4
    if arch == "mixtral":
        c.update(num_local_experts=4, num_experts_per_tok=2)
    r("model.embed_tokens.weight", vocab, D)
    for l in range(layers):
        q = f"model.layers.{l}."
        norm(q + "input_layernorm", D, center=center)
        norm(q + "post_attention_layernorm", D, center=center)
        if arch in ("gemma2", "gemma3_text"):
            norm(q + "pre_feedforward_layernorm", D, center=center)
            norm(q + "post_feedforward_layernorm", D, center=center)
        if arch == "phi3":
            r(q + "self_attn.qkv_proj.weight", (H + 2 * G) * dk, D)
        else:
            r(q + "self_attn.q_proj.weight", H * dk, D)
            r(q + "self_attn.k_proj.weight", G * dk, D)
            r(q + "self_attn.v_proj.weight", G * dk, D)
        r(q + "self_attn.o_proj.weight", D, H * dk)
        if arch in ("qwen3", "gemma3_text"):
            norm(q + "self_attn.q_norm", dk, center=center)
            norm(q + "self_attn.k_norm", dk, center=center)
        if arch == "phi3":
            r(q + "mlp.gate_up_proj.weight", 2 * F, D)
            r(q + "mlp.down_proj.weight", D, F)
        elif arch == "mixtral":
            r(q + "block_sparse_moe.gate.weight", 4, D, scale=1.0)
            for e in range(4):
                x = f"{q}block_sparse_moe.experts.{e}."
                r(x + "w1.weight", F, D)
                r(x + "w2.weight", D, F)
                r(x + "w3.weight", F, D)
        else:
            r(q + "mlp.gate_proj.weight", F, D)
            r(q + "mlp.up_proj.weight", F, D)
            r(q + "mlp.down_proj.weight", D, F)
    norm("model.norm", D, center=center)
    if not c["tie_word_embeddings"]:
        r("lm_head.weight", vocab, D)
    return c, st


FAMILIES = ("qwen3", "gpt_neox", "gemma", "gemma2", "gemma3_text", "phi3", "mixtral")


def make_model(arch, seed=0, vocab=40, layers=3, head_dim=None):
    """(config, state) of a small random model; `arch` one of gpt2, bert, roberta, llama,
    mistral, qwen2 (qwen2 with q/k/v biases and a window from layer 1 on); head_dim: the
    llama family's head width, in config.json (default hidden_size / heads)."""
    if arch in FAMILIES:
        return make_family(arch, seed, vocab, layers)
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
    dk = head_dim or D // H
    if head_dim:
        c["head_dim"] = head_dim
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
