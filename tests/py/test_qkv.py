#!/usr/bin/python3
"""`attnscope run --qkv FILE`: someone's own q, k and v as the start of a run, in every
accepted axis order, against the independent float64 reference scripts/modern_reference.py.

The reference computes a whole trace from x and weights; its Q, K and V (before RoPE) are
written in a layout a user's code would have, and attnscope's later stages from them must
equal the reference's: scores, masks, weights, context (and output: no W_O, so the merged
heads), with masks, grouped K/V heads, RoPE, ALiBi and sinks.

    /usr/bin/python3 tests/py/test_qkv.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import modern_reference as mref  # noqa: E402  (scripts/, on the path through common)
from test_modern import argv_of  # noqa: E402  (the reference's keywords as options)

def problem(seed, B=2, Tq=6, Tk=6, Dm=10, H=4, G=None, Dk=3, Dv=2, cross=False, **extra):
    """A random bundle (no W_O: the output is the merged heads) and its reference trace."""
    rng = np.random.default_rng(seed)
    G = G or H
    b = {"x": rng.standard_normal((B, Tq, Dm)),
         "W_Q": rng.standard_normal((Dm, H * Dk)) / 2, "W_K": rng.standard_normal((Dm, G * Dk)) / 2,
         "W_V": rng.standard_normal((Dm, G * Dv)) / 2}
    if cross:
        b["memory"] = rng.standard_normal((B, Tk, Dm))
    b.update(extra)
    return b


def layout(t, order):
    """The reference's (B, heads, T, D) tensor in one of the orders a user's code has."""
    B, h, T, D = t.shape
    if order == "bhtd":
        return t
    if order == "bthd":
        return t.transpose(0, 2, 1, 3)
    if order == "bt(hd)":
        return t.transpose(0, 2, 1, 3).reshape(B, T, h * D)
    if order == "(bh)td":
        return t.reshape(B * h, T, D)
    if order == "htd":
        assert B == 1
        return t[0]
    if order == "t(hd)":
        assert B == 1
        return t[0].transpose(1, 0, 2).reshape(T, h * D)
    raise ValueError(order)


class FromQKV(CliTestCase):
    """The stages after Q, K, V equal the reference's, whatever the layout."""

    LATER = ["scores", "masked_scores", "weights", "context", "output"]

    def check(self, b, heads, orders=("bhtd",) * 3, masks=None, names=("q", "k", "v"), axes=(), dtype="float64",
              **options):
        want = mref.attention(b, heads, **options)
        B = b["x"].shape[0]
        qkv = {n: layout(want[s], o) for n, s, o in zip(names, ("Q", "K", "V"), orders)}
        src = self.save_npz("qkv.npz", **qkv)
        argv = ["run", "--qkv", src, *argv_of(heads, options), "--dtype", dtype, "--dump", self.path("out.npz"), "-q",
                "--force"]
        for a in axes:
            argv += ["--axes", a]
        if masks:
            argv.insert(1, self.save_npz("masks.npz", **masks))
        r = run_text(*argv)
        self.assertEqual(r.code, 0, r)
        tol = 1e-12 if dtype == "float64" else 2e-5
        with np.load(self.path("out.npz")) as got:
            names_got = set(got.files)
            for n in ["Q", "K", "V"] + self.LATER + (["Q_rot", "K_rot"] if options.get("rope") else []):
                self.assertIn(n, names_got)
                g, w = got[n], want[n]
                if B == 1 and g.ndim == w.ndim - 1:  # a layout without the batch axis: results drop it too
                    w = w[0]
                self.assertEqual(g.shape, w.shape, n)
                if w.dtype == bool:
                    np.testing.assert_array_equal(g, w, err_msg=n)
                    continue
                self.assertEqual(np.isneginf(g).tolist(), np.isneginf(w).tolist(), n)
                fin = np.isfinite(w)
                np.testing.assert_allclose(g[fin], w[fin], rtol=tol, atol=tol, err_msg=f"{n} {orders} {options}")
        return want

    def test_every_batched_order(self):
        b = problem(1)
        for order in ("bhtd", "bthd", "bt(hd)", "(bh)td"):
            with self.subTest(order=order):
                self.check(b, 4, orders=(order,) * 3, causal=True)

    def test_orders_without_a_batch_axis(self):
        b = problem(2, B=1)
        for order in ("htd", "t(hd)"):
            with self.subTest(order=order):
                self.check(b, 4, orders=(order,) * 3)

    def test_mixed_orders_and_aliases(self):
        b = problem(3)
        self.check(b, 4, orders=("bthd", "bhtd", "bt(hd)"), names=("Query", "KEY", "values"))

    def test_masks_from_the_bundle(self):
        pad = np.zeros((2, 6), dtype=bool)
        pad[1, 4:] = True
        b = problem(4, key_padding_mask=pad)
        self.check(b, 4, masks={"key_padding_mask": pad}, causal=True)
        self.check(b, 4, masks={"key_padding_mask": pad}, window=2, causal=True)

    def test_grouped_query_attention(self):
        for G in (2, 1):
            with self.subTest(G=G):
                self.check(problem(5, G=G), 4, kv_heads=G, causal=True)

    def test_rope_alibi_sinks_softcap(self):
        b = problem(6, Dk=4)
        self.check(b, 4, rope=True, causal=True)
        self.check(b, 4, alibi=True, causal=True)
        sinks = np.array([0.5, -1.0, 2.0, 0.0])
        self.check(problem(6, Dk=4, sinks=sinks), 4, masks={"sinks": sinks}, causal=True)
        self.check(b, 4, softcap=1.5)

    def test_cross_attention_lengths(self):
        self.check(problem(7, Tq=3, Tk=8, cross=True), 4)

    def test_float32(self):
        b = problem(8)
        self.check(b, 4, dtype="float32", causal=True)

    def test_ambiguous_order_is_refused_then_settled_by_axes(self):
        # (2, 6, 8) with 2 heads is (B, T, H·D) or (H, T, D) without a batch axis.
        b = problem(9, H=2, Dk=4, Dv=4)
        want = mref.attention(b, 2)
        qkv = {n: layout(want[s], "bt(hd)") for n, s in zip("qkv", "QKV")}
        src = self.save_npz("qkv.npz", **qkv)
        r = run_text("run", "--qkv", src, "--heads", "2")
        self.assert_error(r, "the axis order is ambiguous", "q (2, 6, 8) could be bt(hd) or htd",
                          "--axes q=bt(hd)")
        self.check(b, 2, orders=("bt(hd)",) * 3, axes=("q=bt(hd)", "k=bt(hd)", "v=bt(hd)"))

    def test_views_and_json_say_where_q_k_v_came_from(self):
        b = problem(10, H=2)
        want = mref.attention(b, 2)
        src = self.save_npz("qkv.npz", **{n: want[s] for n, s in zip("qkv", "QKV")})
        r = run_text("run", "--qkv", src, "--heads", "2", "--json", "--stages", "weights")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertIn("q as bhtd, k as bhtd, v as bhtd", doc["config"]["qkv"])
        np.testing.assert_allclose(doc["stages"]["weights"]["data"], want["weights"], rtol=1e-12, atol=1e-12)
        r = run_text("run", "--qkv", src, "--heads", "2", "--stages", "Q,weights", "--explain", "--heatmap")
        self.assert_ok(r)
        self.assertIn("given   ", r.out)
        self.assertIn("Q is given, not computed", r.out)
        r = run_text("run", "--qkv", src, "--heads", "2", "--cell", "1,1,2,3")
        self.assert_ok(r)

    def test_bad_inputs(self):
        b = problem(11, H=2)
        want = mref.attention(b, 2)
        good = {n: want[s] for n, s in zip("qkv", "QKV")}
        src = self.save_npz("extra.npz", **good, attn=want["weights"])
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2"), "unknown array 'attn'")
        src = self.save_npz("missing.npz", q=good["q"], k=good["k"])
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2"), "no array v")
        src = self.save_npz("twice.npz", q=good["q"], query=good["q"], k=good["k"], v=good["v"])
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2"), "two arrays for q")
        src = self.save_npz("short.npz", q=good["q"], k=good["k"][:, :, :4], v=good["v"])
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2"), "do not agree in any axis order")
        src = self.save_npz("good.npz", **good)
        self.assert_error(run_text("run", "--qkv", src, "--heads", "3"), "fits no axis order with 3 heads")
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2", "--axes", "q=bxtd"),
                          "--axes q=bxtd: expected the letters b, h, t, d")
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2", "--axes", "w=bhtd"),
                          "has no array 'w'")
        self.assert_error(run_text("run", "--qkv", src, "--heads", "2", "--axes", "q=bthd"), "does not fit shape")
        bundle = self.save_npz("b.npz", **b)
        self.assert_error(run_text("run", bundle, "--qkv", src, "--heads", "2"),
                          "holds x; with --qkv the run starts from the given Q, K and V")
        self.assert_error(run_text("run", bundle, "--heads", "2", "--axes", "q=bhtd"), "--axes: says how --qkv")


