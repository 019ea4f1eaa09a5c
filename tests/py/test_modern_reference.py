#!/usr/bin/python3
"""Self cross-checks of scripts/modern_reference.py, the float64 oracle of the modern
attention variants (GQA, RoPE, ALiBi, softcap, attn_mask, windows, sinks,
head_output, add_bias_kv/add_zero_attn, KV-cache decoding).

Each variant is checked against a second formulation written separately here (or
against PyTorch 1.13 in float64): repeated K/V columns, rotate_half with a cat'ed
cos/sin, complex multiplication, the ALiBi paper's recursive get_slopes, a sink
column appended and dropped, nn.MultiheadAttention itself, a Hugging Face style
torch implementation. No attnscope binary is needed.

    /usr/bin/python3 tests/py/test_modern_reference.py [--list | NAME...]
"""

import math
import os
import sys
import unittest
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, assert_close, note_maxdiff  # noqa: E402
import modern_reference as mref  # noqa: E402  (scripts/ is on sys.path via common)

attn_reference = common.ref
NEG = -np.inf
MIN_DRIFT = {}   # the smallest drift each emulated decode bug produced (must be > 1e-6)


def make_bundle(rng, B=2, Tq=5, Tk=None, Dm=8, Dkv=None, H=4, G=None, Dk=4, Dv=None,
                Dout=6, biases=True, W_O=True):
    """Random math-layout bundle: x ([B,] Tq, Dm), memory when Tk or Dkv is given."""
    G = G or H
    Dv = Dv or Dk
    lead = () if B is None else (B,)
    b = {"x": rng.standard_normal(lead + (Tq, Dm))}
    if Tk is not None or Dkv is not None:
        Tk, Dkv = Tk or Tq, Dkv or Dm
        b["memory"] = rng.standard_normal(lead + (Tk, Dkv))
    else:
        Dkv = Dm
    b["W_Q"] = rng.normal(0, 1 / math.sqrt(Dm), (Dm, H * Dk))
    b["W_K"] = rng.normal(0, 1 / math.sqrt(Dkv), (Dkv, G * Dk))
    b["W_V"] = rng.normal(0, 1 / math.sqrt(Dkv), (Dkv, G * Dv))
    if W_O:
        b["W_O"] = rng.normal(0, 1 / math.sqrt(H * Dv), (H * Dv, Dout))
    if biases:
        b["b_Q"] = rng.normal(0, 0.3, H * Dk)
        b["b_K"] = rng.normal(0, 0.3, G * Dk)
        b["b_V"] = rng.normal(0, 0.3, G * Dv)
        if W_O:
            b["b_O"] = rng.normal(0, 0.3, Dout)
    return b


