#!/usr/bin/python3
"""Bundles that carry their run options: a `config` record (a JSON bundle's "config"
object, an .npz's `config` member holding one JSON string) that run, check, decode and
report apply under the command line's options, and say so. Expected numbers come from
scripts/attn_reference.py (float64, NumPy) and from PyTorch 1.13's own
nn.MultiheadAttention; the nn.Transformer capture is made by scripts/capture_bundle.py.

    /usr/bin/python3 tests/py/test_bundle_config.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import re
import sys
import unittest

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, reference, run_text  # noqa: E402

KNOWN = ("heads, kv_heads, causal, causal_align, layout, scale, rope, rope_base, rope_dim, rope_style, alibi, "
         "window, softcap, attn_mask_means, add_zero_attn")


def small_bundle(seed=3, T=5, D=8):
    rng = np.random.default_rng(seed)
    return dict(x=rng.normal(size=(2, T, D)), **{w: rng.normal(size=(D, D)) for w in ("W_Q", "W_K", "W_V", "W_O")})


def npz_config(config):
    """The config member as numpy writes it: a 0-d unicode array of JSON text."""
    return np.array(json.dumps(config))


def json_weights(r):
    return np.asarray(json.loads(r.out)["stages"]["weights"]["data"], dtype=np.float64)


def thumbnails(html):
    """{title: values} of the model view's thumbnails."""
    figs = {m.group(1): m.group(2) for m in
            re.finditer(r'<script type="application/json" id="(fig\d+)">(.*?)</script>', html, re.S)}
    out = {}
    for m in re.finditer(r'<canvas class="thumb"[^>]*data-data="(fig\d+)"[^>]*data-title="([^"]*)"', html):
        f = json.loads(figs[m.group(1)])
        import base64
        out[m.group(2)] = np.frombuffer(base64.b64decode(f["values"]),
                                        "<f8" if f["dtype"] == "f8" else "<f4").reshape(f["rows"], f["cols"])
    return out


