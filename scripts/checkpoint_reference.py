#!/usr/bin/python3
"""Independent float64 references and writers for attnscope's checkpoint tests.

Three attention layers as the published models compute them, in float64 torch, each
returning every intermediate under attnscope's stage names (docs/design.md, "The stage table";
docs/modern-attention.md): Q, K, V, Q_rot, K_rot (RoPE only), scores, mask, masked_scores, weights,
context, output.

    gpt2_attention   GPT-2's block attention (Radford et al. 2019; Hugging Face
                     GPT2Attention): Conv1D c_attn (Dm, 3·Dm), y = x·W + b, split into
                     q, k, v; heads n_head; causal; c_proj (Dm, Dm) Conv1D.
    bert_attention   BERT self-attention + attention.output.dense (Devlin et al. 2019):
                     nn.Linear (out, in), y = x·Wᵀ + b; not causal; padding as an
                     additive mask over the keys.
    llama_attention  Llama attention (Touvron et al. 2023; Hugging Face LlamaAttention):
                     q/k/v/o_proj nn.Linear, rotate_half RoPE (Su et al. 2021) on the
                     first partial_rotary_factor·head_dim features with rope_theta,
                     repeat_kv for grouped-query attention, causal, an optional sliding
                     window (Mistral: query i sees keys i−W < j ≤ i), optional q/k/v
                     biases (Qwen2).
    mha_attention    nn.MultiheadAttention from its state dict (in_proj_weight …).
    tl_attention     TransformerLens: W_Q/W_K/W_V (H, Dm, Dk), W_O (H, Dv, Dm),
                     b_Q/b_K/b_V (H, Dk), b_O (Dm).

Shapes (outermost first): B batch, Tq queries, Tk keys, Dm model width, H heads, G K/V
heads, Dk per-head query/key width, Dv per-head value width. x is (B, T, Dm).

Stages as attnscope names them: Q (B, H, Tq, Dk), K (B, G, Tk, Dk), V (B, G, Tk, Dv),
Q_rot/K_rot the same after RoPE, scores = Q·Kᵀ·scale (B, H, Tq, Tk) with K/V head
⌊h/(H/G)⌋ for query head h, mask (B, Tq, Tk) true where a query may see a key,
masked_scores (−inf where not), weights = softmax over keys, context = weights·V
(B, H, Tq, Dv), output = concat(heads)·W_O + b_O (B, Tq, Dout).

Writers, from the formats' descriptions and nothing of attnscope's:
    write_safetensors   the safetensors format: an 8-byte little-endian header length
                        N, N bytes of JSON {name: {dtype, shape, data_offsets}, and an
                        optional "__metadata__" of strings}, then the data buffer; the
                        offsets are relative to the buffer's start, contiguous.
    write_sharded       model.safetensors.index.json ({"metadata", "weight_map"}) and
                        its shards.
    bf16_bits / bf16_value   bfloat16 as the top 16 bits of a float32 (round to nearest
                        even), and back.
    state dicts for each preset (make_state) and their config.json (make_config).
"""

import json
import math
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts

STAGES = ("Q", "K", "V", "Q_rot", "K_rot", "scores", "mask", "masked_scores",
          "weights", "context", "output")

DT = torch.float64


def _t(a):
    """A float64 torch tensor of `a` (numpy or torch), copied."""
    if isinstance(a, torch.Tensor):
        return a.detach().to(DT).clone()
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=DT)


def _np(stages):
    return {k: (v.numpy().copy() if isinstance(v, torch.Tensor) else v) for k, v in stages.items()}


# --------------------------------------------------------------------------
# The shared second half: scores, masks, softmax, mixing, output projection
# --------------------------------------------------------------------------

def key_padding_visible(key_padding_mask, B, Tq, Tk):
    """(B, Tq, Tk) true where the key is not padding (key_padding_mask: 1 = PAD)."""
    if key_padding_mask is None:
        return torch.ones(B, Tq, Tk, dtype=torch.bool)
    pad = torch.as_tensor(np.asarray(key_padding_mask)).to(torch.bool)  # (B, Tk)
    return (~pad)[:, None, :].expand(B, Tq, Tk).clone()


