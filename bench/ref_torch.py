#!/usr/bin/python3
"""PyTorch reference for scripts/bench: the attnscope pipeline written the way a PyTorch user would.

    ref_torch.py IN.npz --heads H [--causal] [--stages output|all|LIST] [--dump DIR] [--threads N]

Reads a self-attention bundle (x (B, T, Dm); W_Q, W_K, W_V, W_O (Dm, Dm) in the math
layout, Q = x . W_Q) with numpy, wraps the arrays with torch.from_numpy (no copy), and computes
the nine stages with torch operations in the arrays' own dtype, without autograd
(torch.inference_mode):

    Q, K, V (B, H, T, Dk) · scores, masked_scores, weights (B, H, T, T) · mask (B, T, T)
    context (B, H, T, Dv) · output (B, T, Dm) = heads concatenated . W_O

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


def attention(x, W_Q, W_K, W_V, W_O, H, causal, keep):
    """Every stage of multi-head self-attention; returns {name: tensor} for the kept names."""
    B, T, Dm = x.shape
    Dk = W_Q.shape[1] // H
    Dv = W_V.shape[1] // H
    kept = {}

    def split(t, D):                       # (B, T, H*D) -> (B, H, T, D), a view
        return t.view(B, T, H, D).transpose(1, 2)

    Q = split(x @ W_Q, Dk)
    K = split(x @ W_K, Dk)
    V = split(x @ W_V, Dv)

    scores = Q @ K.transpose(-2, -1)                        # (B, H, T, T)
    scores.mul_(1.0 / math.sqrt(Dk))
    for name, t in (("Q", Q), ("K", K)):
        if name in keep:
            kept[name] = t
    del Q, K

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

    context = weights @ V                                   # (B, H, T, Dv)
    if "weights" in keep:
        kept["weights"] = weights
    if "V" in keep:
        kept["V"] = V
    del weights, V

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
                           a.heads, a.causal, a.keep)
    t2 = time.perf_counter()

    if a.dump:
        ref_common.save_stages(a.dump, stages, lambda t: t.numpy())
    t3 = time.perf_counter()

    ref_common.print_timings(T0, t1, t2, t3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
