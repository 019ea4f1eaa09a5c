#!/usr/bin/python3
"""PyTorch reference for the long-context benchmark: attnscope run --summary, written as a
PyTorch user writes it (query-chunked loop under torch.no_grad(), causal, keys cut at the
chunk's last query; torch.softmax, torch.special.entr, torch.topk, bucketize-free log2 bins).

    /usr/bin/python3 bench/ref_summary_torch.py IN.npz --heads H [--causal] [--topk K]
                     [--sink-keys S] [--local W] [--chunk C] [--threads N] [--dump OUT.npz]

The same quantities as ref_summary_numpy.py. --threads N calls torch.set_num_threads(N)
(PyTorch 1.13 here starts with one thread). Prints `timings: ...` on stderr.
"""
import sys
import time

import numpy as np
import torch

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
import ref_common  # noqa: E402  (bench/, the script's own directory)

T0 = time.perf_counter()


def main(argv=None):
    a = ref_common.parse_summary_args(argv, __doc__.splitlines()[0], "torch.set_num_threads(N)")
    if a.threads:
        torch.set_num_threads(a.threads)
    with np.load(a.bundle) as f:
        x, W_Q, W_K = (torch.from_numpy(f[n]) for n in ("x", "W_Q", "W_K"))
    t1 = time.perf_counter()
    B, T, Dm = x.shape
    H, K = a.heads, a.topk
    Dk = W_Q.shape[1] // H
    scale = 1.0 / Dk ** 0.5
    f64 = torch.float64
    names = ("entropy", "effective_keys", "max_weight", "sink_mass", "local_mass", "mean_distance", "row_sum")
    out = {n: torch.zeros((B, H, T), dtype=f64) for n in names}
    out["max_key"] = torch.zeros((B, H, T), dtype=torch.int64)
    out["visible_keys"] = torch.zeros((B, H, T), dtype=torch.int64)
    out["topk_index"] = torch.full((B, H, T, K), -1, dtype=torch.int64)
    out["topk_weight"] = torch.zeros((B, H, T, K), dtype=f64)
    bins = int(np.floor(np.log2(max(T - 1, 1)))) + 2
    profile = torch.zeros((B, H, bins), dtype=f64)
    with torch.no_grad():
        for b in range(B):
            Q = (x[b] @ W_Q).view(T, H, Dk).transpose(0, 1).contiguous()
            Kh = (x[b] @ W_K).view(T, H, Dk).transpose(0, 1).contiguous()
            for h in range(H):
                for i0 in range(0, T, a.chunk):
                    i1 = min(T, i0 + a.chunk)
                    hi = i1 if a.causal else T
                    s = (Q[h, i0:i1] @ Kh[h, :hi].T) * scale
                    d = torch.arange(i0, i1)[:, None] - torch.arange(hi)[None, :]
                    if a.causal:
                        s.masked_fill_(d < 0, float("-inf"))
                    w = torch.softmax(s, dim=-1)
                    ent = torch.special.entr(w).sum(-1)
                    out["entropy"][b, h, i0:i1] = ent
                    out["effective_keys"][b, h, i0:i1] = ent.exp()
                    mw, mk = w.max(-1)
                    out["max_weight"][b, h, i0:i1], out["max_key"][b, h, i0:i1] = mw, mk
                    kk = min(K, hi)
                    tw, ti = torch.topk(w, kk, dim=-1)
                    out["topk_weight"][b, h, i0:i1, :kk], out["topk_index"][b, h, i0:i1, :kk] = tw, ti
                    out["sink_mass"][b, h, i0:i1] = w[:, :a.sink_keys].sum(-1)
                    ad = d.abs()
                    out["local_mass"][b, h, i0:i1] = (w * ((d >= 0) & (d < a.local))).sum(-1)
                    out["mean_distance"][b, h, i0:i1] = (w * ad).sum(-1)
                    out["visible_keys"][b, h, i0:i1] = (d >= 0).sum(-1) if a.causal else hi
                    out["row_sum"][b, h, i0:i1] = w.sum(-1)
                    bin_of = torch.where(ad > 0, torch.log2(ad.clamp(min=1).to(torch.float64)).floor().long() + 1,
                                         torch.zeros_like(ad))
                    profile[b, h] += torch.bincount(bin_of.flatten(), weights=w.flatten().double(),
                                                    minlength=bins)[:bins]
    profile /= T
    out["distance_profile"] = profile
    t2 = time.perf_counter()
    if a.dump:
        np.savez(a.dump, **{k: v.numpy() for k, v in out.items()})
    t3 = time.perf_counter()
    ref_common.print_timings(T0, t1, t2, t3)


if __name__ == "__main__":
    main()
