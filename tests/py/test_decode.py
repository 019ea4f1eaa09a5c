#!/usr/bin/python3
"""`attnscope decode`, run as a user runs it, against the independent float64 reference
scripts/modern_reference.py's decode() (itself checked against a PyTorch KV-cache loop in
test_modern_reference.py): every step's weight row, sink share, context and output, its
FLOP counts and cache shapes, and the drift of each emulated bug; in float64 to 1e-12 and
in float32 to a tolerance. Also the refusals (one line, exit 2) and the text view.

    /usr/bin/python3 tests/py/test_decode.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import modern_reference as mref  # noqa: E402  (scripts/, on the path through common)

# Reference keyword -> command-line option.
FLAGS = {"kv_heads": "--kv-heads", "rope_base": "--rope-base", "rope_dim": "--rope-dim",
         "rope_style": "--rope-style", "window": "--window", "softcap": "--softcap"}


def argv_of(heads, options):
    args = ["--heads", str(heads)]
    for k, v in options.items():
        if k in ("rope", "alibi"):
            if v:
                args.append("--" + k)
        else:
            args += [FLAGS[k], str(v)]
    return args


def bundle(seed, B=2, T=7, Dm=12, H=4, G=None, Dk=4, Dv=3, Dout=5, batched=True, W_O=True, **extra):
    """A random self-attention bundle: H query heads, G K/V heads."""
    rng = np.random.default_rng(seed)
    G = G or H
    shape = (B, T, Dm) if batched else (T, Dm)
    b = {"x": rng.standard_normal(shape),
         "W_Q": rng.standard_normal((Dm, H * Dk)) / 2, "W_K": rng.standard_normal((Dm, G * Dk)) / 2,
         "W_V": rng.standard_normal((Dm, G * Dv)) / 2,
         "b_Q": rng.standard_normal(H * Dk) / 4, "b_K": rng.standard_normal(G * Dk) / 4,
         "b_V": rng.standard_normal(G * Dv) / 4}
    if W_O:
        b["W_O"] = rng.standard_normal((H * Dv, Dout)) / 2
        b["b_O"] = rng.standard_normal(Dout) / 4
    b.update(extra)
    return b


class Decode(CliTestCase):
    """Every step equals the reference's step (and the full run's row)."""

    def decode(self, b, heads, prefill, dtype="float64", bug=None, extra=(), **options):
        src = self.save_npz("b.npz", **b)
        argv = ["decode", src, *argv_of(heads, options), "--prefill", str(prefill), "--dtype", dtype,
                "--json", *extra]
        if bug:
            argv += ["--bug", bug]
        r = run_text(*argv)
        self.assert_ok(r)
        return json.loads(r.out)

    def check(self, b, heads, prefill, dtype="float64", bug=None, **options):
        """Runs attnscope and the reference; compares every step. Returns both."""
        doc = self.decode(b, heads, prefill, dtype=dtype, bug=bug, **options)
        inputs = common.as_float32_inputs(b) if dtype == "float32" else b
        want = mref.decode(inputs, heads, prefill, bug=bug, **options)
        tol = 1e-12 if dtype == "float64" else 2e-5
        what = f"{options} P={prefill} bug={bug} {dtype}"
        self.assertEqual(doc["bug"], bug)
        self.assertEqual(doc["dtype"], dtype)
        self.assertIs(doc["config"]["causal"], True)
        pre, wpre = doc["prefill"], want["prefill"]
        self.assertEqual(pre["length"], prefill)
        self.assertEqual(pre["flops"], wpre["flops"], what)
        self.assertEqual(len(doc["steps"]), len(want["steps"]), what)
        for got, ref in zip(doc["steps"], want["steps"]):
            at = f"{what} step t={ref['t']}"
            self.assertEqual(got["t"], ref["t"])
            self.assertEqual(got["cache_length"], ref["cache_length"], at)
            self.assertEqual(tuple(got["k_cache_shape"]), tuple(ref["k_cache_shape"]), at)
            self.assertEqual(tuple(got["v_cache_shape"]), tuple(ref["v_cache_shape"]), at)
            self.assertEqual(got["flops_cached"], ref["flops_cached"], at)
            self.assertEqual(got["flops_recompute"], ref["flops_recompute"], at)
            names = ["weights", "context", "output"] + (["sink_weight"] if "sink_weight" in ref else [])
            self.assertEqual("sink_weight" in got, "sink_weight" in ref, at)
            for n in names:
                common.assert_close(np.array(got[n], dtype=np.float64), ref[n], tol, f"{at} {n}",
                                    category=f"{n} {dtype}")
            # The drift from the full run: each tool against its own full run.
            for n in names:
                common.assert_close(got["diffs"][n], ref["diffs"][n], tol, f"{at} diff of {n}",
                                    category=f"drift {dtype}")
            common.assert_close(got["max_abs_diff"], ref["max_diff"], tol, f"{at} max diff",
                                category=f"drift {dtype}")
        if bug is None:
            self.assertLessEqual(doc["max_abs_diff"], 1e-12 if dtype == "float64" else 1e-5, what)
        return doc, want

    def test_multi_head(self):
        for P in (0, 1, 3, 6, 7):
            self.check(bundle(1), 4, P)

    def test_unbatched_and_without_W_O(self):
        doc, want = self.check(bundle(2, H=2, batched=False, W_O=False), 2, 2)
        step = doc["steps"][0]
        self.assertEqual(np.shape(step["weights"]), (2, 1, 3))  # (H, 1, L): no batch axis
        self.assertEqual(step["k_cache_shape"], [2, 3, 4])

    def test_grouped_query_with_rope(self):
        for style in ("half", "interleaved"):
            self.check(bundle(3, H=4, G=2, Dk=6), 4, 2, kv_heads=2, rope=True, rope_style=style)
        self.check(bundle(4, H=4, G=1, Dk=6), 4, 3, kv_heads=1, rope=True, rope_dim=4, rope_base=500.0)

    def test_alibi(self):
        self.check(bundle(5, H=4), 4, 2, alibi=True)
        self.check(bundle(6, H=3, alibi_slopes=np.array([0.5, 0.25, -0.1])), 3, 1, alibi=True)

    def test_window(self):
        for W in (1, 2, 3):
            self.check(bundle(7, T=8), 2, 2, window=W)

    def test_sinks_and_softcap(self):
        self.check(bundle(8, sinks=np.array([0.0, 1.5, -2.0, 4.0])), 4, 3)
        self.check(bundle(9), 4, 2, softcap=1.5)

    def test_padding(self):
        pad = np.zeros((2, 7), dtype=bool)
        pad[0, 5:] = True       # trailing PAD keys
        pad[1, [0, 3]] = True   # a PAD at the start: step 0 of item 1 sees no key
        self.check(bundle(10, key_padding_mask=pad), 4, 0)
        self.check(bundle(10, key_padding_mask=pad), 4, 4, window=2)

    def test_everything_at_once(self):
        pad = np.zeros((2, 9), dtype=bool)
        pad[1, 2] = True
        b = bundle(11, T=9, H=4, G=2, Dk=6, sinks=np.array([0.5, -1.0, 2.0, 0.0]), key_padding_mask=pad)
        self.check(b, 4, 3, kv_heads=2, rope=True, alibi=True, window=3, softcap=2.0)

    def test_float32(self):
        pad = np.zeros((2, 7), dtype=bool)
        pad[0, 6] = True
        b = bundle(12, H=4, G=2, Dk=6, sinks=np.array([0.5, -1.0, 2.0, 0.0]), key_padding_mask=pad)
        self.check(b, 4, 2, dtype="float32", kv_heads=2, rope=True, alibi=True, window=4)
        self.check(b, 4, 2, dtype="float32", bug="off-by-one", kv_heads=2, rope=True)

    def test_each_bug_drifts_as_the_reference_says(self):
        b = bundle(13, T=8, H=4, G=2, Dk=6)
        for bug in mref.BUGS:
            doc, want = self.check(b, 4, 3, bug=bug, kv_heads=2, rope=True, window=4, alibi=True)
            self.assertGreater(doc["max_abs_diff"], 1e-3, bug)  # visibly wrong
            common.note_maxdiff(f"bug {bug} drift", doc["max_abs_diff"])
        # From an empty cache: the first step of the two position bugs sees nothing.
        for bug in ("attend-before-append", "off-by-one"):
            doc, _ = self.check(b, 4, 0, bug=bug, kv_heads=2)
            self.assertEqual(doc["steps"][0]["fully_masked"], [0, 1], bug)
            self.assertEqual(np.abs(np.array(doc["steps"][0]["weights"])).max(), 0.0, bug)

    def test_attend_before_append_never_weighs_its_own_key(self):
        doc, _ = self.check(bundle(14), 4, 2, bug="attend-before-append")
        for step in doc["steps"]:
            w = np.array(step["weights"])                          # (B, H, 1, L)
            self.assertEqual(np.abs(w[..., -1]).max(), 0.0)
            self.assertFalse(np.array(step["mask"])[..., -1].any())

    def test_cache_grows_by_one_per_step(self):
        doc, _ = self.check(bundle(15, T=6, H=2, G=1), 2, 2, kv_heads=1)
        self.assertEqual(doc["prefill"]["k_cache_shape"], [2, 1, 2, 4])
        self.assertEqual([s["cache_length"] for s in doc["steps"]], [3, 4, 5, 6])
        self.assertEqual([s["v_cache_shape"] for s in doc["steps"]],
                         [[2, 1, L, 3] for L in (3, 4, 5, 6)])
        # A step's FLOPs grow linearly with the cache, recomputing quadratically.
        cached = [s["flops_cached"] for s in doc["steps"]]
        self.assertEqual(len(set(np.diff(cached))), 1)
        self.assertTrue(all(s["flops_recompute"] > s["flops_cached"] for s in doc["steps"]))


class Dump(CliTestCase):
    """--dump FILE.npz: the arrays the reference's --decode --dump-npz writes, and more."""

    def test_dump_matches_the_reference(self):
        b = bundle(16, H=4, G=2, Dk=6, sinks=np.array([0.5, -1.0, 2.0, 0.0]))
        src = self.save_npz("b.npz", **b)
        out = self.path("steps.npz")
        r = run_text("decode", src, "--heads", "4", "--kv-heads", "2", "--rope", "--prefill", "3",
                     "--dump", out, "-q")
        self.assert_ok(r, stdout_empty=True)
        want = mref.decode(b, 4, 3, kv_heads=2, rope=True)
        with np.load(out) as got:
            for step in want["steps"]:
                for n in ("weights", "sink_weight", "context", "output"):
                    common.assert_close(got[f"step{step['t']}_{n}"], step[n], 1e-12, f"step{step['t']}_{n}")
            for n in ("weights", "context", "output"):
                common.assert_close(got[f"prefill_{n}"], want["prefill"]["stages"][n], 1e-12, f"prefill_{n}")
        again = run_text("decode", src, "--heads", "4", "--prefill", "3", "--dump", out)
        self.assert_error(again, "--force")
        self.assert_error(run_text("decode", src, "--heads", "4", "--prefill", "3", "--dump", self.path("d")),
                          ".npz")
        self.assertFalse(self.path("d").exists())


