#!/usr/bin/python3
"""attnscope's HTML report (--html) and SVG heatmap (--svg), read back as a user's
browser and a script read them.

The files are parsed with Python's html.parser and xml.etree; every number a table
cell carries (data-value) must equal, exactly, the value attnscope dumps with --dump;
masked cells are checked against the numpy reference's mask (scripts/attn_reference.py);
colours against viridis' published 16 stops. A real browser (Debian's chromium,
headless) then loads both files: its DOM must hold the same cells, and its
screenshots must not be blank.

    /usr/bin/python3 tests/py/test_html.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)

Without /usr/bin/chromium (or ATTNSCOPE_CHROMIUM) the browser tests fail, unless
ATTNSCOPE_ALLOW_NO_BROWSER=1 (then they are skipped). ATTNSCOPE_SHOTS=DIR keeps the
screenshots in DIR.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
import png  # noqa: E402
from common import DATA, CliTestCase, load_example, reference, run  # noqa: E402

CHROMIUM = Path(os.environ.get("ATTNSCOPE_CHROMIUM") or "/usr/bin/chromium")
ALLOW_NO_BROWSER = os.environ.get("ATTNSCOPE_ALLOW_NO_BROWSER") == "1"
SHOTS = os.environ.get("ATTNSCOPE_SHOTS")
SVG_NS = "http://www.w3.org/2000/svg"
NAMESPACE_URIS = (SVG_NS, "http://www.w3.org/1999/xhtml")
HEAD_STAGES = ("Q", "K", "V", "scores", "masked_scores", "weights", "context")  # those with an H axis

# viridis as matplotlib publishes it, 16 evenly spaced stops (an oracle independent of attnscope).
VIRIDIS = ["#440154", "#481a6c", "#472f7d", "#414487", "#39568c", "#31688e", "#2a788e", "#23888e",
           "#1f988b", "#22a884", "#35b779", "#54c568", "#7ad151", "#a5db36", "#d2e21b", "#fde725"]


def hex_rgb(text):
    text = text.lstrip("#")
    return tuple(int(text[k:k + 2], 16) for k in (0, 2, 4))


def viridis(t):
    """The colour at t in 0..1, linearly interpolated between the 16 stops."""
    x = min(max(t, 0.0), 1.0) * (len(VIRIDIS) - 1)
    k = min(int(x), len(VIRIDIS) - 2)
    a, b = np.array(hex_rgb(VIRIDIS[k]), float), np.array(hex_rgb(VIRIDIS[k + 1]), float)
    return a + (b - a) * (x - k)


def significant_digits(text):
    """Significant digits of a decimal number's text: '0.0012300' -> 3, '1e-05' -> 1."""
    mantissa = text.lower().split("e")[0].lstrip("+-").replace(".", "")
    return len(mantissa.strip("0"))


# ---------------------------------------------------------------------------
# Reading the HTML report
# ---------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Report(HTMLParser):
    """Every <table class="heat"> of a page, and a check that the tags nest properly.

    tables: a list of {"stage", "batch", "head", "cols": [(index, label, attrs)],
    "rows": [{"index", "label", "attrs", "cells": [(attrs, text)]}], "gap_rows"}.
    Gap cells and headers (elided rows/columns) are left out of cols and cells.
    """

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tables, self.stack, self.errors = [], [], []
        self.doctype = None
        self.meta_charset = None
        self._table = self._row = self._cell = None
        self._in_thead = False
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed tags at the end: {self.stack}")

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "meta" and "charset" in a:
            self.meta_charset = a["charset"]
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "table" and "heat" in a.get("class", "").split():
            self._table = {"stage": a.get("data-stage"), "batch": a.get("data-batch"),
                           "head": a.get("data-head"), "attrs": a, "cols": [], "rows": [], "gap_rows": 0}
            self.tables.append(self._table)
        elif self._table is None:
            return
        elif tag == "thead":
            self._in_thead = True
        elif tag == "tr" and not self._in_thead:
            if "data-index" in a:
                self._row = {"index": int(a["data-index"]), "label": None, "attrs": a, "cells": []}
                self._table["rows"].append(self._row)
            else:
                self._row = None
                self._table["gap_rows"] += 1
        elif tag in ("th", "td"):
            self._cell = {"tag": tag, "attrs": a, "text": ""}

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}> "
                               f"at line {self.getpos()[0]}")
        else:
            self.stack.pop()
        if self._table is None:
            return
        if tag == "thead":
            self._in_thead = False
        elif tag in ("th", "td") and self._cell is not None:
            c, self._cell = self._cell, None
            if "data-index" in c["attrs"] and self._in_thead:
                self._table["cols"].append((int(c["attrs"]["data-index"]), c["text"], c["attrs"]))
            elif self._row is not None and c["tag"] == "th" and "data-index" in c["attrs"]:
                self._row["label"] = c["text"]
                self._row["label_attrs"] = c["attrs"]
            elif self._row is not None and c["tag"] == "td" and "data-value" in c["attrs"]:
                self._row["cells"].append((c["attrs"], c["text"]))
        elif tag == "table":
            self._table = None

    def table(self, stage, batch, head=""):
        found = [t for t in self.tables
                 if (t["stage"], t["batch"], t["head"]) == (stage, str(batch), str(head))]
        if len(found) != 1:
            raise AssertionError(f"{len(found)} tables for stage {stage} batch {batch} head {head!r}")
        return found[0]


