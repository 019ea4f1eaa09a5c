#!/usr/bin/python3
"""Long contexts: `run --summary` (per-row summaries computed tile by tile), --topk,
--sink-keys, --local, --jsonl, and the memory plan, run as a user runs them.

Every summary array is checked against scripts/summary_reference.py, which computes the
same quantities the plain way from the dense weights of the independent float64
reference scripts/modern_reference.py (float64: 1e-12; float32: from the float32-rounded
inputs, 2e-5), with every mask and variant.

    /usr/bin/python3 tests/py/test_summary.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, CliTestCase, run_text  # noqa: E402

import summary_reference as sref  # noqa: E402  (scripts/, on the path through common)
from test_modern import argv_of  # noqa: E402  (the reference's keywords as options)

ARRAYS = ["entropy", "effective_keys", "max_weight", "max_key", "topk_index", "topk_weight", "sink_mass",
          "local_mass", "mean_distance", "visible_keys", "row_sum", "distance_profile"]

def bundle(seed, B=2, Tq=37, Tk=None, Dm=12, H=4, G=None, Dk=3, Dv=2, sharp=1.0, **extra):
    """Random self-attention (cross-attention when Tk is given) with H query heads."""
    rng = np.random.default_rng(seed)
    G = G or H
    b = {"x": rng.standard_normal((B, Tq, Dm)),
         "W_Q": rng.standard_normal((Dm, H * Dk)) * sharp, "W_K": rng.standard_normal((Dm, G * Dk)) * sharp,
         "W_V": rng.standard_normal((Dm, G * Dv)) / 2}
    if Tk is not None:
        b["memory"] = rng.standard_normal((B, Tk, Dm))
    b.update(extra)
    return b


def padding(B, Tk, lengths):
    return np.arange(Tk)[None, :] >= np.asarray(lengths)[:, None]


class Against(CliTestCase):
    """Every summary array equals the reference's, mask by mask, variant by variant."""

    def check(self, b, heads, dtype="float64", topk=8, sink_keys=4, local=64, **options):
        src = self.save_npz("b.npz", **b)
        out = self.path("out.npz")
        argv = ["run", src, *argv_of(heads, options), "--dtype", dtype, "--summary", "--topk", str(topk),
                "--sink-keys", str(sink_keys), "--local", str(local), "--dump", out, "-q", "--force"]
        r = run_text(*argv)
        self.assertEqual(r.code, 0, r)
        self.assertTrue(all(line.startswith(common.WARNING_PREFIX) for line in r.err.splitlines()), r)
        theirs = dict(np.load(src))
        if dtype == "float32":
            theirs = common.as_float32_inputs(theirs)
        want = sref.from_modern(theirs, heads, topk=topk, sink_keys=sink_keys, local=local, **options)
        tol = 1e-12 if dtype == "float64" else 2e-5
        with np.load(out) as got:
            self.assertEqual(sorted(got.files), sorted(ARRAYS))
            for n in ARRAYS:
                g, w = got[n], want[n]
                self.assertEqual(g.shape, w.shape, n)
                if n in ("max_key", "topk_index", "visible_keys"):
                    self.assertEqual(g.dtype, np.int64, n)
                    if dtype == "float64":
                        np.testing.assert_array_equal(g, w, err_msg=f"{n} {options}")
                    else:  # float32 weights that differ in the last bit may swap near-ties
                        bad = g != w
                        if n != "visible_keys" and bad.any():
                            gw = got["topk_weight"] if n == "topk_index" else got["max_weight"]
                            self.assertLess(np.abs(gw - (want["topk_weight"] if n == "topk_index" else want["max_weight"]))[bad].max(), tol)
                        else:
                            np.testing.assert_array_equal(g, w, err_msg=f"{n} {options}")
                    continue
                diff = float(np.max(np.abs(g - w))) if g.size else 0.0
                # relative for quantities that grow with Tk (effective keys, distances)
                scale = np.maximum(1.0, np.abs(w))
                self.assertTrue(np.all(np.abs(g - w) <= tol * scale), f"{n} {options}: maxdiff = {diff:.3e}")
        return want

    def test_no_mask(self):
        self.check(bundle(1), 4)

    def test_causal_with_padding(self):
        b = bundle(2, key_padding_mask=padding(2, 37, [37, 21]))
        self.check(b, 4, causal=True, topk=5, sink_keys=3, local=5)

    def test_fully_masked_rows(self):
        # item 1 pads its first 10 keys: causal rows 0..9 see nothing (zeros, -1 keys)
        pad = np.zeros((2, 37), bool)
        pad[1, :10] = True
        b = bundle(3, H=2, key_padding_mask=pad)
        want = self.check(b, 2, causal=True)
        self.assertTrue((want["visible_keys"][1, :, :10] == 0).all())

    def test_bottom_right_cross_attention(self):
        b = bundle(4, Tq=9, Tk=40, key_padding_mask=padding(2, 40, [40, 33]))
        self.check(b, 4, causal=True, causal_align="bottom-right", local=4)

    def test_windows(self):
        self.check(bundle(5), 4, causal=True, window=6, local=3)
        self.check(bundle(6), 4, window=5)

    def test_gqa_rope(self):
        self.check(bundle(7, H=4, G=2, Dk=4), 4, kv_heads=2, rope=True, causal=True)
        self.check(bundle(8, H=4, G=1, Dk=4), 4, kv_heads=1, rope=True, rope_dim=2, causal=True, window=9)

    def test_alibi_softcap(self):
        self.check(bundle(9, sharp=2.0), 4, alibi=True, causal=True, softcap=5.0)

    def test_sinks(self):
        pad = np.zeros((2, 37), bool)
        pad[1, :4] = True
        b = bundle(10, key_padding_mask=pad, sinks=np.array([0.5, 2.0, -1.0, 3.0]))
        self.check(b, 4, causal=True)

    def test_attn_masks(self):
        rng = np.random.default_rng(11)
        allow = rng.random((37, 37)) < 0.6
        self.check(bundle(11, attn_mask=allow), 4, attn_mask_means="allow", causal=True)
        fmask = rng.standard_normal((37, 37))
        fmask[rng.random((37, 37)) < 0.3] = -np.inf
        self.check(bundle(12, attn_mask=fmask), 4)

    def test_explicit_positions(self):
        rng = np.random.default_rng(13)
        q = np.sort(rng.choice(200, 37, replace=False))
        self.check(bundle(13, Dk=4, q_positions=q, k_positions=q), 4, causal=True, rope=True, local=20, sink_keys=50)

    def test_topk_beyond_visible_keys(self):
        want = self.check(bundle(14, Tq=20), 4, causal=True, topk=30)
        self.assertTrue((want["topk_index"][:, :, 0, 1:] == -1).all())

    def test_ties_go_to_the_lower_key(self):
        # W_Q = 0: every score 0, every row uniform: all weights tie
        b = bundle(15, Tq=12)
        b["W_Q"] = np.zeros_like(b["W_Q"])
        self.check(b, 4, topk=5)
        out = np.load(self.path("out.npz"))
        np.testing.assert_array_equal(out["topk_index"], np.broadcast_to(np.arange(5), (2, 4, 12, 5)))
        b["key_padding_mask"] = padding(2, 12, [12, 3])
        self.check(b, 4, topk=5, causal=True)
        out = np.load(self.path("out.npz"))
        np.testing.assert_array_equal(out["topk_index"][1, 0, 7], [0, 1, 2, -1, -1])

    def test_long_rows_and_many_tiles(self):
        # 600 keys: rows of several 8-key blocks and segments; causal tiles skipped
        self.check(bundle(16, B=1, Tq=600, H=2, Dk=8, sharp=0.7), 2, causal=True, topk=16, local=100)
        self.check(bundle(17, B=1, Tq=300, H=2, Dk=8), 2, causal=True, window=50)

    def test_float32(self):
        self.check(bundle(18, key_padding_mask=padding(2, 37, [37, 25])), 4, dtype="float32", causal=True)
        self.check(bundle(19, B=1, Tq=500, H=2, Dk=8), 2, dtype="float32", causal=True, window=300, local=40)
        self.check(bundle(20, sinks=np.array([0.5, 2.0, -1.0, 3.0])), 4, dtype="float32", alibi=True)


