#!/usr/bin/python3
"""Independent float64 reference for the attnscope attention pipeline.

This module recomputes, with plain numpy in float64, every stage that attnscope
shows (see docs/design.md, "Shapes" and "The stage table", for the shape legend and the
stage names):

    Q, K, V, scores, mask, masked_scores, weights, context, output

It is used to write the golden files under tests/golden/ and to cross-check the
classroom examples under data/.  It also runs torch.nn.MultiheadAttention on the
same inputs (torch_mha) so that the reference itself is checked against PyTorch.

Shape legend (outermost first):
    B batch, Tq query positions, Tk key/value positions, Dm query-source width,
    Dkv key/value-source (memory) width, H heads, Dk per-head query/key width,
    Dv per-head value width, Dout output width.

Conventions (same as attnscope):
    * Weights are in the math layout (in, out): Q = x . W_Q.  With layout="torch"
      they are read as PyTorch stores them, (out, in), either as W_Q/W_K/W_V/W_O
      (nn.Linear style) or as an nn.MultiheadAttention state dict.
    * key_padding_mask follows PyTorch: 1/True = PAD = ignored.  The `mask`
      stage is the opposite, friendlier matrix: True where query i MAY attend
      key j.
    * Causal masks are top-left aligned by default (key j visible to query i
      when j <= i, like torch.tril); "bottom-right" places query i at position
      i + Tk - Tq (the KV-cache view).
    * Softmax subtracts the row maximum; a row whose keys are all masked gives
      all-zero weights, never NaN.
    * A 2-D x (no batch axis) gives every stage without the batch axis.

Usage as a script (prints the stages of a bundle):
    /usr/bin/python3 scripts/attn_reference.py data/sentence.json --heads 2
"""

import argparse
import json
import math
import sys

import numpy as np

STAGES = ("Q", "K", "V", "scores", "mask", "masked_scores",
          "weights", "context", "output")

TOKEN_KEYS = ("query_tokens", "key_tokens")

# Keys of an nn.MultiheadAttention state dict that this reference understands.
MHA_KEYS = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
            "v_proj_weight", "out_proj.weight", "out_proj.bias")


# --------------------------------------------------------------------------
# Loading bundles
# --------------------------------------------------------------------------

def _json_number(value):
    """Map one JSON leaf to a Python number; non-finite values may be strings."""
    if isinstance(value, str):
        special = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf,
                   "-inf": -math.inf, "-infinity": -math.inf, "nan": math.nan}
        key = value.strip().lower()
        if key not in special:
            raise ValueError(f"not a number: {value!r}")
        return special[key]
    return value


def _json_leaves(value):
    """Yield every leaf of a nested list."""
    if isinstance(value, list):
        for item in value:
            yield from _json_leaves(item)
    else:
        yield value


def _json_array(name, value):
    """Turn one JSON value (nested lists) into a numpy array."""
    if name in TOKEN_KEYS:
        return np.array(value, dtype=str)
    leaves = list(_json_leaves(value))
    if leaves and all(isinstance(v, bool) for v in leaves):
        return np.array(value, dtype=bool)

    def convert(v):
        if isinstance(v, list):
            return [convert(item) for item in v]
        return _json_number(v)

    return np.array(convert(value), dtype=np.float64)


def load_bundle(path):
    """Read a bundle (.npz or .json object of named arrays) into a dict of arrays.

    Numeric arrays keep their stored dtype for .npz (float32 stays float32);
    JSON numbers become float64, JSON booleans become bool, token lists become
    numpy unicode arrays.
    """
    if str(path).endswith(".npz"):
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    if str(path).endswith(".json"):
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: expected a JSON object of named arrays")
        return {name: _json_array(name, value) for name, value in obj.items()}
    raise ValueError(f"{path}: unknown bundle extension (expected .npz or .json)")


# --------------------------------------------------------------------------
# Weights: layout conversion
# --------------------------------------------------------------------------

