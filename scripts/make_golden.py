#!/usr/bin/python3
"""Write the golden test data under tests/golden/.

For every case this writes tests/golden/NAME.npz holding
    * the input bundle arrays (x, memory, W_Q ..., key_padding_mask, tokens),
      in the case's dtype and layout, and
    * the expected stages under expected/Q, expected/K, ..., expected/output,
      computed by scripts/attn_reference.py in float64 from the stored inputs
      (for float32 cases: from the float32 values).  expected/mask is bool.
and tests/golden/cases.json, the list of cases with the options to run them:
    {"name", "description", "heads", "causal", "causal_align", "scale",
     "dtype", "layout", "tolerance"}

Every case that fits nn.MultiheadAttention is also run through PyTorch, and
the reference must agree with it within 1e-10 (weights and output) on every
query row that has at least one visible key.  Rows with no visible key are
all zeros in the reference and NaN in PyTorch 1.13, so they are left out.

Reproducible: every case has its own fixed seed, and np.savez writes fixed
zip timestamps, so running the script twice gives byte-identical files.

    /usr/bin/python3 scripts/make_golden.py
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_reference as ref  # noqa: E402
import modern_reference as mref  # noqa: E402  (the modern variants' reference)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "golden")

TOLERANCE = {"float64": 1e-10, "float32": 2e-5}
TORCH_TOLERANCE = 1e-10


# --------------------------------------------------------------------------
# Random bundles
# --------------------------------------------------------------------------

def random_bundle(seed, *, B, Tq, Dm, H, Dk, Dv, Tk=None, Dkv=None, Dout=None,
                  bias=False, out_proj=False, out_bias=None):
    """A math-layout bundle with values of order 1.

    B=None gives a 2-D x (no batch axis).  Tk/Dkv given = cross-attention
    (memory present).  Weights ~ N(0, 1/in) so every stage stays of order 1.
    """
    rng = np.random.default_rng(seed)
    cross = Tk is not None
    lead = () if B is None else (B,)
    Dkv = Dm if Dkv is None else Dkv

    b = {"x": rng.standard_normal(lead + (Tq, Dm))}                 # (B, Tq, Dm)
    if cross:
        b["memory"] = rng.standard_normal(lead + (Tk, Dkv))          # (B, Tk, Dkv)
    b["W_Q"] = rng.standard_normal((Dm, H * Dk)) / np.sqrt(Dm)
    b["W_K"] = rng.standard_normal((Dkv, H * Dk)) / np.sqrt(Dkv)
    b["W_V"] = rng.standard_normal((Dkv, H * Dv)) / np.sqrt(Dkv)
    if bias:
        b["b_Q"] = 0.1 * rng.standard_normal(H * Dk)
        b["b_K"] = 0.1 * rng.standard_normal(H * Dk)
        b["b_V"] = 0.1 * rng.standard_normal(H * Dv)
    if out_proj:
        Dout = H * Dv if Dout is None else Dout
        b["W_O"] = rng.standard_normal((H * Dv, Dout)) / np.sqrt(H * Dv)
        if bias if out_bias is None else out_bias:
            b["b_O"] = 0.1 * rng.standard_normal(Dout)
    return b


def padding(lengths, T, left=False):
    """(B, T) bool key_padding_mask, True = PAD, from the real lengths."""
    pos = np.arange(T)[None, :]
    n = np.asarray(lengths)[:, None]
    return pos < T - n if left else pos >= n


def to_torch_linear(b):
    """Store W_Q, W_K, W_V, W_O as nn.Linear does: (out, in)."""
    b = dict(b)
    for k in ("W_Q", "W_K", "W_V", "W_O"):
        if k in b:
            b[k] = np.ascontiguousarray(b[k].T)
    return b


def to_mha_state_dict(b):
    """Replace the math-layout weights with nn.MultiheadAttention's state dict.

    Self-attention (kdim = vdim = E) packs the projections into in_proj_weight
    (3E, E); otherwise q/k/v_proj_weight are kept apart, each stored (E, in).
    """
    b = dict(b)
    W_Q, W_K, W_V = b.pop("W_Q"), b.pop("W_K"), b.pop("W_V")
    E = W_Q.shape[1]
    if W_K.shape[0] == E and W_V.shape[0] == E:
        b["in_proj_weight"] = np.concatenate([W_Q.T, W_K.T, W_V.T])   # (3E, E)
    else:
        b["q_proj_weight"] = np.ascontiguousarray(W_Q.T)              # (E, E)
        b["k_proj_weight"] = np.ascontiguousarray(W_K.T)              # (E, kdim)
        b["v_proj_weight"] = np.ascontiguousarray(W_V.T)              # (E, vdim)
    zeros = np.zeros(E)
    b["in_proj_bias"] = np.concatenate([b.pop("b_Q", zeros), b.pop("b_K", zeros),
                                        b.pop("b_V", zeros)])         # (3E,)
    b["out_proj.weight"] = np.ascontiguousarray(b.pop("W_O").T)       # (E, E)
    b["out_proj.bias"] = b.pop("b_O", zeros)                          # (E,)
    return b


def with_tokens(b, query_tokens, key_tokens=None):
    """Attach token labels as numpy unicode arrays."""
    b = dict(b)
    b["query_tokens"] = np.array(query_tokens)
    b["key_tokens"] = np.array(query_tokens if key_tokens is None else key_tokens)
    return b


# --------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------

def case(name, description, bundle, heads, causal=False, causal_align="top-left",
         scale=None, dtype="float64", layout="math", modern=None):
    """`modern`: options of the modern variants (modern_reference.attention's
    keywords: kv_heads, rope, rope_base, rope_dim, rope_style, alibi, window,
    softcap, attn_mask_means, add_zero_attn); such a case's expected stages come
    from scripts/modern_reference.py and include the variants' own stages."""
    return {"name": name, "description": description, "bundle": bundle,
            "heads": heads, "causal": causal, "causal_align": causal_align,
            "scale": scale, "dtype": dtype, "layout": layout, "modern": modern or {}}