def attend(q, k, v, scale, visible, w_o=None, b_o=None, out_layout="in_out"):
    """q (B, H, Tq, Dk), k (B, G, Tk, Dk), v (B, G, Tk, Dv), visible (B, Tq, Tk).
    Returns scores, mask, masked_scores, weights, context, output."""
    B, H, Tq, _ = q.shape
    G = k.shape[1]
    n_rep = H // G
    # repeat_kv (Hugging Face): (B, G, T, D) -> (B, G, n_rep, T, D) -> (B, H, T, D)
    k_rep = k[:, :, None].expand(B, G, n_rep, *k.shape[2:]).reshape(B, H, *k.shape[2:])
    v_rep = v[:, :, None].expand(B, G, n_rep, *v.shape[2:]).reshape(B, H, *v.shape[2:])
    scores = torch.matmul(q, k_rep.transpose(-1, -2)) * scale  # (B, H, Tq, Tk)
    # The additive mask: 0 where visible, -inf where not (broadcast over heads).
    additive = torch.zeros(visible.shape, dtype=DT).masked_fill(~visible, -math.inf)[:, None]
    masked = scores + additive
    # Softmax over keys; a row with no visible key gives zeros.
    row_max = masked.amax(-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(masked - row_max)
    s = e.sum(-1, keepdim=True)
    weights = torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))
    context = torch.matmul(weights, v_rep)  # (B, H, Tq, Dv)
    merged = context.transpose(1, 2).reshape(B, Tq, -1)  # (B, Tq, H·Dv)
    if w_o is None:
        output = merged
    else:
        output = merged @ (w_o if out_layout == "in_out" else w_o.T)
        if b_o is not None:
            output = output + b_o
    return dict(scores=scores, mask=visible, masked_scores=masked, weights=weights,
                context=context, output=output)


