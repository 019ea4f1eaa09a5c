#!/usr/bin/python3
"""The modern attention variants, run as a user runs them, against the independent
float64 reference scripts/modern_reference.py (itself cross-checked against PyTorch in
test_modern_reference.py): grouped K/V heads, RoPE, ALiBi, float and boolean attn_mask,
sliding windows, soft-capping, sinks, per-head output, and their combinations.

    /usr/bin/python3 tests/py/test_modern.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
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
         "rope_style": "--rope-style", "window": "--window", "softcap": "--softcap",
         "attn_mask_means": "--attn-mask-means", "causal_align": "--causal-align"}


def argv_of(heads, options):
    """attnscope's options for the reference's keyword arguments."""
    args = ["--heads", str(heads)]
    for k, v in options.items():
        if k in ("rope", "alibi", "causal"):
            if v:
                args.append("--" + k)
        else:
            args += [FLAGS[k], str(v)]
    return args


def bundle(seed, B=2, T=7, Dm=12, H=4, G=None, Dk=3, Dv=2, Dout=5, batched=True, **extra):
    """A random self-attention bundle: H query heads, G K/V heads."""
    rng = np.random.default_rng(seed)
    G = G or H
    shape = (B, T, Dm) if batched else (T, Dm)
    b = {"x": rng.standard_normal(shape),
         "W_Q": rng.standard_normal((Dm, H * Dk)) / 2, "W_K": rng.standard_normal((Dm, G * Dk)) / 2,
         "W_V": rng.standard_normal((Dm, G * Dv)) / 2, "W_O": rng.standard_normal((H * Dv, Dout)) / 2,
         "b_Q": rng.standard_normal(H * Dk) / 4, "b_K": rng.standard_normal(G * Dk) / 4}
    b.update(extra)
    return b


class Against(CliTestCase):
    """Every stage of a run equals the reference's (float64: 1e-12; float32: 1e-5)."""

    def check(self, b, heads, stages=None, dtype="float64", reference=None, reference_options=None, **options):
        src = self.save_npz("b.npz", **b)
        out = self.path("out.npz")
        argv = ["run", src, *argv_of(heads, options), "--dtype", dtype, "--dump", out, "-q", "--force"]
        if stages:
            argv += ["--stages", stages]
        r = run_text(*argv)
        self.assertEqual(r.code, 0, r)
        self.assertTrue(all(line.startswith(common.WARNING_PREFIX) for line in r.err.splitlines()), r)
        want = mref.attention(dict(np.load(src)) if reference is None else reference, heads,
                              **(options if reference_options is None else reference_options))
        with np.load(out) as got:
            names = stages.split(",") if stages else [n for n in want if n != "head_output"]
            self.assertEqual(sorted(got.files), sorted(names))
            tol = 1e-12 if dtype == "float64" else 2e-5
            for n in names:
                g, w = got[n], want[n]
                self.assertEqual(g.shape, w.shape, n)
                if w.dtype == bool:
                    np.testing.assert_array_equal(g, w, err_msg=n)
                else:
                    self.assertEqual(np.isneginf(g).tolist(), np.isneginf(w).tolist(), n)
                    fin = np.isfinite(w)
                    np.testing.assert_allclose(g[fin], w[fin], rtol=tol, atol=tol, err_msg=f"{n} {options}")
        return want

    def test_grouped_and_multi_query(self):
        for G in (4, 2, 1):
            with self.subTest(G=G):
                want = self.check(bundle(1, H=4, G=G), 4, kv_heads=G, causal=True)
                self.assertEqual(want["K"].shape, (2, G, 7, 3))

    def test_gqa_equals_mha_with_repeated_kv_weights(self):
        b = bundle(2, H=4, G=2)
        rep = dict(b)
        rep["W_K"] = np.repeat(b["W_K"].reshape(12, 2, 3), 2, axis=1).reshape(12, 12)
        rep["W_V"] = np.repeat(b["W_V"].reshape(12, 2, 2), 2, axis=1).reshape(12, 8)
        rep["b_K"] = np.repeat(b["b_K"].reshape(2, 3), 2, axis=0).reshape(12)
        outs = []
        for bb, extra in ((b, ["--kv-heads", "2"]), (rep, [])):
            src = self.save_npz("b.npz", **bb)
            out = self.path("o.npz")
            self.assert_ok(run_text("run", src, "--heads", "4", *extra, "--dump", out, "-q", "--force",
                                    "--stages", "weights,output"))
            with np.load(out) as z:
                outs.append({k: z[k] for k in z.files})
        for k in ("weights", "output"):
            np.testing.assert_allclose(outs[0][k], outs[1][k], rtol=1e-13, atol=1e-13)

    def test_rope_styles_widths_bases_and_alignment(self):
        b = bundle(3, H=2, Dk=6)
        for opts in ({"rope": True}, {"rope": True, "rope_style": "interleaved"},
                     {"rope": True, "rope_dim": 4}, {"rope": True, "rope_base": 500.0},
                     {"rope": True, "causal": True, "causal_align": "bottom-right"}):
            with self.subTest(opts=opts):
                self.check(b, 2, **opts)
        q = bundle(3, H=2, Dk=6, T=5, q_positions=np.array([[3, 4, 5, 6, 7], [0, 2, 4, 6, 8]]),
                   k_positions=np.arange(5) + 3)
        self.check(q, 2, rope=True, causal=True)

    def test_rope_depends_on_relative_position_only(self):
        # The same two tokens at different absolute positions give the same score.
        rng = np.random.default_rng(4)
        tok = rng.standard_normal((2, 8))
        x = np.stack([tok[0], tok[1], tok[0], tok[1], tok[0], tok[1]])
        b = {"x": x, "W_Q": rng.standard_normal((8, 8)), "W_K": rng.standard_normal((8, 8)),
             "W_V": rng.standard_normal((8, 8))}
        want = self.check(b, 2, rope=True)
        s = want["scores"]
        np.testing.assert_allclose(s[:, 1, 0], s[:, 3, 2], rtol=1e-12)
        np.testing.assert_allclose(s[:, 5, 2], s[:, 3, 0], rtol=1e-12)

    def test_alibi_slopes(self):
        for H in (4, 6):
            with self.subTest(H=H):
                self.check(bundle(5, H=H, Dk=2), H, alibi=True, causal=True)
        b = bundle(5, H=4, Dk=2, alibi_slopes=np.array([0.5, 0.25, 0.0, -1.0]))
        self.check(b, 4, alibi=True)
        # Slopes 0 are no ALiBi.
        z = bundle(5, H=4, Dk=2, alibi_slopes=np.zeros(4))
        with_zero = self.check(z, 4, alibi=True, stages="weights")
        plain = mref.attention(bundle(5, H=4, Dk=2), 4)
        np.testing.assert_allclose(with_zero["weights"], plain["weights"], rtol=1e-14)

    def test_windows(self):
        b = bundle(6, H=2, T=9)
        for opts in ({"window": 3, "causal": True}, {"window": 2}, {"window": 20, "causal": True}):
            with self.subTest(opts=opts):
                self.check(b, 2, **opts)
        wide = mref.attention(b, 2, window=20, causal=True)
        plain = mref.attention(b, 2, causal=True)
        np.testing.assert_array_equal(wide["mask"], plain["mask"])

    def test_softcap(self):
        self.check(bundle(7, H=2), 2, softcap=0.5, causal=True)

    def test_float_attn_mask_in_each_shape(self):
        rng = np.random.default_rng(8)
        B, H, T = 2, 4, 5
        m4 = rng.standard_normal((B, H, T, T))
        m4[0, 1, 2, :3] = -np.inf
        m4[1, 2, 4, :] = -np.inf  # a row hidden entirely: weights 0
        for name, m in (("2-D", m4[0, 0]), ("B", m4[:, 0]), ("H", m4[0]), ("4-D", m4)):
            with self.subTest(shape=name):
                self.check(bundle(8, B=B, H=H, T=T, attn_mask=m), H, causal=True)
        # Axes of size 1 broadcast, as in PyTorch: (B, 1, Tq, Tk) and (1, H, Tq, Tk).
        for name, m in (("B,1", m4[:, :1]), ("1,H", m4[:1])):
            with self.subTest(shape=name):
                full = bundle(8, B=B, H=H, T=T, attn_mask=np.broadcast_to(m, (B, H, T, T)).copy())
                self.check(bundle(8, B=B, H=H, T=T, attn_mask=m), H, reference=full, causal=True)

    def test_boolean_attn_mask(self):
        rng = np.random.default_rng(9)
        allow = rng.random((2, 6, 6)) > 0.3
        w1 = self.check(bundle(9, T=6, attn_mask=allow), 4, attn_mask_means="allow")
        w2 = self.check(bundle(9, T=6, attn_mask=~allow), 4, attn_mask_means="block")
        w3 = self.check(bundle(9, T=6, attn_mask=allow.astype(np.int64)), 4, attn_mask_means="allow")
        for w in (w2, w3):
            np.testing.assert_array_equal(w["weights"], w1["weights"])

    def test_boolean_attn_mask_that_differs_by_head(self):
        # The mask stage has no head axis: a per-head boolean mask is applied as the additive
        # 0/-inf bias it equals, so every stage equals the reference's run on that float mask.
        rng = np.random.default_rng(19)
        for shape in ((4, 6, 6), (2, 4, 6, 6), (1, 4, 6, 6)):
            with self.subTest(shape=shape):
                allow = rng.random(shape) > 0.4
                as_float = np.broadcast_to(np.where(allow, 0.0, -np.inf), (2, 4, 6, 6)).copy()
                for means, m in (("allow", allow), ("block", ~allow)):
                    self.check(bundle(20, T=6, attn_mask=m), 4, attn_mask_means=means, causal=True,
                               reference=bundle(20, T=6, attn_mask=as_float), reference_options={"causal": True})

    def test_sinks(self):
        pad = np.zeros((2, 7), dtype=bool)
        pad[1, :] = True  # batch item 1 sees no key: all its weight goes to the sink
        b = bundle(10, sinks=np.array([0.5, -1.0, 2.0, 0.0]), key_padding_mask=pad)
        want = self.check(b, 4, causal=True)
        self.assertTrue(np.all(want["sink_weight"][1] == 1.0))

    def test_head_output(self):
        want = self.check(bundle(11), 4, stages="head_output,output")
        np.testing.assert_allclose(want["head_output"].sum(axis=2), want["output"], atol=1e-12)
        no_wo = bundle(11)
        del no_wo["W_O"]
        self.check(no_wo, 4, stages="head_output,context,output")

    def test_combinations(self):
        pad = np.zeros((2, 9), dtype=bool)
        pad[0, -2:] = True
        self.check(bundle(12, T=9, H=4, G=2, Dk=4, key_padding_mask=pad), 4, kv_heads=2, rope=True,
                   causal=True, window=3)
        self.check(bundle(13, T=6, key_padding_mask=pad[:, :6]), 4, alibi=True)
        self.check(bundle(14, T=6, H=4, G=1, Dk=4, sinks=np.ones(4), key_padding_mask=pad[:, :6]), 4,
                   kv_heads=1, rope=True, alibi=True, softcap=2.0, causal=True,
                   causal_align="bottom-right", window=2)

    def test_float32(self):
        b = bundle(15, T=9, H=4, G=2, Dk=4, sinks=np.zeros(4))
        self.check(b, 4, dtype="float32", kv_heads=2, rope=True, causal=True, window=4, alibi=True)

    def test_unbatched_input(self):
        self.check(bundle(16, batched=False, H=4, G=2, Dk=4), 4, kv_heads=2, rope=True, causal=True)


