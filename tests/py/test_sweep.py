#!/usr/bin/python3
"""run --sweep (docs/classroom.md, "Sweeps") against numpy: the bundles each value makes are
rebuilt here from the documentation (d_k: x as given, W_Q then W_K drawn by splitmix64 seed
0, each number / sqrt(rows)), attention computed from the published formula (Vaswani et
al. 2017: softmax(Q Kᵀ · scale) per head, masks as -inf), and every number of the table
and of --json checked: the mean score spread, the mean entropy, the nearly uniform and
nearly one-hot rows (thresholds as docs/classroom.md states them).

    /usr/bin/python3 tests/py/test_sweep.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import math
import re
import sys
import unittest

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, run_text  # noqa: E402
from test_classroom import SplitMix64, load  # noqa: E402  (the documented generator, reimplemented)


def drawn_weights(dm, dkv, heads, kv_heads, dk):
    """docs/classroom.md, "Sweeps": W_Q (Dm, H·d_k), then W_K (Dkv, G·d_k), row by row, number / sqrt(rows)."""
    rng = SplitMix64(0)
    return rng.matrix(dm, heads * dk, math.sqrt(dm)), rng.matrix(dkv, kv_heads * dk, math.sqrt(dkv))


def stats(x, src, WQ, WK, heads, scale, visible):
    """Per docs/classroom.md: over the rows that see a key, the mean of max - min of the visible
    scaled scores, the mean entropy, and the rows (of 2+ visible keys) with exp(entropy) >=
    0.9 x visible keys (uniform) or a largest weight >= 0.9 (one-hot). x (B, Tq, Dm), src (B,
    Tk, Dkv), visible (B, Tq, Tk)."""
    Q, K = x @ WQ, src @ WK
    B, Tq, Tk = x.shape[0], x.shape[1], src.shape[1]
    dk = Q.shape[-1] // heads
    Q = Q.reshape(B, Tq, heads, dk).transpose(0, 2, 1, 3)
    K = K.reshape(B, Tk, -1, dk).transpose(0, 2, 1, 3)
    K = np.repeat(K, heads // K.shape[1], axis=1)
    s = Q @ K.transpose(0, 1, 3, 2) * scale  # (B, H, Tq, Tk)
    vis = np.broadcast_to(visible[:, None], s.shape)
    m = np.where(vis, s, -np.inf)
    rows = vis.any(-1)
    e = np.exp(m - np.where(rows, m.max(-1), 0)[..., None])
    w = e / np.where(rows, e.sum(-1), 1)[..., None]
    spread = np.where(vis, s, -np.inf).max(-1) - np.where(vis, s, np.inf).min(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(w > 0, w * np.log(w), 0).sum(-1)
    n = vis.sum(-1)
    two = n >= 2
    return {"rows": int(rows.sum()), "spread": float(spread[rows].mean()), "entropy": float(entropy[rows].mean()),
            "uniform": int((two & (np.exp(entropy) >= 0.9 * n)).sum()),
            "one_hot": int((two & (w.max(-1) >= 0.9)).sum())}


def table(out):
    """The printed table's rows: value -> numbers (spread, entropy, uniform, one-hot, ...)."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"[0-9.e+-]+|none", cells[0]) and len(cells) in (5, 6, 9):
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


