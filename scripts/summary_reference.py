#!/usr/bin/python3
"""Independent float64 reference for attnscope's per-row summaries (`run --summary`).

Written from the definitions (docs/long-context.md), not from attnscope's C++: every
quantity is computed from dense weights, row by row, the plain way (-sum w ln w with a
logarithm per weight, a sort for the top-k, a bincount for the distance profile).

    summarize(weights, visible, q_pos, k_pos, topk=8, sink_keys=4, local=64, sinks=False)

weights (B, H, Tq, Tk); visible (B, H, Tq, Tk) bool (the keys the mask rule and any -inf
bias leave); q_pos (B, Tq) and k_pos (B, Tk) integer positions. Returns a dict of the
arrays attnscope dumps:

    entropy, effective_keys, max_weight, max_key, sink_mass, local_mass, mean_distance,
    visible_keys, row_sum        (B, H, Tq)
    topk_index, topk_weight      (B, H, Tq, K): largest first, ties to the lower key,
                                 -1 / 0 beyond the visible keys
    distance_profile             (B, H, bins): bin 0 distance 0, bin k distances
                                 2^(k-1)..2^k-1; each row's mass per bin, averaged over
                                 the rows that see a key

With sinks=True (a sink logit took part of each row) the entropy is that of w / sum(w),
as attnscope's --diagnose gives it.

from_modern(bundle, heads, **options) runs scripts/modern_reference.py and summarises
its weights (positions and visibility taken from the same reference).
"""

import numpy as np


def distance_bin(d):
    """0 for 0, else floor(log2 d) + 1 (integers, exact)."""
    d = np.asarray(d, dtype=np.int64)
    out = np.zeros(d.shape, dtype=np.int64)
    nz = d > 0
    out[nz] = np.floor(np.log2(d[nz].astype(np.float64))).astype(np.int64) + 1
    # guard the float log2 at exact powers of two
    fix = nz & (np.left_shift(np.int64(1), out - 1, where=nz, out=np.zeros_like(out)) > d)
    out[fix] -= 1
    return out


def summarize(weights, visible, q_pos, k_pos, topk=8, sink_keys=4, local=64, sinks=False):
    w = np.asarray(weights, dtype=np.float64)
    B, H, Tq, Tk = w.shape
    vis = np.broadcast_to(np.asarray(visible, dtype=bool), w.shape)
    q_pos = np.asarray(q_pos, dtype=np.int64)
    k_pos = np.asarray(k_pos, dtype=np.int64)
    far = max(int(q_pos.max() - k_pos.min()), int(k_pos.max() - q_pos.min()), 0) if Tq and Tk else 0
    bins = int(distance_bin(far)) + 1
    out = {n: np.zeros((B, H, Tq)) for n in
           ("entropy", "effective_keys", "max_weight", "sink_mass", "local_mass", "mean_distance", "row_sum")}
    out["max_key"] = np.full((B, H, Tq), -1, dtype=np.int64)
    out["visible_keys"] = np.zeros((B, H, Tq), dtype=np.int64)
    out["topk_index"] = np.full((B, H, Tq, topk), -1, dtype=np.int64)
    out["topk_weight"] = np.zeros((B, H, Tq, topk))
    profile = np.zeros((B, H, bins))
    rows = np.zeros((B, H), dtype=np.int64)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                v = vis[b, h, i]
                keys = np.nonzero(v)[0]
                out["visible_keys"][b, h, i] = len(keys)
                if len(keys) == 0:
                    continue
                rows[b, h] += 1
                wr = w[b, h, i, keys]
                kp = k_pos[b, keys]
                q = q_pos[b, i]
                dist = np.abs(q - kp)
                order = np.lexsort((keys, -wr))  # weight descending, then key ascending
                n = min(topk, len(keys))
                out["topk_index"][b, h, i, :n] = keys[order[:n]]
                out["topk_weight"][b, h, i, :n] = wr[order[:n]]
                out["max_key"][b, h, i] = keys[order[0]]
                out["max_weight"][b, h, i] = wr[order[0]]
                pos = wr[wr > 0]
                ent = -np.sum(pos * np.log(pos))
                total = wr.sum()
                if sinks and total > 0:
                    ent = ent / total + np.log(total)
                out["entropy"][b, h, i] = ent
                out["effective_keys"][b, h, i] = np.exp(ent)
                out["row_sum"][b, h, i] = total
                out["sink_mass"][b, h, i] = wr[(kp >= 0) & (kp < sink_keys)].sum()
                out["local_mass"][b, h, i] = wr[(kp <= q) & (kp > q - local)].sum()
                out["mean_distance"][b, h, i] = np.sum(wr * dist)
                profile[b, h] += np.bincount(np.minimum(distance_bin(dist), bins - 1), weights=wr, minlength=bins)
    nz = rows > 0
    profile[nz] /= rows[nz][:, None]
    out["distance_profile"] = profile
    return out


def from_modern(bundle, heads, topk=8, sink_keys=4, local=64, **options):
    """Summaries of scripts/modern_reference.py's weights for `bundle` (batched form)."""
    import modern_reference as mref
    s = mref.Setup(bundle, heads, **options)
    st = s.run()
    masked = st["masked_scores"]
    visible = ~np.isneginf(masked)
    q_pos, k_pos = s.q_pos, s.k_pos
    Tk = masked.shape[-1]
    if k_pos.shape[1] < Tk:  # appended <bias_kv>, <zero> keys: positions go on by index
        k_pos = np.concatenate([k_pos, np.broadcast_to(np.arange(k_pos.shape[1], Tk), (k_pos.shape[0], Tk - k_pos.shape[1]))], axis=1)
    return summarize(st["weights"], visible, q_pos, k_pos, topk, sink_keys, local, sinks=s.sinks is not None)
