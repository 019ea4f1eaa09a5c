#!/usr/bin/python3
"""numpy reference for scripts/bench: the attnscope pipeline written the way a numpy user would.

    ref_numpy.py IN.npz --heads H [--kv-heads G] [--rope] [--causal]
                 [--stages output|all|LIST] [--dump DIR] [--threads N]

Reads a self-attention bundle (x (B, T, Dm); W_Q (Dm, H*Dk), W_K (Dm, G*Dk), W_V (Dm, G*Dv),
W_O (H*Dv, Dm) in the math layout, Q = x . W_Q; G = H unless --kv-heads), computes the stages
in the arrays' own dtype

    Q (B, H, T, Dk) · K, V (B, G, T, Dk|Dv) · Q_rot (B, H, T, Dk), K_rot (B, G, T, Dk) (--rope)
    scores, masked_scores, weights (B, H, T, T) · mask (B, T, T)
    context (B, H, T, Dv) · output (B, T, Dm) = heads concatenated . W_O

with vectorised numpy (matmul, where, exp), and with --dump saves each kept stage as
DIR/NAME.npy with np.save. Grouped-query attention repeats each K/V head H/G times
(np.repeat on the head axis: query head h reads K/V head h // (H/G), Hugging Face's repeat_kv).
--rope rotates Q and K as Llama does (rotate_half: feature j pairs with j + Dk/2), from cos/sin
tables of angle t * inv_freq_j, inv_freq_j = 1 / 10000**(2j/Dk), computed in the arrays' dtype.
On stderr it prints

    timings: load=S compute=S output=S

in seconds, measured from the first line after the imports (import time is not in any phase).
With --stages output the intermediate stages are still computed (a numpy user has no other way)
but released as soon as the next stage no longer needs them.

--threads only documents the intent: numpy's OpenBLAS reads OPENBLAS_NUM_THREADS when it is
loaded, so scripts/bench sets that variable for this process. A mismatch is reported.
"""

import math
import os
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
import ref_common  # noqa: E402  (bench/, the script's own directory)

T0 = time.perf_counter()


def rope_tables(T, D, base, dtype):
    """cos, sin (T, D) of Llama's rotary embedding at positions 0..T-1, in dtype."""
    exponent = np.arange(0, D, 2, dtype=dtype) / dtype.type(D)    # 2j / D
    inv_freq = dtype.type(1.0) / (dtype.type(base) ** exponent)    # (D/2,)
    freqs = np.outer(np.arange(T, dtype=dtype), inv_freq)          # (T, D/2)
    emb = np.concatenate([freqs, freqs], axis=-1)                  # (T, D)
    return np.cos(emb), np.sin(emb)


def rotate_half(t):
    """(x1, x2) -> (-x2, x1) over the halves of the last axis."""
    half = t.shape[-1] // 2
    return np.concatenate([-t[..., half:], t[..., :half]], axis=-1)


def attention(x, W_Q, W_K, W_V, W_O, H, G, rope, causal, keep):
    """Every stage of multi-head self-attention; returns {name: array} for the kept names.

    G K/V heads (G = H: classic multi-head); rope: rotary embeddings on Q and K.
    """
    B, T, Dm = x.shape
    Dk = W_Q.shape[1] // H
    Dv = W_V.shape[1] // G
    kept = {}

    def split(t, N, D):                    # (B, T, N*D) -> (B, N, T, D), a view
        return t.reshape(B, T, N, D).transpose(0, 2, 1, 3)

    Q = split(x @ W_Q, H, Dk)
    K = split(x @ W_K, G, Dk)
    V = split(x @ W_V, G, Dv)

    if rope:                                                # Q_rot, K_rot
        cos, sin = rope_tables(T, Dk, ref_common.ROPE_BASE, x.dtype)
        for name, t in (("Q", Q), ("K", K)):
            if name in keep:
                kept[name] = t
        Q = Q * cos + rotate_half(Q) * sin                  # (B, H, T, Dk)
        K = K * cos + rotate_half(K) * sin                  # (B, G, T, Dk)
        del cos, sin
        for name, t in (("Q_rot", Q), ("K_rot", K)):
            if name in keep:
                kept[name] = t
    if G != H:                                              # repeat_kv: head h reads h // (H/G)
        K_heads = np.repeat(K, H // G, axis=1)              # (B, H, T, Dk)
        V_heads = np.repeat(V, H // G, axis=1)              # (B, H, T, Dv)
    else:
        K_heads, V_heads = K, V

    scores = Q @ K_heads.transpose(0, 1, 3, 2)              # (B, H, T, T)
    scores *= x.dtype.type(1.0 / math.sqrt(Dk))
    if not rope:
        for name, t in (("Q", Q), ("K", K)):
            if name in keep:
                kept[name] = t
    del Q, K, K_heads

    mask = np.ones((B, T, T), dtype=bool)                   # True = may attend
    if causal:
        mask &= np.tri(T, T, dtype=bool)[None]              # keys j <= i
    masked_scores = np.where(mask[:, None], scores, x.dtype.type(-np.inf))
    if "scores" in keep:
        kept["scores"] = scores
    del scores

    row_max = masked_scores.max(axis=-1, keepdims=True)
    weights = masked_scores - row_max
    np.exp(weights, out=weights)
    weights /= weights.sum(axis=-1, keepdims=True)
    visible = mask.any(axis=-1)                             # (B, T): rows with a key
    if not visible.all():                                   # all-zero rows, never NaN
        weights[~np.broadcast_to(visible[:, None, :], (B, H, T))] = 0
    for name, t in (("mask", mask), ("masked_scores", masked_scores)):
        if name in keep:
            kept[name] = t
    del mask, masked_scores, row_max

    context = weights @ V_heads                             # (B, H, T, Dv)
    if "weights" in keep:
        kept["weights"] = weights
    if "V" in keep:
        kept["V"] = V
    del weights, V, V_heads

    output = context.transpose(0, 2, 1, 3).reshape(B, T, H * Dv) @ W_O
    if "context" in keep:
        kept["context"] = context
    del context
    if "output" in keep:
        kept["output"] = output
    return kept


def main(argv=None):
    a = ref_common.parse_args(argv, __doc__.splitlines()[0], "expected BLAS threads")
    with np.load(a.bundle, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in ("x", "W_Q", "W_K", "W_V", "W_O")}
    t1 = time.perf_counter()

    stages = attention(arrays["x"], arrays["W_Q"], arrays["W_K"], arrays["W_V"], arrays["W_O"],
                       a.heads, a.kv_heads, a.rope, a.causal, a.keep)
    t2 = time.perf_counter()

    if a.dump:
        ref_common.save_stages(a.dump, stages, lambda a: a)
    t3 = time.perf_counter()

    env_threads = os.environ.get("OPENBLAS_NUM_THREADS")
    if a.threads is not None and env_threads != str(a.threads):
        print(f"ref_numpy: warning: --threads {a.threads} but OPENBLAS_NUM_THREADS="
              f"{env_threads}", file=sys.stderr)
    ref_common.print_timings(T0, t1, t2, t3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