class MultiheadAttentionParity(CliTestCase):
    """add_bias_kv and add_zero_attn, checked against torch.nn.MultiheadAttention itself."""

    def test_against_torch(self):
        import torch
        rng = np.random.default_rng(20)
        B, T, E, H = 2, 5, 8, 2
        pad = np.zeros((B, T), dtype=bool)
        pad[1, -2:] = True
        causal_block = np.triu(np.ones((T, T), dtype=bool), 1)  # nn.MultiheadAttention: True = blocked
        for bias_kv, zero, mask in ((True, False, None), (False, True, "bool"), (True, True, "float")):
            with self.subTest(bias_kv=bias_kv, zero=zero, mask=mask):
                torch.manual_seed(0)
                mha = torch.nn.MultiheadAttention(E, H, add_bias_kv=bias_kv, add_zero_attn=zero,
                                                  batch_first=True, dtype=torch.float64)
                with torch.no_grad():
                    for p in mha.parameters():
                        p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) / 2))
                sd = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
                x = rng.standard_normal((B, T, E))
                b = {"x": x, **sd, "key_padding_mask": pad}
                args = ["--layout", "torch"] + (["--add-zero-attn"] if zero else [])
                attn_mask = None
                if mask == "bool":
                    b["attn_mask"] = causal_block
                    args += ["--attn-mask-means", "block"]
                    attn_mask = torch.from_numpy(causal_block)
                elif mask == "float":
                    fm = rng.standard_normal((T, T))
                    b["attn_mask"] = fm
                    attn_mask = torch.from_numpy(fm)
                src = self.save_npz("mha.npz", **b)
                out = self.path("out.npz")
                self.assert_ok(run_text("run", src, "--heads", str(H), *args, "--dump", out, "-q", "--force"))
                o, w = mha(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(pad),
                           attn_mask=attn_mask, average_attn_weights=False)
                with np.load(out) as z:
                    self.assertEqual(z["weights"].shape, (B, H, T, T + bias_kv + zero))
                    np.testing.assert_allclose(z["weights"], w.detach().numpy(), atol=1e-13)
                    np.testing.assert_allclose(z["output"], o.detach().numpy(), atol=1e-13)
                want = mref.attention(dict(np.load(src)), H, layout="torch", add_zero_attn=zero,
                                      **({"attn_mask_means": "block"} if mask == "bool" else {}))
                with np.load(out) as z:
                    self.assertEqual(sorted(z.files), sorted(n for n in want if n != "head_output"))
                    for n in z.files:
                        if want[n].dtype == bool:
                            np.testing.assert_array_equal(z[n], want[n], err_msg=n)
                        else:
                            fin = np.isfinite(want[n])
                            np.testing.assert_allclose(z[n][fin], want[n][fin], atol=1e-12, err_msg=n)

    def test_merged_batch_and_head_mask(self):
        # nn.MultiheadAttention's own 3-D attn_mask (B·H, Tq, Tk), row b·H + h, float and bool:
        # a different mask for every head of every item (issue 21: it was refused).
        import torch
        rng = np.random.default_rng(22)
        B, T, S, E, H = 3, 4, 6, 8, 2
        torch.manual_seed(0)
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            for p in mha.parameters():
                p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) / 2))
        sd = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
        x, mem = rng.standard_normal((B, T, E)), rng.standard_normal((B, S, E))
        blocked = rng.random((B * H, T, S)) < 0.4
        blocked[:, :, 0] = False  # every row sees a key: PyTorch gives NaN rows otherwise
        masks = {"float": (rng.standard_normal((B * H, T, S)), []),
                 "bool": (blocked, ["--attn-mask-means", "block"])}
        for kind, (m, args) in masks.items():
            with self.subTest(kind=kind):
                src = self.save_npz("mha.npz", x=x, memory=mem, attn_mask=m, **sd)
                out = self.path("out.npz")
                self.assert_ok(run_text("run", src, "--heads", str(H), "--layout", "torch", *args, "--dump", out,
                                        "-q", "--force"))
                o, w = mha(torch.from_numpy(x), torch.from_numpy(mem), torch.from_numpy(mem),
                           attn_mask=torch.from_numpy(m), average_attn_weights=False)
                with np.load(out) as z:
                    self.assertEqual(z["weights"].shape, (B, H, T, S))
                    for b in range(B):
                        for h in range(H):
                            common.assert_close(z["weights"][b, h], w.detach().numpy()[b, h], 1e-13,
                                                f"{kind} mask: weights of item {b}, head {h}", "torch module")
                    common.assert_close(z["output"], o.detach().numpy(), 1e-13, f"{kind} mask: output",
                                        "torch module")

    def test_one_padding_row_for_a_batch_is_refused(self):
        # PyTorch refuses a (Tk,) key_padding_mask with a 3-D query; so does attnscope (issue
        # 21: it was spread over the batch). With a 2-D x it is the form both take.
        import torch
        B, T, E, H = 2, 7, 12, 4
        b = bundle(23, B=B, T=T, Dm=E, H=H, key_padding_mask=np.arange(T) >= 5)
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        x = torch.from_numpy(b["x"])
        with self.assertRaisesRegex(AssertionError, "expected `key_padding_mask` to be `None` or 2-D"):
            mha(x, x, x, key_padding_mask=torch.from_numpy(b["key_padding_mask"]))
        self.assert_error(run_text("run", self.save_npz("b.npz", **b), "--heads", str(H), "-q"),
                          "key_padding_mask", "expected (B, Tk) = (2, 7)", "found shape (7,)")
        b["x"] = b["x"][0]
        self.assert_ok(run_text("run", self.save_npz("b.npz", **b), "--heads", str(H), "-q"))

    def test_appended_keys_are_labelled_and_refused_with_rope(self):
        b = bundle(21, H=2, Dk=4, bias_k=np.ones(8), bias_v=np.ones(4), key_tokens=list("abcdefg"))
        del b["key_tokens"]
        src = self.save_json("b.json", {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in b.items()}
                             | {"query_tokens": list("abcdefg")})
        r = run_text("run", src, "--heads", "2", "--add-zero-attn", "--stages", "weights", "--batch", "0",
                     "--head", "0", "--full")
        self.assert_ok(r)
        self.assertIn("<bias_kv>", r.out)
        self.assertIn("<zero>", r.out)
        self.assert_error(run_text("run", src, "--heads", "2", "--rope", "-q"), "--rope", "add_bias_kv")