def split_heads(t, n):
    """(B, T, n·D) -> (B, n, T, D)."""
    B, T, W = t.shape
    return t.reshape(B, T, n, W // n).transpose(1, 2).contiguous()


def causal_visible(T, window=None):
    """(T, T) true where query i sees key j: j <= i, and i - W < j with a window."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    ok = j <= i
    if window is not None:
        ok = ok & (j > i - window)
    return ok


# --------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------

def gpt2_attention(x, c_attn_w, c_attn_b, c_proj_w, c_proj_b, n_head, key_padding_mask=None,
                   scale_attn_weights=True, layer_idx=0, scale_by_inverse_layer_idx=False):
    """GPT2Attention: Conv1D stores (in, out) and computes x·W + b."""
    x = _t(x)
    B, T, Dm = x.shape
    qkv = x @ _t(c_attn_w)
    if c_attn_b is not None:
        qkv = qkv + _t(c_attn_b)
    q, k, v = qkv.split(Dm, dim=2)
    q, k, v = split_heads(q, n_head), split_heads(k, n_head), split_heads(v, n_head)
    dk = Dm // n_head
    scale = 1.0 / math.sqrt(dk) if scale_attn_weights else 1.0
    if scale_by_inverse_layer_idx:
        scale = scale / float(layer_idx + 1)
    visible = causal_visible(T)[None].expand(B, T, T) & key_padding_visible(key_padding_mask, B, T, T)
    out = attend(q, k, v, scale, visible, _t(c_proj_w), None if c_proj_b is None else _t(c_proj_b))
    out.update(Q=q, K=k, V=v)
    return _np(out)


# --------------------------------------------------------------------------
# BERT
# --------------------------------------------------------------------------

def bert_attention(x, qw, qb, kw, kb, vw, vb, ow, ob, heads, key_padding_mask=None):
    """BertSelfAttention + BertSelfOutput.dense: nn.Linear (out, in), y = x·Wᵀ + b."""
    x = _t(x)
    B, T, _ = x.shape

    def linear(w, b):
        y = x @ _t(w).T
        return y if b is None else y + _t(b)

    q = split_heads(linear(qw, qb), heads)
    k = split_heads(linear(kw, kb), heads)
    v = split_heads(linear(vw, vb), heads)
    scale = 1.0 / math.sqrt(q.shape[-1])
    visible = key_padding_visible(key_padding_mask, B, T, T)
    out = attend(q, k, v, scale, visible, None if ow is None else _t(ow), None if ob is None else _t(ob),
                 out_layout="out_in")
    out.update(Q=q, K=k, V=v)
    return _np(out)


# --------------------------------------------------------------------------
# Llama (Mistral, Qwen2)
# --------------------------------------------------------------------------

def rotate_half(t):
    """(…, R) -> (−t[R/2:], t[:R/2])."""
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def rope_cos_sin(positions, rotary_dim, theta):
    """cos, sin (T, R): inv_freq_j = 1 / θ^(2j/R), angle = position · inv_freq, duplicated."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=DT) / rotary_dim))
    freqs = torch.outer(positions.to(DT), inv_freq)  # (T, R/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, R)
    return emb.cos(), emb.sin()


def apply_rotary(t, cos, sin):
    """t (B, n, T, D): the first R features rotate (rotate_half), the rest pass."""
    R = cos.shape[-1]
    rot, rest = t[..., :R], t[..., R:]
    rot = rot * cos + rotate_half(rot) * sin
    return torch.cat((rot, rest), dim=-1)


def llama_attention(x, qw, kw, vw, ow, heads, kv_heads, head_dim, rope_theta=10000.0,
                    partial_rotary_factor=1.0, sliding_window=None, qb=None, kb=None, vb=None,
                    ob=None, key_padding_mask=None):
    """LlamaAttention (and Mistral's window, Qwen2's q/k/v biases). Weights (out, in)."""
    x = _t(x)
    B, T, _ = x.shape

    def linear(w, b):
        y = x @ _t(w).T
        return y if b is None else y + _t(b)

    q = split_heads(linear(qw, qb), heads)  # (B, H, T, D)
    k = split_heads(linear(kw, kb), kv_heads)  # (B, G, T, D)
    v = split_heads(linear(vw, vb), kv_heads)
    rotary_dim = int(head_dim * partial_rotary_factor)
    cos, sin = rope_cos_sin(torch.arange(T), rotary_dim, rope_theta)
    q_rot, k_rot = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    visible = causal_visible(T, sliding_window)[None].expand(B, T, T) & key_padding_visible(
        key_padding_mask, B, T, T)
    out = attend(q_rot, k_rot, v, head_dim ** -0.5, visible, None if ow is None else _t(ow),
                 None if ob is None else _t(ob), out_layout="out_in")
    out.update(Q=q, K=k, V=v, Q_rot=q_rot, K_rot=k_rot)
    return _np(out)


# --------------------------------------------------------------------------
# nn.MultiheadAttention and TransformerLens
# --------------------------------------------------------------------------

def mha_attention(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, heads,
                  key_padding_mask=None, causal=False):
    """nn.MultiheadAttention (self-attention): in_proj_weight (3E, E) holds W_q, W_k, W_v
    (out, in) stacked; out_proj (E, E)."""
    x = _t(x)
    B, T, E = x.shape
    w = _t(in_proj_weight)
    b = None if in_proj_bias is None else _t(in_proj_bias)
    parts = []
    for i in range(3):
        y = x @ w[i * E:(i + 1) * E].T
        if b is not None:
            y = y + b[i * E:(i + 1) * E]
        parts.append(split_heads(y, heads))
    q, k, v = parts
    visible = key_padding_visible(key_padding_mask, B, T, T)
    if causal:
        visible = visible & causal_visible(T)[None]
    out = attend(q, k, v, 1.0 / math.sqrt(E // heads), visible, _t(out_proj_weight),
                 None if out_proj_bias is None else _t(out_proj_bias), out_layout="out_in")
    out.update(Q=q, K=k, V=v)
    return _np(out)


def tl_attention(x, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, b_O=None,
                 key_padding_mask=None, causal=False):
    """TransformerLens: q[b,h,t,d] = Σ_m x[b,t,m]·W_Q[h,m,d] + b_Q[h,d]; output[b,t,m] =
    Σ_{h,d} z[b,h,t,d]·W_O[h,d,m] + b_O[m]."""
    x = _t(x)
    B, T, _ = x.shape

    def proj(w, b):
        y = torch.einsum("btm,hmd->bhtd", x, _t(w))
        return y if b is None else y + _t(b)[None, :, None, :]

    q, k, v = proj(W_Q, b_Q), proj(W_K, b_K), proj(W_V, b_V)
    visible = key_padding_visible(key_padding_mask, B, T, T)
    if causal:
        visible = visible & causal_visible(T)[None]
    out = attend(q, k, v, 1.0 / math.sqrt(q.shape[-1]), visible)
    out["output"] = torch.einsum("bhtd,hdm->btm", out["context"], _t(W_O))
    if b_O is not None:
        out["output"] = out["output"] + _t(b_O)
    out.update(Q=q, K=k, V=v)
    return _np(out)


# --------------------------------------------------------------------------
# One layer of a state dict, by preset (the names each library gives its weights)
# --------------------------------------------------------------------------

def layer_reference(preset, state, config, layer, x, key_padding_mask=None, heads=None,
                    causal=False, root=None):
    """The stages of layer `layer` of `state` (name -> float64 array, as stored) under
    `config` (config.json's dict). `heads` for mha; `causal` for mha and tl."""
    g = lambda n: state.get(n)  # noqa: E731
    if preset == "gpt2":
        p = f"{root if root is not None else 'transformer.h.'}{layer}.attn."
        return gpt2_attention(x, g(p + "c_attn.weight"), g(p + "c_attn.bias"), g(p + "c_proj.weight"),
                              g(p + "c_proj.bias"), config["n_head"], key_padding_mask,
                              scale_attn_weights=config.get("scale_attn_weights", True), layer_idx=layer,
                              scale_by_inverse_layer_idx=config.get("scale_attn_by_inverse_layer_idx", False))
    if preset == "bert":
        p = f"{root if root is not None else 'bert.encoder.layer.'}{layer}.attention."
        return bert_attention(x, g(p + "self.query.weight"), g(p + "self.query.bias"), g(p + "self.key.weight"),
                              g(p + "self.key.bias"), g(p + "self.value.weight"), g(p + "self.value.bias"),
                              g(p + "output.dense.weight"), g(p + "output.dense.bias"),
                              config["num_attention_heads"], key_padding_mask)
    if preset in ("llama", "mistral", "qwen2"):
        p = f"{root if root is not None else 'model.layers.'}{layer}.self_attn."
        H = config["num_attention_heads"]
        G = config.get("num_key_value_heads") or H
        D = config.get("head_dim") or config["hidden_size"] // H
        window = None
        if config.get("layer_types") is not None:  # newer configs: one entry per layer
            if config["layer_types"][layer] == "sliding_attention":
                window = config["sliding_window"]
        elif config.get("sliding_window") is not None:
            if preset == "mistral":
                window = config["sliding_window"]
            elif preset == "qwen2" and config.get("use_sliding_window") and layer >= config.get(
                    "max_window_layers", 0):
                window = config["sliding_window"]
        return llama_attention(x, g(p + "q_proj.weight"), g(p + "k_proj.weight"), g(p + "v_proj.weight"),
                               g(p + "o_proj.weight"), H, G, D, config.get("rope_theta", 10000.0),
                               config.get("partial_rotary_factor", 1.0), window, g(p + "q_proj.bias"),
                               g(p + "k_proj.bias"), g(p + "v_proj.bias"), g(p + "o_proj.bias"),
                               key_padding_mask)
    if preset == "mha":
        p = f"{root if root is not None else 'layers.'}{layer}.self_attn."
        return mha_attention(x, g(p + "in_proj_weight"), g(p + "in_proj_bias"), g(p + "out_proj.weight"),
                             g(p + "out_proj.bias"), heads, key_padding_mask, causal)
    if preset == "tl":
        p = f"{root if root is not None else 'blocks.'}{layer}.attn."
        return tl_attention(x, g(p + "W_Q"), g(p + "W_K"), g(p + "W_V"), g(p + "W_O"), g(p + "b_Q"),
                            g(p + "b_K"), g(p + "b_V"), g(p + "b_O"), key_padding_mask, causal)
    raise ValueError(f"unknown preset {preset}")


# --------------------------------------------------------------------------
# Synthetic models: state dicts (float64, as each library stores them) and config.json
# --------------------------------------------------------------------------

def make_config(preset, **over):
    """A config.json for a small model of `preset`; keyword arguments replace fields."""
    if preset == "gpt2":
        c = {"model_type": "gpt2", "n_head": 2, "n_embd": 8, "n_layer": 3, "n_positions": 64,
             "vocab_size": 11, "architectures": ["GPT2LMHeadModel"]}
    elif preset == "bert":
        c = {"model_type": "bert", "num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 3,
             "intermediate_size": 16, "position_embedding_type": "absolute", "vocab_size": 11}
    elif preset == "llama":
        c = {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16,
             "num_hidden_layers": 3, "intermediate_size": 24, "rope_theta": 10000.0, "rope_scaling": None,
             "vocab_size": 11, "torch_dtype": "float32"}
    elif preset == "mistral":
        c = {"model_type": "mistral", "num_attention_heads": 4, "num_key_value_heads": 1, "hidden_size": 16,
             "head_dim": 4, "num_hidden_layers": 3, "intermediate_size": 24, "rope_theta": 1000000.0,
             "sliding_window": 3, "vocab_size": 11}
    elif preset == "qwen2":
        c = {"model_type": "qwen2", "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16,
             "num_hidden_layers": 3, "intermediate_size": 24, "rope_theta": 500000.0,
             "use_sliding_window": True, "sliding_window": 2, "max_window_layers": 1, "vocab_size": 11}
    else:
        raise ValueError(preset)
    c.update(over)
    return c


def _dims(preset, config):
    if preset == "gpt2":
        return config["n_embd"], config["n_layer"]
    if preset == "bert":
        return config["hidden_size"], config["num_hidden_layers"]
    return config["hidden_size"], config["num_hidden_layers"]


def make_state(preset, config=None, layers=3, seed=0, dm=8, heads=2, dk=None, biases=True):
    """A state dict (name -> float64 numpy, as the library stores it) of a small model,
    with the tensors around attention too (embeddings, norms, MLP) as the real ones have.
    gpt2/bert/llama/mistral/qwen2 take their sizes from `config`; mha and tl from
    dm/heads/dk."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: rng.standard_normal(shape) * (1.0 / math.sqrt(shape[-1] if len(shape) > 1 else 4))  # noqa
    s = {}
    if preset == "gpt2":
        dm, L = _dims(preset, config)
        s["transformer.wte.weight"] = w(config["vocab_size"], dm)
        s["transformer.wpe.weight"] = w(config["n_positions"], dm)
        for n in range(L):
            p = f"transformer.h.{n}."
            s[p + "ln_1.weight"] = np.ones(dm)
            s[p + "ln_1.bias"] = np.zeros(dm)
            s[p + "attn.c_attn.weight"] = w(dm, 3 * dm)
            if biases:
                s[p + "attn.c_attn.bias"] = w(3 * dm)
            s[p + "attn.c_proj.weight"] = w(dm, dm)
            if biases:
                s[p + "attn.c_proj.bias"] = w(dm)
            # The causal-mask buffers older GPT-2 checkpoints carry (not weights).
            s[p + "attn.bias"] = np.tril(np.ones((config["n_positions"],) * 2, dtype=bool))[None, None]
            s[p + "attn.masked_bias"] = np.array(-1e4)
            s[p + "mlp.c_fc.weight"] = w(dm, 4 * dm)
            s[p + "mlp.c_proj.weight"] = w(4 * dm, dm)
        s["transformer.ln_f.weight"] = np.ones(dm)
    elif preset == "bert":
        dm, L = _dims(preset, config)
        s["bert.embeddings.word_embeddings.weight"] = w(config["vocab_size"], dm)
        s["bert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]  # a buffer, int64
        for n in range(L):
            p = f"bert.encoder.layer.{n}.attention."
            for part in ("query", "key", "value"):
                s[p + f"self.{part}.weight"] = w(dm, dm)
                s[p + f"self.{part}.bias"] = w(dm)
            s[p + "output.dense.weight"] = w(dm, dm)
            s[p + "output.dense.bias"] = w(dm)
            s[p + "output.LayerNorm.weight"] = np.ones(dm)
            s[f"bert.encoder.layer.{n}.intermediate.dense.weight"] = w(config["intermediate_size"], dm)
        s["bert.pooler.dense.weight"] = w(dm, dm)
    elif preset in ("llama", "mistral", "qwen2"):
        dm, L = _dims(preset, config)
        H = config["num_attention_heads"]
        G = config.get("num_key_value_heads") or H
        D = config.get("head_dim") or dm // H
        s["model.embed_tokens.weight"] = w(config["vocab_size"], dm)
        for n in range(L):
            p = f"model.layers.{n}."
            s[p + "input_layernorm.weight"] = np.ones(dm)
            s[p + "self_attn.q_proj.weight"] = w(H * D, dm)
            s[p + "self_attn.k_proj.weight"] = w(G * D, dm)
            s[p + "self_attn.v_proj.weight"] = w(G * D, dm)
            s[p + "self_attn.o_proj.weight"] = w(dm, H * D)
            # Older Llama checkpoints keep RoPE's frequencies as a buffer beside the weights.
            s[p + "self_attn.rotary_emb.inv_freq"] = 1.0 / (10000.0 ** (np.arange(0, D, 2) / D))
            if preset == "qwen2" and biases:
                s[p + "self_attn.q_proj.bias"] = w(H * D)
                s[p + "self_attn.k_proj.bias"] = w(G * D)
                s[p + "self_attn.v_proj.bias"] = w(G * D)
            s[p + "mlp.gate_proj.weight"] = w(config["intermediate_size"], dm)
            s[p + "mlp.down_proj.weight"] = w(dm, config["intermediate_size"])
        s["model.norm.weight"] = np.ones(dm)
        s["lm_head.weight"] = w(config["vocab_size"], dm)
    elif preset == "mha":
        for n in range(layers):
            p = f"layers.{n}."
            s[p + "self_attn.in_proj_weight"] = w(3 * dm, dm)
            if biases:
                s[p + "self_attn.in_proj_bias"] = w(3 * dm)
            s[p + "self_attn.out_proj.weight"] = w(dm, dm)
            if biases:
                s[p + "self_attn.out_proj.bias"] = w(dm)
            s[p + "linear1.weight"] = w(2 * dm, dm)
            s[p + "linear1.bias"] = w(2 * dm)
            s[p + "norm1.weight"] = np.ones(dm)
    elif preset == "tl":
        dk = dk or dm // heads
        s["embed.W_E"] = w(11, dm)
        for n in range(layers):
            p = f"blocks.{n}.attn."
            s[p + "W_Q"] = w(heads, dm, dk)
            s[p + "W_K"] = w(heads, dm, dk)
            s[p + "W_V"] = w(heads, dm, dk)
            s[p + "W_O"] = w(heads, dk, dm)
            if biases:
                s[p + "b_Q"] = w(heads, dk)
                s[p + "b_K"] = w(heads, dk)
                s[p + "b_V"] = w(heads, dk)
                s[p + "b_O"] = w(dm)
            s[f"blocks.{n}.ln1.w"] = np.ones(dm)
    else:
        raise ValueError(preset)
    return s


# --------------------------------------------------------------------------
# Storage dtypes: what a float64 array becomes when stored, and back (exactly)
# --------------------------------------------------------------------------

def bf16_bits(a):
    """bfloat16 bits (uint16) of float32(a), rounded to nearest even (NaN kept a NaN)."""
    f = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def bf16_value(bits):
    """float64 of bfloat16 bits: they are a float32's top half."""
    return (np.asarray(bits, dtype=np.uint32) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def stored(a, dtype):
    """The float64 value of `a` after storing it as `dtype` (F64, F32, F16, BF16)."""
    a = np.asarray(a, dtype=np.float64)
    if dtype == "F64":
        return a.copy()
    if dtype == "F32":
        return a.astype(np.float32).astype(np.float64)
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_value(bf16_bits(a)).reshape(a.shape)
    raise ValueError(dtype)


def is_float(a):
    return np.asarray(a).dtype.kind == "f"


def widened(state, dtype):
    """Every float tensor as stored in `dtype`; integer and bool tensors as they are."""
    return {k: (stored(v, dtype) if is_float(v) else np.asarray(v)) for k, v in state.items()}


# --------------------------------------------------------------------------
# safetensors, from the format's description
# --------------------------------------------------------------------------

_ST_OF_NUMPY = {"int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16",
                "uint32": "U32", "uint64": "U64", "bool": "BOOL"}
_ST_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
             "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}
_ST_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def tensor_bytes(a, dtype):
    """The little-endian C-order bytes of float64/whatever `a` stored as `dtype`."""
    if dtype == "BF16":
        return bf16_bits(a).astype("<u2").tobytes()
    return np.ascontiguousarray(np.asarray(a).astype(_ST_NUMPY[dtype])).tobytes()


def safetensors_header(entries, metadata=None, align=8):
    """The header bytes (length prefix included) for entries [(name, dtype, shape)], laid
    out one after another in that order; returns (bytes, [(begin, end)])."""
    header, spans, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in entries:
        n = _ST_SIZE[dtype] * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + n]}
        spans.append((offset, offset + n))
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % align)  # pad with spaces so the buffer starts aligned
    return struct.pack("<Q", len(text)) + text, spans


