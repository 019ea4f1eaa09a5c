"""What the benchmark references share: their command lines, how they save the kept
stages, and their timings line. The attention itself each computes in its own file,
written independently, in its own library's idiom."""

import argparse
import os
import sys

import numpy as np

# Pipeline order; Q_rot and K_rot exist only with --rope.
STAGES = ("Q", "K", "V", "Q_rot", "K_rot", "scores", "mask", "masked_scores", "weights",
          "context", "output")
ROPE_BASE = 10000.0                 # RoPE's θ, as attnscope's default and Llama's


def parse_args(argv, description, threads_help):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("bundle", help=".npz with x, W_Q, W_K, W_V, W_O")
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=None,
                   help="K/V heads G (grouped-query attention; default: --heads)")
    p.add_argument("--rope", action="store_true",
                   help=f"rotary embeddings on Q and K (rotate_half, base {ROPE_BASE:g})")
    p.add_argument("--causal", action="store_true", help="query i sees keys j <= i")
    p.add_argument("--stages", default="all", help="output, all, or a comma-separated list")
    p.add_argument("--dump", default=None, help="directory for NAME.npy files")
    p.add_argument("--threads", type=int, default=None, help=threads_help)
    a = p.parse_args(argv)
    if a.stages == "all":
        a.keep = set(STAGES)
    else:
        a.keep = {s.strip() for s in a.stages.split(",") if s.strip()}
        unknown = a.keep - set(STAGES)
        if unknown or not a.keep:
            p.error(f"--stages: expected output, all or names from {','.join(STAGES)}; "
                    f"found {a.stages!r}")
    if a.heads <= 0:
        p.error(f"--heads: expected a positive integer, found {a.heads}")
    if a.kv_heads is None:
        a.kv_heads = a.heads
    if a.kv_heads <= 0 or a.heads % a.kv_heads:
        p.error(f"--kv-heads: expected a positive divisor of --heads {a.heads}, "
                f"found {a.kv_heads}")
    if a.threads is not None and a.threads <= 0:
        p.error(f"--threads: expected a positive integer, found {a.threads}")
    return a


def parse_summary_args(argv, description, threads_help):
    """The long-context references' command line (bench/ref_summary_*.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("bundle", help=".npz with x, W_Q, W_K")
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--causal", action="store_true", help="query i sees keys j <= i")
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--sink-keys", type=int, default=4)
    p.add_argument("--local", type=int, default=64)
    p.add_argument("--chunk", type=int, default=256, help="query rows per step")
    p.add_argument("--threads", type=int, default=None, help=threads_help)
    p.add_argument("--dump", default=None, help="OUT.npz for the summary arrays")
    return p.parse_args(argv)


def save_stages(dump, stages, as_array):
    """Each stage in pipeline order as DUMP/NAME.npy (np.save of as_array(stage))."""
    os.makedirs(dump, exist_ok=True)
    for name in STAGES:
        if name in stages:
            np.save(os.path.join(dump, name + ".npy"), as_array(stages[name]))


def print_timings(t0, t1, t2, t3):
    print(f"timings: load={t1 - t0:.6f} compute={t2 - t1:.6f} output={t3 - t2:.6f}",
          file=sys.stderr)