class Text(CliTestCase):
    """The text view: 80 columns, escaped tokens, heatmap rows, the bug named."""

    def test_fits_80_columns(self):
        tokens = np.array([f"a-rather-long-token-{i}" for i in range(300)])
        src = self.save_npz("b.npz", **bundle(20, B=2, T=300, H=2, Dk=64, sinks=np.array([0.0, 1.0]),
                                              query_tokens=tokens))
        for extra in ([], ["--heatmap"], ["--bug", "off-by-one"]):
            r = run_text("decode", src, "--heads", "2", "--prefill", "3", "--window", "200", *extra)
            self.assert_ok(r)
            for line in r.out.splitlines():
                self.assertLessEqual(len(line), 80, line)
            self.assertIn("step t=299", r.out)

    def test_tokens_escaped(self):
        b = bundle(21, B=1, T=4, H=1, query_tokens=np.array(["a", "b", "\x1b[31mred", "d"]))
        src = self.save_npz("b.npz", **b)
        r = run_text("decode", src, "--prefill", "2")
        self.assert_ok(r)
        self.assertNotIn("\x1b", r.out)
        self.assertIn("step t=2 '\\x1b[31mred'", r.out)

    def test_numbers_and_summary(self):
        src = self.save_npz("b.npz", **bundle(22, B=1, T=4, H=1))
        r = run_text("decode", src, "--prefill", "2")
        self.assert_ok(r)
        want = mref.decode(bundle(22, B=1, T=4, H=1), 1, 2)
        row = want["steps"][0]["weights"][0, 0, 0]
        self.assertIn("h0   " + " ".join(f"{w:.4f}" for w in row), r.out)
        self.assertIn("prefill: positions 0..1 in one causal run", r.out)
        self.assertIn("causal (implied", r.out)
        self.assertIn("max |diff| vs the full causal run", r.out)
        self.assertIn("(the cache gives the same rows)", r.out)

    def test_heatmap_marks_masked_keys(self):
        src = self.save_npz("b.npz", **bundle(23, B=1, T=5, H=1))
        r = run_text("decode", src, "--prefill", "1", "--window", "2", "--heatmap")
        self.assert_ok(r)
        rows = [line for line in r.out.splitlines() if line.startswith("  b0 h0")]
        self.assertEqual(len(rows), 4)
        last = rows[-1].split("|")[1]                              # t=4: keys 0..2 outside the window
        self.assertEqual(last[:3], "×××")
        self.assertEqual(len(last), 5)

    def test_bug_is_named_with_its_drift(self):
        src = self.save_npz("b.npz", **bundle(24, B=1, T=5, H=2, Dk=4))
        r = run_text("decode", src, "--heads", "2", "--rope", "--prefill", "2", "--bug", "rope-position-zero")
        self.assert_ok(r)
        self.assertIn("bug rope-position-zero (a teaching experiment)", r.out)
        self.assertIn("bug rope-position-zero: drifts from the full run by up to", r.out)