def write_safetensors(path, tensors, dtype="F32", metadata=None, align=8):
    """tensors: {name: array}; every float array stored as `dtype`, integers and bools as
    themselves (or a per-name dtype given as {name: (array, dtype)}). The data start at a
    multiple of `align` (the reference writer pads to 8; 1: no padding). Returns the path."""
    items = []
    for name, value in tensors.items():
        a, dt = value if isinstance(value, tuple) else (value, dtype if is_float(value) else
                                                        _ST_OF_NUMPY[np.asarray(value).dtype.name])
        items.append((name, dt, np.shape(a), a))
    head, _ = safetensors_header([(n, d, s) for n, d, s, _ in items],
                                 {"format": "pt"} if metadata is None else metadata, align)
    with open(path, "wb") as f:
        f.write(head)
        for _, dt, _, a in items:
            f.write(tensor_bytes(a, dt))
    return path


def write_sharded(directory, tensors, shards=2, dtype="F32", index_name="model.safetensors.index.json"):
    """Splits `tensors` (in order) into `shards` files model-0000i-of-0000n.safetensors and
    writes the index; returns the index's path."""
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for i in range(shards):
        chunk = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(f"{directory}/{fname}", {n: tensors[n] for n in chunk}, dtype)
        for n in chunk:
            weight_map[n] = fname
            total += (_ST_SIZE[dtype] if is_float(tensors[n]) else np.asarray(tensors[n]).itemsize) * int(
                np.prod(np.shape(tensors[n]), dtype=np.int64))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    path = f"{directory}/{index_name}"
    with open(path, "w") as f:
        json.dump(index, f, indent=2)
    return path