def sink_window(T):
    """docs/long-context.md: without --sink-keys, floor(Tk / 16) keys, at least 1, at most 4."""
    return min(4, max(1, T // 16))


class SinkWindow(CliTestCase):
    """The default sink window scales with Tk (key 0 alone for a short sentence), against the
    reference's sink mass over that window; and the README's induction head of data/tiny-gpt2,
    classed from numpy's float64 forward pass (scripts/lm_reference.py) by the documented rule."""

    def test_default_window_against_the_reference(self):
        for T in (12, 31, 32, 47, 64, 100):
            with self.subTest(T=T):
                b = bundle(60 + T, B=1, Tq=T, H=2)
                src, out = self.save_npz("b.npz", **b), self.path("out.npz")
                r = run_text("run", src, "--heads", "2", "--causal", "--summary", "--dump", out, "-q", "--force")
                self.assertEqual(r.code, 0, r)
                want = sref.from_modern(dict(np.load(src)), 2, sink_keys=sink_window(T), causal=True)
                with np.load(out) as got:
                    np.testing.assert_allclose(got["sink_mass"], want["sink_mass"], rtol=0, atol=1e-12)
                doc = json.loads(run_text("run", src, "--heads", "2", "--causal", "--summary", "--json").out)
                self.assertEqual(doc["summary"]["sink_keys"], sink_window(T))
                text = run_text("run", src, "--heads", "2", "--causal", "--summary").out
                words = "key 0" if sink_window(T) == 1 else f"keys 0..{sink_window(T) - 1}"
                self.assertIn(f"sink on {words},", text)
        r = run_text("run", src, "--heads", "2", "--causal", "--summary", "--sink-keys", "4", "--json")
        self.assertEqual(json.loads(r.out)["summary"]["sink_keys"], 4)  # given, never scaled

    def test_readme_induction_head(self):
        import train_model  # noqa: E402  (scripts/: the .safetensors reader)
        import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)
        model, text, layer = common.ROOT / "data" / "tiny-gpt2", "The cat sat. The cat sat.", 1
        r = run_text("tokens", "--model", model, "--text", text, "--json")
        self.assertEqual(r.code, 0, r)
        ids = json.loads(r.out)["ids"]
        config, state = train_model.load_model(str(model))
        w = lref.forward(config, {k: v.astype(np.float64) for k, v in state.items()}, ids)["weights"][layer]
        T, s = len(ids), sink_window(len(ids))
        self.assertEqual((T, s), (12, 1))
        mean_sink = w[:, :, :s].sum(-1).mean(-1)  # (H,): the mean over rows of the mass on keys 0..s-1
        r = run_text("run", "--model", model, "--text", text, "--layer", str(layer), "--summary", "--json")
        self.assertEqual(r.code, 0, r)
        heads = json.loads(r.out)["summary"]["heads"]
        for h, head in enumerate(heads):
            self.assertAlmostEqual(head["mean_sink_mass"], mean_sink[h], places=9)
            self.assertEqual(head["class"] == "sink", mean_sink[h] >= 0.5, (h, head["class"], mean_sink[h]))
        self.assertNotEqual(heads[1]["class"], "sink")  # README: head 1 of layer 1 is an induction head
        r = run_text("run", "--model", model, "--text", text, "--layer", str(layer), "--summary")
        self.assertIn("sink on key 0,", r.out)


class DenseStagesToo(CliTestCase):
    """Summaries with dense stages kept (every key of each tile) equal those without."""

    def test_same_with_weights_kept(self):
        src = self.save_npz("b.npz", **bundle(21, key_padding_mask=padding(2, 37, [37, 30])))
        a, b = self.path("a.npz"), self.path("b2.npz")
        r = run_text("run", src, "--heads", "4", "--causal", "--summary", "--dump", a, "-q")
        self.assertEqual(r.code, 0, r)
        r = run_text("run", src, "--heads", "4", "--causal", "--summary", "--stages", "scores,weights,output",
                     "--dump", b, "-q")
        self.assertEqual(r.code, 0, r)
        with np.load(a) as x, np.load(b) as y:
            self.assertEqual(sorted(y.files), sorted(ARRAYS + ["scores", "weights", "output"]))
            for n in ARRAYS:
                np.testing.assert_allclose(x[n], y[n], rtol=0, atol=1e-14, err_msg=n)


class Jsonl(CliTestCase):
    """--jsonl parses line by line with json.loads, and agrees with the dump."""

    def test_lines(self):
        src = self.save_npz("b.npz", **bundle(22, B=2, Tq=15, H=2))
        out, dump = self.path("s.jsonl"), self.path("s.npz")
        r = run_text("run", src, "--heads", "2", "--causal", "--topk", "3", "--stages", "weights,output",
                     "--jsonl", out, "--dump", dump, "-q")
        self.assertEqual(r.code, 0, r)
        lines = out.read_text().splitlines()
        objs = [json.loads(line) for line in lines]
        self.assertEqual(objs[0]["kind"], "run")
        self.assertEqual(objs[0]["summary"]["topk"], 3)
        rows = [o for o in objs if o["kind"] == "row"]
        heads = [o for o in objs if o["kind"] == "head"]
        stages = [o for o in objs if o["kind"] == "stage"]
        self.assertEqual(len(rows), 2 * 2 * 15)
        self.assertEqual(len(heads), 2 * 2)
        self.assertEqual(sorted((o["stage"], o["batch"], o.get("head")) for o in stages),
                         sorted([("weights", b, h) for b in range(2) for h in range(2)] +
                                [("output", b, None) for b in range(2)]))
        with np.load(dump) as d:
            for o in rows:
                at = (o["batch"], o["head"], o["query"])
                for n in ("entropy", "sink_mass", "local_mass", "mean_distance", "row_sum", "max_weight"):
                    self.assertEqual(o[n], float(d[n][at]), n)
                self.assertEqual(o["topk_index"], d["topk_index"][at].tolist())
                self.assertEqual(o["topk_weight"], d["topk_weight"][at].tolist())
            for o in stages:
                if o["stage"] == "weights":
                    np.testing.assert_array_equal(np.array(o["data"]), d["weights"][o["batch"], o["head"]])
            for o in heads:
                np.testing.assert_array_equal(o["distance_profile"], d["distance_profile"][o["batch"], o["head"]])

    def test_stdout_stream_and_head(self):
        # a reader that stops early (head): the run ends by SIGPIPE, what it read parses
        src = self.save_npz("b.npz", **bundle(23, B=1, Tq=3000, H=2, Dk=4))
        p1 = subprocess.Popen([str(BIN), "run", str(src), "--heads", "2", "--causal", "--summary", "--jsonl", "-"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        head = [p1.stdout.readline() for _ in range(5)]
        p1.stdout.close()
        p1.wait(timeout=60)
        for line in head:
            json.loads(line)
        self.assertIn(p1.returncode, (0, -signal.SIGPIPE))

    def test_killed_by_sigpipe_leaves_no_file(self):
        # the report on stdout goes to a reader that closes at once: the .jsonl is not left half-written
        src = self.save_npz("b.npz", **bundle(24, B=1, Tq=400, H=2, Dk=4))
        out = self.path("s.jsonl")
        p = subprocess.Popen([str(BIN), "run", str(src), "--heads", "2", "--causal", "--summary", "--stages",
                              "weights", "--full", "--jsonl", str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.read(10)
        p.stdout.close()
        p.wait(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGPIPE)
        self.assertFalse(out.exists())
        self.assertEqual(sorted(os.listdir(self.tmp)), ["b.npz"])


class Views(CliTestCase):
    def test_text_fits_80_columns(self):
        src = self.save_npz("b.npz", **bundle(25, B=1, Tq=3000, H=3, Dk=4))
        r = run_text("run", src, "--heads", "3", "--causal", "--summary", "--sink-keys", "2", "--local", "16")
        self.assertEqual(r.code, 0, r)
        self.assertIn("== summary", r.out)
        self.assertIn("classes: sink", r.out)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertEqual(r.err, "")  # no progress bar into a pipe

    def test_json_document(self):
        src = self.save_npz("b.npz", **bundle(26, B=1, Tq=10, H=2))
        r = run_text("run", src, "--heads", "2", "--causal", "--summary", "--json")
        self.assertEqual(r.code, 0, r)
        doc = json.loads(r.out)
        self.assertEqual(len(doc["summary"]["rows"]), 20)
        self.assertEqual(len(doc["summary"]["heads"]), 2)
        self.assertEqual(doc["stages"], {})

    def test_memory_refusal_suggests_summary(self):
        src = self.save_npz("b.npz", **bundle(27, B=1, Tq=2000, H=4, Dk=4))
        r = run_text("run", src, "--heads", "4", "--causal", "--max-memory", "200M")
        self.assert_error(r, "--summary", "--topk", "--max-memory")
        r = run_text("run", src, "--heads", "4", "--causal", "--summary", "--max-memory", "200M", "-q")
        self.assertEqual(r.code, 0, r)


def dense_causal(b, H, Dk):
    """numpy: the causal weights (B, H, T, T) of a self-attention bundle (G = H, no bias), a
    NaN anywhere in a row's visible scores making the whole row NaN, as softmax does."""
    x = b["x"]
    B, T, _ = x.shape
    q = (x @ b["W_Q"]).reshape(B, T, H, Dk).transpose(0, 2, 1, 3)
    k = (x @ b["W_K"]).reshape(B, T, H, Dk).transpose(0, 2, 1, 3)
    causal = np.tril(np.ones((T, T), bool))
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(Dk), -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True), np.broadcast_to(causal, s.shape)


class NonFinite(CliTestCase):
    """Issue 21: a row whose logits hold a NaN has no weights to summarise: NaN in, NaN out
    (null in JSON), -1 keys, counted per head and left out of the profile and the means."""

    def test_nan_rows(self):
        B, T, H, Dk = 2, 12, 2, 3
        b = bundle(40, B=B, Tq=T, H=H, Dk=Dk)
        b["x"][1, 5, 2] = np.nan  # item 1: query 5's row, and every later row (key 5), are NaN
        w, causal = dense_causal(b, H, Dk)
        bad = np.isnan(w).any(-1)                               # (B, H, T)
        self.assertEqual(int(bad.sum()), H * (T - 5))
        pos = np.broadcast_to(np.arange(T), (B, T))
        want = sref.summarize(np.nan_to_num(w), causal & ~bad[..., None], pos, pos, topk=3, sink_keys=2, local=3)
        src = self.save_npz("b.npz", **b)
        for dtype in ("float64", "float32"):
            out = self.path(f"{dtype}.npz")
            r = run_text("run", src, "--heads", str(H), "--causal", "--dtype", dtype, "--topk", "3",
                         "--sink-keys", "2", "--local", "3", "--dump", out, "-q")
            self.assertEqual(r.code, 0, r)
            tol = 1e-12 if dtype == "float64" else 2e-5
            with np.load(out) as got:
                for n in ("entropy", "effective_keys", "max_weight", "sink_mass", "local_mass", "mean_distance",
                          "row_sum"):
                    self.assertTrue(np.isnan(got[n][bad]).all(), f"{dtype} {n}")
                    np.testing.assert_allclose(got[n][~bad], want[n][~bad], rtol=tol, atol=tol, err_msg=n)
                self.assertTrue((got["max_key"][bad] == -1).all())
                self.assertTrue((got["topk_index"][bad] == -1).all())
                self.assertTrue(np.isnan(got["topk_weight"][bad]).all())
                np.testing.assert_array_equal(got["max_key"][~bad], want["max_key"][~bad])
                np.testing.assert_array_equal(got["visible_keys"], np.broadcast_to(np.arange(1, T + 1), bad.shape))
                np.testing.assert_allclose(got["distance_profile"], want["distance_profile"], rtol=tol, atol=tol)
        r = run_text("run", src, "--heads", str(H), "--causal", "--summary", "--json")
        self.assertEqual(r.code, 0, r)
        doc = json.loads(r.out)["summary"]
        for o in doc["rows"]:
            null = bad[o["batch"], o["head"], o["query"]]
            for n in ("entropy", "effective_keys", "max_weight", "row_sum", "sink_mass", "local_mass",
                      "mean_distance"):
                self.assertEqual(o[n] is None, null, (n, o))
        for o in doc["heads"]:
            self.assertEqual(o["nonfinite_rows"], int(bad[o["batch"], o["head"]].sum()))
            self.assertEqual(o["rows"], int((~bad[o["batch"], o["head"]]).sum()))
            self.assertIsNotNone(o["mean_effective_keys"])
        r = run_text("run", src, "--heads", str(H), "--causal", "--summary")
        self.assertEqual(r.code, 0, r)
        text = " ".join(r.out.split())
        self.assertIn("rows with a NaN or inf logit (their numbers NaN, left out of the means): "
                      f"b1 h0: {T - 5}, b1 h1: {T - 5}", text)


class TextView(CliTestCase):
    """Issue 21: the text view has the run's header, the top keys of the rows shown, the
    sink keys counted plainly, and a ruler of distance bins under the sparklines."""

    def test_header_top_keys_and_ruler(self):
        B, T, H, Dk = 1, 40, 2, 3
        tokens = np.array([f"t{i}" for i in range(T)])
        b = bundle(41, B=B, Tq=T, H=H, Dk=Dk, query_tokens=tokens)
        src = self.save_npz("b.npz", **b)
        r = run_text("run", src, "--heads", str(H), "--causal", "--topk", "3", "--edgeitems", "2")
        self.assertEqual(r.code, 0, r)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertTrue(r.out.startswith("attnscope: self-attention, 2 heads, float64, "), r.out[:200])
        self.assertIn("  masks   causal", r.out)
        self.assertIn(f"sink on keys 0..{sink_window(T) - 1},", r.out)  # Tk 40: keys 0..1
        self.assertNotIn("-1 >=", r.out)
        self.assertIn(f"sink: mean mass on keys 0..{sink_window(T) - 1} >= 50%", " ".join(r.out.split()))
        self.assertNotIn("0..4-1", r.out)
        # the ruler: first distance of every 4th bin (T = 40: bins 0..6), under "profile"
        lines = r.out.splitlines()
        k = next(n for n, line in enumerate(lines) if line.startswith(" b  h class"))
        self.assertEqual(lines[k + 1][lines[k].index("profile"):], "0   8")
        # the top keys of rows 0, 1 and 38, 39 of each head, against numpy
        w, _ = dense_causal(b, H, Dk)
        for h in range(H):
            block = r.out.split(f"  -- batch 0, head {h}\n")[1].splitlines()
            shown = [line for line in block[:5]]
            self.assertEqual(shown[2].strip(), "…")
            for line, i in zip(shown[:2] + shown[3:], (0, 1, T - 2, T - 1)):
                self.assertEqual(line.split()[0], f"t{i}")
                order = np.lexsort((np.arange(T), -w[0, h, i]))[: min(3, i + 1)]
                items = [item.split() for item in " ".join(line.split()[1:]).split(", ")]
                self.assertEqual([int(it[0]) for it in items], order.tolist(), line)
                self.assertEqual([it[1] for it in items], [f"'t{j}'" for j in order], line)
                np.testing.assert_allclose([float(it[2]) for it in items], w[0, h, i, order], atol=0.5e-3 + 1e-12)


class LongSmoke(CliTestCase):
    """65,536 tokens with a small model width: bounded, and each row sees its prefix."""

    def test_65536_tokens(self):
        T = 65536
        rng = np.random.default_rng(28)
        src = self.save_npz("b.npz", x=rng.standard_normal((1, T, 4)).astype(np.float32),
                            W_Q=rng.standard_normal((4, 4)).astype(np.float32),
                            W_K=rng.standard_normal((4, 4)).astype(np.float32),
                            W_V=rng.standard_normal((4, 4)).astype(np.float32))
        out = self.path("s.npz")
        r = run_text("run", src, "--heads", "1", "--causal", "--dtype", "float32", "--summary", "--topk", "4",
                     "--dump", out, "-q", "--max-memory", "1G")
        self.assertEqual(r.code, 0, r)
        with np.load(out) as d:
            self.assertEqual(d["visible_keys"][0, 0].tolist(), list(range(1, T + 1)))
            np.testing.assert_allclose(d["row_sum"], 1.0, atol=1e-4)
            # a few rows against the reference, from their own scores
            b = {k: np.load(src)[k].astype(np.float64) for k in ("x", "W_Q", "W_K")}
            q = b["x"][0] @ b["W_Q"] / 2.0
            k = b["x"][0] @ b["W_K"]
            for i in (0, 1, 4097, T - 1):
                s = k[: i + 1] @ q[i]
                w = np.exp(s - s.max())
                w /= w.sum()
                want = sref.summarize(w[None, None, None, :], np.ones((1, 1, 1, i + 1), bool), [[i]],
                                      [np.arange(i + 1)], topk=4)
                for n in ("entropy", "sink_mass", "local_mass", "mean_distance", "max_weight"):
                    self.assertLess(abs(d[n][0, 0, i] - want[n][0, 0, 0]), 1e-3 * max(1, abs(want[n][0, 0, 0])),
                                    f"{n} row {i}")


if __name__ == "__main__":
    common.main("test_summary")