def cells(table):
    """(i, j, attrs, text) for every drawn cell of a table."""
    cols = [c[0] for c in table["cols"]]
    for row in table["rows"]:
        if len(row["cells"]) != len(cols):
            raise AssertionError(f"row {row['index']} of {table['stage']}: {len(row['cells'])} cells, "
                                 f"{len(cols)} columns")
        for j, (attrs, text) in zip(cols, row["cells"]):
            yield row["index"], j, attrs, text


def canvas_figures(html, decode=True):
    """The data of every canvas heatmap of a page: its JSON, with levels (uint8, drawn rows
    x columns) and values (float32 or float64) decoded."""
    import base64
    import json
    out = []
    for m in re.finditer(r'<script type="application/json" id="(fig\d+)">(.*?)</script>', html, re.S):
        f = json.loads(m.group(2))
        if decode:
            R = len(f["ri"]) if f["ri"] else f["rows"]
            C = len(f["ci"]) if f["ci"] else f["cols"]
            f["levels"] = np.frombuffer(base64.b64decode(f["levels"]), np.uint8).reshape(R, C)
            if "values" in f:
                f["values"] = np.frombuffer(base64.b64decode(f["values"]),
                                            "<f8" if f["dtype"] == "f8" else "<f4").reshape(R, C)
        out.append(f)
    return out


def matrix(array, stage, b, h):
    """The (rows, cols) matrix of a dumped stage at batch item b and head h."""
    a = np.asarray(array)
    if stage in HEAD_STAGES:
        return a[b, h] if a.ndim == 4 else a[h]
    return a[b] if a.ndim == 3 else a


def classes(attrs):
    return attrs.get("class", "").split()


def check_exact(test, report, dump, stage, dtype=np.float64):
    """Every data-value of a stage equals the dumped value exactly, and is written with as
    few digits as the shortest round-trip text (Python's repr, numpy's str for float32).
    Returns the number of cells checked."""
    checked = 0
    for t in (t for t in report.tables if t["stage"] == stage):
        b, h = int(t["batch"]), int(t["head"] or 0)
        m = matrix(dump[stage], stage, b, h)
        for i, j, attrs, _ in cells(t):
            text, want = attrs["data-value"], m[i, j]
            got = dtype(text)
            where = f"{stage}[{b},{h},{i},{j}]"
            test.assertTrue(got == want or (np.isnan(got) and np.isnan(want)),
                            f"{where}: data-value {text} != dumped {want!r}")
            test.assertTrue(attrs["title"].startswith(text), attrs)
            if np.isfinite(want):
                shortest = repr(float(want)) if dtype is np.float64 else str(dtype(want))
                test.assertEqual(significant_digits(text), significant_digits(shortest),
                                 f"{where}: {text} is not the shortest form ({shortest})")
            else:
                test.assertIn(text, ("-inf", "inf", "nan"))
            checked += 1
    test.assertGreater(checked, 0, f"no cells of {stage}")
    return checked


# ---------------------------------------------------------------------------
# Shared runs: the padded example, as the issue describes it
# ---------------------------------------------------------------------------

class Padded:
    """data/padded.json with 2 heads: --html, --dump and --svg of weights, batch 1, head 1."""
    tmp = html = svg = dump = ref = tokens = None

    @classmethod
    def make(cls):
        if cls.tmp is not None:
            return cls
        cls.tmp = Path(tempfile.mkdtemp(prefix="attnscope-html-"))
        r = run("run", DATA / "padded.json", "--heads", "2", "--html", cls.tmp / "out.html",
                "--dump", cls.tmp / "dump.npz", "-q")
        assert r.code == 0, r
        r = run("run", DATA / "padded.json", "--heads", "2", "--svg", cls.tmp / "out.svg",
                "--svg-stage", "weights", "--head", "1", "--batch", "1", "-q")
        assert r.code == 0, r
        cls.html = (cls.tmp / "out.html").read_text(encoding="utf-8")
        cls.svg = (cls.tmp / "out.svg").read_text(encoding="utf-8")
        with np.load(cls.tmp / "dump.npz") as z:
            cls.dump = {k: z[k] for k in z.files}
        bundle = load_example("padded", "json")
        cls.ref = reference(bundle, heads=2)
        cls.tokens = [list(map(str, row)) for row in bundle["query_tokens"]]
        return cls

    @classmethod
    def cleanup(cls):
        if cls.tmp is not None:
            shutil.rmtree(cls.tmp, ignore_errors=True)


def tearDownModule():
    Padded.cleanup()


# ---------------------------------------------------------------------------
# The HTML report
# ---------------------------------------------------------------------------