class Sweep(common.CliTestCase):
    def sweep(self, *args):
        r = run_text("run", *args)
        self.assert_ok(r)
        return r.out

    def check(self, got, want, what):
        self.assertEqual(got["rows"], want["rows"], what)
        self.assertAlmostEqual(got["spread"], want["spread"], delta=1e-9 * max(1, abs(want["spread"])), msg=what)
        self.assertAlmostEqual(got["entropy"], want["entropy"], delta=1e-9, msg=what)
        self.assertEqual((got["uniform"], got["one_hot"]), (want["uniform"], want["one_hot"]), what)

    def check_text(self, cells, want, what):
        self.assertAlmostEqual(cells[0], want["spread"], delta=1e-3 * max(1, abs(want["spread"])), msg=what)
        self.assertAlmostEqual(cells[1], want["entropy"], delta=1e-4, msg=what)
        self.assertEqual((cells[2], cells[3]), (want["uniform"], want["one_hot"]), what)

    def check_dk(self, args, x, src, heads, visible, values):
        """--sweep dk=VALUES over `args`: the table and --json, every value scaled and not."""
        spec = "dk=" + ",".join(map(str, values))
        doc = json.loads(self.sweep(*args, "--sweep", spec, "--json"))
        printed = table(self.sweep(*args, "--sweep", spec))
        self.assertEqual(doc["schema"], "attnscope.sweep/1")
        self.assertEqual([v["value"] for v in doc["values"]], values)
        for dk, v in zip(values, doc["values"]):
            WQ, WK = drawn_weights(x.shape[-1], src.shape[-1], heads, heads, dk)
            scaled = stats(x, src, WQ, WK, heads, 1 / math.sqrt(dk), visible)
            unscaled = stats(x, src, WQ, WK, heads, 1.0, visible)
            self.check(v["run"], scaled, f"d_k {dk} scaled")
            self.check(v["unscaled"], unscaled, f"d_k {dk} unscaled")
            self.assertAlmostEqual(v["run"]["scale"], 1 / math.sqrt(dk))
            self.check_text(printed[str(dk)][:4], scaled, f"d_k {dk} scaled, text")
            self.check_text(printed[str(dk)][4:], unscaled, f"d_k {dk} unscaled, text")
        return doc

    def test_dk_over_a_made_bundle_with_padding(self):
        path = self.path("pad.npz")
        self.assert_ok(run_text("make", "-o", path, "--tokens", "the cat sat on the mat", "--pad", "2", "--heads",
                                "2", "--seed", "5"))
        b = load(path)
        x = b["x"][None]
        visible = np.broadcast_to(~b["key_padding_mask"].astype(bool)[None, None, :], (1, 8, 8))
        doc = self.check_dk([path], x, x, 2, visible, [4, 16, 64, 256, 1024])
        self.assertEqual(doc["values"][0]["run"]["rows"], 16)  # the <pad> queries see the 6 real keys too
        one_hot = [v["unscaled"]["one_hot"] for v in doc["values"]]
        self.assertGreater(one_hot[-1], one_hot[0])  # the lecture's point: unscaled, rows go one-hot

    def test_dk_over_a_causal_cross_and_batched_bundle(self):
        doc = json.loads(DATA.joinpath("padded.json").read_text(encoding="utf-8"))
        x = np.array(doc["x"], float)  # (B, T, Dm)
        visible = ~np.array(doc["key_padding_mask"], bool)[:, None, :] & np.tril(np.ones((x.shape[1],) * 2, bool))
        self.check_dk([DATA / "padded.json", "--heads", "2", "--causal"], x, x, 2, visible, [2, 8, 32])
        c = json.loads(DATA.joinpath("cross.json").read_text(encoding="utf-8"))
        x, mem = np.array(c["x"], float), np.array(c["memory"], float)
        x, mem = (x[None], mem[None]) if x.ndim == 2 else (x, mem)
        self.check_dk([DATA / "cross.json", "--heads", "2"], x, mem, 2, np.ones((x.shape[0], x.shape[1],
                                                                                  mem.shape[1]), bool), [4, 128])

    def test_scale_and_temperature_keep_the_bundle_s_weights(self):
        doc = json.loads(DATA.joinpath("sentence.json").read_text(encoding="utf-8"))
        x = np.array(doc["x"], float)[None]
        WQ, WK = np.array(doc["W_Q"], float), np.array(doc["W_K"], float)
        dk = WQ.shape[1] // 2
        visible = np.ones((1, x.shape[1], x.shape[1]), bool)
        for over, values, scale_of in (("scale", ["0.1", "1", "none", "3"], lambda v: 1.0 if v == "none" else float(v)),
                                       ("temperature", ["0.25", "1", "4"], lambda v: 1 / (math.sqrt(dk) * float(v)))):
            args = [DATA / "sentence.json", "--heads", "2", "--sweep", f"{over}={','.join(values)}"]
            got = json.loads(self.sweep(*args, "--json"))
            printed = table(self.sweep(*args))
            self.assertEqual(got["over"], over)
            for v, row in zip(values, got["values"]):
                want = stats(x, x, WQ, WK, 2, scale_of(v), visible)
                self.check(row["run"], want, f"{over} {v}")
                self.assertIsNone(row["unscaled"])
                self.assertAlmostEqual(row["run"]["scale"], scale_of(v))
                self.check_text(printed[v][1:], want, f"{over} {v}, text")

    def test_over_a_model_and_text(self):
        """x is the layer's input of the forward pass (saved by a run of its own); d_k's W_Q
        and W_K are drawn, so the model's own weights do not matter."""
        model = DATA / "tiny-gpt2"
        saved = self.path("forward.npz")
        source = ["--model", model, "--text", "the cat sat on the mat", "--layer", "1"]
        self.assert_ok(run_text("run", *source, "--save-forward", saved, "--stages", "none"))
        x = np.load(saved)["x"][None]
        heads = json.loads((model / "config.json").read_text())["n_head"]
        visible = np.tril(np.ones((1, x.shape[1], x.shape[1]), bool))
        self.check_dk(source, x, x, heads, visible, [4, 64])

    def test_every_line_fits_80_columns_and_names_its_thresholds(self):
        out = self.sweep(DATA / "sentence.json", "--heads", "2", "--sweep", "dk=4,16,64,256,1024")
        for line in out.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertIn("0.9 x visible keys", out)
        self.assertIn("largest weight >= 0.9", out)
        self.assertIn("splitmix64 seed 0", out)

    def test_html_draws_a_chart(self):
        page = self.path("sweep.html")
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--sweep", "dk=4,16,64", "--html", page)
        self.assertEqual(r.code, 0, r)
        self.assertEqual(r.out, "")
        html = page.read_text(encoding="utf-8")
        lines = re.findall(r'<polyline[^>]* points="([^"]*)"', html)
        self.assertEqual(len(lines), 6)  # one-hot, uniform, entropy; scaled and not
        for points in lines:
            self.assertEqual(len(points.split()), 3)
        self.assertEqual(html.count("<tr>"), 4)

    def test_refusals(self):
        s = DATA / "sentence.json"
        for args, words in (
                (["--sweep", "dk"], "expected NAME=V1,V2,... with NAME dk, scale or temperature"),
                (["--sweep", "width=4"], "expected NAME=V1,V2,..."),
                (["--sweep", "dk=4,,8"], "expected a value before each comma"),
                (["--sweep", "dk=0"], "expected whole numbers 1..65536 for dk, found '0'"),
                (["--sweep", "dk=4.5"], "found '4.5'"),
                (["--sweep", "temperature=0"], "numbers above 0 for temperature, found '0'"),
                (["--sweep", "scale=nan"], "finite numbers (or none) for scale"),
                (["--sweep", "scale=" + ",".join(["1"] * 17)], "at most 16 values, found 17"),
                (["--sweep", "dk=4", "--scale", "2"], "--sweep: dk= sets the scale of each run; --scale"),
                (["--sweep", "temperature=2", "--temperature", "2"], "--temperature contradicts it"),
                (["--sweep", "dk=4", "--compare", "--causal"], "--compare belongs to a single run"),
                (["--sweep", "dk=4", "--heatmap"], "--heatmap belongs to a single run"),
                (["--sweep", "dk=4", "--stages", "weights"], "--stages belongs to a single run"),
                (["--sweep", "dk=4", "--head", "5"], "--head")):
            with self.subTest(args=args):
                self.assert_error(run_text("run", s, "--heads", "2", *args), *words.split("\n"))
        self.assert_error(run_text("run", "--qkv", DATA / "sentence.json", "--sweep", "dk=4"),
                          "--sweep: dk= draws W_Q and W_K for x; --qkv")



