#!/usr/bin/python3
"""The views of the modern attention variants, run as a user runs them: --cell and
--explain narrate RoPE pairs, the softcap, the bias (ALiBi's slope, a float attn_mask),
the window and boolean attn_mask tests, the sink's share, grouped K/V heads and
head_output with the real numbers; the heatmaps, the HTML page and --diagnose mark the
keys the mask rule (and a -inf bias) hides; --json records the options and the new
stages with their shapes.

Every expected number comes from the independent float64 reference
scripts/modern_reference.py (attention() gives every stage), never from attnscope.

    /usr/bin/python3 tests/py/test_modern_views.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import math
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import modern_reference as mref  # noqa: E402  (scripts/, on the path through common)

NUM = r"(-?(?:\d+\.\d+|\d+|inf)(?:e[-+]\d+)?)"
DECIMALS = 6
TOL = 0.5 * 10 ** -DECIMALS * (1 + 1e-9) + 1e-12


def bundle(seed, B=2, T=6, Dm=8, H=4, G=2, Dk=4, Dv=3, Dout=5, **extra):
    """A random self-attention bundle with H query heads and G K/V heads."""
    rng = np.random.default_rng(seed)
    b = {"x": rng.standard_normal((B, T, Dm)),
         "W_Q": rng.standard_normal((Dm, H * Dk)) / 2, "W_K": rng.standard_normal((Dm, G * Dk)) / 2,
         "W_V": rng.standard_normal((Dm, G * Dv)) / 2, "W_O": rng.standard_normal((H * Dv, Dout)) / 2,
         "b_O": rng.standard_normal(Dout) / 4}
    b.update(extra)
    return b


def hidden(want, b, h, i, j):
    """Whether the reference hides key j from query i in head h: the mask, or a -inf bias."""
    m = want["mask"]
    seen = m[b, h, i, j] if m.ndim == 4 else m[b, i, j]
    return not seen or ("bias" in want and want["bias"][b, h, i, j] == -np.inf)


class ModernViews(CliTestCase):
    def run_ok(self, b, *args):
        src = self.save_npz("b.npz", **b)
        r = run_text("run", src, *args)
        self.assertEqual(r.code, 0, r)
        self.assertTrue(all(line.startswith(common.WARNING_PREFIX) for line in r.err.splitlines()), r)
        return r

    def near(self, printed, expected, what, tol=TOL):
        printed = float(printed)
        if math.isinf(expected):
            self.assertEqual(printed, expected, what)
        else:
            self.assertLessEqual(abs(printed - expected), tol, f"{what}: printed {printed}, expected {expected}")

    def line(self, text, pattern):
        """The one match of `pattern` in text (its groups)."""
        found = re.findall(pattern, text, re.M)
        self.assertEqual(len(found), 1, f"{pattern!r} in:\n{text}")
        return found[0]


class Cell(ModernViews):
    """--cell: every narrated number equals the reference's."""

    OPTS = dict(kv_heads=2, rope=True, alibi=True, causal=True, window=3, softcap=2.0)
    ARGS = ["--heads", "4", "--kv-heads", "2", "--rope", "--alibi", "--causal", "--window", "3", "--softcap", "2"]

    def check_cell(self, b, want, args, cell, sinks=None):
        bi, h, i, j = cell
        r = self.run_ok(b, *args, "--cell", f"{bi},{h},{i},{j}", "--stages", "none", "--decimals", str(DECIMALS))
        t = r.out
        H, G = want["Q"].shape[1], want["K"].shape[1]
        g = h // (H // G)
        # Grouped-query attention: the K/V head the query head reads.
        if G < H:
            self.assertEqual(int(self.line(t, rf"reads K/V head g = h / \(H/G\) = {h} / {H // G} = (\d+)")), g)
        # 0) RoPE: each pair before (Q, K) and after (Q_rot, K_rot).
        if "Q_rot" in want:
            for who, before, after, row in (("q_i", want["Q"][bi, h], want["Q_rot"][bi, h], i),
                                            ("k_j", want["K"][bi, g], want["K_rot"][bi, g], j)):
                block = t[t.index(f"     {who} at position"):]
                for a, c in ((0, 2), (1, 3)):
                    got = re.search(rf"pair \(d{a}, d{c}\) angle {NUM}: \({NUM}, {NUM}\) -> \({NUM}, {NUM}\)",
                                    block).groups()
                    pos = i if who == "q_i" else j
                    self.near(got[0], pos * 10000.0 ** (-2 * a / 4), f"{who} angle {a}")
                    for n, value in enumerate((before[row, a], before[row, c], after[row, a], after[row, c])):
                        self.near(got[1 + n], value, f"{who} pair {a} value {n}")
        # 1) the dot product (of the rotated vectors) and 2) the scaled, stored score.
        q = want["Q_rot" if "Q_rot" in want else "Q"][bi, h, i]
        k = want["K_rot" if "K_rot" in want else "K"][bi, g, j]
        self.near(self.line(t, rf"^     sum = {NUM}$"), float(q @ k), "q · k")
        self.near(self.line(t, rf"^     stored: scores\[{bi}\]\[{h}\]\[{i}\]\[{j}\] = {NUM}$"),
                  want["scores"][bi, h, i, j], "score")
        s = want["scores"][bi, h, i, j]
        logit = s
        if "--softcap" in args:
            logit = 2.0 * math.tanh(s / 2.0)
            self.near(self.line(t, rf"softcap: C · tanh\(s / C\) = 2 · tanh\({NUM} / 2\) = {NUM}$")[1], logit,
                      "softcap")
        if "bias" in want:
            bias = want["bias"][bi, h, i, j]
            self.near(self.line(t, rf"^     stored: bias\[{bi}\]\[{h}\]\[{i}\]\[{j}\] = {NUM}$"), bias, "bias")
            if "--alibi" in args and "attn_mask" not in b:
                m, kp, qp, prod = self.line(t, rf"ALiBi m_{h} · \(k_pos - q_pos\) = {NUM} · \({NUM} - {NUM}\) = {NUM}$")
                self.assertAlmostEqual(float(m), mref.alibi_slopes(H)[h], delta=5e-4 * abs(float(m)))
                self.assertEqual((int(kp), int(qp)), (j, i))
                self.near(prod, bias, "m_h · (k_pos - q_pos)")
            logit = logit + bias
        # 3) the verdict of the mask rule, and a -inf bias.
        is_hidden = hidden(want, bi, h, i, j)
        self.assertIn(f"3) mask: key {j} is {'hidden from' if is_hidden else 'visible to'} query {i}", t)
        if "--window" in args:
            verdict = self.line(t, rf"window 3: q_pos - 3 < k_pos: {i} - 3 = -?\d+ < {j} is (true|false)$")
            self.assertEqual(verdict == "true", i - 3 < j)
        if not is_hidden and ("bias" in want or "--softcap" in args):
            self.near(self.line(t, rf"\[masked_scores = {NUM}\]$"), want["masked_scores"][bi, h, i, j], "masked")
            self.near(self.line(t, rf"the masked score stays {NUM} "), logit, "logit")
        # 4) the softmax, with the sink when there is one.
        w = want["weights"][bi, h, i, j]
        self.near(self.line(t, rf"^     weight = {NUM} / {NUM} = {NUM}    \[weights = {NUM}\]$")[3], w, "weights")
        row = want["masked_scores"][bi, h, i]
        if sinks is not None and np.isfinite(row).any():
            s_h = sinks[h]
            self.near(self.line(t, rf"sink logit s_h = {NUM} \(read back"), s_h, "sink logit", tol=1e-5)
            M = max(row[np.isfinite(row)].max(), s_h)
            self.near(self.line(t, rf"^     M = max\(row max, s_h\) = {NUM}$"), M, "M", tol=1e-5)
            keys, sink, denom = self.line(t, rf"over the \d+ (?:visible )?keys? {NUM} \+ exp\(s_h - M\) {NUM} = {NUM}$")
            self.near(keys, float(np.exp(row - M).sum()), "keys' sum", tol=1e-5)
            self.near(sink, math.exp(s_h - M), "exp(s_h - M)", tol=1e-5)
            self.near(denom, float(np.exp(row - M).sum()) + math.exp(s_h - M), "denominator", tol=1e-5)
            share = self.line(t, rf"sink's share = {NUM} / {NUM} = {NUM}    \[sink_weight = {NUM}\]")
            self.near(share[2], want["sink_weight"][bi, h, i], "sink share", tol=1e-5)
            self.near(share[3], want["sink_weight"][bi, h, i], "sink_weight")
        # 5) the value of the K/V head the query head reads, and the context row.
        for d in range(want["V"].shape[-1]):
            vals = self.line(t, rf"^       d{d} +{NUM} +{NUM} +{NUM}$")
            self.near(vals[0], want["V"][bi, g, j, d], "v_j")
            self.near(vals[2], want["context"][bi, h, i, d], "context")
        return t

    def test_gqa_rope_alibi_window_softcap_sinks(self):
        sinks = np.array([0.5, -1.0, 2.0, 0.0])
        b = bundle(1, sinks=sinks)
        want = mref.attention(b, 4, **self.OPTS)
        for cell in ((1, 3, 4, 2), (0, 0, 5, 1), (0, 1, 5, 4), (1, 2, 0, 0), (1, 3, 2, 5)):
            with self.subTest(cell=cell):
                self.check_cell(b, want, self.ARGS, cell, sinks=sinks)

    def test_float_attn_mask_with_minus_inf(self):
        rng = np.random.default_rng(2)
        m = rng.standard_normal((6, 6))
        m[4, :2] = -np.inf
        b = bundle(2, attn_mask=m)
        want = mref.attention(b, 4, kv_heads=2)
        args = ["--heads", "4", "--kv-heads", "2"]
        t = self.check_cell(b, want, args, (0, 1, 4, 1))
        self.assertIn("the mask rule: visible", t)
        self.assertIn("but the bias is -inf: that hides the key too", t)
        t = self.check_cell(b, want, args, (1, 2, 4, 3))
        self.assertIn("bias: the float attn_mask's value", t)

    def test_boolean_attn_mask_verdicts(self):
        rng = np.random.default_rng(3)
        blocked = rng.random((2, 6, 6)) < 0.4
        b = bundle(3, attn_mask=blocked)
        want = mref.attention(b, 4, kv_heads=2, attn_mask_means="block", causal=True)
        args = ["--heads", "4", "--kv-heads", "2", "--attn-mask-means", "block", "--causal"]
        for i, j in ((5, 0), (5, 1), (5, 2), (5, 3), (3, 3), (2, 4)):
            with self.subTest(i=i, j=j):
                t = self.check_cell(b, want, args, (1, 0, i, j))
                verdict = self.line(t, r"boolean attn_mask: (.*)$")
                if j > i:
                    self.assertEqual(verdict, "(not needed: already hidden)")
                else:
                    self.assertEqual(verdict, "blocks it" if blocked[1, i, j] else "allows it")

    def test_explicit_positions_and_bottom_right(self):
        b = bundle(4, T=5, q_positions=np.array([3, 4, 5, 6, 7]), k_positions=np.arange(5) + 3)
        want = mref.attention(b, 4, kv_heads=2, rope=True, causal=True, window=2)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--causal", "--window", "2",
                        "--cell", "0,1,3,2", "--stages", "none", "--decimals", str(DECIMALS))
        self.assertIn("positions: q_pos = 6, k_pos = 5", r.out)
        self.assertIn("explicit positions (q_positions / k_positions)", " ".join(r.out.split()))  # (wrapped)
        self.assertIn("window 2: q_pos - 2 < k_pos: 6 - 2 = 4 < 5 is true", r.out)
        self.near(self.line(r.out, rf"^     stored: scores\[0\]\[1\]\[3\]\[2\] = {NUM}$"), want["scores"][0, 1, 3, 2],
                  "score")