class Views(CliTestCase):
    """Issue 21: every difference names its stage; key labels over the rows; each batch
    item's token; --batch and --head."""

    @staticmethod
    def diff_lines(text):
        """{stage: value} of each "max |diff| ..." line of the steps, in order."""
        out = []
        for line in text.splitlines():
            if line.startswith("  max |diff| ") and "full" not in line:
                out.append({k: float(v) for k, v in
                            (item.split() for item in line[len("  max |diff| "):].split(", "))})
        return out

    def test_each_difference_names_its_stage(self):
        b = bundle(40, B=1, T=6, H=2, Dk=4)
        src = self.save_npz("b.npz", **b)
        r = run_text("decode", src, "--heads", "2", "--rope", "--prefill", "2", "--bug", "rope-position-zero")
        self.assert_ok(r)
        want = mref.decode(b, 2, 2, bug="rope-position-zero", rope=True)
        got = self.diff_lines(r.out)[1:]  # the first: the prefill's (rows 0..1, no bug: 0)
        self.assertEqual(len(got), len(want["steps"]))
        for g, ref in zip(got, want["steps"]):
            self.assertEqual(sorted(g), ["context", "output", "weights"])
            for n, v in g.items():  # printed to 3 significant digits
                self.assertAlmostEqual(v, ref["diffs"][n], delta=5e-3 * abs(ref["diffs"][n]) + 1e-15,
                                       msg=f"t={ref['t']} {n}")
        # the summary names the stage of its largest figure, and every stage's largest
        most = {n: max(s["diffs"][n] for s in want["steps"]) for n in ("weights", "context", "output")}
        top = max(most, key=most.get)
        summary = " ".join(r.out.split("recomputing each prefix")[1].split())
        self.assertIn(f"by up to {most[top]:.3g} ({top}, at t=", summary)
        for n, v in most.items():
            self.assertIn(f"{n} {v:.3g}", summary)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)

    def test_key_labels_tokens_of_every_item_and_selections(self):
        tokens = np.array([["<s>", "I", "like", "green", "tea"], ["<s>", "we", "drink", "black", "tea"]])
        b = bundle(41, B=2, T=5, H=3, query_tokens=tokens)
        src = self.save_npz("b.npz", **b)
        r = run_text("decode", src, "--heads", "3", "--prefill", "3")
        self.assert_ok(r)
        self.assertIn("step t=3 b0 'green' b1 'black': cache 4", r.out)  # each item's token
        self.assertIn("step t=4 'tea': cache 5", r.out)                  # shared: once
        self.assertIn("  b0 keys    <s>      I   like  green", r.out)
        self.assertIn("  b1 keys    <s>     we  drink  black", r.out)
        want = mref.decode(b, 3, 3)
        r = run_text("decode", src, "--heads", "3", "--prefill", "3", "--batch", "1", "--head", "0,2")
        self.assert_ok(r)
        self.assertIn("shown: batch item 1 of 2; heads 0,2 of 3 (--batch, --head)", r.out)
        rows = [line for line in r.out.splitlines() if line.startswith("  b")]
        self.assertEqual([line[:9] for line in rows], ["  b1 h0  ", "  b1 h2  "] * 2)
        for k, step in enumerate(want["steps"]):
            for n, h in enumerate((0, 2)):
                printed = [float(v) for v in rows[2 * k + n].split()[2:]]
                np.testing.assert_allclose(printed, step["weights"][1, h, 0], atol=0.5e-4 + 1e-12)
        self.assertIn("step t=3 'black'", r.out)
        self.assertIn("  keys       <s>     we  drink  black\n  b1 h0", r.out)
        # without tokens, the keys' indices; a heatmap marks every tenth
        src2 = self.save_npz("c.npz", **bundle(42, B=1, T=23, H=1))
        r = run_text("decode", src2, "--prefill", "21")
        self.assertIn("  keys        k0     k1     k2     k3 …    k18    k19    k20    k21\n", r.out)
        r = run_text("decode", src2, "--prefill", "21", "--heatmap")
        self.assertIn("  keys    |0         10        20|\n", r.out)

    def test_selections_refused_where_they_cannot_apply(self):
        src = self.save_npz("b.npz", **bundle(43, B=2, T=4, H=2))
        self.assert_error(run_text("decode", src, "--heads", "2", "--prefill", "2", "--batch", "2"),
                          "--batch", "2")
        self.assert_error(run_text("decode", src, "--heads", "2", "--prefill", "2", "--head", "5"), "--head")
        self.assert_error(run_text("decode", src, "--heads", "2", "--prefill", "2", "--head", "1", "--json"),
                          "--head", "--json")