def math_weights(bundle, layout="math"):
    """Return the projection weights in math layout (in, out) as float64.

    Result keys: W_Q, W_K, W_V and, when present, W_O, b_Q, b_K, b_V, b_O.
    """
    f64 = lambda a: np.asarray(a, dtype=np.float64)
    has_mha = any(k in bundle for k in MHA_KEYS)

    if layout == "math":
        if has_mha:
            raise ValueError("bundle holds an nn.MultiheadAttention state dict; "
                             "use layout='torch'")
        w = {k: f64(bundle[k]) for k in ("W_Q", "W_K", "W_V")}
        for k in ("W_O", "b_Q", "b_K", "b_V", "b_O"):
            if k in bundle:
                w[k] = f64(bundle[k])
        return w

    if layout != "torch":
        raise ValueError(f"unknown layout {layout!r} (expected 'math' or 'torch')")

    if not has_mha:
        # nn.Linear style: W_* stored (out, in); biases are the same either way.
        w = {k: f64(bundle[k]).T for k in ("W_Q", "W_K", "W_V")}
        if "W_O" in bundle:
            w["W_O"] = f64(bundle["W_O"]).T
        for k in ("b_Q", "b_K", "b_V", "b_O"):
            if k in bundle:
                w[k] = f64(bundle[k])
        return w

    # nn.MultiheadAttention state dict.
    if any(k in bundle for k in ("W_Q", "W_K", "W_V", "W_O")):
        raise ValueError("bundle mixes W_Q/W_K/W_V/W_O with an MHA state dict")
    w = {}
    if "in_proj_weight" in bundle:
        # (3E, E): rows [0:E] project queries, [E:2E] keys, [2E:3E] values.
        ipw = f64(bundle["in_proj_weight"])
        E = ipw.shape[0] // 3
        if ipw.shape != (3 * E, E):
            raise ValueError(f"in_proj_weight: expected (3E, E), got {ipw.shape}")
        w["W_Q"], w["W_K"], w["W_V"] = ipw[:E].T, ipw[E:2 * E].T, ipw[2 * E:].T
    else:
        # Separate projections when kdim/vdim differ from E: each (E, in).
        for k, name in (("W_Q", "q_proj_weight"), ("W_K", "k_proj_weight"),
                        ("W_V", "v_proj_weight")):
            w[k] = f64(bundle[name]).T
    if "in_proj_bias" in bundle:
        ipb = f64(bundle["in_proj_bias"])  # (3E,)
        E = ipb.shape[0] // 3
        w["b_Q"], w["b_K"], w["b_V"] = ipb[:E], ipb[E:2 * E], ipb[2 * E:]
    if "out_proj.weight" in bundle:
        w["W_O"] = f64(bundle["out_proj.weight"]).T  # (E, E) stored (out, in)
    if "out_proj.bias" in bundle:
        w["b_O"] = f64(bundle["out_proj.bias"])
    return w


# --------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------

def causal_mask(Tq, Tk, align="top-left"):
    """(Tq, Tk) bool, True where query i may see key j under the causal rule."""
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    if align == "top-left":
        return j <= i                      # like torch.tril(ones(Tq, Tk))
    if align == "bottom-right":
        return j <= i + (Tk - Tq)          # query i sits at position i + Tk - Tq
    raise ValueError(f"unknown causal_align {align!r}")


def build_mask(B, Tq, Tk, key_padding_mask=None, causal=False,
               causal_align="top-left"):
    """(B, Tq, Tk) bool: True where query i may attend key j."""
    mask = np.ones((B, Tq, Tk), dtype=bool)
    if key_padding_mask is not None:
        pad = np.asarray(key_padding_mask).astype(bool)  # True = PAD
        if pad.ndim == 1:
            pad = np.broadcast_to(pad, (B, pad.shape[0]))
        if pad.shape != (B, Tk):
            raise ValueError(f"key_padding_mask: expected (B, Tk) = {(B, Tk)} "
                             f"or (Tk,), got {pad.shape}")
        mask &= ~pad[:, None, :]           # a PAD key is hidden from every query
    if causal:
        mask &= causal_mask(Tq, Tk, causal_align)[None, :, :]
    return mask