def gqa_bundle(seed, *, B, T, Dm, H, G, Dk, Dv, out_proj=True):
    """A self-attention bundle with G K/V heads: W_K (Dm, G*Dk), W_V (Dm, G*Dv)."""
    rng = np.random.default_rng(seed)
    b = {"x": rng.standard_normal((B, T, Dm)),
         "W_Q": rng.standard_normal((Dm, H * Dk)) / np.sqrt(Dm),
         "W_K": rng.standard_normal((Dm, G * Dk)) / np.sqrt(Dm),
         "W_V": rng.standard_normal((Dm, G * Dv)) / np.sqrt(Dm),
         "b_K": 0.1 * rng.standard_normal(G * Dk)}
    if out_proj:
        b["W_O"] = rng.standard_normal((H * Dv, Dm)) / np.sqrt(H * Dv)
    return b


def modern_cases():
    """The modern variants, alone and combined (docs/modern-attention.md)."""
    cases = []
    rng = np.random.default_rng(400)
    b = gqa_bundle(401, B=2, T=9, Dm=16, H=4, G=2, Dk=4, Dv=3)
    b["key_padding_mask"] = padding([9, 6], 9)
    for dtype in ("float64", "float32"):
        cases.append(case(
            f"modern_gqa_rope_window_padding_{dtype}",
            "grouped-query (4 query heads, 2 K/V heads) + RoPE + causal + window 3 + "
            f"key padding, {dtype}",
            b, heads=4, causal=True, dtype=dtype,
            modern={"kv_heads": 2, "rope": True, "window": 3}))
    cases.append(case(
        "modern_mqa_rope_interleaved_partial",
        "multi-query (G = 1), RoPE interleaved on the first 4 of 6 features, base 500, "
        "bottom-right alignment, Tq = Tk",
        gqa_bundle(402, B=1, T=7, Dm=12, H=3, G=1, Dk=6, Dv=2), heads=3, causal=True,
        causal_align="bottom-right",
        modern={"kv_heads": 1, "rope": True, "rope_style": "interleaved", "rope_dim": 4,
                "rope_base": 500.0}))
    b = gqa_bundle(403, B=2, T=6, Dm=12, H=6, G=6, Dk=2, Dv=2)
    b["key_padding_mask"] = padding([6, 3], 6)
    cases.append(case(
        "modern_alibi_padding",
        "ALiBi with 6 heads (not a power of two: the paper's slopes), key padding, "
        "not causal", b, heads=6, modern={"alibi": True}))
    b = gqa_bundle(404, B=2, T=5, Dm=8, H=2, G=2, Dk=4, Dv=4)
    b["key_padding_mask"] = padding([5, 0], 5)
    b["sinks"] = np.array([0.3, -1.2])
    cases.append(case(
        "modern_sinks_fully_masked",
        "attention sinks; batch item 1 has every key PAD, so its rows give all their "
        "weight to the sink", b, heads=2, causal=True))
    m = rng.standard_normal((2, 4, 5, 5))
    m[0, 1, 3, :2] = -np.inf
    m[1, :, 4, :] = -np.inf
    b = gqa_bundle(405, B=2, T=5, Dm=8, H=4, G=4, Dk=2, Dv=2)
    b["attn_mask"] = m
    cases.append(case(
        "modern_float_attn_mask_softcap",
        "a float attn_mask (B, H, Tq, Tk) with -inf entries (one row hidden entirely), "
        "soft-capping 1.5", b, heads=4, modern={"softcap": 1.5}))
    b = gqa_bundle(406, B=2, T=5, Dm=8, H=4, G=4, Dk=2, Dv=2)
    b["attn_mask"] = rng.random((2, 5, 5)) > 0.4
    cases.append(case(
        "modern_bool_attn_mask_block",
        "a boolean attn_mask (B, Tq, Tk) in nn.MultiheadAttention's polarity "
        "(true = blocked)", b, heads=4, modern={"attn_mask_means": "block"}))
    b = random_bundle(407, B=2, Tq=5, Dm=8, H=2, Dk=4, Dv=4, bias=True, out_proj=True)
    b["key_padding_mask"] = padding([5, 3], 5)
    b = to_mha_state_dict(b)
    b["bias_k"] = rng.standard_normal((1, 1, 8))
    b["bias_v"] = rng.standard_normal((1, 1, 8))
    cases.append(case(
        "modern_mha_bias_kv_zero_attn",
        "nn.MultiheadAttention with add_bias_kv and add_zero_attn: two keys appended "
        "(<bias_kv>, <zero>), always visible, also under causal", b, heads=2, causal=True,
        layout="torch", modern={"add_zero_attn": True}))
    return cases


