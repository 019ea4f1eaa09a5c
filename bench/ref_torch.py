#!/usr/bin/python3
"""PyTorch reference for scripts/bench: the attnscope pipeline written the way a PyTorch user would.

    ref_torch.py IN.npz --heads H [--kv-heads G] [--rope] [--causal]
                 [--stages output|all|LIST] [--dump DIR] [--threads N]

Reads a self-attention bundle (x (B, T, Dm); W_Q (Dm, H*Dk), W_K (Dm, G*Dk), W_V (Dm, G*Dv),
W_O (H*Dv, Dm) in the math layout, Q = x . W_Q; G = H unless --kv-heads) with numpy, wraps the
arrays with torch.from_numpy (no copy), and computes the stages with torch operations in the
arrays' own dtype, without autograd (torch.inference_mode):

    Q (B, H, T, Dk) · K, V (B, G, T, Dk|Dv) · Q_rot (B, H, T, Dk), K_rot (B, G, T, Dk) (--rope)
    scores, masked_scores, weights (B, H, T, T) · mask (B, T, T)
    context (B, H, T, Dv) · output (B, T, Dm) = heads concatenated . W_O

Grouped-query attention and RoPE follow Hugging Face's Llama attention (modeling_llama.py):
LlamaRotaryEmbedding's cos/sin (inv_freq = 1 / 10000**(2j/Dk), angles = inv_freq @ positions,
here in the arrays' dtype), apply_rotary_pos_emb with rotate_half, and repeat_kv (expand +
reshape: query head h reads K/V head h // (H/G)). The mask is applied as before, masked_fill
with -inf where a key is hidden (Llama adds the dtype's minimum instead: the same weights, but
masked_scores would not be the stage attnscope defines).

With --dump each kept stage is saved as DIR/NAME.npy (tensor.numpy(), then np.save). On
stderr it prints

    timings: load=S compute=S output=S

in seconds, measured from the first line after the imports (import time is not in any phase).
--threads N calls torch.set_num_threads(N) (PyTorch 1.13 here starts with one thread).
With --stages output the intermediate stages are still computed but released as soon as the
next stage no longer needs them.
"""

import math
import sys
import time

import numpy as np
import torch

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
import ref_common  # noqa: E402  (bench/, the script's own directory)

T0 = time.perf_counter()


# ---- Hugging Face Llama (transformers, modeling_llama.py), in torch ops ----------

def rope_cos_sin(T, dim, base, dtype):
    """LlamaRotaryEmbedding.forward at position_ids 0..T-1: cos, sin (1, T, dim) in dtype."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))
    position_ids = torch.arange(T)[None]                                    # (1, T)
    inv_freq_expanded = inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].to(dtype)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)    # (1, T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)                                 # (1, T, dim)
    return emb.cos(), emb.sin()


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Applies Rotary Position Embedding to the query and key tensors."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    """(batch, num_key_value_heads, seqlen, head_dim) -> (batch, num_attention_heads, ...)."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def attention(x, W_Q, W_K, W_V, W_O, H, G, rope, causal, keep):
    """Every stage of multi-head self-attention; returns {name: tensor} for the kept names.

    G K/V heads (G = H: classic multi-head); rope: rotary embeddings on Q and K.
    """
    B, T, Dm = x.shape
    Dk = W_Q.shape[1] // H
    Dv = W_V.shape[1] // G
    kept = {}

    def split(t, N, D):                    # (B, T, N*D) -> (B, N, T, D), a view
        return t.view(B, T, N, D).transpose(1, 2)

    Q = split(x @ W_Q, H, Dk)
    K = split(x @ W_K, G, Dk)
    V = split(x @ W_V, G, Dv)

    if rope:                                                # Q_rot, K_rot
        cos, sin = rope_cos_sin(T, Dk, ref_common.ROPE_BASE, x.dtype)
        for name, t in (("Q", Q), ("K", K)):
            if name in keep:
                kept[name] = t
        Q, K = apply_rotary_pos_emb(Q, K, cos, sin)         # (B, H|G, T, Dk)
        del cos, sin
        for name, t in (("Q_rot", Q), ("K_rot", K)):
            if name in keep:
                kept[name] = t
    K_heads = repeat_kv(K, H // G)                          # (B, H, T, Dk)
    V_heads = repeat_kv(V, H // G)                          # (B, H, T, Dv)

    scores = Q @ K_heads.transpose(-2, -1)                  # (B, H, T, T)
    scores.mul_(1.0 / math.sqrt(Dk))
    if not rope:
        for name, t in (("Q", Q), ("K", K)):
            if name in keep:
                kept[name] = t
    del Q, K, K_heads

    mask = torch.ones(B, T, T, dtype=torch.bool)            # True = may attend
    if causal:
        mask = torch.tril(mask)                             # keys j <= i
    masked_scores = scores.masked_fill(~mask[:, None], float("-inf"))
    if "scores" in keep:
        kept["scores"] = scores
    del scores

    weights = torch.softmax(masked_scores, dim=-1)
    visible = mask.any(dim=-1)                              # (B, T): rows with a key
    if not bool(visible.all()):                             # all-zero rows, never NaN
        weights.masked_fill_(~visible[:, None, :, None], 0.0)
    for name, t in (("mask", mask), ("masked_scores", masked_scores)):
        if name in keep:
            kept[name] = t
    del mask, masked_scores

    context = weights @ V_heads                             # (B, H, T, Dv)
    if "weights" in keep:
        kept["weights"] = weights
    if "V" in keep:
        kept["V"] = V
    del weights, V, V_heads

    output = context.transpose(1, 2).reshape(B, T, H * Dv) @ W_O
    if "context" in keep:
        kept["context"] = context
    del context
    if "output" in keep:
        kept["output"] = output
    return kept


def main(argv=None):
    a = ref_common.parse_args(argv, __doc__.splitlines()[0], "torch.set_num_threads(N)")
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    with np.load(a.bundle, allow_pickle=False) as npz:
        arrays = {name: torch.from_numpy(npz[name]) for name in ("x", "W_Q", "W_K", "W_V", "W_O")}
    t1 = time.perf_counter()

    with torch.inference_mode():
        stages = attention(arrays["x"], arrays["W_Q"], arrays["W_K"], arrays["W_V"], arrays["W_O"],
                           a.heads, a.kv_heads, a.rope, a.causal, a.keep)
    t2 = time.perf_counter()

    if a.dump:
        ref_common.save_stages(a.dump, stages, lambda t: t.numpy())
    t3 = time.perf_counter()

    ref_common.print_timings(T0, t1, t2, t3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
