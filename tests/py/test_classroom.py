#!/usr/bin/python3
"""The classroom commands (docs/classroom.md) against numpy: `attnscope make`'s bundles
read by numpy, attention computed from the published formula (Vaswani et al. 2017:
softmax(Q Kᵀ / sqrt(d_k)) V per head), the patterns checked on numpy's weights, the
documented generator (splitmix64) reimplemented here, and `run --json`'s weights compared.

    /usr/bin/python3 tests/py/test_classroom.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, DATA, ROOT, run_text  # noqa: E402

MASK64 = (1 << 64) - 1


class SplitMix64:
    """docs/classroom.md, "The numbers": splitmix64, uniform u = (z >> 11)·2^-53, 2u - 1."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def symmetric(self):
        return 2.0 * ((self.next() >> 11) * 2.0 ** -53) - 1.0

    def matrix(self, rows, cols, scale=1.0):
        return np.array([[self.symmetric() / scale for _ in range(cols)] for _ in range(rows)]).reshape(rows, cols)


def load(path):
    """A bundle made by attnscope make, as numpy arrays (and its config, parsed)."""
    if str(path).endswith(".json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out = {k: (np.array(v) if k != "config" else v) for k, v in doc.items()}
    else:
        z = np.load(path)
        out = {k: z[k] for k in z.files}
        out["config"] = json.loads(str(out["config"]))
    return out


def attention(b):
    """softmax(Q Kᵀ / sqrt(d_k) + mask) per head: weights (H, Tq, Tk), from the formula."""
    x = b["x"].astype(np.float64)
    src = b["memory"].astype(np.float64) if "memory" in b else x
    H = b["config"]["heads"]
    Q, K = x @ b["W_Q"].astype(np.float64), src @ b["W_K"].astype(np.float64)
    dk = Q.shape[1] // H
    Tq, Tk = Q.shape[0], K.shape[0]
    Q = Q.reshape(Tq, H, dk).transpose(1, 0, 2)
    K = K.reshape(Tk, H, dk).transpose(1, 0, 2)
    s = Q @ K.transpose(0, 2, 1) / math.sqrt(dk)
    visible = np.ones((Tq, Tk), bool)
    if b["config"].get("causal"):
        visible &= np.tril(np.ones((Tq, Tk), bool))
    if "key_padding_mask" in b:
        visible &= ~b["key_padding_mask"].astype(bool)[None, :]
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / e.sum(axis=-1, keepdims=True)


class Make(common.CliTestCase):
    """`attnscope make` read by numpy; its patterns, its generator, its bytes."""

    def make(self, name, *args):
        out = self.path(name)
        r = run_text("make", "-o", out, *args)
        self.assert_ok(r)
        return out

    def run_weights(self, path, *args):
        r = run_text("run", path, "--json", "--stages", "weights", *args)
        self.assert_ok(r)
        return np.array(json.loads(r.out)["stages"]["weights"]["data"], dtype=np.float64)

    def check_run(self, path, b):
        got = self.run_weights(path)
        common.assert_close(got, attention(b), 1e-12, f"{path.name}: run's weights vs numpy", "make weights")

    def test_previous_token(self):
        for ext in ("npz", "json"):
            p = self.make(f"prev.{ext}", "--pattern", "previous-token", "--heads", "2", "--dm", "8")
            b = load(p)
            w = attention(b)
            for h in range(2):
                self.assertEqual(list(w[h, 1:].argmax(axis=1)), list(range(5)), f"{ext} head {h}")
                self.assertTrue((w[h, 1:].max(axis=1) > 0.99).all())
            self.check_run(p, b)

    def test_first_token_identity_induction(self):
        cases = {
            "first-token": lambda toks, i: {0},
            "identity": lambda toks, i: {i},
            "induction": lambda toks, i: {j for j in range(1, i + 1) if toks[j - 1] == toks[i]} or {0},
        }
        for pattern, expected in cases.items():
            p = self.make(f"{pattern}.npz", "--pattern", pattern, "--tokens", "a b c d")
            b = load(p)
            toks = [str(t) for t in b["query_tokens"]]
            if pattern == "induction":
                self.assertEqual(toks, "a b c d a b c d".split())
            w = attention(b)[0]
            for i in range(len(toks)):
                self.assertIn(int(w[i].argmax()), expected(toks, i), f"{pattern}: query {i}")
            self.check_run(p, b)

    def test_cross_and_padding(self):
        p = self.make("cross.json", "--tokens", "le chat noir", "--memory-tokens", "the black cat", "--pad", "2",
                      "--heads", "2", "--dk", "3", "--dv", "5", "--seed", "7")
        b = load(p)
        self.assertEqual(b["memory"].shape, (5, 8))
        self.assertEqual(b["x"].shape, (3, 8))
        self.assertEqual(list(b["key_padding_mask"]), [0, 0, 0, 1, 1])
        self.assertEqual(list(b["key_tokens"]), ["the", "black", "cat", "<pad>", "<pad>"])
        w = attention(b)
        self.assertTrue((w[:, :, 3:] == 0).all())
        self.check_run(p, b)

    def test_generator_reimplemented(self):
        """The random pattern: E, then W_Q, W_K, W_V, W_O, each (2u - 1)/sqrt(rows)."""
        for seed in (0, 12345, 2**64 - 1):
            p = self.make(f"r{seed}.npz", "--seed", str(seed), "--heads", "2", "--dm", "6", "--dk", "2",
                          "--dv", "3")
            b = load(p)
            rng = SplitMix64(seed)
            vocab = ["the", "cat", "sat", "on", "mat"]
            E = rng.matrix(len(vocab), 6)
            np.testing.assert_array_equal(b["x"], E[[vocab.index(t) for t in "the cat sat on the mat".split()]])
            for name, rows, cols in (("W_Q", 6, 4), ("W_K", 6, 4), ("W_V", 6, 6), ("W_O", 6, 6)):
                np.testing.assert_array_equal(b[name], rng.matrix(rows, cols, math.sqrt(rows)), f"{name} seed {seed}")
            self.assertEqual(b["config"], {"heads": 2, "causal": False})
            self.check_run(p, b)

    def test_float32(self):
        p = self.make("f.npz", "--dtype", "float32", "--seed", "3")
        b = load(p)
        self.assertEqual(b["W_Q"].dtype, np.float32)
        rng = SplitMix64(3)
        rng.matrix(5, 8)
        np.testing.assert_array_equal(b["W_Q"], rng.matrix(8, 8, math.sqrt(8)).astype(np.float32))

    def test_same_seed_same_bytes(self):
        for ext in ("npz", "json"):
            a = self.make(f"a.{ext}", "--seed", "5", "--pattern", "induction")
            c = self.make(f"c.{ext}", "--seed", "5", "--pattern", "induction")
            d = self.make(f"d.{ext}", "--seed", "6", "--pattern", "induction")
            self.assertEqual(a.read_bytes(), c.read_bytes())
            self.assertNotEqual(a.read_bytes(), d.read_bytes())

    def test_refusals(self):
        out = self.path("x.npz")
        self.assert_error(run_text("make", "-o", self.path("x.txt")), "--out", ".npz or .json")
        self.assert_error(run_text("make", "-o", out, "--pattern", "induction", "--dk", "2"), "--dk 2",
                          "induction", "at least 6")
        self.assert_error(run_text("make", "-o", out, "--tokens", "a", "--length", "3"), "--length")
        self.assert_error(run_text("make", "-o", out, "--tokens", "   "), "--tokens", "found none")
        self.assert_error(run_text("make", "-o", out, "--dm", "100000", "--dk", "100000"), "at most")
        self.assert_error(run_text("make", "-o", out, "--heads", "-1"), "--heads: expected a number from 1")
        self.assert_error(run_text("make", "-o", out, "--pattern", "copy"), "--pattern")
        self.assertFalse(out.exists())
        self.make("x.npz")
        self.assert_error(run_text("make", "-o", out), "x.npz")
        self.make("x.npz", "--force")



def bundle_of(name):
    """A data/ bundle as numpy arrays; config (heads) as its README says."""
    doc = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    b = {k: (np.array(v) if k not in ("query_tokens", "key_tokens") else v) for k, v in doc.items()}
    b["config"] = {"heads": 2}
    return b


def batched_weights(b, zero_key=None, mask=None):
    """weights (B, H, Tq, Tk) from the formula, key `zero_key` set to 0 after W_K, `mask` (B, Tk) True = PAD."""
    x = b["x"] if b["x"].ndim == 3 else b["x"][None]
    src = b["memory"] if "memory" in b else x
    src = src if src.ndim == 3 else src[None]
    H = b["config"]["heads"]
    Q, K = x @ b["W_Q"], src @ b["W_K"]
    if zero_key is not None:
        K[:, zero_key] = 0
    B, Tq, Tk, dk = Q.shape[0], Q.shape[1], K.shape[1], Q.shape[2] // H
    Q = Q.reshape(B, Tq, H, dk).transpose(0, 2, 1, 3)
    K = K.reshape(B, Tk, H, dk).transpose(0, 2, 1, 3)
    s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(dk)
    if mask is None and "key_padding_mask" in b:
        mask = np.array(b["key_padding_mask"], bool).reshape(B, Tk)
    if mask is not None:
        s = np.where(np.array(mask, bool).reshape(B, 1, 1, Tk), -np.inf, s)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    return s, e / e.sum(axis=-1, keepdims=True)


class ZeroKey(common.CliTestCase):
    """--zero-key J's story in the report and in --explain, its numbers against numpy."""

    STORY = re.compile(r"E\.g\. (?:batch 0, )?head 0, query (\d+) '[^']*': m_iJ = (\S+), the row's max (\S+) "
                       r"\(key (\d+) '[^']*'\), sum_j exp\(m_ij - max\) = (\S+): w_iJ = exp\(\S+ - \S+\) / \S+ = "
                       r"(\S+) \(stored (\S+)\), not 0\.")
    MASK = re.compile(r"To try it: echo '(.+?)' > (mask\d+\.json), then the same command with --key_padding_mask "
                      r"mask\d+\.json in place of --zero-key (\d+)\.")

    def story(self, name, j, *args):
        r = run_text("run", DATA / f"{name}.json", "--heads", "2", "--zero-key", str(j), "--width", "1000", *args)
        self.assert_ok(r)
        return r.out

    def test_the_row_worked_out_is_numpy_s(self):
        for name, j in (("sentence", 1), ("sentence", 4), ("padded", 2), ("cross", 0)):
            with self.subTest(name=name, key=j):
                b = bundle_of(name)
                s, w = batched_weights(b, zero_key=j)
                for args in ((), ("--explain", "--stages", "weights")):
                    out = self.story(name, j, *args)
                    self.assertIn(f"its score column is q_i · 0 = 0 for every query and head", out)
                    m = self.STORY.search(out)
                    self.assertIsNotNone(m, out)
                    i, row_max, key, row_sum = int(m[1]), float(m[3]), int(m[4]), float(m[5])
                    self.assertEqual(float(m[2]), 0.0)
                    self.assertAlmostEqual(row_max, s[0, 0, i].max(), places=3)
                    self.assertEqual(key, int(s[0, 0, i].argmax()))
                    self.assertAlmostEqual(row_sum, np.exp(s[0, 0, i] - s[0, 0, i].max()).sum(), places=3)
                    self.assertAlmostEqual(float(m[6]), w[0, 0, i, j], places=4)
                    self.assertAlmostEqual(float(m[7]), w[0, 0, i, j], places=4)
                    self.assertGreater(w[0, 0, i, j], 0.01)

    def test_the_masking_command_masks_the_key(self):
        for name, j in (("sentence", 1), ("padded", 2)):
            with self.subTest(name=name):
                m = self.MASK.search(self.story(name, j))
                self.assertIsNotNone(m)
                self.assertEqual(int(m[3]), j)
                mask = np.array(json.loads(m[1]), bool)
                path = self.path(m[2])
                path.write_text(m[1], encoding="utf-8")
                r = run_text("run", DATA / f"{name}.json", "--heads", "2", "--key_padding_mask", path, "--json",
                             "--stages", "weights")
                self.assert_ok(r)
                got = np.array(json.loads(r.out)["stages"]["weights"]["data"], dtype=np.float64)
                b = bundle_of(name)
                _, want = batched_weights(b, mask=mask.reshape(-1, mask.shape[-1]))
                common.assert_close(got.reshape(want.shape), want, 1e-12, f"{name}: key {j} masked")
                self.assertTrue((got.reshape(want.shape)[..., j] == 0).all())


if __name__ == "__main__":
    common.main("test_classroom")