def build_cases():
    cases = []

    cases.append(case(
        "self_1head_unbatched",
        "self-attention, 1 head, 2-D x (no batch axis), no biases, no W_O",
        random_bundle(101, B=None, Tq=5, Dm=4, H=1, Dk=4, Dv=4),
        heads=1))

    cases.append(case(
        "self_2head_bias_wo",
        "self-attention, 2 heads, batched, all biases, W_O with b_O",
        random_bundle(102, B=2, Tq=5, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True),
        heads=2))

    cases.append(case(
        "self_4head_dk_ne_dv",
        "self-attention, 4 heads, Dk=2 != Dv=3, H*Dk=8 != Dm=6, W_O (12, 5) "
        "with b_O, no Q/K/V biases",
        random_bundle(103, B=2, Tq=6, Dm=6, H=4, Dk=2, Dv=3, Dout=5,
                      out_proj=True, out_bias=True),
        heads=4))

    cases.append(case(
        "self_4head_no_wo",
        "self-attention, 4 heads of width 2, Q/K/V biases, no W_O "
        "(output = heads concatenated)",
        random_bundle(104, B=2, Tq=4, Dm=8, H=4, Dk=2, Dv=2, bias=True),
        heads=4))

    cases.append(case(
        "cross_2head",
        "cross-attention, Tq=4 queries over Tk=7 memory keys, Dkv=6 != Dm=8, "
        "2 heads, biases, W_O",
        random_bundle(105, B=2, Tq=4, Tk=7, Dm=8, Dkv=6, H=2, Dk=4, Dv=4,
                      bias=True, out_proj=True),
        heads=2))

    b = random_bundle(106, B=3, Tq=6, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True)
    b["key_padding_mask"] = padding([6, 4, 2], 6)
    toks = [["the", "cat", "sat", "on", "the", "mat"],
            ["dogs", "bark", "at", "night", "<pad>", "<pad>"],
            ["hello", "world", "<pad>", "<pad>", "<pad>", "<pad>"]]
    cases.append(case(
        "self_padding",
        "self-attention, batch of 3 right-padded to 6 (lengths 6, 4, 2), "
        "bool key_padding_mask (B, Tk), per-item token lists",
        with_tokens(b, toks), heads=2))

    b = random_bundle(107, B=2, Tq=3, Tk=5, Dm=8, Dkv=8, H=2, Dk=4, Dv=4,
                      out_proj=True)
    b["key_padding_mask"] = padding([3, 0], 5)
    cases.append(case(
        "cross_padding_empty_memory",
        "cross-attention, batch item 1 has every memory key PAD: all its "
        "query rows are fully masked and get all-zero weights",
        b, heads=2))

    b = random_bundle(108, B=2, Tq=6, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True)
    toks = ["<s>", "I", "like", "green", "tea", "."]
    cases.append(case(
        "causal_self",
        "decoder self-attention, causal top-left (key j visible when j <= i), "
        "2 heads, biases, W_O",
        with_tokens(b, [toks, toks]), heads=2, causal=True))

    b = random_bundle(109, B=2, Tq=5, Dm=8, H=2, Dk=4, Dv=4, out_proj=True)
    b["key_padding_mask"] = padding([5, 3], 5, left=True).astype(np.int64)
    cases.append(case(
        "causal_left_padding",
        "causal self-attention with LEFT padding, key_padding_mask stored as "
        "int64 0/1: item 1's first two queries see only PAD keys (fully masked "
        "rows)",
        b, heads=2, causal=True))

    cases.append(case(
        "cross_causal_top_left",
        "cross-attention with causal top-left, Tq=6 > Tk=4 (rows 3..5 see all "
        "keys), Dkv=5",
        random_bundle(110, B=2, Tq=6, Tk=4, Dm=8, Dkv=5, H=2, Dk=4, Dv=4,
                      bias=True, out_proj=True),
        heads=2, causal=True))

    b = random_bundle(111, B=None, Tq=3, Tk=7, Dm=8, Dkv=8, H=2, Dk=4, Dv=4,
                      bias=True, out_proj=True)
    cases.append(case(
        "cross_causal_bottom_right_unbatched",
        "KV-cache view: causal bottom-right, Tq=3 < Tk=7 (query i sees keys "
        "j <= i + 4), 2-D x and memory, token labels",
        with_tokens(b, ["tea", "is", "hot"],
                    ["<s>", "I", "like", "green", "tea", ".", "tea"]),
        heads=2, causal=True, causal_align="bottom-right"))

    cases.append(case(
        "cross_causal_bottom_right_empty_rows",
        "causal bottom-right with Tq=6 > Tk=4: query i sees keys j <= i - 2, "
        "so rows 0 and 1 have no visible key (all-zero weights)",
        random_bundle(112, B=2, Tq=6, Tk=4, Dm=8, Dkv=6, H=2, Dk=4, Dv=4,
                      out_proj=True),
        heads=2, causal=True, causal_align="bottom-right"))

    cases.append(case(
        "custom_scale",
        "self-attention with --scale 0.25 instead of 1/sqrt(Dk)=0.5, 2 heads, "
        "biases, W_O",
        random_bundle(113, B=2, Tq=5, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True),
        heads=2, scale=0.25))

    b = random_bundle(114, B=2, Tq=6, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True)
    b["key_padding_mask"] = padding([6, 5], 6)
    cases.append(case(
        "float32_self_padding",
        "float32 inputs (run with --dtype float32), self-attention, 2 heads, "
        "biases, W_O, key padding",
        b, heads=2, dtype="float32"))

    cases.append(case(
        "float32_cross_causal_unbatched",
        "float32 inputs, unbatched cross-attention, causal top-left, Tq=5 > "
        "Tk=3, 4 heads, no W_O",
        random_bundle(115, B=None, Tq=5, Tk=3, Dm=8, Dkv=6, H=4, Dk=2, Dv=2,
                      bias=True),
        heads=4, causal=True, dtype="float32"))

    cases.append(case(
        "torch_linear_layout",
        "PyTorch layout: W_Q (6, 5), W_K (6, 5), W_V (8, 5), W_O (7, 8) stored "
        "(out, in) like nn.Linear; biases; 2 heads, Dk=3, Dv=4",
        to_torch_linear(random_bundle(116, B=2, Tq=5, Dm=5, H=2, Dk=3, Dv=4,
                                      Dout=7, bias=True, out_proj=True)),
        heads=2, layout="torch"))

    b = random_bundle(117, B=2, Tq=6, Dm=8, H=2, Dk=4, Dv=4, bias=True,
                      out_proj=True)
    b["key_padding_mask"] = padding([6, 4], 6)
    cases.append(case(
        "mha_in_proj",
        "nn.MultiheadAttention state dict (in_proj_weight (24, 8), in_proj_bias, "
        "out_proj.weight, out_proj.bias), self-attention, causal, key padding",
        to_mha_state_dict(b), heads=2, causal=True, layout="torch"))

    b = random_bundle(118, B=None, Tq=4, Tk=6, Dm=8, Dkv=6, H=4, Dk=2, Dv=2,
                      bias=True, out_proj=True)
    b["key_padding_mask"] = np.array([False, False, False, False, True, True])
    cases.append(case(
        "mha_separate_qkv",
        "nn.MultiheadAttention state dict with q_proj_weight (8, 8), "
        "k_proj_weight and v_proj_weight (8, 6) (kdim = vdim = 6 != E = 8), "
        "unbatched cross-attention, key_padding_mask (Tk,), 4 heads",
        to_mha_state_dict(b), heads=4, layout="torch"))

    return cases + modern_cases()