# --------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------

def split_heads(t, H):
    """(B, T, H*D) -> (B, H, T, D); feature h*D + j belongs to head h."""
    B, T, HD = t.shape
    return t.reshape(B, T, H, HD // H).transpose(0, 2, 1, 3)


def merge_heads(t):
    """(B, H, T, D) -> (B, T, H*D), heads concatenated in order."""
    B, H, T, D = t.shape
    return t.transpose(0, 2, 1, 3).reshape(B, T, H * D)


def masked_softmax(masked_scores, mask):
    """Softmax over the key axis; rows with no visible key give all zeros.

    masked_scores: (B, H, Tq, Tk) with -inf at hidden keys; mask: (B, 1, Tq, Tk).
    """
    any_visible = mask.any(axis=-1, keepdims=True)                  # (B, 1, Tq, 1)
    row_max = np.where(mask, masked_scores, -np.inf).max(axis=-1, keepdims=True)
    row_max = np.where(any_visible, row_max, 0.0)                   # avoid inf - inf
    e = np.where(mask, np.exp(masked_scores - row_max), 0.0)        # (B, H, Tq, Tk)
    denom = e.sum(axis=-1, keepdims=True)
    return np.where(any_visible, e / np.where(denom > 0, denom, 1.0), 0.0)


def attention(bundle, heads, causal=False, causal_align="top-left", scale=None,
              layout="math"):
    """Run the full pipeline on a bundle; return {stage name: float64 ndarray}.

    bundle: dict of arrays as described in data/README.md (x, optional memory,
    W_Q, W_K, W_V, optional W_O and biases, optional key_padding_mask).
    """
    H = int(heads)
    x = np.asarray(bundle["x"], dtype=np.float64)
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected (Tq, Dm) or (B, Tq, Dm), got {x.shape}")
    unbatched = x.ndim == 2
    if unbatched:
        x = x[None]                                                 # (1, Tq, Dm)
    B, Tq, Dm = x.shape

    cross = "memory" in bundle
    if cross:
        src = np.asarray(bundle["memory"], dtype=np.float64)
        if src.ndim != (2 if unbatched else 3):
            raise ValueError(f"memory: expected (Tk, Dkv) or (B, Tk, Dkv) like x, "
                             f"got {src.shape}")
        if unbatched:
            src = src[None]                                         # (1, Tk, Dkv)
    else:
        src = x
    if src.shape[0] != B:
        raise ValueError(f"memory: batch {src.shape[0]} != x batch {B}")
    _, Tk, Dkv = src.shape

    w = math_weights(bundle, layout)
    W_Q, W_K, W_V = w["W_Q"], w["W_K"], w["W_V"]
    if W_Q.shape[0] != Dm:
        raise ValueError(f"W_Q: expected ({Dm}, H*Dk) (in = Dm), got {W_Q.shape}")
    if W_K.shape[0] != Dkv or W_V.shape[0] != Dkv:
        raise ValueError(f"W_K/W_V: expected ({Dkv}, ...) (in = Dkv), "
                         f"got {W_K.shape} and {W_V.shape}")
    if W_Q.shape[1] != W_K.shape[1]:
        raise ValueError(f"W_Q and W_K must share H*Dk: {W_Q.shape} vs {W_K.shape}")
    if W_Q.shape[1] % H or W_V.shape[1] % H:
        raise ValueError(f"H*Dk={W_Q.shape[1]} and H*Dv={W_V.shape[1]} "
                         f"must be divisible by heads={H}")
    Dk = W_Q.shape[1] // H

    # Projections, then split into heads.
    q = x @ W_Q + w.get("b_Q", 0.0)                                 # (B, Tq, H*Dk)
    k = src @ W_K + w.get("b_K", 0.0)                               # (B, Tk, H*Dk)
    v = src @ W_V + w.get("b_V", 0.0)                               # (B, Tk, H*Dv)
    Q = split_heads(q, H)                                           # (B, H, Tq, Dk)
    K = split_heads(k, H)                                           # (B, H, Tk, Dk)
    V = split_heads(v, H)                                           # (B, H, Tk, Dv)

    # Scaled dot products: one row per query, one column per key.
    s = 1.0 / math.sqrt(Dk) if scale is None else float(scale)
    scores = (Q @ K.transpose(0, 1, 3, 2)) * s                      # (B, H, Tq, Tk)

    # Mask (padding AND causal), then -inf where a key is hidden.
    mask = build_mask(B, Tq, Tk, bundle.get("key_padding_mask"), causal,
                      causal_align)                                 # (B, Tq, Tk)
    mask4 = mask[:, None, :, :]                                     # (B, 1, Tq, Tk)
    masked_scores = np.where(mask4, scores, -np.inf)                # (B, H, Tq, Tk)

    weights = masked_softmax(masked_scores, mask4)                  # (B, H, Tq, Tk)
    context = weights @ V                                           # (B, H, Tq, Dv)

    output = merge_heads(context)                                   # (B, Tq, H*Dv)
    if "W_O" in w:
        if w["W_O"].shape[0] != output.shape[-1]:
            raise ValueError(f"W_O: expected ({output.shape[-1]}, Dout), "
                             f"got {w['W_O'].shape}")
        output = output @ w["W_O"] + w.get("b_O", 0.0)              # (B, Tq, Dout)
    elif "b_O" in w:
        raise ValueError("b_O given without W_O")

    stages = {"Q": Q, "K": K, "V": V, "scores": scores, "mask": mask,
              "masked_scores": masked_scores, "weights": weights,
              "context": context, "output": output}
    if unbatched:
        stages = {name: t[0] for name, t in stages.items()}
    return stages


# --------------------------------------------------------------------------
# PyTorch cross-check
# --------------------------------------------------------------------------

def mha_fits(bundle, heads, layout="math"):
    """True when the case can be expressed as one nn.MultiheadAttention.

    Needs Dk == Dv, E = Dm = H*Dk, and an output projection that is (E, E)
    (an absent W_O is replaced by the identity).
    """
    w = math_weights(bundle, layout)
    Dm = np.shape(bundle["x"])[-1]
    E = w["W_Q"].shape[1]
    if E % heads or w["W_V"].shape[1] != E or Dm != E:
        return False
    return "W_O" not in w or w["W_O"].shape == (E, E)


def torch_mha(bundle, heads, causal=False, causal_align="top-left", scale=None,
              layout="math"):
    """Run torch.nn.MultiheadAttention (float64) on the same inputs.

    Returns {"weights": (B, H, Tq, Tk), "output": (B, Tq, E)} as numpy float64,
    batch axis dropped for a 2-D x.  A custom scale is folded into the query
    projection (MHA always divides by sqrt(Dk)), which leaves weights and
    output unchanged.  Rows with no visible key come out NaN in PyTorch 1.13.
    """
    import torch

    if not mha_fits(bundle, heads, layout):
        raise ValueError("case does not fit nn.MultiheadAttention")
    w = math_weights(bundle, layout)
    E = w["W_Q"].shape[1]
    Dk = E // heads

    x = np.asarray(bundle["x"], dtype=np.float64)
    unbatched = x.ndim == 2
    src = np.asarray(bundle["memory"], dtype=np.float64) if "memory" in bundle else x
    if unbatched:
        x, src = x[None], src[None]
    B, Tq, _ = x.shape
    Tk, Dkv = src.shape[1], src.shape[2]

    mha = torch.nn.MultiheadAttention(E, heads, bias=True, batch_first=True,
                                      kdim=Dkv, vdim=Dkv, dtype=torch.float64)
    q_factor = 1.0 if scale is None else float(scale) * math.sqrt(Dk)
    zeros = np.zeros(E)
    bias = np.concatenate([w.get("b_Q", zeros) * q_factor, w.get("b_K", zeros),
                           w.get("b_V", zeros)])
    t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=torch.float64)
    with torch.no_grad():
        # PyTorch stores (out, in): transpose the math-layout weights.
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(t(np.concatenate(
                [w["W_Q"].T * q_factor, w["W_K"].T, w["W_V"].T])))
        else:
            mha.q_proj_weight.copy_(t(w["W_Q"].T * q_factor))
            mha.k_proj_weight.copy_(t(w["W_K"].T))
            mha.v_proj_weight.copy_(t(w["W_V"].T))
        mha.in_proj_bias.copy_(t(bias))
        mha.out_proj.weight.copy_(t(w["W_O"].T if "W_O" in w else np.eye(E)))
        mha.out_proj.bias.copy_(t(w.get("b_O", zeros)))

    kpm = None
    if "key_padding_mask" in bundle:
        pad = np.asarray(bundle["key_padding_mask"]).astype(bool)
        kpm = torch.tensor(np.broadcast_to(pad, (B, Tk)).copy())   # True = PAD
    attn_mask = None
    if causal:
        # torch: True = NOT allowed to attend.
        attn_mask = torch.tensor(~causal_mask(Tq, Tk, causal_align))

    mha.eval()
    with torch.no_grad():
        out, attn = mha(t(x), t(src), t(src), key_padding_mask=kpm,
                        need_weights=True, attn_mask=attn_mask,
                        average_attn_weights=False)
    result = {"weights": attn.numpy(), "output": out.numpy()}
    if unbatched:
        result = {k: v[0] for k, v in result.items()}
    return result