def why_reference(x, WQ, WK, heads, h, i, causal=False):
    """Vaswani et al.: scores = Q Kᵀ / sqrt(d_k) per head; the winner and runner-up of row i of
    head h by weight; per feature d, q_d·k_d / sqrt(d_k) of both, sorted by their difference."""
    T = x.shape[0]
    dk = WQ.shape[1] // heads
    Q = (x @ WQ).reshape(T, heads, dk)[:, h]
    K = (x @ WK).reshape(T, heads, dk)[:, h]
    s = Q @ K.T / math.sqrt(dk)
    visible = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    m = np.where(visible, s, -np.inf)
    w = np.exp(m - m.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    order = [j for j in np.argsort(-w[i], kind="stable") if visible[i, j]]
    win, run = order[0], order[1]
    win_d, run_d = Q[i] * K[win] / math.sqrt(dk), Q[i] * K[run] / math.sqrt(dk)
    features = sorted(range(dk), key=lambda d: -(win_d[d] - run_d[d]))
    return {"winner": win, "runner": run, "w": w[i], "s": s[i], "win_d": win_d, "run_d": run_d, "order": features,
            "q": Q[i], "k_win": K[win], "k_run": K[run]}


class Why(common.CliTestCase):
    def bundle(self, name):
        doc = json.loads(DATA.joinpath(name).read_text(encoding="utf-8"))
        return (np.array(doc["x"], float), np.array(doc["W_Q"], float), np.array(doc["W_K"], float))

    def check(self, args, want, batched=True):
        r = run_text("run", *args, "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertEqual(doc["schema"], "attnscope.why/1")
        self.assertEqual((doc["winner"]["key"], doc["runner_up"]["key"]), (want["winner"], want["runner"]))
        self.assertAlmostEqual(doc["winner"]["weight"], want["w"][want["winner"]], delta=1e-12)
        self.assertAlmostEqual(doc["runner_up"]["score"], want["s"][want["runner"]], delta=1e-12)
        self.assertEqual([f["d"] for f in doc["features"]], want["order"])
        for f in doc["features"]:
            d = f["d"]
            self.assertAlmostEqual(f["q"], want["q"][d], delta=1e-12)
            self.assertAlmostEqual(f["k_runner_up"], want["k_run"][d], delta=1e-12)
            self.assertAlmostEqual(f["winner"], want["win_d"][d], delta=1e-12)
            self.assertAlmostEqual(f["difference"], want["win_d"][d] - want["run_d"][d], delta=1e-12)
        self.assertAlmostEqual(sum(f["winner"] for f in doc["features"]), doc["winner"]["score"], delta=1e-12)
        self.assertAlmostEqual(doc["gap"], want["s"][want["winner"]] - want["s"][want["runner"]], delta=1e-12)
        r = run_text("run", *args)
        self.assert_ok(r)
        rows = [line.split() for line in r.out.splitlines() if re.fullmatch(r"\s+\d+(\s+\S+){6}", line)]
        self.assertEqual([int(c[0]) for c in rows], want["order"])
        for c in rows:
            d = int(c[0])
            got = [float(v) for v in c[1:]]
            expected = [want["q"][d], want["k_win"][d], want["k_run"][d], want["win_d"][d], want["run_d"][d],
                        want["win_d"][d] - want["run_d"][d]]
            for g, e in zip(got, expected):
                self.assertAlmostEqual(g, e, delta=1e-5 * max(1, abs(e)))
        total = [line for line in r.out.splitlines() if line.startswith("  total")][0].split()[1:]
        self.assertAlmostEqual(float(total[0]), want["s"][want["winner"]], delta=1e-5)
        self.assertAlmostEqual(float(total[1]), want["s"][want["runner"]], delta=1e-5)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)
        return r.out

    def test_every_row_of_a_two_head_bundle(self):
        x, WQ, WK = self.bundle("sentence.json")
        for h in range(2):
            for i in range(x.shape[0]):
                with self.subTest(h=h, i=i):
                    self.check([DATA / "sentence.json", "--heads", "2", "--why", f"{h},{i}"],  # a 2-D x: H,I
                               why_reference(x, WQ, WK, 2, h, i))

    def test_a_causal_row_and_the_explanation(self):
        x, WQ, WK = self.bundle("causal.json")
        args = [DATA / "causal.json", "--causal", "--heads", "1"]
        H, I = ("0", "3") if x.ndim == 2 else ("0,0", "3")
        want = why_reference(x if x.ndim == 2 else x[0], WQ, WK, 1, 0, 3, causal=True)
        self.check(args + ["--why", f"{H},{I}"], want)
        r = run_text("run", *args, "--why", f"{H},{I}", "--explain")
        self.assert_ok(r)
        ratio = want["w"][want["winner"]] / want["w"][want["runner"]]
        m = re.search(r"w_win / w_run =\s*(\S+)", r.out)
        self.assertAlmostEqual(float(m.group(1).rstrip(",")), ratio, delta=1e-4 * ratio)
        self.assertIn("exp(gap)", r.out)

    def test_refusals(self):
        s = [DATA / "sentence.json", "--heads", "2"]
        self.assert_error(run_text("run", *s, "--why", "2,0"), "--why 0,2,0: expected batch < 1, head < 2")
        self.assert_error(run_text("run", *s, "--why", "0,0,0"), "--why: expected H,I (x is 2-D), found 3 numbers")
        self.assert_error(run_text("run", *s, "--why", "0,x"), "--why")
        self.assert_error(run_text("run", *s, "--why", "0,1", "--heatmap"), "--heatmap belongs to the whole run")
        self.assert_error(run_text("run", *s, "--why", "0,1", "--sweep", "dk=4"), "--why")
        x, _, _ = self.bundle("causal.json")
        row = "0,0" if x.ndim == 2 else "0,0,0"
        self.assert_error(run_text("run", DATA / "causal.json", "--causal", "--why", row),
                          "the row sees 1 key(s); a winner needs a runner-up")


if __name__ == "__main__":
    common.main("test_sweep")