class Explain(ModernViews):
    """--explain: the new stages narrated with the run's numbers."""

    def test_numbers(self):
        sinks = np.array([0.5, -1.0, 2.0, 0.0])
        b = bundle(5, sinks=sinks)
        want = mref.attention(b, 4, kv_heads=2, rope=True, alibi=True, causal=True, window=3, softcap=2.0)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--alibi", "--causal", "--window", "3",
                        "--softcap", "2", "--explain", "--width", "400", "--stages",
                        "Q,K,V,Q_rot,K_rot,scores,bias,mask,masked_scores,weights,sink_weight,context,head_output,output")
        t = r.out
        # RoPE: key 1 at position 1, pair (d0, d2), angle 1 rad.
        got = self.line(t, rf"key 1 'k1' at position 1, head 0, pair \(d0, d2\): angle 1 · 1 = 1 rad, "
                           rf"\({NUM}, {NUM}\) -> \({NUM}, {NUM}\)")
        for printed, value in zip(got, (want["K"][0, 0, 1, 0], want["K"][0, 0, 1, 2], want["K_rot"][0, 0, 1, 0],
                                        want["K_rot"][0, 0, 1, 2])):
            self.assertAlmostEqual(float(printed), value, delta=5e-4 * max(1, abs(value)))
        # ALiBi slopes, and one bias worked out.
        slopes = self.line(t, rf"Slopes: m_0 = {NUM}, m_1 = {NUM}, m_2 = {NUM}, m_3 = {NUM}\.")
        for printed, value in zip(slopes, mref.alibi_slopes(4)):
            self.assertAlmostEqual(float(printed), value, delta=5e-4 * value)
        self.assertIn("query 5 (q_pos 5), key 0 (k_pos 0): 0.25 · (0 - 5) = -1.25; stored -1.25.", t)
        # The window, with the keys query 5 sees.
        self.assertIn("query 5 'q5' at q_pos 5 sees keys 3, 4, 5 of 6.", t)
        # Sink logits read back, and one row's share.
        logits = self.line(t, rf"s_0 = {NUM}, s_1 = {NUM}, s_2 = {NUM}, s_3 = {NUM}\.")
        for printed, value in zip(logits, sinks):
            self.assertAlmostEqual(float(printed), value, delta=1e-3)
        stored = self.line(t, rf"sink_weight = {NUM} \(stored {NUM}\)\.")
        for printed in stored:
            self.assertAlmostEqual(float(printed), want["sink_weight"][0, 0, 0], delta=5e-4)
        # Row sums 1 - sink_weight, and head_output summing to output.
        lo, hi = self.line(t, rf"a row sums to 1 - sink_weight \(here from {NUM} to {NUM}\)")
        sums = want["weights"].sum(-1)
        self.assertAlmostEqual(float(lo), sums.min(), delta=5e-4)
        self.assertAlmostEqual(float(hi), sums.max(), delta=5e-4)
        terms = self.line(t, rf"query 0, feature 0: {NUM} \+ {NUM} \+ {NUM} \+ {NUM} = {NUM}; output {NUM} "
                             rf"\(the difference {NUM} is b_O\[0\]\)")
        ho = want["head_output"][0, 0, :, 0]
        for printed, value in zip(terms, list(ho) + [ho.sum(), want["output"][0, 0, 0], b["b_O"][0]]):
            self.assertAlmostEqual(float(printed), value, delta=5e-4 * max(1, abs(value)))
        # Grouped-query attention in words.
        self.assertIn("K/V head 0 serves query heads 0–1; K/V head 1 serves query heads 2–3", t)
        self.assertIn("split into G = 2 K/V heads", t)

    def test_header_says_every_mask_and_term(self):
        pad = np.zeros((2, 6), dtype=bool)
        pad[0, -1] = True
        b = bundle(6, sinks=np.zeros(4), attn_mask=np.ones((6, 6), dtype=bool), key_padding_mask=pad)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--causal", "--causal-align", "bottom-right",
                        "--window", "2", "--alibi", "--softcap", "30", "--attn-mask-means", "allow",
                        "--stages", "weights")
        # (the line wraps within the width, under its first word)
        masks = re.search(r"^  masks   (.*(?:\n {10}.*)*)", r.out, re.M).group(1).replace("\n          ", " ")
        for part in ("key padding (key_padding_mask, 1 = PAD)", "causal, bottom-right", "window 2",
                     "boolean attn_mask (true = may attend)", "ALiBi", "softcap 30", "sink"):
            self.assertIn(part, masks)
        self.assertIn("  K/V     K/V head 0 serves query heads 0–1; K/V head 1 serves query heads 2–3", r.out)