class HtmlReportTest(unittest.TestCase):
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.p = Padded.make()
        cls.report = Report(cls.p.html)

    def test_html5_document(self):
        self.assertTrue(self.p.html.startswith("<!DOCTYPE html>\n"), self.p.html[:80])
        self.assertEqual(self.report.doctype.lower(), "doctype html")
        self.assertEqual(self.report.meta_charset, "utf-8")
        self.assertTrue('<html lang="en">' in self.p.html, '<html lang="en">')
        self.assertEqual(self.report.errors, [])

    def test_header_shows_the_configuration(self):
        for text in ("self-attention", "B=2 Tq=6 Tk=6 Dm=8 Dkv=8 H=2 Dk=4 Dv=4 Dout=8", "0.5 = 1/sqrt(Dk)",
                     "key padding (key_padding_mask, 1 = PAD)", "float64", "padded.json",
                     "rows with every key masked"):
            self.assertTrue(text in self.p.html, f"{text!r} is not in the page")

    def test_every_stage_batch_and_head_has_a_table(self):
        expected = set()
        for stage in common.STAGES:
            for b in range(2):
                for h in (range(2) if stage in HEAD_STAGES else [""]):
                    expected.add((stage, str(b), str(h)))
        found = [(t["stage"], t["batch"], t["head"]) for t in self.report.tables]
        self.assertEqual(len(found), len(set(found)), "a table appears twice")
        self.assertEqual(set(found), expected)
        for t in self.report.tables:
            rows, cols = matrix(self.p.dump[t["stage"]], t["stage"], 0, 0).shape
            self.assertEqual([r["index"] for r in t["rows"]], list(range(rows)), t["stage"])
            self.assertEqual([c[0] for c in t["cols"]], list(range(cols)), t["stage"])

    def test_weights_and_masked_scores_are_exact(self):
        for stage in ("weights", "masked_scores"):
            self.assertEqual(check_exact(self, self.report, self.p.dump, stage), 2 * 2 * 6 * 6)

    def test_other_stages_are_exact(self):
        for stage in ("Q", "K", "V", "scores", "context", "output"):
            with self.subTest(stage=stage):
                check_exact(self, self.report, self.p.dump, stage)

    def test_masked_cells_exactly_where_the_mask_is_false(self):
        visible = self.p.ref["mask"]  # (B, Tq, Tk), from the numpy reference
        self.assertFalse(visible.all(), "the example should mask something")
        for stage in ("mask", "masked_scores", "weights"):
            for t in (t for t in self.report.tables if t["stage"] == stage):
                b = int(t["batch"])
                for i, j, attrs, text in cells(t):
                    where = f"{stage} batch {b} head {t['head']} [{i},{j}]"
                    self.assertEqual("masked" in classes(attrs), not visible[b, i, j], where)
                    if visible[b, i, j]:
                        continue
                    self.assertEqual(text, {"mask": "·", "masked_scores": "−∞", "weights": "0"}[stage], where)
                    self.assertEqual(attrs["data-value"], {"mask": "0", "masked_scores": "-inf",
                                                           "weights": "0"}[stage], where)

    def test_scores_and_other_stages_have_no_masked_cells(self):
        for t in self.report.tables:
            if t["stage"] in ("mask", "masked_scores", "weights"):
                continue
            for i, j, attrs, _ in cells(t):
                self.assertNotIn("masked", classes(attrs), (t["stage"], i, j))

    def test_cell_text_is_the_rounded_value(self):
        w = self.p.dump["weights"]
        for t in (t for t in self.report.tables if t["stage"] == "weights"):
            b, h = int(t["batch"]), int(t["head"])
            for i, j, attrs, text in cells(t):
                if "masked" not in classes(attrs):
                    self.assertEqual(text, f"{w[b, h, i, j]:.2f}", (b, h, i, j))
        for t in (t for t in self.report.tables if t["stage"] == "mask"):
            for i, j, attrs, text in cells(t):
                self.assertEqual(text, "✓" if attrs["data-value"] == "1" else "·")

    def test_no_negative_zero_noise(self):
        for t in (t for t in self.report.tables if t["stage"] != "mask"):
            for i, j, attrs, text in cells(t):
                self.assertIsNone(re.fullmatch(r"[-−]0(\.0*)?", text), (t["stage"], i, j, text))
                if attrs["data-value"] in ("0", "-0"):
                    self.assertEqual(text, "0", (t["stage"], i, j))

    def test_self_contained(self):
        """No other file: the script is inline (canvas heatmaps, head view), nothing is fetched."""
        for url in re.findall(r"https?://[^\s\"'<>)]*", self.p.html):
            self.assertEqual(url, "http://www.w3.org/2000/svg", f"the page refers to {url}")
        lowered = self.p.html.lower()
        for needle in ("<link", "<img", "<iframe", "@import", "url(", " src=", "fetch(", "xmlhttprequest",
                       "import("):
            self.assertNotIn(needle, lowered)
        for attrs in re.findall(r"<script([^>]*)>", lowered):
            self.assertNotIn("src", attrs)

    def test_tooltips_name_head_tokens_and_every_stage(self):
        """A cell's title: its exact value, the batch item, head, query and key with their
        tokens, and the same cell in scores, masked_scores and weights (from --dump)."""
        d = self.p.dump
        for stage in ("scores", "masked_scores", "weights"):
            t = self.report.table(stage, 1, 1)
            for i, j, attrs, _ in cells(t):
                lines = attrs["title"].split("\n")
                self.assertEqual(len(lines), 3, attrs["title"])
                self.assertEqual(lines[1], f"batch 1 · head 1 · query {i} ‘{self.p.tokens[1][i]}’ → "
                                           f"key {j} ‘{self.p.tokens[1][j]}’")
                got = dict(part.rsplit(" ", 1) for part in lines[2].split(" · "))
                for st in ("scores", "masked_scores", "weights"):
                    self.assertEqual(float(got[st]), float(d[st][1, 1, i, j]), (stage, i, j, st))

    def test_scores_share_one_scale_across_heads_and_with_masked_scores(self):
        """Item 4: the colour class of a score is its place on one range, the finite
        values of scores and masked_scores of every batch item and head drawn."""
        d = self.p.dump
        values = np.concatenate([d["scores"].ravel(), d["masked_scores"].ravel()])
        values = values[np.isfinite(values)]
        lo, hi = values.min(), values.max()
        n = 0
        for stage in ("scores", "masked_scores"):
            for t in (t for t in self.report.tables if t["stage"] == stage):
                b, h = int(t["batch"]), int(t["head"])
                for i, j, attrs, _ in cells(t):
                    if "masked" in classes(attrs):
                        continue
                    level = round((d[stage][b, h, i, j] - lo) / (hi - lo) * 63)
                    self.assertEqual(classes(attrs), [f"v{level}"], (stage, b, h, i, j))
                    n += 1
        self.assertGreater(n, 100)
        self.assertIn("colours: the smallest to the largest finite value of scores and masked_scores", self.p.html)
        self.assertIn("colours: 0..1", self.p.html)

    def test_head_view_and_coloured_text_data(self):
        """The head view's data: every weight of the chosen batch items and heads (float32)."""
        m = re.search(r'<script type="application/json" id="headview-data">(.*?)</script>', self.p.html)
        self.assertIsNotNone(m)
        import base64
        import json
        hv = json.loads(m.group(1))
        self.assertEqual(hv["heads"], [0, 1])
        w = np.frombuffer(base64.b64decode(hv["w"]), dtype="<f4").reshape(2, 2, 6, 6)
        np.testing.assert_array_equal(w, self.p.dump["weights"].astype(np.float32))
        self.assertEqual(hv["qt"][1][:3], ["birds", "sing", "loudly"])
        for anchor in ('id="headview"', 'id="coloured-text"', 'class="hv-heads"', 'select class="ct-head"'):
            self.assertIn(anchor, self.p.html)

    def test_token_labels_appear_escaped(self):
        t = self.report.table("weights", 1, 0)
        self.assertEqual([r["label"] for r in t["rows"]], self.p.tokens[1])
        self.assertEqual([c[1] for c in t["cols"]], self.p.tokens[1])
        t = self.report.table("Q", 0, 1)
        self.assertEqual([r["label"] for r in t["rows"]], self.p.tokens[0])
        self.assertEqual([c[1] for c in t["cols"]], ["d0", "d1", "d2", "d3"])
        self.assertTrue("&lt;pad&gt;" in self.p.html, "&lt;pad&gt;")
        self.assertFalse("<pad>" in self.p.html, "<pad>")

    def test_colours_follow_viridis(self):
        """A weight's colour class is viridis at that weight (64 levels), per the style sheet."""
        style = dict(re.findall(r"\.(v\d+)\{background:(#[0-9a-f]{6})", self.p.html))
        self.assertEqual(len(style), 64)
        w = self.p.dump["weights"]
        for t in (t for t in self.report.tables if t["stage"] == "weights"):
            b, h = int(t["batch"]), int(t["head"])
            for i, j, attrs, _ in cells(t):
                if "masked" in classes(attrs):
                    continue
                level = round(w[b, h, i, j] * 63)
                self.assertEqual(classes(attrs), [f"v{level}"])
                got, want = np.array(hex_rgb(style[f"v{level}"])), viridis(level / 63)
                self.assertLessEqual(np.abs(got - want).max(), 1.0, f"v{level}")


