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
import shlex
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

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

    def test_induction_default_rows_above_099(self):
        """docs/classroom.md: a query with an earlier copy weights the key after it above 0.99
        (numpy's weights); the default sentence has no token twice."""
        p = self.make("ind.npz", "--pattern", "induction")
        b = load(p)
        toks = [str(t) for t in b["query_tokens"]]
        half = len(toks) // 2
        self.assertEqual(toks[:half], toks[half:])
        self.assertEqual(len(set(toks[:half])), half, toks)
        w = attention(b)[0]
        copies = 0
        for i in range(len(toks)):
            after = [j for j in range(1, i + 1) if toks[j - 1] == toks[i]]
            if after:
                copies += 1
                self.assertEqual(len(after), 1, (i, toks))
                self.assertGreater(w[i, after[0]], 0.99, (i, toks[i], w[i]))
        self.assertEqual(copies, half)
        self.check_run(p, b)

    def test_output_fits_80_columns(self):
        """The docs' own example and the widest numbers make prints, run in a folder of their own."""
        for args in (("--pattern", "previous-token", "--force"),
                     ("--pattern", "previous-token", "--seed", str(2**64 - 1), "--length", "65536", "--heads",
                      "4096", "--dk", "2", "--dtype", "float32", "--force")):
            with self.subTest(args=args):
                r = run_text("make", "-o", "prev.npz", *args, cwd=self.tmp)
                self.assert_ok(r)
                self.assertEqual(r.out.splitlines()[0], "attnscope make: wrote prev.npz")
                self.assertEqual(r.out.splitlines()[-1], "  attnscope run prev.npz")
                for line in r.out.splitlines():
                    self.assertLessEqual(len(line), 80, line)

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
                          "induction", "at least 7")
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


def batched_weights(b, zero_key=None, mask=None, scale=None, causal=False):
    """weights (B, H, Tq, Tk) from the formula, key `zero_key` set to 0 after W_K, `mask` (B, Tk) True = PAD,
    `scale` in place of 1/sqrt(d_k), keys after the query hidden when `causal`."""
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
    s = Q @ K.transpose(0, 1, 3, 2) * (1 / math.sqrt(dk) if scale is None else scale)
    if causal:
        s = np.where(np.tril(np.ones((Tq, Tk), bool)), s, -np.inf)
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



RAMP = ".,:-=+*#%@"  # docs/usage.md: the heatmap's character ramp, 0 to 1


def ramp_chars(w):
    """The ramp characters a weight may be drawn with (both neighbours at a rounding tie)."""
    t = min(max(w, 0.0), 1.0) * 9
    return {RAMP[int(math.floor(t + 0.5 + e))] for e in (-1e-9, 1e-9) if 0 <= math.floor(t + 0.5 + e) <= 9}


def diff_chars(d):
    """'-' where B is lower, '+' where higher, blank within 0.01 (both at the edge)."""
    return {" " if abs(d + e) < 0.01 else "-" if d + e < 0 else "+" for e in (-1e-9, 1e-9)}


class CompareHeatmap(common.CliTestCase):
    """run --compare 'OPTS' --heatmap: A, B and B - A for one head, against numpy."""

    def check(self, name, delta, b, wa, wb, visible_a, visible_b, *args):
        r = run_text("run", DATA / f"{name}.json", "--heads", "2", "--compare", delta, "--heatmap", "--color",
                     "never", *args)
        self.assert_ok(r)
        text = r.out[r.out.index("== weights"):]
        for line in text.splitlines():
            self.assertLessEqual(len(line), 80, line)
        lines = text.splitlines()
        title = next(n for n, line in enumerate(lines) if line.startswith("  A "))
        starts = [lines[title].index("A "), lines[title].index("B: " + delta), lines[title].index("B - A")]
        labels = bundle_of(name)["query_tokens"]
        labels = labels[b] if isinstance(labels[0], list) else labels
        label_w = max(len(t) for t in labels)
        rows = [line for line in lines[title + 1:] if line[2:2 + label_w + 1].rstrip() in labels and
                line[2 + label_w] == " " and line[2:].split()[0] in labels][:len(labels)]
        self.assertEqual(len(rows), len(labels), text)
        for i, line in enumerate(rows):
            for p, (w, vis) in enumerate(((wa, visible_a), (wb, visible_b), (None, None))):
                cells = line[starts[p] + label_w + 1:starts[p] + label_w + 1 + 2 * wa.shape[-1]]
                for j in range(wa.shape[-1]):
                    got = cells[2 * j:2 * j + 2]
                    if p < 2 and not vis[i, j]:
                        self.assertEqual(got, "××", (p, i, j))
                    elif p < 2:
                        self.assertIn(got[0], ramp_chars(w[i, j]), (p, i, j, w[i, j]))
                    elif not visible_a[i, j] and not visible_b[i, j]:
                        self.assertEqual(got, "××")
                    else:
                        self.assertIn(got[0], diff_chars(wb[i, j] - wa[i, j]), (i, j, wb[i, j] - wa[i, j]))
                    self.assertEqual(got[0], got[1])
        self.assertIn("blank where |B - A| < 0.01", " ".join(text.split()))
        return r.out

    def test_scale_none_on_sentence(self):
        bun = bundle_of("sentence")
        _, wa = batched_weights(bun)
        _, wb = batched_weights(bun, scale=1.0)
        every = np.ones(wa.shape[-2:], bool)
        out = self.check("sentence", "--scale none", 0, wa[0, 0], wb[0, 0], every, every)
        self.assertIn("max |A - B|", out)  # the differences table stays

    def test_ignore_padding_on_padded_batch_1_head_1(self):
        bun = bundle_of("padded")
        _, wa = batched_weights(bun)
        _, wb = batched_weights(bun, mask=np.zeros((2, 6), bool))
        seen = ~np.array(bun["key_padding_mask"], bool)[1][None, :].repeat(6, 0)
        self.check("padded", "--ignore-padding", 1, wa[1, 1], wb[1, 1], seen, np.ones((6, 6), bool), "--batch", "1",
                   "--head", "1")

    def test_refusals_in_one_line(self):
        for args, words in ((("--compare", "--heads 1"), "differ in shape"),
                            (("--compare", "--scale none", "--head", "0,1"), "one head"),
                            (("--compare", "--scale none", "--head", "5"), "head")):
            with self.subTest(args=args):
                r = run_text("run", DATA / "sentence.json", "--heads", "2", "--heatmap", *args)
                self.assertEqual(r.code, 2, r.err)
                self.assertEqual(len(r.err.strip().splitlines()), 1, r.err)
                self.assertIn(words, r.err)
                self.assertEqual(r.out, "")