class Pictures(ModernViews):
    """Heatmaps and HTML mark what the mask rule and a -inf bias hide; bias is diverging."""

    def masked_cells(self, text, title):
        """The rows of '××' / other cells of one terminal heatmap panel titled `title`."""
        lines = text.splitlines()
        start = next(k for k, l in enumerate(lines) if l.strip() == title)
        rows = []
        for l in lines[start + 1:]:
            m = re.match(r"^  (q\d) (.*)$", l)
            if m:
                cells = m.group(2)
                rows.append([cells[2 * c:2 * c + 2] == "××" for c in range(len(cells) // 2)])
            elif rows:
                break
        return np.array(rows)

    def test_terminal_heatmaps(self):
        rng = np.random.default_rng(7)
        m = rng.standard_normal((6, 6))
        m[2, 1:3] = -np.inf
        b = bundle(7, attn_mask=m)
        want = mref.attention(b, 4, kv_heads=2, window=2)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--window", "2", "--stages", "bias,weights",
                        "--heatmap", "--color", "never", "--width", "80", "--batch", "1", "--head", "3")
        self.assertIn("K/V head 0 serves query heads 0–1; K/V head 1 serves query heads 2–3", r.out)
        w = self.masked_cells(r.out, "weights, batch 1, head 3")
        np.testing.assert_array_equal(w, ~want["mask"][1] | (want["bias"][1, 3] == -np.inf))
        bias = self.masked_cells(r.out, "bias, batch 1, head 3")
        np.testing.assert_array_equal(bias, want["bias"][1, 3] == -np.inf)
        legend = [l for l in r.out.splitlines() if l.startswith("  legend")][0]
        big = np.abs(want["bias"][1, 3][np.isfinite(want["bias"][1, 3])]).max()
        # Labelled legends, one per stage: "  legend  bias  LO RAMP HI   ×× masked (-inf)".
        lo, hi = re.match(rf"  legend  bias +{NUM} \S+ {NUM}(?:   |$)", legend).groups()
        self.assertAlmostEqual(float(hi), big, delta=5e-4 * big)  # diverging: -m .. m
        self.assertAlmostEqual(float(lo), -big, delta=5e-4 * big)

    def test_sink_weight_heatmap(self):
        b = bundle(8, sinks=np.array([0.0, 1.0, -1.0, 3.0]))
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--stages", "sink_weight", "--heatmap",
                        "--color", "never", "--width", "80")
        self.assertIn("rows: heads; columns: queries", r.out)
        self.assertIn("sink_weight, batch 0", r.out)
        self.assertIn("  legend  sink_weight  0 ", r.out)  # the probability scale 0..1

    def test_html(self):
        rng = np.random.default_rng(9)
        m = rng.standard_normal((6, 6))
        m[3, :2] = -np.inf
        b = bundle(9, attn_mask=m, sinks=np.ones(4))
        want = mref.attention(b, 4, kv_heads=2, causal=True, window=3)
        src = self.save_npz("b.npz", **b)
        page = self.path("p.html")
        r = run_text("run", src, "--heads", "4", "--kv-heads", "2", "--causal", "--window", "3", "--html", page,
                     "--stages", "K,bias,weights,sink_weight,head_output", "-q")
        self.assertEqual(r.code, 0, r)
        html = open(page, encoding="utf-8").read()
        self.assertIn("K/V head 0 serves query heads 0–1", html)
        tables = re.findall(r'<table class="heat[^"]*" data-stage="weights" data-batch="(\d)" data-head="(\d)">'
                            r"(.*?)</table>", html, re.S)
        self.assertEqual(len(tables), 8)
        for bi, h, body in tables:
            bi, h = int(bi), int(h)
            cells = re.findall(r'<td class="([^"]*)" title', body)
            got = np.array([c == "masked" for c in cells]).reshape(6, 6)
            want_hidden = ~want["mask"][bi] | (want["bias"][bi, h] == -np.inf)
            np.testing.assert_array_equal(got, want_hidden, f"batch {bi} head {h}")
        # bias on the diverging palette, its -inf cells hatched; sink_weight an (H, Tq) table per item.
        bias = re.search(r'data-stage="bias" data-batch="0" data-head="3">(.*?)</table>', html, re.S).group(1)
        classes = re.findall(r'<td class="([^"]*)" title', bias)
        self.assertEqual(classes.count("masked"), 2)
        self.assertTrue(all(c == "masked" or c.startswith("r") for c in classes))
        sink = re.findall(r'data-stage="sink_weight" data-batch="(\d)" data-head="">(.*?)</table>', html, re.S)
        self.assertEqual(len(sink), 2)
        self.assertEqual(len(re.findall(r"<tr data-index", sink[0][1])), 4)  # a row per head
        self.assertIn("(reads K/V head 1)", html)

    def test_svg_of_the_bias(self):
        b = bundle(10, attn_mask=np.where(np.eye(6, dtype=bool), -np.inf, 0.5))
        src = self.save_npz("b.npz", **b)
        svg = self.path("b.svg")
        # (--stages bias,weights: the bias alone is not computed, see the report of this change)
        r = run_text("run", src, "--heads", "4", "--kv-heads", "2", "--alibi", "--stages", "bias,weights",
                     "--svg", svg, "--svg-stage", "bias", "-q")
        self.assertEqual(r.code, 0, r)
        text = open(svg, encoding="utf-8").read()
        self.assertEqual(text.count('class="cell masked"'), 6)  # the -inf diagonal


class Json(ModernViews):
    def test_config_and_shapes(self):
        b = bundle(11, sinks=np.zeros(4), q_positions=np.arange(6) + 2)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--rope-dim", "2", "--rope-style",
                        "interleaved", "--rope-base", "500", "--causal", "--window", "4", "--softcap", "5",
                        "--alibi", "--json", "--stages",
                        "Q,K,V,Q_rot,K_rot,scores,bias,mask,masked_scores,weights,sink_weight,context,head_output,output")
        doc = json.loads(r.out)
        c = doc["config"]
        self.assertEqual(c["kv_heads"], 2)
        self.assertEqual(c["rope"], {"base": 500, "dim": 2, "style": "interleaved"})
        self.assertEqual((c["alibi"], c["window"], c["softcap"], c["attn_mask_means"]), (True, 4, 5, None))
        self.assertEqual((c["attn_mask"], c["sinks"], c["positions"]), (None, [0, 0, 0, 0], True))
        np.testing.assert_allclose(c["alibi_slopes"], mref.alibi_slopes(4), rtol=1e-15)
        self.assertEqual(doc["dims"]["G"], 2)
        want = mref.attention(b, 4, kv_heads=2, rope=True, rope_dim=2, rope_style="interleaved", rope_base=500.0,
                              causal=True, window=4, softcap=5.0, alibi=True)
        for name, w in want.items():
            got = np.array(doc["stages"][name]["data"], dtype=float)
            self.assertEqual(got.shape, w.shape, name)
            fin = np.isfinite(w)
            np.testing.assert_allclose(got[fin], w[fin], atol=1e-12, err_msg=name)
        self.assertEqual(doc["stages"]["K_rot"]["axes"], ["B", "G", "Tk", "Dk"])
        self.assertEqual(doc["stages"]["head_output"]["axes"], ["B", "Tq", "H", "Dout"])

    def test_boolean_and_float_attn_mask_in_config(self):
        b = bundle(12, attn_mask=np.ones((6, 6), dtype=bool))
        c = json.loads(self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--attn-mask-means", "block",
                                   "--json", "--stages", "weights").out)["config"]
        self.assertEqual((c["attn_mask"], c["attn_mask_means"], c["sinks"]), ("bool", "block", None))
        b = bundle(12, attn_mask=np.zeros((6, 6)))
        c = json.loads(self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--json").out)["config"]
        self.assertEqual(c["attn_mask"], "float")
        # Whichever stages are kept: a float mask beside ALiBi, and sinks, are told from the run itself.
        b = bundle(12, attn_mask=np.zeros((6, 6)), sinks=np.array([1.0, 2.0, 3.0, 4.0]))
        c = json.loads(self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--alibi", "--json", "--stages",
                                   "output").out)["config"]
        self.assertEqual((c["attn_mask"], c["sinks"], c["alibi"]), ("float", [1, 2, 3, 4], True))
        self.assertEqual(len(c["alibi_slopes"]), 4)