def softmax_rows(z):
    """Plain softmax over the last axis; -inf entries give 0 (rows need a finite entry)."""
    m = z.max(axis=-1, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def paper_get_slopes(n):
    """ALiBi slopes as the paper's reference code builds them: a geometric sequence
    starting at 2^(-8/n) with that ratio for a power of two; otherwise the closest
    lower power of two, then every other slope of twice that, recursively."""
    def power_of_2(k):
        start = 2.0 ** (-(2.0 ** -(math.log2(k) - 3)))
        return [start * start ** i for i in range(k)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_get_slopes(2 * closest)[0::2][:n - closest]


# ---------------------------------------------------------------------------
# Independent RoPE formulations
# ---------------------------------------------------------------------------

def rope_rotate_half(t, pos, R, base):
    """HF Llama / GPT-NeoX: cos, sin = cat(freqs, freqs); t*cos + rotate_half(t)*sin on
    the first R features (GPT-NeoX partial rotary), the rest passed through.
    t (B, N, T, D), pos (B, T)."""
    inv_freq = 1.0 / (base ** (np.arange(0, R, 2, dtype=np.float64) / R))
    freqs = pos[..., None].astype(np.float64) * inv_freq          # (B, T, R/2)
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None]        # (B, 1, T, R)
    cos, sin = np.cos(emb), np.sin(emb)
    rot, rest = t[..., :R], t[..., R:]

    def rotate_half(u):
        u1, u2 = u[..., :R // 2], u[..., R // 2:]
        return np.concatenate([-u2, u1], axis=-1)

    return np.concatenate([rot * cos + rotate_half(rot) * sin, rest], axis=-1)


def rope_complex(t, pos, R, base):
    """RoFormer / GPT-J / Meta Llama: features (2j, 2j+1) as one complex number times
    exp(i pos theta_j), on the first R features."""
    theta = base ** (-np.arange(0, R, 2, dtype=np.float64) / R)   # (R/2,)
    z = t[..., 0:R:2] + 1j * t[..., 1:R:2]                        # (B, N, T, R/2)
    z = z * np.exp(1j * pos[:, None, :, None] * theta)
    out = np.array(t, copy=True)
    out[..., 0:R:2], out[..., 1:R:2] = z.real, z.imag
    return out


def repeat_columns(W, H, G, D):
    """(in, G*D) -> (in, H*D): head h gets group h // (H/G)'s D columns (repeat_kv order)."""
    return np.concatenate([W[..., (h // (H // G)) * D:(h // (H // G) + 1) * D]
                           for h in range(H)], axis=-1)


class Case(unittest.TestCase):
    maxDiff = 4000

    def close(self, actual, expected, tol, what, category=None):
        return assert_close(actual, expected, tol, what, category)


# ---------------------------------------------------------------------------
# Classic options: the modern reference equals attn_reference.py
# ---------------------------------------------------------------------------

class Classic(Case):

    def test_equals_classic_reference(self):
        rng = np.random.default_rng(1)
        for case in range(24):
            B = [None, 1, 3][case % 3]
            cross = case % 2 == 1
            Tq = int(rng.integers(1, 7))
            b = make_bundle(rng, B=B, Tq=Tq, Tk=int(rng.integers(1, 7)) if cross else None,
                            Dkv=5 if cross else None, H=2, Dk=3, Dv=2, biases=case % 4 < 2,
                            W_O=case % 5 != 0)
            Tk = np.shape(b.get("memory", b["x"]))[-2]
            if case % 3 == 0:
                b["key_padding_mask"] = rng.random(((B or 1), Tk) if B else (Tk,)) < 0.3
            kw = dict(causal=case % 4 == 1, causal_align=["top-left", "bottom-right"][case % 2],
                      scale=[None, 0.7][case % 2])
            with self.subTest(case=case):
                old = attn_reference.attention(b, 2, **kw)
                new = mref.attention(b, 2, **kw)
                for name in attn_reference.STAGES:
                    self.close(new[name], old[name], 1e-15, name, "classic vs attn_reference")
                self.assertNotIn("bias", new)
                self.assertNotIn("Q_rot", new)
                self.assertNotIn("sink_weight", new)

    def test_scale_none_and_temperature(self):
        rng = np.random.default_rng(2)
        b = make_bundle(rng, H=2, Dk=4)
        base = mref.attention(b, 2)
        none = mref.attention(b, 2, scale="none")
        temp = mref.attention(b, 2, temperature=2.0)
        self.close(none["scores"], base["scores"] * 2.0, 1e-14, "scale none = 1")
        self.close(temp["scores"], base["scores"] / 2.0, 1e-14, "temperature 2")
        with self.assertRaisesRegex(ValueError, "temperature"):
            mref.attention(b, 2, scale=0.5, temperature=2.0)


# ---------------------------------------------------------------------------
# Grouped-query attention
# ---------------------------------------------------------------------------

class GroupedQuery(Case):

    def test_gqa_equals_mha_with_repeated_kv(self):
        rng = np.random.default_rng(3)
        H, Dk, Dv = 6, 4, 3
        for G in (1, 2, 3, 6):
            for rope in (False, True):
                b = make_bundle(rng, B=2, Tq=5, H=H, G=G, Dk=Dk, Dv=Dv)
                b["key_padding_mask"] = np.array([[0, 0, 0, 0, 1], [0, 1, 0, 0, 0]], bool)
                full = dict(b)
                full["W_K"] = repeat_columns(b["W_K"], H, G, Dk)
                full["b_K"] = repeat_columns(b["b_K"], H, G, Dk)
                full["W_V"] = repeat_columns(b["W_V"], H, G, Dv)
                full["b_V"] = repeat_columns(b["b_V"], H, G, Dv)
                kw = dict(causal=True, rope=rope)
                gqa = mref.attention(b, H, kv_heads=G, **kw)
                mha = mref.attention(full, H, **kw)
                with self.subTest(G=G, rope=rope):
                    self.assertEqual(gqa["K"].shape, (2, G, 5, Dk))
                    self.assertEqual(gqa["V"].shape, (2, G, 5, Dv))
                    for name in ("Q", "scores", "masked_scores", "weights", "context",
                                 "head_output", "output"):
                        self.close(gqa[name], mha[name], 1e-13, name, "GQA vs repeated K/V")
                    for h in range(H):
                        g = h // (H // G)
                        self.close(gqa["K"][:, g], mha["K"][:, h], 0, f"K head {h}")
                        if rope:
                            self.close(gqa["K_rot"][:, g], mha["K_rot"][:, h], 1e-15,
                                       f"K_rot head {h}")

    def test_refusals(self):
        rng = np.random.default_rng(4)
        b = make_bundle(rng, H=4, G=2)
        with self.assertRaisesRegex(ValueError, "multiple of kv_heads"):
            mref.attention(b, 4, kv_heads=3)
        with self.assertRaisesRegex(ValueError, "W_K"):
            mref.attention(b, 4)                 # W_K has 2 groups, not 4


# ---------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------

class Rope(Case):

    def rotated(self, style, R, base=10000.0, positions=True):
        rng = np.random.default_rng(5)
        b = make_bundle(rng, B=2, Tq=6, H=2, G=1, Dk=8)
        if positions:
            b["q_positions"] = rng.integers(0, 50, (2, 6))
            b["k_positions"] = rng.integers(0, 50, (6,))
        st = mref.attention(b, 2, kv_heads=1, rope=True, rope_dim=R, rope_style=style,
                            rope_base=base)
        qp = np.broadcast_to(b.get("q_positions", np.arange(6)), (2, 6))
        kp = np.broadcast_to(b.get("k_positions", np.arange(6)), (2, 6))
        return st, qp, kp

    def test_half_matches_rotate_half(self):
        for R in (8, 4, 2):
            for base in (10000.0, 500.0):
                st, qp, kp = self.rotated("half", R, base)
                with self.subTest(R=R, base=base):
                    self.close(st["Q_rot"], rope_rotate_half(st["Q"], qp, R, base), 1e-14,
                               "Q_rot", "RoPE half vs rotate_half")
                    self.close(st["K_rot"], rope_rotate_half(st["K"], kp, R, base), 1e-14,
                               "K_rot", "RoPE half vs rotate_half")
                    self.close(st["Q_rot"][..., R:], st["Q"][..., R:], 0, "pass-through")

    def test_interleaved_matches_complex(self):
        for R in (8, 6, 2):
            st, qp, kp = self.rotated("interleaved", R)
            with self.subTest(R=R):
                self.close(st["Q_rot"], rope_complex(st["Q"], qp, R, 10000.0), 1e-14,
                           "Q_rot", "RoPE interleaved vs complex")
                self.close(st["K_rot"], rope_complex(st["K"], kp, R, 10000.0), 1e-14,
                           "K_rot", "RoPE interleaved vs complex")

    def test_scores_use_rotated_vectors(self):
        st, _, _ = self.rotated("half", 8)
        expected = np.einsum("bhid,bjd->bhij", st["Q_rot"], st["K_rot"][:, 0]) / math.sqrt(8)
        self.close(st["scores"], expected, 1e-14, "scores = scale Q_rot K_rot^T")

    def test_equal_tokens_depend_on_distance_only(self):
        rng = np.random.default_rng(6)
        b = make_bundle(rng, B=None, Tq=7, H=2, Dk=6)
        b["x"] = np.tile(rng.standard_normal(8), (7, 1))          # one token, 7 times
        for style in mref.ROPE_STYLES:
            s = mref.attention(b, 2, rope=True, rope_style=style)["scores"]  # (H, 7, 7)
            d = np.max(np.abs(s[:, 1:, 1:] - s[:, :-1, :-1]))
            note_maxdiff("RoPE Toeplitz (equal tokens)", d)
            self.assertLessEqual(d, 1e-13, style)
            self.assertGreater(np.ptp(s[0, 3]), 1e-3)              # the scores do vary

    def test_shifting_all_positions_changes_nothing(self):
        rng = np.random.default_rng(7)
        b = make_bundle(rng, B=2, Tq=5, Tk=6, H=2, Dk=6)
        b["q_positions"] = rng.integers(0, 20, (2, 5))
        b["k_positions"] = rng.integers(0, 20, (2, 6))
        shifted = dict(b, q_positions=b["q_positions"] + 1000,
                       k_positions=b["k_positions"] + 1000)
        for style in mref.ROPE_STYLES:
            kw = dict(rope=True, rope_style=style, rope_dim=4, alibi=True, causal=True)
            a, s = mref.attention(b, 2, **kw), mref.attention(shifted, 2, **kw)
            self.close(s["scores"], a["scores"], 1e-10, "scores", "RoPE position shift")
            self.close(s["weights"], a["weights"], 1e-10, "weights", "RoPE position shift")

    def test_bottom_right_is_a_position_offset(self):
        rng = np.random.default_rng(8)
        b = make_bundle(rng, B=2, Tq=3, Tk=7, H=2, Dk=4)
        a = mref.attention(b, 2, rope=True, alibi=True, causal=True, window=3,
                           causal_align="bottom-right")
        e = mref.attention(dict(b, q_positions=np.arange(3) + 4), 2, rope=True, alibi=True,
                           causal=True, window=3)
        for name in a:
            self.close(a[name], e[name], 0, name)

    def test_refusals(self):
        rng = np.random.default_rng(9)
        b = make_bundle(rng, H=2, Dk=4)
        for kw in (dict(rope_dim=3), dict(rope_dim=6), dict(rope_style="spiral")):
            with self.subTest(**kw), self.assertRaises(ValueError):
                mref.attention(b, 2, rope=True, **kw)
        with self.assertRaisesRegex(ValueError, "rope or alibi"):
            mref.attention(b, 2, rope=True, add_zero_attn=True)
        with self.assertRaisesRegex(ValueError, "integers"):
            mref.attention(dict(b, q_positions=np.arange(5) + 0.5), 2, rope=True)


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------

class Alibi(Case):

    def test_slopes_match_paper(self):
        for H in range(1, 17):
            d = np.max(np.abs(mref.alibi_slopes(H) - np.array(paper_get_slopes(H))))
            note_maxdiff("ALiBi slopes vs paper", d)
            self.assertLessEqual(d, 1e-15, f"H={H}")

    def test_slopes_h8_explicit(self):
        self.assertEqual(mref.alibi_slopes(8).tolist(),
                         [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
        # H = 3: the two slopes of 2 heads, then slope 0 of 4 heads.
        self.assertEqual(mref.alibi_slopes(3).tolist(), [2 ** -4, 2 ** -8, 2 ** -2])

    def test_bias_stage(self):
        rng = np.random.default_rng(10)
        b = make_bundle(rng, B=2, Tq=4, Tk=5, H=3, Dk=2)
        b["q_positions"] = np.array([[3, 4, 5, 6], [0, 2, 4, 6]])
        st = mref.attention(b, 3, alibi=True)
        m = mref.alibi_slopes(3)
        for bi in range(2):
            for h in range(3):
                for i in range(4):
                    for j in range(5):
                        self.assertEqual(st["bias"][bi, h, i, j],
                                         m[h] * (j - b["q_positions"][bi, i]))
        self.close(st["masked_scores"], st["scores"] + st["bias"], 0, "masked = scores + bias")
        own = np.array([0.5, -0.25, 2.0])
        st2 = mref.attention(dict(b, alibi_slopes=own), 3, alibi=True)
        self.close(st2["bias"][0, 2, 1], own[2] * (np.arange(5) - 4), 0, "alibi_slopes")
        with self.assertRaisesRegex(ValueError, "alibi is off"):
            mref.attention(dict(b, alibi_slopes=own), 3)

    def test_bloom_bias_gives_same_weights_under_causal(self):
        rng = np.random.default_rng(11)
        for H in (4, 5):
            b = make_bundle(rng, B=2, Tq=6, H=H, Dk=4)
            m = mref.alibi_slopes(H)
            bloom = m[:, None, None] * np.arange(6)[None, None, :] * np.ones((H, 6, 1))
            a = mref.attention(b, H, alibi=True, causal=True)
            c = mref.attention(dict(b, attn_mask=bloom), H, causal=True)   # (H, Tq, Tk)
            self.close(a["weights"], c["weights"], 1e-14, f"H={H}", "ALiBi m(j-i) vs BLOOM m j")
            self.assertGreater(np.max(np.abs(a["bias"] - c["bias"])), 0.1)


# ---------------------------------------------------------------------------
# Attention sinks
# ---------------------------------------------------------------------------

class Sinks(Case):

    def test_extra_column_formulation(self):
        rng = np.random.default_rng(12)
        H = 4
        b = make_bundle(rng, B=2, Tq=6, H=H, G=2, Dk=4)
        b["key_padding_mask"] = np.array([[0, 0, 0, 0, 0, 1], [0, 0, 1, 0, 0, 0]], bool)
        sinks = rng.normal(0, 2, H)
        kw = dict(kv_heads=2, causal=True, window=3, rope=True)
        plain = mref.attention(b, H, **kw)
        st = mref.attention(dict(b, sinks=sinks), H, **kw)
        # gpt-oss: cat the sink logit as one more column, softmax, drop the column.
        col = np.broadcast_to(sinks[None, :, None, None], (2, H, 6, 1))
        p = softmax_rows(np.concatenate([plain["masked_scores"], col], axis=-1))
        self.close(st["weights"], p[..., :-1], 1e-15, "weights", "sinks vs extra column")
        self.close(st["sink_weight"], p[..., -1], 1e-15, "sink_weight", "sinks vs extra column")
        self.close(st["weights"].sum(-1) + st["sink_weight"], np.ones((2, H, 6)), 1e-15,
                   "rows + sink_weight = 1", "row sums")
        self.assertTrue(np.all(st["weights"].sum(-1) < 1))
        V = np.repeat(st["V"], 2, axis=1)
        self.close(st["context"], st["weights"] @ V, 1e-15, "context = weights V")

    def test_fully_masked_row_goes_to_the_sink(self):
        rng = np.random.default_rng(13)
        b = make_bundle(rng, B=2, Tq=3, H=2, Dk=2)
        b["key_padding_mask"] = np.array([[1, 1, 1], [0, 0, 0]], bool)   # item 0: all PAD
        b["sinks"] = np.array([-1.0, 3.0])
        st = mref.attention(b, 2)
        self.assertTrue(np.all(st["weights"][0] == 0))
        self.assertTrue(np.all(st["sink_weight"][0] == 1))
        self.close(st["output"][0], np.broadcast_to(b["b_O"], (3, 6)), 0, "output = b_O")
        self.assertTrue(np.all(st["sink_weight"][1] > 0))
        # M = max(row max, s_h): a sink logit far above the scores must not overflow.
        big = mref.attention(dict(b, sinks=np.array([800.0, -800.0])), 2)
        self.assertTrue(np.all(np.isfinite(big["weights"])))
        self.assertTrue(np.all(big["sink_weight"][:, 0] == 1))
        self.assertTrue(np.all(big["sink_weight"][1, 1] == 0))
        self.close(big["weights"][1, 1].sum(-1), np.ones(3), 1e-15, "no sink share")
        with self.assertRaisesRegex(ValueError, "sinks"):
            mref.attention(dict(b, sinks=np.array([0.0, np.inf])), 2)


# ---------------------------------------------------------------------------
# attn_mask: float (additive) and bool (allow / block)
# ---------------------------------------------------------------------------

class AttnMask(Case):

    def setUp(self):
        rng = np.random.default_rng(14)
        self.B, self.H, self.Tq, self.Tk = 2, 3, 4, 5
        self.b = make_bundle(rng, B=2, Tq=4, Tk=5, H=3, Dk=2)
        self.rng = rng

    def test_float_mask_in_each_shape(self):
        B, H, Tq, Tk = self.B, self.H, self.Tq, self.Tk
        plain = mref.attention(self.b, H)
        for shape in ((Tq, Tk), (B, Tq, Tk), (H, Tq, Tk), (B, H, Tq, Tk)):
            m = self.rng.normal(0, 1, shape)
            m[self.rng.random(shape) < 0.25] = NEG
            m[..., 0, :] = NEG                                      # query 0 sees nothing
            m[..., 1, 2] = 0.0                                      # query 1 sees key 2
            if len(shape) == 3 and shape[0] == B:
                full = np.broadcast_to(m[:, None], (B, H, Tq, Tk))
            else:
                full = np.broadcast_to(m, (B, H, Tq, Tk))
            st = mref.attention(dict(self.b, attn_mask=m), H)
            st4 = mref.attention(dict(self.b, attn_mask=np.array(full)), H)
            with self.subTest(shape=shape):
                for name in st:
                    self.close(st[name], st4[name], 0, name)
                self.close(st["bias"], full, 0, "bias")
                self.close(st["masked_scores"], plain["scores"] + full, 1e-15, "scores + mask",
                           "float attn_mask")
                self.assertTrue(np.all(st["weights"][np.isneginf(full)] == 0))
                self.assertTrue(np.all(st["weights"][:, :, 0] == 0))  # fully -inf: zeros
                self.assertFalse(np.any(np.isnan(st["weights"])))
                live = ~np.isneginf(full).all(-1)
                self.close(st["weights"].sum(-1)[live], np.ones(live.sum()), 1e-15, "rows")
                self.assertTrue(st["mask"].all())                 # -inf bias is not the mask

    def test_ambiguous_3d_mask_refused(self):
        rng = np.random.default_rng(15)
        b = make_bundle(rng, B=2, Tq=3, H=2, Dk=2)
        with self.assertRaisesRegex(ValueError, "4-D"):
            mref.attention(dict(b, attn_mask=np.zeros((2, 3, 3))), 2)
        # B == H == 1: both readings are the same array.
        b1 = make_bundle(rng, B=1, Tq=3, H=1, Dk=2)
        mref.attention(dict(b1, attn_mask=np.zeros((1, 3, 3))), 1)
        with self.assertRaisesRegex(ValueError, "attn_mask"):
            mref.attention(dict(b, attn_mask=np.zeros((3, 3, 3))), 2)

    def test_bool_allow_block_and_float_equivalence(self):
        B, H, Tq, Tk = self.B, self.H, self.Tq, self.Tk
        for shape in ((Tq, Tk), (B, Tq, Tk), (H, Tq, Tk), (B, H, Tq, Tk)):
            allow = self.rng.random(shape) < 0.6
            allow[..., 0] = True                                   # every row sees key 0
            a = mref.attention(dict(self.b, attn_mask=allow), H, attn_mask_means="allow")
            k = mref.attention(dict(self.b, attn_mask=~allow), H, attn_mask_means="block")
            i = mref.attention(dict(self.b, attn_mask=allow.astype(np.int64)), H,
                               attn_mask_means="allow")
            f = mref.attention(dict(self.b, attn_mask=np.where(allow, 0.0, NEG)), H)
            with self.subTest(shape=shape):
                for name in a:
                    self.close(k[name], a[name], 0, name)
                    self.close(i[name], a[name], 0, name)
                self.close(f["weights"], a["weights"], 0, "bool vs float -inf mask")
                self.assertNotIn("bias", a)
                head_axis = len(shape) == 4 or (len(shape) == 3 and shape[0] == H)
                self.assertEqual(a["mask"].shape, (B, H, Tq, Tk) if head_axis else (B, Tq, Tk))
        with self.assertRaisesRegex(ValueError, "allow"):
            mref.attention(dict(self.b, attn_mask=np.ones((Tq, Tk), bool)), H)
        with self.assertRaisesRegex(ValueError, "float"):
            mref.attention(dict(self.b, attn_mask=np.zeros((Tq, Tk))), H, attn_mask_means="allow")


# ---------------------------------------------------------------------------
# Sliding window, softcap, per-head output
# ---------------------------------------------------------------------------

class WindowSoftcapHeads(Case):

    def test_window_rules(self):
        rng = np.random.default_rng(16)
        b = make_bundle(rng, B=2, Tq=6, H=2, Dk=4)
        causal = mref.attention(b, 2, causal=True)
        for W in (6, 7, 100):
            wide = mref.attention(b, 2, causal=True, window=W)
            for name in causal:
                self.close(wide[name], causal[name], 0, f"window {W}: {name}")
        one = mref.attention(b, 2, causal=True, window=1)
        self.close(one["weights"], np.broadcast_to(np.eye(6), (2, 2, 6, 6)), 0, "diagonal")
        i, j = np.arange(6)[:, None], np.arange(6)[None]
        for W in (1, 2, 3):
            nc = mref.attention(b, 2, window=W)["mask"][0]
            self.assertTrue(np.array_equal(nc, nc.T), f"symmetric W={W}")
            self.assertTrue(np.array_equal(nc, np.abs(i - j) < W))
            c = mref.attention(b, 2, causal=True, window=W)["mask"][0]
            self.assertTrue(np.array_equal(c, (j <= i) & (j > i - W)))
        # Bottom-right: query i sits at i + Tk - Tq (Mistral's rule on positions).
        bc = make_bundle(rng, B=1, Tq=2, Tk=6, H=1, Dk=2)
        m = mref.attention(bc, 1, causal=True, causal_align="bottom-right", window=3)["mask"][0]
        self.assertEqual(m.astype(int).tolist(), [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]])

    def test_softcap(self):
        rng = np.random.default_rng(17)
        b = make_bundle(rng, B=2, Tq=5, H=2, Dk=4)
        plain = mref.attention(b, 2, causal=True, alibi=True)
        huge = mref.attention(b, 2, causal=True, alibi=True, softcap=1e9)
        self.close(huge["masked_scores"], plain["masked_scores"], 1e-12, "C -> inf",
                   "softcap C=1e9 vs none")
        self.close(huge["weights"], plain["weights"], 1e-12, "C -> inf", "softcap C=1e9 vs none")
        for C in (0.5, 3.0):
            st = mref.attention(b, 2, causal=True, alibi=True, scale=40.0, softcap=C)
            capped = st["masked_scores"] - st["bias"]
            fin = np.isfinite(capped)
            self.assertTrue(np.all(np.abs(capped[fin]) <= C))
            self.assertGreater(np.max(np.abs(st["scores"])), 5 * C)    # scores go past C
            self.close(np.where(fin, capped, 0), np.where(fin, C * np.tanh(st["scores"] / C), 0),
                       1e-14, "C tanh(s / C), before the bias")

    def test_head_output_sums_to_output(self):
        rng = np.random.default_rng(18)
        for W_O in (True, False):
            b = make_bundle(rng, B=2, Tq=4, Tk=6, H=4, G=2, Dk=3, Dv=5, W_O=W_O)
            b["sinks"] = rng.normal(0, 1, 4)
            st = mref.attention(b, 4, kv_heads=2, rope=True, rope_dim=2, causal=True)
            bO = b.get("b_O", 0.0)
            self.assertEqual(st["head_output"].shape, (2, 4, 4, st["output"].shape[-1]))
            self.close(st["head_output"].sum(axis=2) + bO, st["output"], 1e-14,
                       f"W_O={W_O}", "sum_h head_output + b_O vs output")
            self.close(st["head_output"][:, :, 1],
                       st["context"][:, 1] @ (b["W_O"][5:10] if W_O else np.eye(20)[5:10]),
                       1e-14, "head 1")

    def test_unbatched_drops_the_batch_axis(self):
        rng = np.random.default_rng(19)
        b = make_bundle(rng, B=1, Tq=4, H=2, G=1, Dk=4)
        b["sinks"] = np.array([0.1, 0.2])
        b["attn_mask"] = rng.normal(0, 1, (1, 2, 4, 4))
        kw = dict(kv_heads=1, rope=True, alibi=True, causal=True, window=2, softcap=5.0)
        batched = mref.attention(b, 2, **kw)
        u = dict(b, x=b["x"][0], attn_mask=b["attn_mask"][0])     # (H, Tq, Tk)
        single = mref.attention(u, 2, **kw)
        self.assertEqual(list(single), list(batched))
        for name in batched:
            self.close(single[name], batched[name][0], 0, name)


# ---------------------------------------------------------------------------
# PyTorch: nn.MultiheadAttention and a Hugging Face style implementation
# ---------------------------------------------------------------------------

def _torch():
    import torch
    return torch


class TorchChecks(Case):

    @classmethod
    def setUpClass(cls):
        try:
            cls.torch = _torch()
        except ImportError as exc:
            raise unittest.SkipTest(f"torch not importable: {exc}")

    # ---- nn.MultiheadAttention: add_bias_kv, add_zero_attn, key_padding_mask, attn_mask

    def mha_case(self, rng, bias_kv, zero_attn, use_pad, mask_kind, causal, cross):
        torch = self.torch
        B, Tq, E, H = 2, 5, 8, 2
        Tk, kdim = (6, 5) if cross else (Tq, E)
        mha = torch.nn.MultiheadAttention(E, H, bias=True, add_bias_kv=bias_kv,
                                          add_zero_attn=zero_attn, kdim=kdim, vdim=kdim,
                                          batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            for _, p in mha.named_parameters():
                p.copy_(torch.tensor(rng.normal(0, 1 / math.sqrt(p.shape[-1]), tuple(p.shape))))
        mha.eval()
        x = rng.standard_normal((B, Tq, E))
        src = rng.standard_normal((B, Tk, kdim)) if cross else x
        pad = rng.random((B, Tk)) < 0.3 if use_pad else None
        shape = {"2": (Tq, Tk), "4": (B, H, Tq, Tk)}
        user = None
        if mask_kind.startswith("bool"):
            user = rng.random(shape[mask_kind[-1]]) < 0.3                 # True = blocked
        elif mask_kind.startswith("float"):
            user = rng.normal(0, 1, shape[mask_kind[-1]])
            user[rng.random(user.shape) < 0.2] = NEG
        blocked = np.triu(np.ones((Tq, Tk), bool), 1) if causal else None

        # torch's one attn_mask: 2-D, or 3-D (B*H, Tq, Tk) batch-major.
        tm = None
        if user is not None and user.dtype == bool:
            tm = user | blocked if causal else user
        elif user is not None:
            tm = user + np.where(blocked, NEG, 0.0) if causal else user
        elif causal:
            tm = blocked
        if tm is not None and tm.ndim == 4:
            tm = tm.reshape(B * H, Tq, Tk)

        bundle = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
        bundle["x"] = x
        if cross:
            bundle["memory"] = src
        if pad is not None:
            bundle["key_padding_mask"] = pad
        if user is not None:
            bundle["attn_mask"] = user
        kw = dict(layout="torch", causal=causal, add_zero_attn=zero_attn,
                  attn_mask_means="block" if mask_kind.startswith("bool") else None)
        st = mref.attention(bundle, H, **kw)
        if np.any(np.all(np.isneginf(st["masked_scores"]), axis=-1)):
            return None                                 # torch 1.13 gives NaN there
        with torch.no_grad():
            out, w = mha(torch.tensor(x), torch.tensor(src), torch.tensor(src),
                         key_padding_mask=None if pad is None else torch.tensor(pad),
                         attn_mask=None if tm is None else torch.tensor(tm),
                         need_weights=True, average_attn_weights=False)
        n_extra = bias_kv + zero_attn
        self.assertEqual(st["weights"].shape, (B, H, Tq, Tk + n_extra))
        labels = mref.key_tokens(bundle, add_zero_attn=zero_attn)
        self.assertEqual(list(labels[Tk:]), ["<bias_kv>"] * bias_kv + ["<zero>"] * zero_attn)
        self.close(st["weights"], w.numpy(), 1e-12, "weights", "nn.MultiheadAttention weights")
        self.close(st["output"], out.numpy(), 1e-12, "output", "nn.MultiheadAttention output")
        if zero_attn:
            self.assertTrue(np.all(st["scores"][..., -1] == 0))
        return True

    def test_mha_bias_kv_zero_attn_masks(self):
        rng = np.random.default_rng(20)
        done = 0
        for bias_kv in (False, True):
            for zero_attn in (False, True):
                for mask_kind in ("none", "bool2", "bool4", "float2", "float4"):
                    for causal in (False, True):
                        cross = (done % 3) == 2
                        use_pad = (done % 2) == 0
                        with self.subTest(bias_kv=bias_kv, zero_attn=zero_attn, mask=mask_kind,
                                          causal=causal, cross=cross, pad=use_pad):
                            for _ in range(20):
                                if self.mha_case(rng, bias_kv, zero_attn, use_pad, mask_kind,
                                                 causal, cross):
                                    break
                            else:
                                self.fail("no case without a fully masked row in 20 draws")
                        done += 1
        self.assertEqual(done, 40)

    # ---- GQA + RoPE + causal + window + padding (+ softcap + sinks), HF style in torch

    def hf_attention(self, b, H, G, W, base, pad, softcap=None, sinks=None):
        torch = self.torch
        t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float64)  # noqa: E731
        x = t(b["x"])
        B, T, _ = x.shape
        Dk = b["W_Q"].shape[1] // H
        Dv = b["W_V"].shape[1] // G
        q = (x @ t(b["W_Q"]) + t(b["b_Q"])).view(B, T, H, Dk).transpose(1, 2)
        k = (x @ t(b["W_K"]) + t(b["b_K"])).view(B, T, G, Dk).transpose(1, 2)
        v = (x @ t(b["W_V"]) + t(b["b_V"])).view(B, T, G, Dv).transpose(1, 2)
        inv_freq = 1.0 / (base ** (torch.arange(0, Dk, 2, dtype=torch.float64) / Dk))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()

        def rotate_half(u):
            return torch.cat((-u[..., Dk // 2:], u[..., :Dk // 2]), dim=-1)

        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin

        def repeat_kv(u, n):
            b_, g, s, d = u.shape
            return u[:, :, None].expand(b_, g, n, s, d).reshape(b_, g * n, s, d)

        k, v = repeat_kv(k, H // G), repeat_kv(v, H // G)
        attn = q @ k.transpose(2, 3) / math.sqrt(Dk)
        if softcap is not None:
            attn = softcap * torch.tanh(attn / softcap)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool)) & \
            ~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-W)
        allowed = allowed[None, None] & ~torch.tensor(pad)[:, None, None, :]
        attn = attn.masked_fill(~allowed, float("-inf"))
        if sinks is not None:
            s = t(sinks).reshape(1, H, 1, 1).expand(B, H, T, 1)
            combined = torch.cat([attn, s], dim=-1)
            combined = combined - combined.max(dim=-1, keepdim=True).values
            w = torch.softmax(combined, dim=-1)[..., :-1]
        else:
            w = torch.softmax(attn, dim=-1)
        ctx = (w @ v).transpose(1, 2).reshape(B, T, H * Dv)
        return w.numpy(), (ctx @ t(b["W_O"]) + t(b["b_O"])).numpy()

    def test_combined_against_hf_style_torch(self):
        # torch 1.13 has no F.scaled_dot_product_attention (2.0 added it): the attention
        # is written out in torch as Hugging Face's Llama / gpt-oss code does it.
        rng = np.random.default_rng(21)
        H, G, W, T = 6, 2, 3, 7
        pad = np.zeros((2, T), bool)
        pad[1, -2:] = True                                     # right padding of item 1
        for extra in ({}, {"softcap": 2.5}, {"sinks": rng.normal(0, 1, H)},
                      {"softcap": 1.5, "sinks": rng.normal(0, 1, H)}):
            b = make_bundle(rng, B=2, Tq=T, Dm=8, H=H, G=G, Dk=4, Dv=3, Dout=5)
            b["key_padding_mask"] = pad
            if "sinks" in extra:
                b["sinks"] = extra["sinks"]
            st = mref.attention(b, H, kv_heads=G, rope=True, rope_base=100.0, causal=True,
                                window=W, softcap=extra.get("softcap"))
            w, out = self.hf_attention(b, H, G, W, 100.0, pad, extra.get("softcap"),
                                       extra.get("sinks"))
            with self.subTest(extra=sorted(extra)):
                self.close(st["weights"], w, 1e-13, "weights", "HF-style torch weights")
                self.close(st["output"], out, 1e-13, "output", "HF-style torch output")


# ---------------------------------------------------------------------------
# KV-cache decoding
# ---------------------------------------------------------------------------

DECODE_CASES = [
    # (bundle shape, options, prefill)
    (dict(B=2, Tq=8, H=4, G=2, Dk=4), dict(kv_heads=2, rope=True, window=3), 3),
    (dict(B=None, Tq=6, H=2, Dk=6), dict(rope=True, rope_style="interleaved", rope_dim=4,
                                         alibi=True, softcap=3.0), 1),
    (dict(B=2, Tq=5, H=3, G=1, Dk=2, W_O=False), dict(kv_heads=1, alibi=True), 0),
    (dict(B=1, Tq=6, H=2, Dk=4), dict(rope=True, scale="none"), 5),
]


class Decode(Case):

    def bundle(self, rng, shape, sinks=False, pad=False):
        b = make_bundle(rng, **shape)
        if sinks:
            b["sinks"] = rng.normal(0, 1, shape["H"])
        if pad:
            p = np.zeros((shape["B"] or 1, shape["Tq"]), bool)
            p[-1, 1] = True
            b["key_padding_mask"] = p if shape["B"] else p[0]
        return b

    def test_steps_equal_the_full_run(self):
        rng = np.random.default_rng(22)
        for n, (shape, opts, P) in enumerate(DECODE_CASES):
            b = self.bundle(rng, shape, sinks=n % 2 == 0, pad=n == 0)
            r = mref.decode(b, shape["H"], P, **opts)
            T, H, G = shape["Tq"], shape["H"], shape.get("G") or shape["H"]
            lead = () if shape["B"] is None else (shape["B"],)
            with self.subTest(case=n):
                note_maxdiff("decode steps vs full run", r["max_diff"])
                self.assertLessEqual(r["max_diff"], 1e-12)
                self.assertEqual(len(r["steps"]), T - P)
                for s in r["steps"]:
                    L = s["t"] + 1
                    self.assertEqual(s["cache_length"], L)
                    self.assertEqual(s["k_cache_shape"], lead + (G, L, shape["Dk"]))
                    self.assertEqual(s["weights"].shape, lead + (H, 1, L))
                    self.assertLessEqual(s["flops_cached"], s["flops_recompute"])
                    full_row = r["full"]["weights"][..., s["t"]:s["t"] + 1, :L]
                    self.close(s["weights"], full_row, 1e-12, "step row")

    def test_flop_count(self):
        rng = np.random.default_rng(23)
        b = make_bundle(rng, B=2, Tq=5, Dm=8, H=4, G=2, Dk=3, Dv=5, Dout=7)
        r = mref.decode(b, 4, 2, kv_heads=2)
        s = r["steps"][1]                                   # t = 3, L = 4
        proj = 2 * (8 * 4 * 3 + 8 * 2 * 3 + 8 * 2 * 5)
        self.assertEqual(s["flops_cached"], 2 * (proj + 2 * 4 * 1 * 4 * (3 + 5) + 2 * 4 * 5 * 7))
        self.assertEqual(s["flops_recompute"],
                         2 * (4 * proj + 2 * 4 * 4 * 4 * (3 + 5) + 4 * 2 * 4 * 5 * 7))

    def test_each_bug_drifts(self):
        rng = np.random.default_rng(24)
        for n, (shape, opts, P) in enumerate(DECODE_CASES):
            b = self.bundle(rng, shape, sinks=n % 2 == 1)
            for bug in mref.BUGS:
                if bug == "rope-position-zero" and not opts.get("rope"):
                    with self.assertRaisesRegex(ValueError, "rope"):
                        mref.decode(b, shape["H"], P, bug=bug, **opts)
                    continue
                r = mref.decode(b, shape["H"], P, bug=bug, **opts)
                with self.subTest(case=n, bug=bug):
                    self.assertEqual(r["prefill"]["max_diff"] <= 1e-12, True)
                    self.assertGreater(r["max_diff"], 1e-6)
                    key = f"decode bug {bug}"
                    MIN_DRIFT[key] = min(MIN_DRIFT.get(key, np.inf), r["max_diff"])

    def test_refusals(self):
        rng = np.random.default_rng(25)
        b = make_bundle(rng, B=1, Tq=4, Tk=5, H=2, Dk=2)
        with self.assertRaisesRegex(ValueError, "memory"):
            mref.decode(b, 2, 1)
        with self.assertRaisesRegex(ValueError, "bug"):
            mref.decode(make_bundle(rng, H=2), 2, 1, bug="typo")


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------

class CommandLine(CliTestCase):

    def test_dump_npz_equals_attention(self):
        rng = np.random.default_rng(26)
        b = make_bundle(rng, B=2, Tq=5, H=4, G=2, Dk=4)
        b["sinks"] = rng.normal(0, 1, 4)
        b["key_padding_mask"] = np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], bool)
        path = self.save_npz("case.npz", **b)
        out = self.path("out.npz")
        args = [str(path), "--heads", "4", "--kv-heads", "2", "--rope", "--rope-base", "500",
                "--rope-dim", "2", "--rope-style", "interleaved", "--alibi", "--window", "3",
                "--softcap", "4", "--causal", "--causal-align", "bottom-right",
                "--scale", "none", "--dump-npz", str(out), "-q"]
        self.assertEqual(mref.main(args), 0)
        expected = mref.attention(b, 4, kv_heads=2, rope=True, rope_base=500, rope_dim=2,
                                  rope_style="interleaved", alibi=True, window=3, softcap=4,
                                  causal=True, causal_align="bottom-right", scale="none")
        with np.load(out) as npz:
            self.assertEqual(sorted(npz.files), sorted(expected))
            for name in expected:
                self.close(npz[name], expected[name], 0, name)
        self.assertEqual(mref.main([str(path), "--heads", "4", "--kv-heads", "2",
                                    "--stages", "weights,sink_weight", "-q",
                                    "--dump-npz", str(self.path("two.npz"))]), 0)
        with np.load(self.path("two.npz")) as npz:
            self.assertEqual(sorted(npz.files), ["sink_weight", "weights"])

    def close(self, actual, expected, tol, what):
        return assert_close(actual, expected, tol, what)


# ---------------------------------------------------------------------------

def main():
    """common.main without the binary: `--list`, `--list-tests`, or NAME... to run."""
    module = sys.modules["__main__"]
    args = sys.argv[1:]
    loader = unittest.defaultTestLoader
    script = Path(sys.argv[0]).name
    if args in (["-h"], ["--help"]):
        print(common.USAGE.format(script=script))
        return
    if args == ["--list"]:
        print("\n".join(common.ctest_units(module)))
        return
    if args == ["--list-tests"]:
        print("\n".join(common.test_names(loader.loadTestsFromModule(module))))
        return
    options = [a for a in args if a.startswith("-")]
    if options:
        print(f"test_modern_reference: unknown option {options[0]}\n"
              + common.USAGE.format(script=script), file=sys.stderr)
        sys.exit(2)
    suite = loader.loadTestsFromNames(args, module) if args else loader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=int(os.environ.get("VERBOSE", "1")),
                                     stream=sys.stdout).run(suite)
    what = " ".join(["test_modern_reference"] + args)
    print(f"{what}: {result.testsRun} tests, {len(result.failures)} failures, "
          f"{len(result.errors)} errors, {len(result.skipped)} skipped")
    for k, v in sorted(common.MAXDIFF.items()):
        print(f"{what}: max |diff| {k}: {v:.2e}")
    for k, v in sorted(MIN_DRIFT.items()):
        print(f"{what}: smallest drift of {k} over the cases: {v:.2e}")
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