def lesson(*args, stdin="", columns=80):
    """`attnscope lesson ARGS` in a pipe, from the source tree (data/ found there)."""
    env = dict(os.environ, COLUMNS=str(columns), NO_COLOR="1")
    return subprocess.run([str(BIN), "lesson", *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          env=env)


def columns(line):
    """Terminal columns of a line (wide East Asian characters count 2)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def expected_answers():
    """Each question of `lesson keys`, answered by numpy from data/'s bundles."""
    sentence, padded, cross = bundle_of("sentence"), bundle_of("padded"), bundle_of("cross")
    _, w = batched_weights(sentence)
    keys = sentence["key_tokens"]
    _, wp = batched_weights(padded)
    pads = [j for j, t in enumerate(padded["key_tokens"][1]) if t == "<pad>"]
    assert pads and (wp[1, 0, 0, pads] == 0).all()
    _, wz = batched_weights(sentence, zero_key=1)
    assert (wz[0, 0, :, 1] > 0).all()
    return {
        "strongest-key": keys[int(w[0, 0, 2].argmax())],
        "scale": f"{1 / math.sqrt(sentence['W_Q'].shape[1] // 2):.4f}",
        "softmax-axis": "keys",
        "pad-weight": "0",
        "scores-shape": f"{cross['x'].shape[0]} x {cross['memory'].shape[0]}",
        "cross-keys": "memory",
        "zeroed-key": "no",
        "keys-vs-values": "values",
    }, wz[0, 0, :, 1]


def row_max_key(w, b, h, i):
    return int(w[b, h, i].argmax())


def scaling_answers(made):
    """`lesson scaling`: the scale, the unscaled row's max, the spread's growth with Dk and the
    nearly one-hot rows, from numpy; `made` holds the bundles the lesson's make commands wrote."""
    sentence = bundle_of("sentence")
    _, w = batched_weights(sentence)
    _, wn = batched_weights(sentence, scale=1.0)
    small, big = load(made / "dk4.npz"), load(made / "dk1024.npz")
    sd = []
    for b in (small, big):
        s, _ = batched_weights(dict(b, config={"heads": 1}), scale=1.0)
        sd.append(s[0, 0].std())
    ratio, dks = sd[1] / sd[0], (small["W_Q"].shape[1], big["W_Q"].shape[1])
    root, whole = math.sqrt(dks[1] / dks[0]), dks[1] // dks[0]
    growth = int(root) if abs(math.log(ratio / root)) < abs(math.log(ratio / whole)) else whole
    hot = [int((batched_weights(dict(big, config={"heads": 1}), scale=sc)[1][0, 0].max(axis=1) >= 0.9).sum())
           for sc in (1.0, 1 / math.sqrt(dks[1]))]
    return {
        "scale": f"{1 / math.sqrt(sentence['W_Q'].shape[1] // 2):.4f}",
        "unscaled-max": "larger" if wn[0, 0, 2].max() > w[0, 0, 2].max() else "smaller",
        "spread-growth": str(growth),
        "one-hot-unscaled": str(hot[0]),
        "one-hot-scaled": str(hot[1]),
    }, {"ratio": ratio, "sd": sd}


def masks_answers():
    padded, causal = bundle_of("padded"), bundle_of("causal")
    causal["config"] = {"heads": 1}
    _, wp = batched_weights(padded)
    _, wc = batched_weights(causal, causal=True)
    zero = [j for j in range(wp.shape[-1]) if (wp[1, 0, :, j] == 0).all()]
    assert zero == [j for j, m in enumerate(padded["key_padding_mask"][1]) if m]
    return {
        "masked-keys": ", ".join(map(str, zero)),
        "pad-weight": "0",
        "visible-sum": "1" if f"{wp[1, 0, 0].sum():.4f}" == "1.0000" else f"{wp[1, 0, 0].sum():.4f}",
        "causal-visible": str(int((wc[0, 0, 2] > 0).sum())),
        "causal-first": "1" if f"{wc[0, 0, 0, 0]:.4f}" == "1.0000" else f"{wc[0, 0, 0, 0]:.4f}",
    }


def cross_answers():
    cross, sentence = bundle_of("cross"), bundle_of("sentence")
    _, w = batched_weights(cross)
    Tq, Tk = cross["x"].shape[0], cross["memory"].shape[0]
    return {
        "scores-shape": f"{Tq} x {Tk}",
        "cross-keys": "memory",
        "cross-softmax": str(Tk),
        "strongest-key": cross["key_tokens"][int(w[0, 0, 2].argmax())],
        "self-keys": "yes" if list(sentence["query_tokens"]) == list(sentence["key_tokens"]) else "no",
    }


def values_answers():
    b = bundle_of("sentence")
    K, V = b["x"] @ b["W_K"], b["x"] @ b["W_V"]
    _, w = batched_weights(b)
    _, wz = batched_weights(b, zero_key=1)
    context = w[0, 0, 2] @ V[:, :4]  # head 0: features 0..3
    by_keys = w[0, 0, 2] @ K[:, :4]
    return {
        "k-equals-v": "yes" if np.array_equal(K, V) else "no",
        "keys-vs-values": "values",
        "zeroed-key-value": "yes" if wz[0, 0, 2, 1] > 0 else "no",
    }, {"context": context[0], "by_keys": by_keys[0], "zeroed": wz[0, 0, 2, 1]}


def heads_answers():
    b = bundle_of("sentence")
    _, w = batched_weights(b)
    H, Dm = 2, b["x"].shape[-1]
    keys = b["key_tokens"]
    return {
        "head-dk": str(b["W_Q"].shape[1] // H),
        "heads-agree": "yes" if keys[int(w[0, 0, 2].argmax())] == keys[int(w[0, 1, 2].argmax())] else "no",
        "concat-width": str(H * (b["W_V"].shape[1] // H)),
    }


TOPICS = ("keys", "scaling", "masks", "cross", "values", "heads")


class Topics(common.CliTestCase):
    """Every topic of `attnscope lesson` but keys: each answer against numpy, the widths, --quiz."""

    def questions(self, topic):
        r = lesson(topic, "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""), topic)
        doc = json.loads(r.stdout)
        self.assertEqual((doc["schema"], doc["topic"]), ("attnscope.lesson/1", topic))
        return {q["id"]: q for q in doc["questions"]}

    def check(self, topic, want):
        got = self.questions(topic)
        self.assertEqual(set(got), set(want), topic)
        for qid, answer in want.items():
            self.assertEqual(got[qid]["answer"], answer, f"{topic}: {qid}")
        return got

    def test_scaling(self):
        r = lesson("scaling", "--no-pause")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        makes = [shlex.split(line[2:])[1:] for line in r.stdout.splitlines() if line.startswith("$ attnscope make ")]
        self.assertEqual(len(makes), 2)
        for args in makes:  # as a student types them, in a folder of their own
            proc = subprocess.run([str(BIN), *args], cwd=self.tmp, capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
        want, seen = scaling_answers(Path(self.tmp))
        got = self.check("scaling", want)
        sd4, sd_big, ratio = map(float, re.search(r"scores: (\S+) at Dk 4, (\S+) at Dk \d+, (\S+) times",
                                                  got["spread-growth"]["why"]).groups())
        self.assertAlmostEqual(sd4, seen["sd"][0], places=4)
        self.assertAlmostEqual(sd_big, seen["sd"][1], places=4)
        self.assertAlmostEqual(ratio, seen["ratio"], places=3)

    def test_masks(self):
        self.check("masks", masks_answers())

    def test_cross(self):
        self.check("cross", cross_answers())

    def test_values(self):
        want, seen = values_answers()
        got = self.check("values", want)
        m = re.search(r"context\[2\]\[0\] = (\S+) = sum_j w_j · V\[j\]\[0\] = (\S+); sum_j w_j · K\[j\]\[0\] would "
                      r"be (\S+)\.", got["keys-vs-values"]["why"])
        self.assertIsNotNone(m, got["keys-vs-values"]["why"])
        self.assertAlmostEqual(float(m[1]), seen["context"], places=4)
        self.assertAlmostEqual(float(m[3]), seen["by_keys"], places=4)
        self.assertIn(f"still {seen['zeroed']:.4f}", got["zeroed-key-value"]["why"])

    def test_heads(self):
        self.check("heads", heads_answers())

    def test_no_topic_lists_them(self):
        r = lesson()
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual([line.split()[0] for line in r.stdout.splitlines()[1:]], list(TOPICS))
        r = lesson("nope")
        self.assertIn("(topics: " + ", ".join(TOPICS) + ")", r.stderr)

    def test_every_line_fits_and_quiz_scores(self):
        for topic in TOPICS[1:]:
            for width in (80, 60):
                with self.subTest(topic=topic, width=width):
                    r = lesson(topic, "--no-pause", columns=width)
                    self.assertEqual((r.returncode, r.stderr), (0, ""))
                    for line in r.stdout.splitlines():
                        self.assertLessEqual(columns(line), width, line)
            qs = list(self.questions(topic).values())
            r = lesson(topic, "--quiz", stdin="\n".join(["wrong"] + [q["answer"] for q in qs[1:]]) + "\n")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"Not quite: the answer is {qs[0]['answer']}.", r.stdout)
            self.assertIn(f"Score: {len(qs) - 1} of {len(qs)} right", r.stdout)

    def test_the_scratch_folder_is_removed(self):
        env_tmp = self.path("scratch")
        env_tmp.mkdir()
        env = dict(os.environ, TMPDIR=str(env_tmp), COLUMNS="80")
        for args in (["--json"], ["--no-pause"]):
            r = subprocess.run([str(BIN), "lesson", "scaling", *args], capture_output=True, text=True, cwd=ROOT,
                               env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(list(env_tmp.iterdir()), [])
            self.assertNotIn(str(env_tmp), r.stdout)


class Lesson(common.CliTestCase):
    """`attnscope lesson keys` in a pipe: its answers against numpy, its widths, --quiz."""

    def questions(self):
        r = lesson("keys", "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        doc = json.loads(r.stdout)
        self.assertEqual(doc["schema"], "attnscope.lesson/1")
        return doc["questions"]

    def test_every_answer_is_numpy_s(self):
        want, zeroed = expected_answers()
        got = {q["id"]: q for q in self.questions()}
        self.assertEqual(set(got), set(want))
        for qid, answer in want.items():
            self.assertEqual(got[qid]["answer"], answer, qid)
        lo, hi = re.search(r"from (\S+) to (\S+) in head 0", got["zeroed-key"]["why"]).groups()
        self.assertAlmostEqual(float(lo), zeroed.min(), places=4)
        self.assertAlmostEqual(float(hi), zeroed.max(), places=4)

    def test_every_line_fits(self):
        for width in (80, 60):
            with self.subTest(width=width):
                r = lesson("keys", "--no-pause", columns=width)
                self.assertEqual((r.returncode, r.stderr), (0, ""))
                self.assertIn("Step 7 of 7", r.stdout)
                for line in r.stdout.splitlines():
                    self.assertLessEqual(columns(line), width, line)

    def test_quiz_scores_the_answers(self):
        qs = self.questions()
        right = "\n".join(q["answer"] for q in qs) + "\n"
        r = lesson("keys", "--quiz", stdin=right)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"Score: {len(qs)} of {len(qs)} right", r.stdout)
        self.assertNotIn("$ attnscope", r.stdout)
        one_wrong = "\n".join(["wrong"] + [q["answer"] for q in qs[1:]]) + "\n"
        r = lesson("keys", "--quiz", stdin=one_wrong)
        self.assertIn(f"Not quite: the answer is {qs[0]['answer']}.", r.stdout)
        self.assertIn(f"Score: {len(qs) - 1} of {len(qs)} right", r.stdout)

    def test_refusals(self):
        r = lesson("nope")
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("unknown topic 'nope'", r.stderr)
        r = lesson("keys", "--data", self.tmp)
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("--data", r.stderr)

    def test_a_pipe_never_waits(self):
        r = subprocess.run([str(BIN), "lesson", "keys"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
        self.assertEqual(r.returncode, 0)
        self.assertNotIn("[Enter", r.stdout)
        self.assertIn("Answer: no.", r.stdout)


class DemoLines(common.CliTestCase):
    """scripts/demo as a class sees it: every line of every view within 80 columns, each
    experiment shown beside the run it changes, and no waiting when not on a terminal."""

    def demo(self, *args):
        env = dict(os.environ, ATTNSCOPE_BIN=str(BIN), NO_COLOR="1", COLUMNS="80")
        return subprocess.run(["bash", str(ROOT / "scripts/demo"), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=env)

    def test_every_line_fits_80_columns(self):
        r = self.demo("--no-pause")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(len(r.stdout.splitlines()), 200)
        for line in r.stdout.splitlines():
            self.assertLessEqual(columns(line), 80, line)
        self.assertNotIn("[Enter", r.stdout + r.stderr)

    def test_the_scale_experiment_beside_the_run_it_changes(self):
        out = self.demo().stdout.replace(" \\\n    ", " ")  # a command wrapped with a backslash, joined
        runs = re.findall(r"\$ attnscope (run data/sentence\.json --heads 2 (?:--scale none )?--diagnose --stages none)"
                          r"\n(.*?)(?=\n-{80}|\Z)", out, re.S)
        self.assertEqual([c for c, _ in runs], ["run data/sentence.json --heads 2 --diagnose --stages none",
                                                "run data/sentence.json --heads 2 --scale none --diagnose --stages none"])
        spreads = [re.findall(r"(\S+)→(\S+)", body) for _, body in runs]
        sentence = bundle_of("sentence")
        s, _ = batched_weights(sentence, scale=1.0)
        raw = s[0, 0, 0].max() - s[0, 0, 0].min()  # head 0, query 0: the spread before scaling
        self.assertAlmostEqual(float(spreads[0][0][0]), raw, delta=0.01 * raw)
        self.assertAlmostEqual(float(spreads[0][0][1]), raw / 2, delta=0.01 * raw)  # 1/sqrt(4)
        self.assertAlmostEqual(float(spreads[1][0][1]), raw, delta=0.01 * raw)

    def test_an_unknown_option_is_refused(self):
        r = self.demo("--nopause")
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertIn("unknown option '--nopause'", r.stderr)


@unittest.skipUnless(shutil.which("tmux"), "tmux is not installed")
class LessonTmux(common.CliTestCase):
    """The lesson as a person uses it: tmux sends the keys and reads the screen. Every wait
    polls the screen with a generous timeout, so a loaded machine is only slower."""

    TIMEOUT = 120

    def setUp(self):
        super().setUp()
        self.server = f"attnscope-test-{os.getpid()}-{id(self)}"
        self.addCleanup(subprocess.run, ["tmux", "-L", self.server, "kill-server"], capture_output=True)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.server, *args], capture_output=True, text=True, check=True).stdout

    def start(self, cols, rows, command="lesson keys", end="LESSON-END"):
        """A shell in a cols x rows terminal, running `attnscope COMMAND` (or a command of its
        own, named by its first word) from the source tree, then printing `end`."""
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", str(cols), "-y", str(rows), "-s", "t",
                  "env -i PATH=/usr/bin:/bin TERM=xterm HOME=/tmp PS1='READY$ ' bash --norc --noprofile")
        self.wait_for("READY$")
        program = "" if command.startswith("env ") else f"'{BIN}' "
        self.keys(f"cd '{ROOT}' && {program}{command}; echo {end}", "Enter")

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "t", *keys)

    def screen(self, joined=False):
        return self.tmux("capture-pane", "-p", "-t", "t", "-S", "-2000", *(["-J"] if joined else []))

    def wait_for(self, text, after=0):
        """The screen (from `after` occurrences of `text` on) once `text` shows one more time."""
        deadline = time.monotonic() + self.TIMEOUT
        while time.monotonic() < deadline:
            screen = self.screen(joined=True)
            if screen.count(text) > after:
                return screen
            time.sleep(0.2)
        self.fail(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def test_answers_a_wrong_one_then_ctrl_c(self):
        want, _ = expected_answers()
        self.start(80, 24)
        self.wait_for("Predict:")
        self.keys("no such key", "Enter")  # wrong on purpose
        self.wait_for("[Enter: run it]")
        self.keys("Enter")
        screen = self.wait_for("[Enter: next step]")
        self.assertIn(f"Not quite: the answer is {want['strongest-key']}.", screen)
        self.keys("Enter")
        self.wait_for("Step 2 of 7")
        self.wait_for("Predict:", after=1)
        self.keys("0.5", "Enter")
        self.wait_for("[Enter: run it]", after=1)
        self.keys("Enter")
        screen = self.wait_for("[Enter: next step]", after=1)
        self.assertIn(f"Right: {want['scale']}.", screen)
        self.keys("C-c")
        self.wait_for("READY$", after=1)
        self.keys("clear; stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo; echo DONE-$((40+2))", "Enter")
        screen = self.wait_for("DONE-42")
        self.assertIn("icanon", screen)
        self.assertIn("\necho\n", screen)

    def test_a_60_by_20_terminal(self):
        self.start(60, 20)
        self.wait_for("Predict:")
        self.keys("the", "Enter")
        self.wait_for("[Enter: run it]")
        self.keys("Enter")
        screen = self.wait_for("[Enter: next step]")
        for line in screen.split("LESSON-END", 1)[1].splitlines():  # after the command typed
            self.assertLessEqual(columns(line), 60, line)
        self.keys("C-c")
        self.wait_for("READY$", after=1)


    def test_ctrl_c_removes_the_scratch_folder(self):
        scratch = self.path("scratch")
        scratch.mkdir()
        self.start(80, 24, f"env TMPDIR='{scratch}' '{BIN}' lesson scaling")
        self.wait_for("Predict:")
        self.assertEqual(len(list(scratch.iterdir())), 1)  # the lesson's folder, its two bundles made
        self.keys("C-c")
        self.wait_for("READY$", after=1)
        self.assertEqual(list(scratch.iterdir()), [])

    def test_a_second_topic_s_quiz_with_a_wrong_answer(self):
        want = masks_answers()
        self.start(80, 24, "lesson masks --quiz")
        screen = self.wait_for("Predict: Which keys")
        self.keys("0 1", "Enter")  # wrong on purpose
        self.wait_for("Predict:", after=1)
        self.keys("0", "Enter")
        for k, answer in enumerate(("1", want["causal-visible"], want["causal-first"])):
            self.wait_for("Predict:", after=2 + k)
            self.keys(answer, "Enter")
        screen = self.wait_for("LESSON-END", after=1)
        self.assertIn(f"Not quite: the answer is {want['masked-keys']}.", screen)
        self.assertIn("Score: 4 of 5 right", screen)
        self.assertNotIn("$ attnscope", screen)

    def test_the_paused_demo(self):
        """scripts/demo waits for Enter on a terminal; Ctrl-C mid-way leaves the terminal and the
        tree as they were (the folders it reads; other tests may write scratch files beside
        them), and no attnscope behind."""
        before = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "data", "scripts", "docs", "src"], cwd=ROOT, capture_output=True,
                                text=True).stdout
        self.start(80, 24, f"env ATTNSCOPE_BIN='{BIN}' NO_COLOR=1 bash scripts/demo", end="DEMO-END")
        screen = self.wait_for("[Enter: next step")
        self.assertIn("### 0. From text", screen)
        self.assertNotIn("### 1.", screen)
        for line in screen.split("DEMO-END", 1)[1].splitlines():
            self.assertLessEqual(columns(line), 80, line)
        self.keys("Enter")
        screen = self.wait_for("[Enter: next step", after=1)
        self.assertIn("### 1. Self-attention", screen)
        self.assertNotIn("### 2.", screen)
        self.keys("Enter")
        screen = self.wait_for("[Enter: next step", after=2)
        self.assertIn("The same weights as a heatmap", screen)
        self.assertNotIn("### 2.", screen)
        self.keys("C-c")
        screen = self.wait_for("READY$", after=1)
        self.assertNotIn("### 2.", screen)
        self.keys("clear; stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo; echo LEFT-$(ps -o args= -s $$ "
                  "| grep -c -e 'scripts/[d]emo' -e 'attnscope [r]un')", "Enter")
        screen = self.wait_for("LEFT-0")
        self.assertIn("icanon", screen)
        self.assertIn("\necho\n", screen)
        after = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "data", "scripts", "docs", "src"], cwd=ROOT, capture_output=True,
                               text=True).stdout
        self.assertEqual(after, before)

def softmax_rows(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class LessonOverASubject(common.CliTestCase):
    """`attnscope lesson keys BUNDLE` and `lesson keys --model DIR --text ...`: each answer
    against numpy (the bundle read by numpy; the model through scripts/lm_reference.py's
    float64 forward pass and its safetensors read by numpy), and the refusals."""

    def questions(self, *args):
        r = lesson("keys", *args, "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""), args)
        return {q["id"]: q for q in json.loads(r.stdout)["questions"]}

    def check(self, got, w, wz, J, dk, head):
        """w (Tq, Tk) the head's weights, wz its weights with key J zeroed (visible rows only)."""
        self.assertEqual(set(got), {"strongest-key", "scores-shape", "scale", "softmax-axis", "zeroed-key",
                                    "keys-vs-values"})
        q = min(2, w.shape[0] - 1)
        self.assertIn(str(int(w[q].argmax())), got["strongest-key"]["accepted"])
        self.assertIn(f"in head {head} of", got["strongest-key"]["question"])
        self.assertEqual(got["scores-shape"]["answer"], f"{w.shape[0]} x {w.shape[1]}")
        self.assertEqual(got["scale"]["answer"], f"{1 / math.sqrt(dk):.4f}")
        self.assertEqual(got["softmax-axis"]["answer"], "keys")
        self.assertEqual(got["zeroed-key"]["answer"], "no")
        self.assertEqual(got["keys-vs-values"]["answer"], "values")
        lo, hi = re.search(r"from (\S+) to (\S+) in head " + str(head), got["zeroed-key"]["why"]).groups()
        self.assertAlmostEqual(float(lo), wz.min(), places=4)
        self.assertAlmostEqual(float(hi), wz.max(), places=4)

    def test_a_bundle_made_by_make(self):
        out = self.path("made.npz")
        self.assert_ok(run_text("make", "-o", out, "--tokens", "the cat sat on the mat", "--heads", "2", "--seed",
                                "5"))
        b = load(Path(out))
        b["x"], b["W_Q"], b["W_K"] = (b[k].astype(np.float64) for k in ("x", "W_Q", "W_K"))
        _, w = batched_weights(b)
        _, wz = batched_weights(b, zero_key=1)
        got = self.questions(str(out))
        self.check(got, w[0, 0], wz[0, 0, :, 1], 1, b["W_Q"].shape[1] // 2, 0)
        self.assertIn(f"run {out} --stages scores,weights --head 0", got["strongest-key"]["command"])

    def test_a_model_and_text(self):
        import train_model  # noqa: E402  (scripts/: the .safetensors reader)
        import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)
        model, text, layer, head = ROOT / "data" / "tiny-gpt2", "The cat sat. The cat sat.", 1, 1
        r = run_text("tokens", "--model", model, "--text", text, "--json")
        self.assert_ok(r)
        ids = json.loads(r.out)["ids"]
        config, state = train_model.load_model(str(model))  # read now: the weights change this session
        state = {k: v.astype(np.float64) for k, v in state.items()}
        ref = lref.forward(config, state, ids)
        w = ref["weights"][layer][head]
        H, D, T = config["n_head"], config["n_embd"], len(ids)
        qkv = ref["inputs"][layer] @ state[f"transformer.h.{layer}.attn.c_attn.weight"] + \
            state[f"transformer.h.{layer}.attn.c_attn.bias"]
        dk = D // H
        Q, K = (t[:, head * dk:(head + 1) * dk] for t in np.split(qkv, 3, axis=1)[:2])
        K[1] = 0
        s = np.where(np.tril(np.ones((T, T), bool)), Q @ K.T / math.sqrt(dk), -np.inf)
        wz = softmax_rows(s)[1:, 1]  # the rows that see key 1
        got = self.questions("--model", str(model), "--text", text, "--layer", str(layer), "--head", str(head))
        self.check(got, w, wz, 1, dk, head)
        self.assertIn(f"--layer {layer} --stages weights --head {head}", got["softmax-axis"]["command"])

    def test_refusals(self):
        for args, words in [(("scaling", "data/sentence.json"), "topics that do: keys"),
                            (("keys", "no/such.npz"), "no/such.npz: no such file"),
                            (("keys", "--model", "no/such", "--text", "a"), "--model no/such: no such file"),
                            (("keys", "--model", "data/tiny-gpt2"), "--model, --text and --layer go together")]:
            with self.subTest(args=args):
                r = lesson(*args)
                self.assertEqual(r.returncode, 2, r)
                self.assertEqual(r.stdout, "")
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn(words, r.stderr)


class LessonInput(common.CliTestCase):
    """What a quiz reads: one bounded line per answer (a NUL byte or an endless line is refused
    in one line, exit 2), the last answer without its newline, and any arithmetic of the
    right value, evaluated here by Python's own arithmetic."""

    def quiz(self, **stdin):
        return subprocess.run([str(BIN), "lesson", "heads", "--quiz"], capture_output=True, cwd=ROOT, timeout=120,
                              **stdin)

    def test_dev_zero_and_an_endless_line_are_refused(self):
        with open("/dev/zero", "rb") as zero:
            r = self.quiz(stdin=zero)
        err = r.stderr.decode()
        self.assertEqual((r.returncode, len(err.splitlines())), (2, 1), err)
        self.assertIn("<stdin>: an answer holds a NUL byte", err)
        r = self.quiz(input=b"a" * (1 << 22))
        err = r.stderr.decode()
        self.assertEqual((r.returncode, len(err.splitlines())), (2, 1), err)
        self.assertIn("<stdin>: an answer longer than 1024 bytes", err)

    def test_the_last_answer_needs_no_newline(self):
        qs = json.loads(lesson("heads", "--json").stdout)["questions"]
        r = lesson("heads", "--quiz", stdin="\n".join(q["answer"] for q in qs))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"Score: {len(qs)} of {len(qs)} right", r.stdout)

    def test_any_arithmetic_of_the_scale(self):
        sentence = bundle_of("sentence")
        dk = sentence["W_Q"].shape[1] // 2
        scale = 1 / math.sqrt(dk)
        self.assertEqual(dk, 4)  # the expressions below are written for it
        right = ["0.5", ".5", "1/2", "1/sqrt(4)", "2^-1", "2**-1", "(1+1)/4", " 1 / ( 1 + 1 ) ", "4^-0.5",
                 "exp(-log(2))", "e^(-log(2))", "50e-2", "-(-1)/2", "sqrt(1/4)", "1/sqrt(2)^2"]
        wrong = ["1/3", "2", "sqrt(4)", "1/", "1/0", "2^", "import os", "__import__('os')", "1/2)", "(1/2",
                 "sqrt 4", "0x10", "nan", "inf", "(" * 200 + "1/2" + ")" * 200]
        for answer in right:
            self.assertAlmostEqual(eval(answer.replace("^", "**").replace("sqrt", "math.sqrt").replace(
                "exp", "math.exp").replace("log", "math.log").replace("e**", "math.e**")), scale, places=9, msg=answer)
        for answers, expect in ((right, "Right: "), (wrong, "Not quite: the answer is ")):
            for answer in answers:
                with self.subTest(answer=answer):
                    r = lesson("scaling", "--quiz", stdin=answer + "\n")
                    self.assertEqual(r.returncode, 0, r.stderr)
                    first = r.stdout.split("Predict:", 2)[1]
                    self.assertIn(expect + f"{scale:.4f}.", first)


class LessonSubjectRefusals(common.CliTestCase):
    """A subject the lesson cannot teach over is refused in one line, with the run's own words:
    a non-finite input, a single token, a head the run does not have."""

    def test_a_nan_input_is_the_run_s_warning(self):
        b = {k: np.array(v, dtype=np.float64) for k, v in json.loads((DATA / "sentence.json").read_text()).items()
             if k not in ("query_tokens", "key_tokens")}
        b["x"][0, 0] = np.nan
        p = self.save_npz("nan.npz", **b)
        for extra in ((), ("--json",)):
            r = lesson("keys", str(p), "--head", "0", *extra)
            with self.subTest(extra=extra):
                self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertTrue(r.stderr.startswith("attnscope: error: "), r.stderr)
                self.assertNotIn("internal error", r.stderr)
                self.assertIn("x: 1 non-finite value, the first nan at [0][0]", r.stderr)
                self.assertIn("a lesson needs finite inputs", r.stderr)

    def test_one_token(self):
        one = self.path("one.npz")
        self.assert_ok(run_text("make", "-o", one, "--tokens", "cat"))
        r = lesson("keys", str(one))
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("has 1 key; the lesson zeroes key 1, so it needs 2 or more", r.stderr)
        self.assertNotIn("--zero-key", r.stderr)
        self.assertNotIn("\\n", r.stderr)

    def test_a_refusal_says_attnscope_error_once(self):
        for args in (("keys", "data/sentence.json", "--head", "7"), ("keys", "data/reverse.json", "--layer", "1")):
            with self.subTest(args=args):
                r = lesson(*args)
                self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertEqual(r.stderr.count("attnscope: error:"), 1, r.stderr)


class LessonCommands(common.CliTestCase):
    """The commands a lesson shows, and the --json "command" field, as a POSIX shell reads
    them: shlex.split gives back the run's arguments, and `sh -c` runs them to the same
    output as the arguments given directly."""

    TEXT = "It's a cat;dog $HOME `id` \\ \"q\" *"

    def shell_env(self):
        bindir = self.path("bin")
        bindir.mkdir()
        (bindir / "attnscope").symlink_to(BIN)
        return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", COLUMNS="80", NO_COLOR="1")

    def test_json_commands_roundtrip_through_sh(self):
        args = ["--model", "data/tiny-gpt2", "--text", self.TEXT]
        r = lesson("keys", *args, "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        env = self.shell_env()
        for q in json.loads(r.stdout)["questions"]:
            with self.subTest(q=q["id"]):
                argv = shlex.split(q["command"])
                self.assertEqual(argv[:6], ["attnscope", "run", *args])
                by_sh = subprocess.run(["sh", "-c", q["command"]], capture_output=True, text=True, cwd=ROOT, env=env)
                direct = subprocess.run([str(BIN), *argv[1:]], capture_output=True, text=True, cwd=ROOT, env=env)
                self.assertEqual(by_sh.returncode, 0, by_sh.stderr)
                self.assertEqual((by_sh.stdout, by_sh.stderr), (direct.stdout, direct.stderr))

    def test_shown_commands_wrapped_run_in_sh(self):
        r = lesson("keys", "--model", "data/tiny-gpt2", "--text", self.TEXT, "--no-pause")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        commands = re.findall(r"^\$ (attnscope .*?(?:\\\n.*?)*)$", r.stdout, re.M)
        self.assertGreater(len(commands), 4)
        env = self.shell_env()
        for c in commands:
            with self.subTest(command=c):
                argv = shlex.split(c.replace("\\\n", ""))  # the shell's line continuation
                self.assertIn(self.TEXT, argv)
                by_sh = subprocess.run(["sh", "-c", c], capture_output=True, text=True, cwd=ROOT, env=env)
                direct = subprocess.run([str(BIN), *argv[1:]], capture_output=True, text=True, cwd=ROOT, env=env)
                self.assertEqual(by_sh.returncode, 0, by_sh.stderr)
                self.assertEqual((by_sh.stdout, by_sh.stderr), (direct.stdout, direct.stderr))


class LessonLines(common.CliTestCase):
    """`lesson scaling` shows make's lines whole (a number is never cut across lines), and
    `lesson --help` names --data's folder."""

    def test_numbers_are_never_cut(self):
        made = run_text("make", "-o", "dk1024.npz", "--dk", "1024", "--seed", "1", cwd=self.tmp)
        self.assert_ok(made)
        self.assertIn("1024,", made.out.split())
        for width in (80, 60, 40):
            with self.subTest(width=width):
                r = lesson("scaling", "--no-pause", columns=width)
                self.assertEqual((r.returncode, r.stderr), (0, ""))
                # make's output, word by word as the lesson shows it: wrapped between words only
                self.assertIn(" ".join(made.out.split()), " ".join(r.stdout.split()))
                for line in r.stdout.splitlines():
                    self.assertLessEqual(columns(line), width, line)

    def test_help_names_a_folder(self):
        r = run_text("lesson", "--help")
        self.assertEqual(r.code, 0, r)
        self.assertIn("--data DIR", r.out)
        self.assertNotIn("--data FILE", r.out)

if __name__ == "__main__":
    common.main("test_classroom")