class Diagnose(ModernViews):
    def test_sinks_gqa_and_minus_inf_bias(self):
        rng = np.random.default_rng(13)
        m = rng.standard_normal((6, 6))
        m[5, :3] = -np.inf
        sinks = np.array([0.0, 1.0, -1.0, 2.0])
        b = bundle(13, attn_mask=m, sinks=sinks)
        want = mref.attention(b, 4, kv_heads=2, rope=True, causal=True)
        r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--causal", "--diagnose", "--json",
                        "--stages", "none")
        rows = json.loads(r.out)["diagnostics"]
        self.assertEqual(len(rows), 2 * 4 * 6)
        for row in rows:
            bi, h, i = row["batch"], row["head"], row["query"]
            seen = [j for j in range(6) if not hidden(want, bi, h, i, j)]
            self.assertEqual(row["visible_keys"], len(seen))
            self.assertAlmostEqual(row["sink_weight"], want["sink_weight"][bi, h, i], delta=1e-12)
            self.assertAlmostEqual(row["row_sum"] + row["sink_weight"], 1.0, delta=1e-12)
            # The spread of q_rot · k_rot over the visible keys, before scaling.
            qk = want["scores"][bi, h, i, seen] / 0.5
            self.assertAlmostEqual(row["score_spread_raw"], qk.max() - qk.min(), delta=1e-9)
        text = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--causal", "--diagnose", "--stages",
                           "none", "--batch", "0", "--head", "3", "--width", "100").out
        self.assertIn("-- batch 0, head 3 (reads K/V head 1)", text)
        self.assertIn("sink = sink_weight", " ".join(text.split()))  # (the legend wraps)


class Escaping(ModernViews):
    def test_labels_reach_the_terminal_escaped(self):
        tokens = ["a\x1b[31m", "b\x07", "c", "d\r", "e", "f"]
        b = bundle(14, sinks=np.zeros(4), query_tokens=np.array(tokens))
        for args in (["--cell", "0,1,3,2", "--stages", "none"], ["--explain"],
                     ["--heatmap", "--color", "never", "--stages", "weights,sink_weight"]):
            with self.subTest(args=args):
                r = self.run_ok(b, "--heads", "4", "--kv-heads", "2", "--rope", "--causal", "--window", "2", *args)
                for c in ("\x1b", "\x07", "\r"):
                    self.assertNotIn(c, r.out)


if __name__ == "__main__":
    common.main("test_modern_views")