class ConfigRecord(CliTestCase):
    """The record, read from .npz and JSON bundles, applied, overridden, refused."""

    def test_npz_config_runs_without_flags(self):
        b = small_bundle()
        p = self.save_npz("b.npz", config=npz_config({"heads": 2, "causal": True}), **b)
        r = run_text("run", p, "--json")
        self.assert_ok(r)
        ref = reference(b, heads=2, causal=True)
        common.assert_close(json_weights(r), ref["weights"], 1e-12, "weights (config heads 2, causal)")
        doc = json.loads(r.out)["config"]
        self.assertEqual((doc["heads"], doc["causal"]), (2, True))
        self.assertEqual(doc["bundle_config"], {"causal": {"value": True, "overridden": False},
                                                "heads": {"value": 2, "overridden": False}})
        r = run_text("run", p, "--stages", "weights", "--color", "never", "--width", "200")
        self.assert_ok(r)
        self.assertIn("  config  from the bundle: causal true, heads 2\n", r.out)

    def test_json_config_object(self):
        b = small_bundle(4)
        doc = {k: v.tolist() for k, v in b.items()}
        doc["config"] = {"heads": 4, "scale": "none", "causal": True, "causal_align": "bottom-right"}
        p = self.save_json("b.json", doc)
        r = run_text("run", p, "--json")
        self.assert_ok(r)
        ref = reference(b, heads=4, causal=True, causal_align="bottom-right", scale=1.0)
        common.assert_close(json_weights(r), ref["weights"], 1e-12, "weights (JSON config)")
        # The same record from standard input.
        r = run_text("run", "-", "--json", stdin=p.read_text(encoding="utf-8"))
        self.assert_ok(r)
        common.assert_close(json_weights(r), ref["weights"], 1e-12, "weights (config on stdin)")

    def test_command_line_overrides_and_says_so(self):
        b = small_bundle(5)
        p = self.save_npz("b.npz", config=npz_config({"heads": 2, "causal": True, "layout": "math"}), **b)
        r = run_text("run", p, "--heads", "4", "--no-causal", "--json")
        self.assert_ok(r)
        common.assert_close(json_weights(r), reference(b, heads=4)["weights"], 1e-12, "weights (overridden)")
        cfg = json.loads(r.out)["config"]
        self.assertEqual((cfg["heads"], cfg["causal"]), (4, False))
        self.assertEqual(cfg["bundle_config"], {"causal": {"value": True, "overridden": True},
                                                "heads": {"value": 2, "overridden": True},
                                                "layout": {"value": "math", "overridden": False}})
        r = run_text("run", p, "--heads", "4", "--stages", "weights", "--color", "never", "--width", "200")
        self.assert_ok(r)
        self.assertIn("  config  from the bundle: causal true, layout \"math\"; the command line's instead of "
                      "the bundle's: heads 2\n", r.out)
        # --compare's run B overrides the bundle's record too.
        r = run_text("run", p, "--compare", "--heads 1", "--json")
        self.assert_ok(r)

    def test_check_and_decode_apply_it(self):
        b = small_bundle(6, T=6)
        p = self.save_npz("b.npz", config=npz_config({"heads": 2, "causal": True}), **b)
        ref = reference(b, heads=2, causal=True)
        theirs = self.save_npz("theirs.npz", weights=ref["weights"], output=ref["output"])
        r = run_text("check", theirs, "--against", p)
        self.assertEqual(r.code, 0, r)
        r = run_text("decode", p, "--prefill", "3", "--json")
        self.assert_ok(r)
        self.assertEqual(json.loads(r.out)["config"]["H"], 2)
        # causal false in the record does not turn decode's causality off.
        q = self.save_npz("q.npz", config=npz_config({"heads": 2, "causal": False}), **b)
        self.assert_ok(run_text("decode", q, "--prefill", "3", "--json"))

    def test_refusals(self):
        b = small_bundle(7)
        cases = [
            ({"head": 2}, "b.npz: config: unknown option 'head'; did you mean heads? (a config may hold: " + KNOWN),
            ({"heads": "2"}, "b.npz: config: heads: expected a number, found a string 2"),
            ({"causal": 1}, "b.npz: config: causal: expected true or false, found a number 1"),
            ({"heads": 0}, "b.npz: config: heads: --heads: "),
            ({"layout": "tf"}, "b.npz: config: layout: --layout: "),
            ({"heads": [2]}, "b.npz: config: heads: expected a number, true, false or a string, found a list"),
            ({"heads": {"n": 2}}, "b.npz: config: heads: expected a number, true, false or a string, found an "
                                  "object"),
            ({"heads": None}, "found null"),
        ]
        for config, message in cases:
            with self.subTest(config=config):
                p = self.save_npz("b.npz", config=npz_config(config), **b)
                self.assert_error(run_text("run", p), message)
        # Not one string of JSON; not JSON; an object twice; a record that is not an object.
        for config, message in [(np.array([1.0, 2.0]), "b.npz: config: expected one string of JSON run options"),
                                (np.array(["{}", "{}"]), "found text of shape (2,)"),
                                (np.array("{heads: 2}"), "b.npz: config: invalid JSON at line 1, column 2"),
                                (np.array('{"heads": 2, "heads": 3}'), "b.npz: config: heads: appears twice"),
                                (np.array("[2]"), "b.npz: config: expected an object of run options")]:
            with self.subTest(config=config):
                p = self.save_npz("b.npz", config=config, **b)
                self.assert_error(run_text("run", p), message)
        doc = {k: v.tolist() for k, v in b.items()}
        p = self.path("b.json")
        p.write_text('{"config": {"heads": 2}, "config": {"heads": 2}, "x": 1}', encoding="utf-8")
        self.assert_error(run_text("run", p), "b.json: 'config' appears twice in the object")
        p = self.save_json("c.json", dict(doc, config=[1, 2]))
        self.assert_error(run_text("run", p), "c.json: config: expected an object of run options")

    def test_hostile_records(self):
        """Deep nesting, many keys, a long string: one line each, at once, within the limit."""
        b = small_bundle(8)
        deep = '{"heads": ' + "[" * 200000 + "]" * 200000 + "}"
        many = "{" + ",".join(f'"k{i}": 1' for i in range(100000)) + "}"
        for text, message in [(deep, "found a list"), (many, "b.npz: config: more than 64 options"),
                              ('{"layout": "' + "t" * 2000000 + '"}', "config: layout: --layout: ")]:
            with self.subTest(text=text[:20]):
                p = self.save_npz("b.npz", config=np.array(text), **b)
                msg = self.assert_error(run_text("run", p, timeout=30), message)
                self.assertLess(len(msg), 2000)
        p = self.save_npz("b.npz", config=np.array('{"layout": "' + "t" * 2000000 + '"}'), **b)
        self.assert_error(run_text("run", p, "--max-memory", "1M"), "memory limit", code=2)
        # A JSON record of many keys stops at the 64th, before anything is applied.
        doc = {k: v.tolist() for k, v in b.items()}
        doc["config"] = {f"k{i}": 1 for i in range(100)}
        p = self.save_json("b.json", doc)
        self.assert_error(run_text("run", p), "b.json: config: more than 64 options")


