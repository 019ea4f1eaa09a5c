#!/usr/bin/python3
"""numpy reference for the long-context benchmark: attnscope run --summary, written as a
numpy user writes it (query-chunked loop, causal, keys cut at the chunk's last query).

    /usr/bin/python3 bench/ref_summary_numpy.py IN.npz --heads H [--causal] [--topk K]
                     [--sink-keys S] [--local W] [--chunk C] [--threads N] [--dump OUT.npz]

Per (head, query) row: entropy (-Σ w ln w), effective keys, max weight and key, top-k keys
and weights (argpartition, then sorted), sink mass (keys 0..S-1), local mass (i-W < j <= i),
mean distance Σ w|i-j|, visible keys, row sum; per head the mass by log2 distance bin.
Prints `timings: load=S compute=S output=S` on stderr. Threads: OPENBLAS_NUM_THREADS (the
bench sets it); --threads is accepted for the same command line.
"""
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
import ref_common  # noqa: E402  (bench/, the script's own directory)

T0 = time.perf_counter()


def main(argv=None):
    a = ref_common.parse_summary_args(argv, __doc__.splitlines()[0], "expected BLAS threads")
    with np.load(a.bundle) as f:
        x, W_Q, W_K = f["x"], f["W_Q"], f["W_K"]
    t1 = time.perf_counter()
    B, T, Dm = x.shape
    H, K = a.heads, a.topk
    Dk = W_Q.shape[1] // H
    dt = x.dtype
    scale = dt.type(1.0 / np.sqrt(Dk))
    out = {n: np.zeros((B, H, T)) for n in ("entropy", "effective_keys", "max_weight", "sink_mass",
                                            "local_mass", "mean_distance", "row_sum")}
    out["max_key"] = np.zeros((B, H, T), np.int64)
    out["visible_keys"] = np.zeros((B, H, T), np.int64)
    out["topk_index"] = np.full((B, H, T, K), -1, np.int64)
    out["topk_weight"] = np.zeros((B, H, T, K))
    bins = int(np.floor(np.log2(max(T - 1, 1)))) + 2
    profile = np.zeros((B, H, bins))
    for b in range(B):
        Q = (x[b] @ W_Q).reshape(T, H, Dk).transpose(1, 0, 2)      # (H, T, Dk)
        Kh = (x[b] @ W_K).reshape(T, H, Dk).transpose(1, 0, 2)     # (H, T, Dk)
        for h in range(H):
            for i0 in range(0, T, a.chunk):
                i1 = min(T, i0 + a.chunk)
                hi = i1 if a.causal else T
                s = (Q[h, i0:i1] @ Kh[h, :hi].T) * scale          # (C, hi)
                i = np.arange(i0, i1)[:, None]
                j = np.arange(hi)[None, :]
                d = i - j
                if a.causal:
                    s[d < 0] = -np.inf
                s -= s.max(axis=1, keepdims=True)
                w = np.exp(s)
                w /= w.sum(axis=1, keepdims=True)
                ent = -np.sum(w * np.log(np.where(w > 0, w, 1)), axis=1)
                out["entropy"][b, h, i0:i1] = ent
                out["effective_keys"][b, h, i0:i1] = np.exp(ent)
                out["max_key"][b, h, i0:i1] = w.argmax(axis=1)
                out["max_weight"][b, h, i0:i1] = w.max(axis=1)
                kk = min(K, hi)
                top = np.argpartition(-w, kk - 1, axis=1)[:, :kk]
                tw = np.take_along_axis(w, top, axis=1)
                order = np.argsort(-tw, axis=1, kind="stable")
                out["topk_index"][b, h, i0:i1, :kk] = np.take_along_axis(top, order, axis=1)
                out["topk_weight"][b, h, i0:i1, :kk] = np.take_along_axis(tw, order, axis=1)
                out["sink_mass"][b, h, i0:i1] = w[:, :a.sink_keys].sum(axis=1)
                ad = np.abs(d)
                out["local_mass"][b, h, i0:i1] = np.sum(w * ((d >= 0) & (d < a.local)), axis=1)
                out["mean_distance"][b, h, i0:i1] = np.sum(w * ad, axis=1)
                out["visible_keys"][b, h, i0:i1] = (d >= 0).sum(axis=1) if a.causal else hi
                out["row_sum"][b, h, i0:i1] = w.sum(axis=1)
                bin_of = np.zeros(ad.shape, np.int64)
                nz = ad > 0
                bin_of[nz] = np.log2(ad[nz]).astype(np.int64) + 1
                profile[b, h] += np.bincount(bin_of.ravel(), weights=w.ravel(), minlength=bins)[:bins]
    profile /= T
    out["distance_profile"] = profile
    t2 = time.perf_counter()
    if a.dump:
        np.savez(a.dump, **out)
    t3 = time.perf_counter()
    ref_common.print_timings(T0, t1, t2, t3)


if __name__ == "__main__":
    main()