class Refusals(CliTestCase):
    """What decode cannot run: one clear line, exit 2, nothing on stdout."""

    def refused(self, b, *args, fragments=()):
        src = self.save_npz("b.npz", **b)
        r = run_text("decode", src, *args)
        return self.assert_error(r, *fragments)

    def test_cross_attention(self):
        b = bundle(30)
        b["memory"] = np.zeros((2, 5, 12))
        self.refused(b, "--heads", "4", "--prefill", "2", fragments=("self-attention only", "memory"))

    def test_attn_mask(self):
        b = bundle(31, attn_mask=np.zeros((7, 7)))
        self.refused(b, "--heads", "4", "--prefill", "2", fragments=("attn_mask is not supported", "--window"))

    def test_positions(self):
        b = bundle(32, q_positions=np.arange(7), k_positions=np.arange(7))
        self.refused(b, "--heads", "4", "--prefill", "2", fragments=("q_positions",))

    def test_prefill_longer_than_the_sequence(self):
        self.refused(bundle(33), "--heads", "4", "--prefill", "8", fragments=("--prefill 8: expected 0..7",))

    def test_no_causal(self):
        self.refused(bundle(34), "--heads", "4", "--prefill", "2", "--no-causal",
                     fragments=("--no-causal", "causal by construction"))

    def test_rope_bug_without_rope(self):
        self.refused(bundle(35), "--heads", "4", "--prefill", "2", "--bug", "rope-position-zero",
                     fragments=("--bug rope-position-zero: needs --rope",))

    def test_unknown_bug_and_missing_prefill(self):
        self.refused(bundle(36), "--heads", "4", "--prefill", "2", "--bug", "typo", fragments=("--bug",))
        self.refused(bundle(36), "--heads", "4", fragments=("--prefill",))

    def test_json_and_heatmap(self):
        self.refused(bundle(37), "--heads", "4", "--prefill", "2", "--json", "--heatmap",
                     fragments=("--heatmap",))


if __name__ == "__main__":
    common.main("test_decode")