# --------------------------------------------------------------------------
# torch.save
# --------------------------------------------------------------------------

_TORCH_DTYPE = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def torch_state(tensors, dtype="F32"):
    """{name: torch tensor} (an OrderedDict, as state_dict()): float arrays as `dtype`,
    integers and bools as themselves."""
    from collections import OrderedDict
    return OrderedDict((k, torch.tensor(np.asarray(v, dtype=np.float64)).to(_TORCH_DTYPE[dtype]) if is_float(v)
                        else torch.from_numpy(np.array(v))) for k, v in tensors.items())


def write_torch(path, tensors, dtype="F32"):
    torch.save(torch_state(tensors, dtype), str(path))
    return path


def self_check():
    """The references against PyTorch's own modules and an independent RoPE; returns the
    largest difference of each check."""
    torch.manual_seed(0)
    diffs = {}
    x = torch.randn(2, 5, 8, dtype=DT)
    pad = np.array([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    pad_t = torch.tensor(pad, dtype=torch.bool)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=DT)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    ref = mha_attention(x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias, 2,
                        key_padding_mask=pad)
    out, w = mha(x, x, x, key_padding_mask=pad_t, average_attn_weights=False)
    diffs["mha vs nn.MultiheadAttention"] = max(float((torch.tensor(ref["output"]) - out).abs().max()),
                                                float((torch.tensor(ref["weights"]) - w).abs().max()))
    # GPT-2 = nn.MultiheadAttention with in_proj = c_attnᵀ, out_proj = c_projᵀ, causal.
    c_attn, c_attn_b = torch.randn(8, 24, dtype=DT), torch.randn(24, dtype=DT)
    c_proj, c_proj_b = torch.randn(8, 8, dtype=DT), torch.randn(8, dtype=DT)
    with torch.no_grad():
        mha.in_proj_weight.copy_(c_attn.T)
        mha.in_proj_bias.copy_(c_attn_b)
        mha.out_proj.weight.copy_(c_proj.T)
        mha.out_proj.bias.copy_(c_proj_b)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)  # True = blocked
    out, w = mha(x, x, x, attn_mask=causal, key_padding_mask=pad_t, average_attn_weights=False)
    ref = gpt2_attention(x, c_attn, c_attn_b, c_proj, c_proj_b, 2, key_padding_mask=pad)
    diffs["gpt2 vs nn.MultiheadAttention"] = max(float((torch.tensor(ref["output"]) - out).abs().max()),
                                                 float((torch.tensor(ref["weights"]) - w).abs().max()))
    # BERT = nn.MultiheadAttention with the three nn.Linear stacked.
    lin = [torch.randn(8, 8, dtype=DT) for _ in range(4)]
    bia = [torch.randn(8, dtype=DT) for _ in range(4)]
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat(lin[:3]))
        mha.in_proj_bias.copy_(torch.cat(bia[:3]))
        mha.out_proj.weight.copy_(lin[3])
        mha.out_proj.bias.copy_(bia[3])
    out, w = mha(x, x, x, key_padding_mask=pad_t, average_attn_weights=False)
    ref = bert_attention(x, lin[0], bia[0], lin[1], bia[1], lin[2], bia[2], lin[3], bia[3], 2, pad)
    diffs["bert vs nn.MultiheadAttention"] = max(float((torch.tensor(ref["output"]) - out).abs().max()),
                                                 float((torch.tensor(ref["weights"]) - w).abs().max()))
    # Llama: RoPE against complex numbers (pairs j, j + R/2),
    # GQA against explicitly repeated K/V heads run as plain multi-head attention.
    H, G, D, R, theta = 4, 2, 6, 4, 500.0
    qw, kw, vw, ow = (torch.randn(H * D, 8, dtype=DT), torch.randn(G * D, 8, dtype=DT),
                      torch.randn(G * D, 8, dtype=DT), torch.randn(8, H * D, dtype=DT))
    ref = llama_attention(x, qw, kw, vw, ow, H, G, D, theta, R / D, sliding_window=3)
    q = torch.tensor(ref["Q"])
    pos = torch.arange(5, dtype=DT)
    ang = pos[:, None] * theta ** (-torch.arange(0, R, 2, dtype=DT) / R)[None, :]  # (T, R/2)
    z = torch.complex(q[..., :R // 2], q[..., R // 2:R]) * torch.polar(torch.ones_like(ang), ang)
    q_rot = torch.cat((z.real, z.imag, q[..., R:]), -1)
    diffs["llama RoPE vs complex numbers"] = float((q_rot - torch.tensor(ref["Q_rot"])).abs().max())
    k_rot = torch.tensor(ref["K_rot"]).repeat_interleave(H // G, dim=1)
    v = torch.tensor(ref["V"]).repeat_interleave(H // G, dim=1)
    sc = torch.tensor(ref["Q_rot"]) @ k_rot.transpose(-1, -2) / math.sqrt(D)
    i, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    allowed = (j <= i) & (i - j < 3)
    wts = torch.softmax(sc.masked_fill(~allowed, -math.inf), -1)
    o = (wts @ v).transpose(1, 2).reshape(2, 5, H * D) @ ow.T
    diffs["llama GQA + window vs repeated heads"] = float((o - torch.tensor(ref["output"])).abs().max())
    return diffs


if __name__ == "__main__":
    worst = 0.0
    for what, d in self_check().items():
        print(f"{what}: max |diff| {d:.2e}")
        worst = max(worst, d)
    sys.exit(0 if worst <= 1e-12 else 1)