class ReportFolders(CliTestCase):
    """report: each bundle with its own record, rows named, folders searched, links named."""

    def make(self, root, name, config, seed):
        p = root / f"{name}.npz"
        p.parent.mkdir(parents=True, exist_ok=True)
        b = small_bundle(seed, T=4)
        np.savez(p, config=npz_config(config), **b)
        return b

    def test_each_bundle_its_own_options(self):
        root = self.path("out")
        bundles = {"m/call0": (self.make(root, "m/call0", {"heads": 2, "causal": True}, 1), 2, True),
                   "m/call10": (self.make(root, "m/call10", {"heads": 1}, 2), 1, False),
                   "m/call9": (self.make(root, "m/call9", {"heads": 4}, 3), 4, False)}
        # capture_bundle.py's side files are not bundles
        (root / "m" / "call0.json").write_text("{}", encoding="utf-8")
        np.savez(root / "m" / "call0.expected.npz", output=np.zeros(3))
        html = self.path("page.html")
        self.assert_ok(run_text("report", "--html", html, root), stdout_empty=True)
        text = html.read_text(encoding="utf-8")
        rows = re.findall(r'<tr data-layer="\d+"><th>([^<]*)<br>', text)
        self.assertEqual(rows, ["m/call0", "m/call9", "m/call10"])
        thumbs = thumbnails(text)
        for name, (b, heads, causal) in bundles.items():
            ref = reference(b, heads=heads, causal=causal)["weights"]
            for h in range(heads):
                common.assert_close(thumbs[f"{name} · weights · head {h} · batch 0"], ref[0, h], 1e-12,
                                    f"{name} head {h}")
        # The command line overrides every record: one head each.
        self.assert_ok(run_text("report", "--html", html, root, "--heads", "1", "--force"), stdout_empty=True)
        self.assertEqual(len(thumbnails(html.read_text(encoding="utf-8"))), 3)

    def test_dangling_link_is_named(self):
        for link in ("a.npz", "z.npz"):  # before and after the bundle in name order
            with self.subTest(link=link):
                root = self.path(f"d-{link}")
                self.make(root, "m", {"heads": 2}, 1)
                os.symlink(root / "gone.npz", root / link)
                r = run_text("report", "--html", self.path(f"{link}.html"), root)
                self.assert_error(r, f"{root}/{link}: a symbolic link to nothing ({root}/gone.npz does not exist)")


class WholeTransformerReport(CliTestCase):
    """nn.Transformer (PyTorch 1.13) captured by scripts/capture_bundle.py, then `attnscope
    report` on the capture folder with no options: every attention runs with its own
    record; the decoder's self-attention is causal as torch computed it."""


    def test_report_of_a_capture(self):
        import torch
        from torch import nn
        import capture_bundle as cb
        torch.manual_seed(41)
        model = nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
                               batch_first=True, dtype=torch.float64).eval()
        src, tgt = torch.randn(2, 6, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
        causal = model.generate_square_subsequent_mask(5).double()
        out = self.path("captured")
        with torch.no_grad(), cb.capture(model, out) as cap:
            model(src, tgt, tgt_mask=causal)
        names = [f"{c.name}/call0" for c in cap.calls]
        # The commands carry no options: the bundles do.
        self.assertEqual(cap.calls[1].command, f"attnscope run {out}/decoder.layers.0.self_attn/call0.npz")
        self.assertEqual(cap.calls[1].config, {"heads": 2, "layout": "torch", "causal": True})
        self.assertEqual(cap.calls[2].config, {"heads": 2, "layout": "torch", "causal": False})
        html = self.path("model.html")
        self.assert_ok(run_text("report", "--html", html, out), stdout_empty=True)
        text = html.read_text(encoding="utf-8")
        rows = re.findall(r'<tr data-layer="\d+"><th>([^<]*)<br>', text)
        self.assertEqual(rows, sorted(names))  # by name: decoder.layers.0.multihead_attn/call0 first
        # Each row says its masks and the options its record set.
        own = re.search(r'<tr data-layer="\d+"><th>decoder\.layers\.0\.self_attn/call0<br>(.*?)</th>', text).group(1)
        self.assertIn("causal, top-left", own)
        self.assertIn("from the bundle: causal true, heads 2, layout", own)
        cross = re.search(r'<tr data-layer="\d+"><th>decoder\.layers\.0\.multihead_attn/call0<br>(.*?)</th>',
                          text).group(1)
        self.assertNotIn("causal,", cross)
        self.assertIn("from the bundle: causal false, heads 2, layout", cross)
        thumbs = thumbnails(text)
        # Torch's own weights of each attention on the inputs the capture recorded.
        for call in cap.calls:
            b = np.load(call.bundle)
            mha = dict(model.named_modules())[call.name]
            x = torch.from_numpy(b["x"])
            kv = torch.from_numpy(b["memory"]) if "memory" in b.files else x
            mask = causal if call.config["causal"] else None
            with torch.no_grad():
                _, w = mha(x, kv, kv, attn_mask=mask, need_weights=True, average_attn_weights=False)
            w = w.numpy()  # (B, H, Tq, Tk)
            for h in range(2):
                got = thumbs[f"{call.name}/call0 · weights · head {h} · batch 0"]
                common.assert_close(got, w[0, h], 1e-12, f"{call.name} head {h} vs torch")
                if call.name.endswith("self_attn") and call.name.startswith("decoder"):
                    self.assertTrue((np.triu(got, 1) == 0).all(), f"{call.name}: not causal")
                    self.assertTrue((got[np.tril_indices(len(got))] > 0).all(), got)


if __name__ == "__main__":
    common.main("test_bundle_config", against="scripts/attn_reference.py and PyTorch's own weights")