# --------------------------------------------------------------------------
# Writing and checking
# --------------------------------------------------------------------------

def cast_inputs(bundle, dtype):
    """Numeric float arrays to the case dtype; masks and tokens unchanged."""
    out = {}
    for k, v in bundle.items():
        v = np.asarray(v)
        out[k] = v.astype(dtype) if v.dtype.kind == "f" else v
    return out


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = build_cases()
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"

    index = []
    print(f"{'case':40s} {'torch max|dweights|':>20s} {'max|doutput|':>13s}  note")
    for c in cases:
        inputs = cast_inputs(c["bundle"], c["dtype"])
        opts = dict(heads=c["heads"], causal=c["causal"],
                    causal_align=c["causal_align"], scale=c["scale"],
                    layout=c["layout"])
        modern = c["modern"] or any(k in inputs for k in ("sinks", "attn_mask", "bias_k"))

        def reference(bundle):
            if not modern:
                return ref.attention(bundle, **opts)
            stages = mref.attention({k: v for k, v in bundle.items() if not k.startswith("expected/")},
                                    **opts, **c["modern"])
            stages.pop("head_output")  # computed only when asked for
            return stages
        expected = reference(inputs)

        arrays = dict(inputs)
        for stage in expected:
            arrays["expected/" + stage] = expected[stage]
        path = os.path.join(OUT_DIR, c["name"] + ".npz")
        np.savez(path, **arrays)

        # Round trip: the stored inputs give back the stored expectations.
        loaded = ref.load_bundle(path)
        again = reference(loaded)
        for stage in expected:
            stored = loaded["expected/" + stage]
            assert stored.dtype == (bool if stage == "mask" else np.float64)
            assert np.array_equal(stored, again[stage]), (c["name"], stage)

        # Cross-check against PyTorch where the case fits one MHA module.
        if not modern and ref.mha_fits(inputs, c["heads"], c["layout"]):
            dw, do, empty = ref.compare_with_torch(inputs, ref=expected, **opts)
            note = f"{empty} fully masked rows excluded" if empty else ""
            print(f"{c['name']:40s} {dw:20.3g} {do:13.3g}  {note}")
            assert dw <= TORCH_TOLERANCE and do <= TORCH_TOLERANCE, \
                f"{c['name']}: reference disagrees with torch"
        else:
            print(f"{c['name']:40s} {'-':>20s} {'-':>13s}  "
                  + ("modern_reference.py (checked against torch in its own tests)" if modern
                     else "not an MHA shape"))

        index.append({"name": c["name"], "description": c["description"],
                      "heads": c["heads"], "causal": c["causal"],
                      "causal_align": c["causal_align"], "scale": c["scale"],
                      "dtype": c["dtype"], "layout": c["layout"], "modern": c["modern"],
                      "tolerance": TOLERANCE[c["dtype"]]})

    with open(os.path.join(OUT_DIR, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
        f.write("\n")

    total = sum(os.path.getsize(os.path.join(OUT_DIR, n))
                for n in os.listdir(OUT_DIR))
    print(f"wrote {len(index)} cases to {OUT_DIR} ({total / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