def compare_with_torch(bundle, heads, causal=False, causal_align="top-left",
                       scale=None, layout="math", ref=None):
    """Max |reference - torch| for weights and output over rows with a visible key.

    Returns (max_diff_weights, max_diff_output, number_of_fully_masked_rows).
    Fully masked rows are compared separately: the reference gives zeros there
    while PyTorch 1.13 gives NaN, so they are excluded from the difference.
    """
    if ref is None:
        ref = attention(bundle, heads, causal, causal_align, scale, layout)
    th = torch_mha(bundle, heads, causal, causal_align, scale, layout)
    visible = ref["mask"].any(axis=-1)                     # (B, Tq) or (Tq,)
    w_ref, w_th = ref["weights"], th["weights"]            # (B, H, Tq, Tk)
    o_ref, o_th = ref["output"], th["output"]              # (B, Tq, E)
    if visible.ndim == 1:
        w_ref, w_th = w_ref[None], w_th[None]
        o_ref, o_th = o_ref[None], o_th[None]
        visible = visible[None]
    rows_w = visible[:, None, :, None]                     # (B, 1, Tq, 1)
    rows_o = visible[:, :, None]                           # (B, Tq, 1)
    dw = np.where(rows_w, np.abs(w_ref - w_th), 0.0).max()
    do = np.where(rows_o, np.abs(o_ref - o_th), 0.0).max()
    return float(dw), float(do), int((~visible).sum())


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description="numpy float64 attention reference")
    p.add_argument("bundle")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--causal-align", default="top-left",
                   choices=["top-left", "bottom-right"])
    p.add_argument("--scale", type=float, default=None)
    p.add_argument("--layout", default="math", choices=["math", "torch"])
    p.add_argument("--torch", action="store_true",
                   help="also compare weights and output with nn.MultiheadAttention")
    a = p.parse_args(argv)

    bundle = load_bundle(a.bundle)
    stages = attention(bundle, a.heads, a.causal, a.causal_align, a.scale, a.layout)
    np.set_printoptions(precision=4, suppress=True, linewidth=120)
    for name in STAGES:
        print(f"== {name} {stages[name].shape}")
        print(stages[name])
    if a.torch:
        dw, do, n = compare_with_torch(bundle, a.heads, a.causal, a.causal_align,
                                       a.scale, a.layout, ref=stages)
        print(f"torch: max|dweights|={dw:.3g} max|doutput|={do:.3g} "
              f"(fully masked rows excluded: {n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