class SdpaLayout(CliTestCase):
    """Issue 21: SDPA's (B, H, T, D) without --heads names the head counts that fit; a run
    of --qkv alone shows its file and no model width."""

    def test_the_head_counts_that_fit_are_named(self):
        rng = np.random.default_rng(21)
        src = self.save_npz("sdpa.npz", **{n: rng.standard_normal((1, 2, 5, 4)) for n in "qkv"})
        r = run_text("run", "--qkv", src)
        self.assertEqual((r.code, r.out), (2, ""))
        self.assertEqual(r.err, f"attnscope: error: {src}: q: shape (1, 2, 5, 4) fits no axis order with 1 head "
                                "(--heads); it fits bhtd with --heads 2, or bthd with --heads 5\n")
        merged = self.save_npz("merged.npz", **{n: rng.standard_normal((1, 5, 8)) for n in "qkv"})
        r = run_text("run", "--qkv", merged, "--heads", "3")
        self.assertEqual(r.err, f"attnscope: error: {merged}: q: shape (1, 5, 8) fits no axis order with 3 heads "
                                "(--heads); it fits bt(hd) with --heads dividing 8\n")
        k1 = self.save_npz("gqa.npz", q=rng.standard_normal((1, 4, 5, 2)), k=rng.standard_normal((1, 1, 5, 2)),
                           v=rng.standard_normal((1, 1, 5, 2)))
        r = run_text("run", "--qkv", k1, "--heads", "4")
        self.assertEqual(r.err, f"attnscope: error: {k1}: k: shape (1, 1, 5, 2) fits no axis order with 4 K/V "
                                "heads (--kv-heads, default --heads); it fits bhtd with --kv-heads 1, or bthd with "
                                "--kv-heads 5\n")

    def test_the_header_shows_what_was_given(self):
        rng = np.random.default_rng(22)
        src = self.save_npz("sdpa.npz", **{n: rng.standard_normal((1, 2, 5, 4)) for n in "qkv"})
        r = run_text("run", "--qkv", src, "--heads", "2", "--stages", "weights")
        self.assert_ok(r)
        lines = r.out.splitlines()
        self.assertEqual(lines[0], f"attnscope: self-attention, 2 heads, float64, {src}")
        self.assertEqual(lines[1], "  sizes   B=1 Tq=5 Tk=5 H=2 Dk=4 Dv=4 Dout=8")


if __name__ == "__main__":
    common.main("run --qkv", against="modern_reference.py")