class HtmlOptionsTest(CliTestCase):
    """Other runs: float32, the mask without its stages, big matrices, awkward labels."""

    def html(self, *args, name="out.html"):
        out = self.path(name)
        r = run("run", *args, "--html", out, "-q")
        self.assert_ok(r, stdout_empty=True, warnings=None if "--allow-warnings" in args else 0)
        text = out.read_text(encoding="utf-8")
        report = Report(text)
        self.assertEqual(report.errors, [])
        return text, report

    def assert_ok(self, r, stdout_empty=False, warnings=0):
        if warnings is None:
            self.assertEqual(r.code, 0, r)
        else:
            super().assert_ok(r, stdout_empty=stdout_empty, warnings=warnings)

    def test_float32_values_are_exact_float32(self):
        dump = self.path("d.npz")
        text, report = self.html(DATA / "sentence.npz", "--heads", "2", "--dtype", "float32", "--dump", dump)
        with np.load(dump) as z:
            values = {k: z[k] for k in z.files}
        self.assertEqual(values["weights"].dtype, np.float32)
        self.assertTrue("float32" in text, "float32")
        for stage in ("weights", "scores", "output"):
            check_exact(self, report, values, stage, dtype=np.float32)

    def test_causal_mask_marked_without_the_mask_stages(self):
        text, report = self.html(DATA / "causal.json", "--causal", "--stages", "weights")
        t = report.table("weights", 0, 0)  # 2-D input: batch 0 is the only item
        n = 0
        for i, j, attrs, text_ in cells(t):
            self.assertEqual("masked" in classes(attrs), j > i, (i, j))
            n += j > i
        self.assertEqual(n, 10)

    def test_padding_marked_without_the_mask_stages(self):
        text, report = self.html(DATA / "padded.json", "--heads", "2", "--stages", "weights")
        self.assertFalse("Masked cells are not marked" in text, "Masked cells are not marked")
        self.assertEqual(len(report.tables), 4)
        visible = reference(load_example("padded", "json"), heads=2)["mask"]  # (B, Tq, Tk), numpy
        for t in report.tables:
            b = int(t["batch"])
            for i, j, attrs, _ in cells(t):
                self.assertEqual("masked" in classes(attrs), not visible[b, i, j], (b, i, j))

    def test_masked_scores_alone_marks_the_mask(self):
        text, report = self.html(DATA / "padded.json", "--heads", "2", "--stages", "masked_scores,weights")
        t = report.table("weights", 1, 1)
        for i, j, attrs, _ in cells(t):
            self.assertEqual("masked" in classes(attrs), j >= 3, (i, j))

    def test_big_matrices_are_canvases_with_every_cell(self):
        """Item 3: a matrix bigger than a table (64 x 16) is a canvas whose data holds every
        cell: values exactly as --dump has them, levels viridis' place, masked cells 254."""
        rng = np.random.default_rng(7)
        T, D = 150, 8
        bundle = self.save_npz("big.npz", x=rng.normal(size=(T, D)), W_Q=rng.normal(size=(D, D)),
                               W_K=rng.normal(size=(D, D)), W_V=rng.normal(size=(D, D)))
        dump = self.path("d.npz")
        text, report = self.html(bundle, "--causal", "--heads", "2", "--stages", "Q,weights", "--dump", dump)
        with np.load(dump) as z:
            w, q = z["weights"], z["Q"]
        figs = canvas_figures(text)
        self.assertEqual(sorted((f["stage"], f["head"]) for f in figs),
                         [("Q", "0"), ("Q", "1"), ("weights", "0"), ("weights", "1")])
        f = next(f for f in figs if (f["stage"], f["head"]) == ("weights", "1"))
        self.assertEqual((f["rows"], f["cols"], f["ri"], f["ci"]), (T, T, None, None))
        np.testing.assert_array_equal(f["values"], w[1])       # float64: exact
        visible = np.tril(np.ones((T, T), bool))
        self.assertTrue((f["levels"][~visible] == 254).all())
        np.testing.assert_array_equal(f["levels"][visible], np.rint(w[1][visible] * 251).astype(np.uint8))
        self.assertEqual(f["rl"][:3], ["q0", "q1", "q2"])
        g = next(f for f in figs if (f["stage"], f["head"]) == ("Q", "0"))  # (Tq, Dk) = (150, 4)
        self.assertEqual((g["rows"], g["cols"]), (T, 4))
        np.testing.assert_array_equal(g["values"], q[0])
        self.assertFalse("Not drawn" in text, "Not drawn")
        self.assertEqual(report.tables, [])
        self.assertLess(len(text.encode()), 2_000_000)

    def random_bundle(self, name, seed, B, T, D):
        """An .npz of random x (B, T, D) and square W_Q, W_K, W_V."""
        rng = np.random.default_rng(seed)
        return self.save_npz(name, x=rng.normal(size=(B, T, D)),
                             **{w: rng.normal(size=(D, D)) for w in ("W_Q", "W_K", "W_V")})

    def test_many_matrices_stay_within_the_page_budget(self):
        """About 8 million cells a page (--full lifts it): 8 heads of 1100 x 1100 do not fit."""
        H, T = 8, 1100
        bundle = self.random_bundle("many.npz", 3, 1, T=T, D=16)
        out = self.path("many.html")
        r = run("run", bundle, "--heads", str(H), "--stages", "weights", "--html", out, "-q")
        self.assert_ok(r, stdout_empty=True)
        text = out.read_text(encoding="utf-8")
        drawn = len(canvas_figures(text, decode=False))
        self.assertEqual(drawn, (8 << 20) // (T * T))
        note = f"{H - drawn} more matrices of weights (from batch 0 · head {drawn} on) left out"
        self.assertTrue(note in text, note)
        self.assertLess(len(text.encode()), 60_000_000)

    def test_batch_and_head_choose_the_tables(self):
        H = 3
        bundle = self.random_bundle("bh.npz", 4, B=3, T=5, D=6)
        out = self.path("bh.html")
        r = run("run", bundle, "--heads", str(H), "--stages", "weights,output", "--batch", "2,0",
                "--head", "1", "--html", out, "-q")
        self.assert_ok(r, stdout_empty=True)
        tables = Report(out.read_text(encoding="utf-8")).tables
        found = sorted((t["stage"], t["batch"], t["head"]) for t in tables)
        self.assertEqual(found, [("output", "0", ""), ("output", "2", ""),
                                 ("weights", "0", "1"), ("weights", "2", "1")])
        bad = self.path("bad.html")
        r = run("run", bundle, "--heads", str(H), "--head", "3", "--html", bad, "-q")
        self.assert_error(r, "--head", code=2)
        self.assertFalse(bad.exists())

    def test_awkward_token_labels(self):
        tokens = ['<b>&amp;', 'quote"s', "it's", "naïve", "日本語", "\u0001bell", "averyveryverylongtoken"]
        T, D = len(tokens), 4
        rng = np.random.default_rng(1)
        bundle = self.save_json("odd.json", {
            "x": rng.normal(size=(T, D)).round(2).tolist(), "W_Q": np.eye(D).tolist(),
            "W_K": np.eye(D).tolist(), "W_V": np.eye(D).tolist(),
            "query_tokens": tokens, "key_tokens": tokens})
        text, report = self.html(bundle, "--stages", "weights")
        t = report.table("weights", 0, 0)
        shown = [r["label"] for r in t["rows"]]
        self.assertEqual(shown[:5], tokens[:5])
        self.assertEqual(shown[5], "\\x01bell")                    # a control character is spelled out
        self.assertEqual(shown[6], "averyveryver…")                 # clipped to 12 characters
        self.assertEqual(t["rows"][6]["label_attrs"]["title"], tokens[6])  # the whole label on hover
        self.assertTrue("&lt;b&gt;&amp;amp;" in text, "&lt;b&gt;&amp;amp;")
        self.assertFalse("\u0001" in text, "\u0001")
        # The SVG of the same run is well-formed XML with the same labels.
        svg = self.path("odd.svg")
        r = run("run", bundle, "--svg", svg, "-q")
        self.assert_ok(r, stdout_empty=True)
        root = ET.parse(svg).getroot()
        texts = [e.text for e in root.iter(f"{{{SVG_NS}}}text")]
        for label in tokens[:5]:
            self.assertIn(label, texts)


# ---------------------------------------------------------------------------
# Long axes: one summarising rule for text, heatmaps, HTML and SVG; --full lifts it
# ---------------------------------------------------------------------------

class LongAxesTest(CliTestCase):
    """Item 3: an axis longer than a view's limit shows its first and last cells around a
    gap and says what it left out; --full draws everything, in every view."""

    def long_bundle(self, T, D=4):
        rng = np.random.default_rng(5)
        return self.save_npz("long.npz", x=rng.normal(size=(T, D)), W_Q=rng.normal(size=(D, D)),
                             W_K=rng.normal(size=(D, D)), W_V=rng.normal(size=(D, D)))

    def test_html_beyond_2048_and_full(self):
        T = 2100
        bundle = self.long_bundle(T)
        for full in (False, True):
            with self.subTest(full=full):
                out = self.path(f"long{full}.html")
                r = run("run", bundle, "--causal", "--stages", "weights", "--html", out, "-q",
                        *(["--full"] if full else []))
                self.assert_ok(r, stdout_empty=True)
                text = out.read_text(encoding="utf-8")
                (f,) = canvas_figures(text)
                self.assertEqual((f["rows"], f["cols"]), (T, T))
                if full:
                    self.assertIsNone(f["ri"])
                    self.assertEqual(f["levels"].shape, (T, T))
                    self.assertFalse("Not drawn" in text, "Not drawn")
                else:
                    want = list(range(1024)) + [-1] + list(range(T - 1024, T))
                    self.assertEqual(f["ri"], want)
                    self.assertEqual(f["ci"], want)
                    self.assertTrue((f["levels"][1024, :] == 252).all())   # the gap
                    self.assertEqual(f["rl"][1025], f"q{T - 1024}")
                    note = ("Not drawn: rows 1024–1075 and columns 1024–1075 (of 2100 × 2100); "
                            "--full draws every cell.")
                    self.assertTrue(note in text, note)

    def test_rule_is_stated_in_help_and_readme(self):
        """The limits the views use are the ones --help (of --full) and docs/usage.md state."""
        r = run("run", "--help", binary=False)
        self.assertEqual(r.code, 0)
        help_text = " ".join(r.out.split())
        for words in ("first and last cells around a gap", "2*edgeitems+2", "HTML beyond 2048 cells",
                      "about 8 million cells a page", "SVG beyond 256"):
            self.assertIn(words, help_text)
        readme = " ".join((common.ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split())
        for words in ("first and last cells around a gap", "2048 cells per axis", "about 8 million cells per page",
                      "`--svg` 256 cells per axis", "`--full` lifts every limit"):
            self.assertIn(words, readme)

    def test_svg_and_text_follow_full(self):
        T = 300
        bundle = self.long_bundle(T)
        out = self.path("full.svg")
        self.assert_ok(run("run", bundle, "--causal", "--stages", "weights", "--svg", out, "--full", "-q"),
                       stdout_empty=True)
        root = ET.parse(out).getroot()
        rects = sum(1 for _ in root.iter(f"{{{SVG_NS}}}rect"))
        self.assertTrue(T * T <= rects <= T * T + 8, rects)
        texts = [e.text for e in root.iter(f"{{{SVG_NS}}}text")]
        self.assertNotIn("not drawn", " ".join(t or "" for t in texts))
        self.assertIn("q140", texts)  # a row the 256-row limit would leave out (128–171 of 300)
        # Terminal heatmaps: without --full the keys that fit, the ends around "…"; with it all.
        for full in (False, True):
            r = run("run", bundle, "--causal", "--stages", "weights", "--heatmap", "--color", "never",
                    "--width", "80", *(["--full"] if full else []), binary=False)
            self.assert_ok(r)
            rows = [line for line in r.out.splitlines() if re.match(r"^  q\d+ +[.,:=+*#%@×-]", line)]
            self.assertEqual(len(rows), T)
            widths = {len(line.split(None, 1)[1]) for line in rows}
            if full:
                self.assertEqual(widths, {2 * T})
                self.assertNotIn("left out", r.out)
            else:
                self.assertTrue(all(w < 80 for w in widths), widths)
                self.assertTrue(all("…" in line for line in rows))
                self.assertIn("left out; --full draws them", r.out)
                self.assertIn("(keys ", r.out)


class ModelViewTest(CliTestCase):
    """attnscope report: bundles (or a directory of them) x heads as thumbnails."""

    def test_layers_from_files_and_a_directory(self):
        rng = np.random.default_rng(6)
        layers = self.path("layers")
        layers.mkdir()
        dump = {}
        for n in ("b_second", "a_first"):
            arrays = dict(x=rng.normal(size=(20, 8)), **{w: rng.normal(size=(8, 8)) for w in ("W_Q", "W_K", "W_V")})
            np.savez(layers / f"{n}.npz", **arrays)
            d = self.path(f"{n}-dump.npz")
            self.assert_ok(run("run", layers / f"{n}.npz", "--heads", "2", "--causal", "--dump", d, "-q"),
                           stdout_empty=True)
            with np.load(d) as z:
                dump[n] = z["weights"]
        out = self.path("model.html")
        self.assert_ok(run("report", "--html", out, layers, "--heads", "2", "--causal"), stdout_empty=True)
        text = out.read_text(encoding="utf-8")
        thumbs = re.findall(r'<canvas class="thumb"[^>]*data-layer="(\d+)" data-head="(\d+)"', text)
        self.assertEqual(thumbs, [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")])
        self.assertLess(text.index("a_first.npz"), text.index("b_second.npz"))  # in name order
        figs = canvas_figures(text)
        self.assertEqual(len(figs), 4)
        for k, (layer, head) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
            np.testing.assert_array_equal(figs[k]["values"], dump[("a_first", "b_second")[layer]][head])
        # An existing page is kept unless --force; an empty directory is refused.
        r = run("report", "--html", out, layers, "--heads", "2")
        self.assert_error(r, str(out))
        empty = self.path("empty")
        empty.mkdir()
        r = run("report", "--html", self.path("e.html"), empty)
        self.assert_error(r, "expected .npz or .json bundles in the directory")


# ---------------------------------------------------------------------------
# The SVG heatmap
# ---------------------------------------------------------------------------

class SvgTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.p = Padded.make()
        cls.root = ET.fromstring(cls.p.svg.encode("utf-8"))

    def q(self, tag):
        return f"{{{SVG_NS}}}{tag}"

    def cell_groups(self):
        groups = [g for g in self.root.iter(self.q("g")) if "cell" in g.get("class", "").split()]
        self.assertEqual(len(groups), 36)
        return groups

    def test_well_formed_svg(self):
        self.assertTrue(self.p.svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg'))
        self.assertEqual(self.root.tag, self.q("svg"))
        self.assertTrue(float(self.root.get("width")) > 200 and float(self.root.get("height")) > 200)
        self.assertIsNotNone(self.root.get("viewBox"))

    def test_title(self):
        title = self.root.find(self.q("title")).text
        self.assertEqual(title, "weights · batch 1 · head 1")
        self.assertIn(title, [e.text for e in self.root.iter(self.q("text"))])

    def test_values_exact_and_masked_cells(self):
        want = self.p.dump["weights"][1, 1]
        visible = self.p.ref["mask"][1]
        for k, g in enumerate(self.cell_groups()):
            i, j = divmod(k, 6)
            self.assertEqual(float(g.get("data-value")), want[i, j], (i, j))
            masked = "masked" in g.get("class").split()
            self.assertEqual(masked, not visible[i, j], (i, j))
            rect = g.find(self.q("rect"))
            number = g.find(self.q("text"))
            if masked:
                self.assertEqual(rect.get("fill"), "url(#masked)")
                self.assertIsNone(number, "a masked cell shows no number")
            else:
                self.assertEqual(number.text, f"{want[i, j]:.2f}")
                got = np.array(hex_rgb(rect.get("fill")))
                self.assertLessEqual(np.abs(got - viridis(want[i, j])).max(), 1.0, (i, j, rect.get("fill")))

    def test_hatch_pattern_and_legend(self):
        self.assertIsNotNone(self.root.find(f".//{self.q('pattern')}[@id='masked']"))
        stops = self.root.findall(f".//{self.q('linearGradient')}/{self.q('stop')}")
        self.assertEqual([s.get("stop-color") for s in stops], VIRIDIS)
        texts = [e.text for e in self.root.iter(self.q("text"))]
        for tick in ("0", "0.2", "0.4", "0.6", "0.8", "1", "masked"):
            self.assertIn(tick, texts)

    def test_token_labels(self):
        texts = [e.text for e in self.root.iter(self.q("text"))]
        self.assertEqual(texts.count("<pad>"), 6)  # three rows and three columns
        for token in ("birds", "sing", "loudly"):
            self.assertEqual(texts.count(token), 2)
        self.assertTrue("&lt;pad&gt;" in self.p.svg, "&lt;pad&gt;")

    def test_self_contained(self):
        urls = re.findall(r"https?://[^\s\"'<>)]*", self.p.svg)
        self.assertEqual(set(urls) - set(NAMESPACE_URIS), set())
        self.assertFalse("<script" in self.p.svg, "<script")
        self.assertFalse("href" in self.p.svg, "href")

    def test_scores_and_defaults(self):
        """--svg-stage scores on cross-attention: 4 x 6, k0.. labels absent, min/max legend."""
        out = self.path("s.svg")
        dump = self.path("d.npz")
        r = run("run", DATA / "cross.json", "--heads", "2", "--svg", out, "--svg-stage", "scores",
                "--dump", dump, "-q")
        self.assert_ok(r, stdout_empty=True)
        root = ET.parse(out).getroot()
        self.assertEqual(root.find(self.q("title")).text, "scores · head 0")
        groups = [g for g in root.iter(self.q("g")) if "cell" in g.get("class", "").split()]
        with np.load(dump) as z:
            scores = z["scores"][0]
        self.assertEqual(len(groups), scores.size)
        self.assertEqual([float(g.get("data-value")) for g in groups], list(scores.ravel()))
        texts = [e.text for e in root.iter(self.q("text"))]
        with np.load(dump) as z:  # one scale per stage, shared by every head chosen (all of them)
            lo, hi = z["scores"].min(), z["scores"].max()
        self.assertIn(f"{lo:.3g}".replace("-", "−"), texts)
        self.assertIn(f"{hi:.3g}".replace("-", "−"), texts)

    def test_q_labels_when_no_tokens(self):
        rng = np.random.default_rng(2)
        bundle = self.save_npz("plain.npz", x=rng.normal(size=(3, 4)), W_Q=np.eye(4), W_K=np.eye(4),
                               W_V=np.eye(4))
        out = self.path("p.svg")
        self.assert_ok(run("run", bundle, "--svg", out, "--svg-stage", "mask", "-q"), stdout_empty=True)
        texts = [e.text for e in ET.parse(out).getroot().iter(self.q("text"))]
        for label in ("q0", "q1", "q2", "k0", "k1", "k2", "may attend"):
            self.assertIn(label, texts)
        self.assertNotIn("masked", texts)  # nothing is masked: no hatch in the legend

    def test_long_axes_are_summarised(self):
        rng = np.random.default_rng(4)
        T, D = 300, 4
        bundle = self.save_npz("long.npz", x=rng.normal(size=(T, D)), W_Q=rng.normal(size=(D, D)),
                               W_K=rng.normal(size=(D, D)), W_V=rng.normal(size=(D, D)))
        out = self.path("long.svg")
        self.assert_ok(run("run", bundle, "--causal", "--stages", "weights", "--svg", out, "-q"), stdout_empty=True)
        self.assertLess(out.stat().st_size, 8_000_000)
        root = ET.parse(out).getroot()
        rects = sum(1 for _ in root.iter(self.q("rect")))
        self.assertTrue(256 * 256 <= rects <= 256 * 256 + 8, rects)  # the cells, plus background and legend
        texts = [e.text for e in root.iter(self.q("text"))]
        self.assertIn("not drawn: rows 128–171, columns 128–171 (of 300 × 300)", texts)
        self.assertIn("q0", texts)
        self.assertNotIn("q150", texts)

    def test_bad_choices_are_usage_errors(self):
        out = self.path("bad.svg")
        for args, fragments in (
                (["--head", "2"], ["--head", "head 2 does not exist", "0..1"]),
                (["--batch", "2"], ["--batch", "batch item 2 does not exist", "0..1"]),
                (["--stages", "weights", "--svg-stage", "scores"], ["--svg-stage scores"]),
                (["--svg-stage", "output"], ["--svg-stage"])):
            with self.subTest(args=args):
                r = run("run", DATA / "padded.json", "--heads", "2", "--svg", out, *args)
                self.assert_error(r, *fragments)
                self.assert_no_output_files(out)


# ---------------------------------------------------------------------------
# A real browser
# ---------------------------------------------------------------------------

class BrowserTest(CliTestCase):
    @classmethod
    def setUpClass(cls):
        if not CHROMIUM.exists():
            if ALLOW_NO_BROWSER:
                raise unittest.SkipTest(f"{CHROMIUM} not found; browser tests skipped "
                                        "(ATTNSCOPE_ALLOW_NO_BROWSER=1)")
            raise AssertionError(f"{CHROMIUM} not found: install Debian's chromium, or set "
                                 "ATTNSCOPE_ALLOW_NO_BROWSER=1 to skip the browser tests")
        cls.p = Padded.make()

    def chromium(self, *args):
        """Run headless chromium with a fresh profile, no network services."""
        profile = self.path("profile")
        profile.mkdir(exist_ok=True)
        cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 0, proc.stderr.decode(errors="replace")[-2000:])
        return proc.stdout.decode("utf-8")

    def screenshot(self, source, name, size="1200,900"):
        shot = self.path(name)
        self.chromium(f"--screenshot={shot}", f"--window-size={size}", source.as_uri())
        self.assertTrue(shot.exists(), f"no screenshot {shot}")
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(SHOTS) / name)
        image = png.read_png(shot)
        w, h = map(int, size.split(","))
        self.assertEqual(image.shape[:2], (h, w))
        colours = png.distinct_colours(image)
        self.assertGreater(colours, 20, f"{name}: only {colours} colours: blank?")
        self.assertFalse((png.rgb(image) == 255).all(), f"{name} is all white")
        return image

    def test_dom_holds_the_cells(self):
        dom = self.chromium("--dump-dom", (self.p.tmp / "out.html").as_uri())
        browser, ours = Report(dom), Report(self.p.html)
        self.assertEqual(browser.errors, [])
        self.assertEqual([(t["stage"], t["batch"], t["head"]) for t in browser.tables],
                         [(t["stage"], t["batch"], t["head"]) for t in ours.tables])
        for a, b in zip(browser.tables, ours.tables):
            self.assertEqual(list(cells(a)), list(cells(b)), a["stage"])
        w = browser.table("weights", 1, 1)
        self.assertEqual([r["label"] for r in w["rows"]], self.p.tokens[1])

    def test_html_screenshot(self):
        image = self.screenshot(self.p.tmp / "out.html", "padded-html.png")
        # The first table on the page (Q, batch 0, head 0) is drawn in its style sheet colours.
        report = Report(self.p.html)
        style = dict(re.findall(r"\.([vr]\d+)\{background:(#[0-9a-f]{6})", self.p.html))
        first = next(cells(report.table("Q", 0, 0)))[2]
        self.assertTrue(png.has_colour(image, hex_rgb(style[classes(first)[0]])), classes(first))

    def test_weights_page_screenshot(self):
        out = self.path("weights.html")
        self.assert_ok(run("run", DATA / "padded.json", "--heads", "2", "--stages", "mask,weights",
                           "--html", out, "-q"), stdout_empty=True)
        image = self.screenshot(out, "padded-weights-html.png", "1200,1400")
        self.assertTrue(png.has_colour(image, hex_rgb("#ababab"), 3), "no hatched (masked) cells to see")

    def test_svg_screenshot(self):
        image = self.screenshot(self.p.tmp / "out.svg", "padded-weights-svg.png")
        root = ET.fromstring(self.p.svg.encode("utf-8"))
        fills = [r.get("fill") for r in root.iter(f"{{{SVG_NS}}}rect") if r.get("fill", "").startswith("#")]
        cell_fill = next(f for f in fills if f not in ("#fff", "#ffffff"))
        self.assertTrue(png.has_colour(image, hex_rgb(cell_fill)), cell_fill)


if __name__ == "__main__":
    common.main("test_html", module_name="__main__")