class Refusals(CliTestCase):
    """What does not fit is refused in one line that says what was expected."""

    def run_bad(self, b, *args):
        return run_text("run", self.save_npz("b.npz", **b), *args, "-q")

    def test_kv_heads(self):
        self.assert_error(self.run_bad(bundle(1, H=4, G=2), "--heads", "4"),
                          "W_K", "pass --kv-heads 2")
        self.assert_error(self.run_bad(bundle(1, H=4, G=2), "--heads", "4", "--kv-heads", "3"),
                          "--kv-heads 3", "does not divide --heads 4")
        self.assert_error(self.run_bad(bundle(1, H=4, G=2), "--heads", "4", "--kv-heads", "1"),
                          "W_K", "expected G*Dk = 1*3 = 3 columns")

    def test_rope(self):
        self.assert_error(self.run_bad(bundle(1, H=4), "--heads", "4", "--rope"), "--rope", "odd")
        self.assert_error(self.run_bad(bundle(1, H=2, Dk=4), "--heads", "2", "--rope", "--rope-dim", "6"),
                          "--rope-dim 6", "more than the 4 features")
        self.assert_error(self.run_bad(bundle(1), "--heads", "4", "--rope-base", "100"),
                          "--rope-base", "without --rope")

    def test_attn_masks(self):
        m = np.zeros((2, 7, 7))
        self.assert_error(self.run_bad(bundle(1, H=2, Dk=6, attn_mask=m), "--heads", "2"),
                          "attn_mask", "ambiguous", "give it 4-D")
        self.assert_error(self.run_bad(bundle(1, attn_mask=np.ones((7, 7), dtype=bool)), "--heads", "4"),
                          "attn_mask", "--attn-mask-means allow", "--attn-mask-means block")
        self.assert_error(self.run_bad(bundle(1, attn_mask=np.ones((2, 3, 7, 7), dtype=bool)), "--heads", "4",
                                       "--attn-mask-means", "allow"),
                          "attn_mask", "expected a head axis of 1 or H = 4, found shape (2, 3, 7, 7)")
        self.assert_error(self.run_bad(bundle(1, attn_mask=np.zeros((4, 7, 7))), "--heads", "4",
                                       "--attn-mask-means", "allow"),
                          "attn_mask", "a float mask (float64) is added to the scores as it is")
        self.assert_error(self.run_bad(bundle(1, attn_mask=np.ones((3, 7))), "--heads", "4"),
                          "attn_mask", "expected (Tq, Tk) = (7, 7)")

    def test_stage_of_a_variant_not_used(self):
        self.assert_error(self.run_bad(bundle(1), "--heads", "4", "--stages", "Q_rot"),
                          "--stages", "no stage Q_rot", "--rope")
        self.assert_error(self.run_bad(bundle(1), "--heads", "4", "--stages", "sink_weight"),
                          "sinks")

    def test_slopes_and_positions_need_their_option(self):
        self.assert_error(self.run_bad(bundle(1, alibi_slopes=np.ones(4)), "--heads", "4"),
                          "alibi_slopes", "without --alibi")
        self.assert_error(self.run_bad(bundle(1, q_positions=np.arange(7)), "--heads", "4"),
                          "q_positions", "none of them is given")


class Views(CliTestCase):
    """The new stages in the printed report and the JSON document."""

    def test_text_names_kv_sharing(self):
        src = self.save_npz("b.npz", **bundle(1, H=4, G=2))
        r = run_text("run", src, "--heads", "4", "--kv-heads", "2", "--stages", "K", "--batch", "0")
        self.assert_ok(r)
        self.assertIn("K/V head 0 (query heads 0-1)", r.out)
        self.assertIn("K/V head 1 (query heads 2-3)", r.out)
        self.assertIn("(B, G, Tk, Dk) = (2, 2, 7, 3)", r.out)

    def test_json_has_the_variant_stages(self):
        src = self.save_npz("b.npz", **bundle(1, H=4, Dk=4, sinks=np.zeros(4)))
        r = run_text("run", src, "--heads", "4", "--rope", "--alibi", "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertEqual(list(doc["stages"]), ["Q", "K", "V", "Q_rot", "K_rot", "scores", "bias", "mask",
                                               "masked_scores", "weights", "sink_weight", "context", "output"])


if __name__ == "__main__":
    common.main("test_modern")
