#!/usr/bin/python3
"""Independent float64 reference for attnscope's modern attention variants.

Written from the formulas (docs/modern-attention.md; docs/design.md, "The stage table"), not from
attnscope's C++. It extends scripts/attn_reference.py (bundle loading, weight
layouts, head split/merge are reused from there) with:

    grouped-query / multi-query attention (kv_heads), RoPE (half / interleaved,
    partial rope_dim, explicit positions), logit soft-capping, ALiBi, float and
    bool attn_mask, sliding windows, attention sinks, per-head output, and
    nn.MultiheadAttention's add_bias_kv / add_zero_attn;

and a KV-cache decoding reference, decode(), with three classic bugs to emulate.

Shape legend (outermost first): B batch, Tq query positions, Tk key/value
positions, Dm query-source width, Dkv key/value-source width, H query heads,
G K/V heads, Dk per-head query/key width, Dv per-head value width, R rotated
features per head, Dout output width.

Stages (dict name -> numpy array; float64, `mask` bool), in this order:

    Q              (B, H, Tq, Dk)   x . W_Q (+ b_Q), split into H heads
    K              (B, G, Tk, Dk)   src . W_K (+ b_K), split into G heads
    V              (B, G, Tk, Dv)   src . W_V (+ b_V), split into G heads
    Q_rot          (B, H, Tq, Dk)   RoPE(Q) at the query positions  (rope only)
    K_rot          (B, G, Tk, Dk)   RoPE(K) at the key positions    (rope only)
    scores         (B, H, Tq, Tk)   scale . Q_rot . K_rot(group of h)^T
    bias           (B, H, Tq, Tk)   ALiBi + float attn_mask (only when one is given)
    mask           (B, Tq, Tk)      True where query i MAY attend key j;
                   (B, H, Tq, Tk)   when a bool attn_mask has a head axis
    masked_scores  (B, H, Tq, Tk)   softcap(scores) + bias, -inf where mask is False
    weights        (B, H, Tq, Tk)   softmax over keys (with the sink in the denominator)
    sink_weight    (B, H, Tq)       the sink's share of each row (only with `sinks`)
    context        (B, H, Tq, Dv)   weights . V(group of h)
    head_output    (B, Tq, H, Dout) context_h . W_O[h*Dv:(h+1)*Dv, :]
    output         (B, Tq, Dout)    merged context . W_O + b_O

A 2-D x (Tq, Dm) gives every stage without the batch axis (B = 1 is used
inside). In a torch-layout bundle with bias_k/bias_v, and with add_zero_attn,
Tk counts the appended key/value positions (K, V, scores, mask, ... all have them).

Formulas (float64 throughout):
    * GQA: query head h reads K/V head h // (H/G) (Hugging Face repeat_kv order).
    * RoPE: inv_freq_j = rope_base**(-2j/R), angle = pos * inv_freq_j, j < R/2.
      "half": feature j pairs with j + R/2 (rotate_half, Llama / GPT-NeoX);
      "interleaved": 2j pairs with 2j+1 (RoFormer / GPT-J). A pair (a, b) becomes
      (a cos - b sin, b cos + a sin). Features R..Dk-1 pass through.
    * Positions: keys 0..Tk-1; queries 0..Tq-1, or Tk-Tq+i with
      causal_align="bottom-right"; bundle arrays q_positions ((Tq,) or (B, Tq))
      and k_positions ((Tk,) or (B, Tk)) override. RoPE, the causal rule
      (k_pos <= q_pos), windows and ALiBi all use these positions.
    * softcap C: C * tanh(scores / C), after the scale, before bias and mask.
    * ALiBi: bias = m_h * (k_pos - q_pos); m_h = 2**(-8(h+1)/H) for H a power
      of two, else the paper's rule; bundle array alibi_slopes (H,) overrides.
    * Window W: causal: q_pos - W < k_pos <= q_pos (Mistral); non-causal:
      |q_pos - k_pos| < W.
    * Sinks (bundle array `sinks` (H,)): M = max(row max, s_h);
      w_ij = exp(m_ij - M) / (sum_j exp(m_ij - M) + exp(s_h - M)),
      sink_weight = exp(s_h - M) / (same denominator).
    * A row with no finite masked score gives weights 0 (sink_weight 1 with a sink).

Decisions where the specification is silent (keep them in sync with attnscope):
    * scale: None -> 1/(sqrt(Dk) * temperature); "none" -> 1; a number -> itself.
      A number with temperature != 1 is refused (as attnscope does).
    * Positions also follow causal_align="bottom-right" without --causal (the
      alignment is a statement about where the queries sit).
    * Positions must be integers (an integer array, or floats with integral
      values); bool positions are refused.
    * alibi_slopes in the bundle without alibi=True is refused, not ignored.
      `sinks`, `bias_k`/`bias_v`, `attn_mask`, `key_padding_mask` act by presence.
    * bias_k and bias_v must come together; they are accepted in either layout
      (they are vectors, nothing to transpose), widths G*Dk and G*Dv. Each may be
      (width,), (1, 1, width) or any shape with that many elements.
    * A 3-D attn_mask is refused as ambiguous only when B == H > 1; with
      B == H == 1 both readings are the same array. Its first size must be B or H.
    * A float attn_mask may hold -inf but not +inf or NaN. attn_mask_means given
      with a float attn_mask is refused (it only says what a bool mask means).
      An integer attn_mask counts as bool (nonzero = true).
    * key_padding_mask, attn_mask, q_positions and k_positions describe the
      original keys; the appended <bias_kv>/<zero> keys are padded exactly as
      PyTorch pads them: visible, bias 0.
    * Sinks must be finite.
    * head_output exists always; without W_O the output projection is the
      identity, so head h's output is its context in columns h*Dv..(h+1)*Dv - 1
      and zeros elsewhere (sum over heads = output still holds).
    * window must be an integer >= 1; softcap a finite number > 0.

KV-cache decoding: see decode(), including the FLOP count it reports.

Usage as a script:
    /usr/bin/python3 scripts/modern_reference.py BUNDLE --heads 4 --kv-heads 2 \
        --rope --causal --window 3 [--stages weights,output] [--dump-npz OUT.npz]
    /usr/bin/python3 scripts/modern_reference.py BUNDLE --heads 4 --rope \
        --decode 3 [--bug off-by-one]
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))
import attn_reference as ref  # noqa: E402  (load_bundle, math_weights, split/merge)

STAGES = ("Q", "K", "V", "Q_rot", "K_rot", "scores", "bias", "mask",
          "masked_scores", "weights", "sink_weight", "context", "head_output",
          "output")

ROPE_STYLES = ("half", "interleaved")
ALIGNS = ("top-left", "bottom-right")
MASK_MEANINGS = ("allow", "block")
BUGS = ("rope-position-zero", "attend-before-append", "off-by-one")

BIAS_KV_LABEL = "<bias_kv>"
ZERO_LABEL = "<zero>"

# The keyword options of attention(), with their defaults.
DEFAULTS = dict(kv_heads=None, causal=False, causal_align="top-left", scale=None,
                temperature=1.0, layout="math", rope=False, rope_base=10000.0,
                rope_dim=None, rope_style="half", alibi=False, window=None,
                softcap=None, attn_mask_means=None, add_zero_attn=False)


# --------------------------------------------------------------------------
# Small pieces, each one formula
# --------------------------------------------------------------------------

def alibi_slopes(H):
    """ALiBi head slopes m_h, h = 0..H-1 (Press et al., 2022).

    H a power of two: m_h = 2**(-8(h+1)/H). Otherwise, with P = 2**floor(log2 H):
    the P slopes of P, then slopes 0, 2, 4, ... of 2P, as many as needed.
    """
    H = int(H)
    if H < 1:
        raise ValueError(f"alibi: heads must be >= 1, got {H}")
    P = 1 << (H.bit_length() - 1)                     # largest power of two <= H
    if P == H:
        return np.array([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])
    extra = [2.0 ** (-8.0 * (h + 1) / (2 * P)) for h in range(0, 2 * P, 2)]
    return np.concatenate([alibi_slopes(P), extra[:H - P]])


def rope_inv_freq(rope_dim, base):
    """(R/2,) inverse frequencies base**(-2j/R), j = 0..R/2-1, float64."""
    j = np.arange(rope_dim // 2, dtype=np.float64)
    return float(base) ** (-2.0 * j / rope_dim)


def rope_pairs(rope_dim, style):
    """Index arrays (a, b), each (R/2,): feature a[j] pairs with b[j], frequency j."""
    half = rope_dim // 2
    if style == "half":
        return np.arange(half), np.arange(half) + half
    if style == "interleaved":
        return 2 * np.arange(half), 2 * np.arange(half) + 1
    raise ValueError(f"rope_style: expected one of {ROPE_STYLES}, got {style!r}")


def apply_rope(t, positions, rope_dim, base, style):
    """Rotate the first rope_dim features of every head at its position.

    t: (B, N, T, D) heads; positions: (B, T) numbers. Returns (B, N, T, D).
    Pair (a, b) at angle pos * inv_freq_j -> (a cos - b sin, b cos + a sin).
    """
    a, b = rope_pairs(rope_dim, style)
    angle = np.asarray(positions, np.float64)[:, None, :, None] * \
        rope_inv_freq(rope_dim, base)                              # (B, 1, T, R/2)
    cos, sin = np.cos(angle), np.sin(angle)
    out = np.array(t, dtype=np.float64, copy=True)
    xa, xb = t[..., a], t[..., b]                                  # (B, N, T, R/2)
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xb * cos + xa * sin
    return out


def softmax_with_sinks(masked_scores, sinks=None):
    """Softmax over the last axis; -inf entries get weight 0.

    masked_scores: (B, H, Tq, Tk); sinks: None or (H,) logits that join each row's
    denominator only. Returns (weights (B, H, Tq, Tk), sink_weight (B, H, Tq) or
    None). A row with no finite entry gives zeros (and sink_weight 1).
    """
    ms = np.asarray(masked_scores, dtype=np.float64)
    live = ms > -np.inf                                            # (B, H, Tq, Tk)
    row_max = np.max(np.where(live, ms, -np.inf), axis=-1, keepdims=True,
                     initial=-np.inf)                              # (B, H, Tq, 1)
    if sinks is None:
        M = np.where(row_max > -np.inf, row_max, 0.0)              # no inf - inf
    else:
        s = np.asarray(sinks, np.float64)[None, :, None, None]     # (1, H, 1, 1)
        M = np.maximum(row_max, s)
    e = np.where(live, np.exp(np.where(live, ms - M, 0.0)), 0.0)   # (B, H, Tq, Tk)
    denom = e.sum(axis=-1, keepdims=True)                          # (B, H, Tq, 1)
    if sinks is None:
        w = np.where(denom > 0, e / np.where(denom > 0, denom, 1.0), 0.0)
        return w, None
    es = np.exp(s - M)                                             # (B, H, Tq, 1)
    denom = denom + es
    return e / denom, (es / denom)[..., 0]


def _as_positions(name, value, B, T):
    """An integer position array (T,) or (B, T) -> (B, T) int64."""
    p = np.asarray(value)
    if p.dtype.kind == "f":
        if not np.all(np.isfinite(p)) or np.any(p != np.round(p)):
            raise ValueError(f"{name}: positions must be integers")
        p = p.astype(np.int64)
    elif p.dtype.kind in "iu":
        p = p.astype(np.int64)
    else:
        raise ValueError(f"{name}: expected an integer array, got dtype {p.dtype}")
    if p.shape == (T,):
        p = np.broadcast_to(p, (B, T))
    if p.shape != (B, T):
        raise ValueError(f"{name}: expected ({T},) or ({B}, {T}), got {p.shape}")
    return np.array(p)


def _head_axis_mask(name, m, B, H, Tq, Tk):
    """A (Tq,Tk), (B,Tq,Tk), (H,Tq,Tk) or (B,H,Tq,Tk) mask -> (B or 1, H or 1, Tq, Tk)."""
    shapes = f"({Tq}, {Tk}), (B, {Tq}, {Tk}) with B={B}, (H, {Tq}, {Tk}) with H={H}, " \
             f"or ({B}, {H}, {Tq}, {Tk})"
    if m.ndim == 2 and m.shape == (Tq, Tk):
        return m[None, None]
    if m.ndim == 3 and m.shape[1:] == (Tq, Tk):
        n = m.shape[0]
        if n == B and n == H and n > 1:
            raise ValueError(f"{name}: a 3-D mask of first size {n} is ambiguous "
                             f"with B == H == {n}; give it 4-D as (B, H, Tq, Tk)")
        if n == B:
            return m[:, None]
        if n == H:
            return m[None, :]
    if m.ndim == 4 and m.shape == (B, H, Tq, Tk):
        return m
    raise ValueError(f"{name}: expected {shapes}, got {m.shape}")


# --------------------------------------------------------------------------
# The setup: everything read from a bundle and the options, checked once
# --------------------------------------------------------------------------

class Setup:
    """The attention problem of one bundle with its options, validated.

    Attributes: x (B, Tq, Dm), src (B, Tk, Dkv), w (math-layout weights), B, Tq,
    Tk (original keys, without <bias_kv>/<zero>), H, G, Dk, Dv, R, scale,
    unbatched, options, and the optional bundle arrays (positions, masks, ...).
    """

    def __init__(self, bundle, heads, **options):
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        o = dict(DEFAULTS, **options)
        self.o = o
        H = int(heads)
        G = H if o["kv_heads"] is None else int(o["kv_heads"])
        if H < 1 or G < 1 or H % G:
            raise ValueError(f"kv_heads: heads={H} must be a multiple of kv_heads={G} >= 1")
        self.H, self.G = H, G

        # Inputs.
        x = np.asarray(bundle["x"], dtype=np.float64)
        if x.ndim not in (2, 3):
            raise ValueError(f"x: expected (Tq, Dm) or (B, Tq, Dm), got {x.shape}")
        self.unbatched = x.ndim == 2
        if self.unbatched:
            x = x[None]
        self.cross = "memory" in bundle
        if self.cross:
            src = np.asarray(bundle["memory"], dtype=np.float64)
            if src.ndim != (2 if self.unbatched else 3):
                raise ValueError(f"memory: expected (Tk, Dkv) or (B, Tk, Dkv) like x, "
                                 f"got {src.shape}")
            if self.unbatched:
                src = src[None]
        else:
            src = x
        if src.shape[0] != x.shape[0]:
            raise ValueError(f"memory: batch {src.shape[0]} != x batch {x.shape[0]}")
        self.x, self.src = x, src
        self.B, self.Tq, self.Dm = x.shape
        _, self.Tk, self.Dkv = src.shape

        # Weights.
        w = ref.math_weights(bundle, o["layout"])
        self.w = w
        if w["W_Q"].ndim != 2 or w["W_Q"].shape[0] != self.Dm:
            raise ValueError(f"W_Q: expected ({self.Dm}, H*Dk), got {w['W_Q'].shape}")
        if w["W_Q"].shape[1] % H:
            raise ValueError(f"W_Q: H*Dk = {w['W_Q'].shape[1]} is not divisible by heads={H}")
        self.Dk = w["W_Q"].shape[1] // H
        for k in ("W_K", "W_V"):
            if w[k].ndim != 2 or w[k].shape[0] != self.Dkv:
                raise ValueError(f"{k}: expected ({self.Dkv}, ...) (in = Dkv), got {w[k].shape}")
        if w["W_K"].shape[1] != G * self.Dk:
            raise ValueError(f"W_K: expected ({self.Dkv}, G*Dk) = ({self.Dkv}, {G * self.Dk}) "
                             f"with G={G}, Dk={self.Dk}, got {w['W_K'].shape}")
        if w["W_V"].shape[1] % G:
            raise ValueError(f"W_V: G*Dv = {w['W_V'].shape[1]} is not divisible by kv_heads={G}")
        self.Dv = w["W_V"].shape[1] // G
        for k, n in (("b_Q", H * self.Dk), ("b_K", G * self.Dk), ("b_V", G * self.Dv)):
            if k in w and w[k].shape != (n,):
                raise ValueError(f"{k}: expected ({n},), got {w[k].shape}")
        if "W_O" in w:
            if w["W_O"].ndim != 2 or w["W_O"].shape[0] != H * self.Dv:
                raise ValueError(f"W_O: expected ({H * self.Dv}, Dout), got {w['W_O'].shape}")
            self.W_O = w["W_O"]
        elif "b_O" in w:
            raise ValueError("b_O given without W_O")
        else:
            self.W_O = np.eye(H * self.Dv)
        self.Dout = self.W_O.shape[1]
        self.b_O = w.get("b_O", np.zeros(self.Dout))
        if self.b_O.shape != (self.Dout,):
            raise ValueError(f"b_O: expected ({self.Dout},), got {self.b_O.shape}")

        # Scale.
        temperature = float(o["temperature"])
        if not (temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature: expected a positive number, got {temperature}")
        scale = o["scale"]
        if isinstance(scale, str) and scale.strip().lower() == "none":
            scale = 1.0
        elif scale is not None:
            scale = float(scale)
        if scale is not None and temperature != 1.0:
            raise ValueError("temperature: contradicts scale; give one of them")
        self.scale = 1.0 / (math.sqrt(self.Dk) * temperature) if scale is None else scale

        # Mode checks.
        if o["causal_align"] not in ALIGNS:
            raise ValueError(f"causal_align: expected one of {ALIGNS}, got {o['causal_align']!r}")
        self.rope = bool(o["rope"])
        self.R = None
        if self.rope:
            R = self.Dk if o["rope_dim"] is None else int(o["rope_dim"])
            if R < 2 or R % 2 or R > self.Dk:
                raise ValueError(f"rope_dim: expected an even number in 2..Dk={self.Dk}, got {R}")
            if o["rope_style"] not in ROPE_STYLES:
                raise ValueError(f"rope_style: expected one of {ROPE_STYLES}, got {o['rope_style']!r}")
            if not (float(o["rope_base"]) > 0 and math.isfinite(float(o["rope_base"]))):
                raise ValueError(f"rope_base: expected a positive number, got {o['rope_base']}")
            self.R = R
        if o["window"] is not None:
            W = o["window"]
            if int(W) != W or int(W) < 1:
                raise ValueError(f"window: expected an integer >= 1, got {W}")
        if o["softcap"] is not None:
            C = float(o["softcap"])
            if not (C > 0 and math.isfinite(C)):
                raise ValueError(f"softcap: expected a finite number > 0, got {o['softcap']}")

        # Positions.
        offset = self.Tk - self.Tq if o["causal_align"] == "bottom-right" else 0
        self.q_pos = (_as_positions("q_positions", bundle["q_positions"], self.B, self.Tq)
                      if "q_positions" in bundle else
                      np.broadcast_to(np.arange(self.Tq) + offset, (self.B, self.Tq)).copy())
        self.k_pos = (_as_positions("k_positions", bundle["k_positions"], self.B, self.Tk)
                      if "k_positions" in bundle else
                      np.broadcast_to(np.arange(self.Tk), (self.B, self.Tk)).copy())

        # ALiBi slopes.
        self.slopes = None
        if o["alibi"]:
            if "alibi_slopes" in bundle:
                s = np.asarray(bundle["alibi_slopes"], dtype=np.float64).reshape(-1)
                if s.shape != (H,) or not np.all(np.isfinite(s)):
                    raise ValueError(f"alibi_slopes: expected ({H},) finite numbers, "
                                     f"got shape {np.shape(bundle['alibi_slopes'])}")
                self.slopes = s
            else:
                self.slopes = alibi_slopes(H)
        elif "alibi_slopes" in bundle:
            raise ValueError("alibi_slopes: given in the bundle but alibi is off")

        # Sinks.
        self.sinks = None
        if "sinks" in bundle:
            s = np.asarray(bundle["sinks"], dtype=np.float64)
            if s.shape != (H,) or not np.all(np.isfinite(s)):
                raise ValueError(f"sinks: expected ({H},) finite numbers, got {s.shape}")
            self.sinks = s

        # Key padding (True = PAD), over the original keys.
        self.pad = None
        if "key_padding_mask" in bundle:
            pad = np.asarray(bundle["key_padding_mask"]).astype(bool)
            if pad.shape == (self.Tk,):
                pad = np.broadcast_to(pad, (self.B, self.Tk))
            if pad.shape != (self.B, self.Tk):
                raise ValueError(f"key_padding_mask: expected ({self.Tk},) or "
                                 f"({self.B}, {self.Tk}), got {pad.shape}")
            self.pad = np.array(pad)

        # attn_mask: float -> additive bias; bool/int -> joins the mask.
        self.float_mask = self.bool_mask = None
        means = o["attn_mask_means"]
        if means is not None and means not in MASK_MEANINGS:
            raise ValueError(f"attn_mask_means: expected one of {MASK_MEANINGS}, got {means!r}")
        if "attn_mask" in bundle:
            m = np.asarray(bundle["attn_mask"])
            if m.dtype.kind == "f":
                if means is not None:
                    raise ValueError("attn_mask_means: the attn_mask is float (additive); "
                                     "the option is only for a bool attn_mask")
                m = m.astype(np.float64)
                if np.any(np.isnan(m)) or np.any(m == np.inf):
                    raise ValueError("attn_mask: NaN or +inf in a float mask")
                self.float_mask = _head_axis_mask("attn_mask", m, self.B, H, self.Tq, self.Tk)
            elif m.dtype.kind in "biu":
                if means is None:
                    raise ValueError("attn_mask: a bool mask needs attn_mask_means "
                                     "'allow' (true = may attend, scaled_dot_product_attention) "
                                     "or 'block' (true = blocked, nn.MultiheadAttention)")
                m = m.astype(bool)
                if means == "block":
                    m = ~m
                self.bool_mask = _head_axis_mask("attn_mask", m, self.B, H, self.Tq, self.Tk)
            else:
                raise ValueError(f"attn_mask: unsupported dtype {m.dtype}")
        elif means is not None:
            raise ValueError("attn_mask_means: given without an attn_mask in the bundle")

        # nn.MultiheadAttention extras: <bias_kv>, then <zero>.
        self.bias_k = self.bias_v = None
        if ("bias_k" in bundle) != ("bias_v" in bundle):
            raise ValueError("bias_k and bias_v: give both or neither")
        if "bias_k" in bundle:
            bk = np.asarray(bundle["bias_k"], dtype=np.float64)
            bv = np.asarray(bundle["bias_v"], dtype=np.float64)
            if bk.size != G * self.Dk or bv.size != G * self.Dv:
                raise ValueError(f"bias_k/bias_v: expected {G * self.Dk} and {G * self.Dv} "
                                 f"elements, got shapes {bk.shape} and {bv.shape}")
            self.bias_k, self.bias_v = bk.reshape(-1), bv.reshape(-1)
        self.zero_attn = bool(o["add_zero_attn"])
        self.n_extra = (self.bias_k is not None) + self.zero_attn
        if self.n_extra and (self.rope or o["alibi"]):
            raise ValueError("add_bias_kv/add_zero_attn cannot be combined with rope or "
                             "alibi: the appended keys have no position")

    # ---- pieces used by attention() and decode()

    def project(self, x, src):
        """x (B, n, Dm), src (B, m, Dkv) -> Q (B, H, n, Dk), K (B, G, m, Dk), V (B, G, m, Dv)."""
        w = self.w
        Q = ref.split_heads(x @ w["W_Q"] + w.get("b_Q", 0.0), self.H)
        K = ref.split_heads(src @ w["W_K"] + w.get("b_K", 0.0), self.G)
        V = ref.split_heads(src @ w["W_V"] + w.get("b_V", 0.0), self.G)
        return Q, K, V

    def rotate(self, t, positions):
        """RoPE on (B, N, T, Dk) at positions (B, T); identity without rope."""
        if not self.rope:
            return t
        return apply_rope(t, positions, self.R, self.o["rope_base"], self.o["rope_style"])

    def append_extras(self, K, V):
        """Append <bias_kv> then <zero> key/value positions: (B, G, Tk + n_extra, D)."""
        B = K.shape[0]
        if self.bias_k is not None:
            bk = self.bias_k.reshape(self.G, 1, self.Dk)
            bv = self.bias_v.reshape(self.G, 1, self.Dv)
            K = np.concatenate([K, np.broadcast_to(bk, (B, self.G, 1, self.Dk))], axis=2)
            V = np.concatenate([V, np.broadcast_to(bv, (B, self.G, 1, self.Dv))], axis=2)
        if self.zero_attn:
            K = np.concatenate([K, np.zeros((B, self.G, 1, self.Dk))], axis=2)
            V = np.concatenate([V, np.zeros((B, self.G, 1, self.Dv))], axis=2)
        return K, V

    def core(self, Q_rot, K_rot, V, q_pos, k_pos, rows=None, cols=None):
        """Everything after the projections and RoPE.

        Q_rot (B, H, n, Dk); K_rot (B, G, m + n_extra, Dk); V (B, G, m + n_extra, Dv);
        q_pos (B, n); k_pos (B, m) for the m original keys. rows, cols: which rows
        (queries) and columns (original keys) of the bundle's attn_mask and
        key_padding_mask these are (default: all).
        Returns the stages from `scores` on, batched.
        """
        o, H, G = self.o, self.H, self.G
        B, n, m = Q_rot.shape[0], Q_rot.shape[2], k_pos.shape[1]
        rows = slice(None) if rows is None else rows
        cols = slice(None) if cols is None else cols
        rep = H // G
        K_h = np.repeat(K_rot, rep, axis=1)                        # (B, H, Tk, Dk)
        V_h = np.repeat(V, rep, axis=1)                            # (B, H, Tk, Dv)

        # 1) scores = scale * Q_rot . K_rot^T: (B,H,n,Dk) x (B,H,Dk,Tk) -> (B,H,n,Tk)
        scores = (Q_rot @ K_h.transpose(0, 1, 3, 2)) * self.scale

        # 2) soft-capping: C tanh(scores / C)
        capped = scores
        if o["softcap"] is not None:
            C = float(o["softcap"])
            capped = C * np.tanh(scores / C)

        # 3) additive bias over the original keys, 0 on the appended ones: (B,H,n,Tk)
        bias = None
        if self.slopes is not None or self.float_mask is not None:
            bias = np.zeros((B, H, n, m))
            if self.slopes is not None:
                rel = k_pos[:, None, :] - q_pos[:, :, None]        # (B, n, m)
                bias = bias + self.slopes[None, :, None, None] * rel[:, None]
            if self.float_mask is not None:
                bias = bias + self.float_mask[:, :, rows, cols]
            bias = np.concatenate([bias, np.zeros((B, H, n, self.n_extra))], axis=-1)

        # 4) mask: True where query i may attend key j: (B, n, Tk) or (B, H, n, Tk)
        mask = np.ones((B, n, m), dtype=bool)
        if self.pad is not None:
            mask &= ~self.pad[:, None, cols]
        qp, kp = q_pos[:, :, None], k_pos[:, None, :]              # (B,n,1), (B,1,m)
        if o["causal"]:
            mask &= kp <= qp
        if o["window"] is not None:
            W = int(o["window"])
            mask &= (qp - W < kp) if o["causal"] else (np.abs(qp - kp) < W)
        if self.bool_mask is not None:
            bm = self.bool_mask[:, :, rows, cols]                  # (B|1, H|1, n, m)
            if bm.shape[1] == 1:
                mask = mask & bm[:, 0]
            else:
                mask = mask[:, None] & bm
        extra = np.ones(mask.shape[:-1] + (self.n_extra,), dtype=bool)
        mask = np.concatenate([np.broadcast_to(mask, mask.shape), extra], axis=-1)
        mask4 = mask[:, None] if mask.ndim == 3 else mask          # (B, 1|H, n, Tk)

        # 5) masked_scores = softcap(scores) + bias, -inf where hidden: (B,H,n,Tk)
        biased = capped if bias is None else capped + bias
        masked_scores = np.where(mask4, biased, -np.inf)

        # 6) softmax over keys, with the sink logit in the denominator: (B,H,n,Tk)
        weights, sink_weight = softmax_with_sinks(masked_scores, self.sinks)

        # 7) context = weights . V: (B,H,n,Tk) x (B,H,Tk,Dv) -> (B,H,n,Dv)
        context = weights @ V_h

        # 8) per-head output: context_h . W_O[h*Dv:(h+1)*Dv]: (B, n, H, Dout)
        W_O_h = self.W_O.reshape(H, self.Dv, self.Dout)
        head_output = np.einsum("bhnd,hde->bnhe", context, W_O_h)

        # 9) output = merge(context) . W_O + b_O: (B, n, H*Dv) x (H*Dv, Dout)
        output = ref.merge_heads(context) @ self.W_O + self.b_O

        st = {"scores": scores}
        if bias is not None:
            st["bias"] = bias
        st.update(mask=mask, masked_scores=masked_scores, weights=weights)
        if sink_weight is not None:
            st["sink_weight"] = sink_weight
        st.update(context=context, head_output=head_output, output=output)
        return st

    def run(self):
        """All stages, batched."""
        Q, K, V = self.project(self.x, self.src)
        st = {"Q": Q, "K": K, "V": V}
        Q_rot = self.rotate(Q, self.q_pos)
        K_rot = self.rotate(K, self.k_pos)
        if self.rope:
            st.update(Q_rot=Q_rot, K_rot=K_rot)
        K_rot, V_all = self.append_extras(K_rot, V)
        if self.n_extra:
            st["K"], st["V"] = self.append_extras(K, V)
        st.update(self.core(Q_rot, K_rot, V_all, self.q_pos, self.k_pos))
        return st

    def unbatch(self, stages):
        if not self.unbatched:
            return stages
        return {k: v[0] for k, v in stages.items()}


# --------------------------------------------------------------------------
# The public API
# --------------------------------------------------------------------------

def attention(bundle, heads, **options):
    """Run the modern pipeline on a bundle; return {stage name: ndarray} in STAGES order.

    Options (defaults in DEFAULTS): kv_heads, causal, causal_align, scale,
    temperature, layout, rope, rope_base, rope_dim, rope_style, alibi, window,
    softcap, attn_mask_means, add_zero_attn. Bundle arrays beyond the classic
    ones: q_positions, k_positions, alibi_slopes, attn_mask, sinks, bias_k, bias_v.
    """
    s = Setup(bundle, heads, **options)
    return s.unbatch(s.run())


def key_tokens(bundle, add_zero_attn=False):
    """Labels of the key columns: the bundle's key_tokens (query_tokens in
    self-attention), or "0", "1", ... without them, then "<bias_kv>" (when the
    bundle has bias_k/bias_v) and "<zero>" (add_zero_attn). Shape (Tk,) or (B, Tk)."""
    if "key_tokens" in bundle:
        labels = np.asarray(bundle["key_tokens"], dtype=str)
    elif "query_tokens" in bundle and "memory" not in bundle:
        labels = np.asarray(bundle["query_tokens"], dtype=str)
    else:
        src = bundle["memory"] if "memory" in bundle else bundle["x"]
        labels = np.array([str(j) for j in range(np.shape(src)[-2])])
    extra = ([BIAS_KV_LABEL] if "bias_k" in bundle else []) + \
        ([ZERO_LABEL] if add_zero_attn else [])
    if not extra:
        return labels
    tail = np.broadcast_to(np.array(extra), labels.shape[:-1] + (len(extra),))
    return np.concatenate([labels.astype(object), tail.astype(object)], axis=-1).astype(str)


def _flops(s, n_q, n_k, n_new):
    """Multiply-adds x 2 of the matrix products for n_new projected tokens,
    n_q queries against n_k keys (dense), and n_q output rows; all batch items."""
    proj = 2 * n_new * (s.Dm * s.H * s.Dk + s.Dkv * s.G * (s.Dk + s.Dv))
    attn = 2 * s.H * n_q * n_k * (s.Dk + s.Dv)
    out = 2 * n_q * s.H * s.Dv * s.Dout if "W_O" in s.w else 0
    return s.B * (proj + attn + out)


def decode(bundle, heads, prefill, bug=None, **options):
    """KV-cache decoding, step by step, checked against one full causal run.

    Positions 0..P-1 (P = prefill) run as one causal prefill; each later position
    t then runs as a single query against the cache of K (after RoPE) and V of
    positions 0..t (its own key and value appended first), RoPE at its true
    position t, bottom-right alignment. Self-attention only; key_padding_mask is
    sliced per step; attn_mask, memory, bias_k/bias_v, add_zero_attn and explicit
    positions are refused. causal is always on.

    bug: None or one of BUGS:
        "rope-position-zero"   the step's query and new key are rotated at position 0
                               (needs rope=True; the prefill is right);
        "attend-before-append" the step's query sees the cache without its own
                               key/value (its own column gets weight 0);
        "off-by-one"           the step's query sits at position t - 1 (RoPE, causal
                               rule, window and ALiBi), so it cannot see itself.

    FLOPs: 2 x multiply-adds of the matrix products, over all batch items:
    projections 2n(Dm*H*Dk + Dkv*G*(Dk+Dv)) for n new tokens, scores and
    context 2*H*nq*nk*(Dk+Dv) (dense, masked entries included), output
    projection 2*nq*H*Dv*Dout (only with W_O). Softmax, RoPE, biases and masks
    (lower order) are not counted. With the cache a step projects 1 token and
    runs 1 query against L = t+1 keys; recomputing runs the whole prefix of L
    tokens from scratch (all L rows, as generation without a cache does).

    Returns {"prefill": {"length", "stages", "flops", "max_diff"},
             "steps": [{"t", "cache_length", "k_cache_shape", "v_cache_shape",
                        "weights" (B,H,1,L), "context" (B,H,1,Dv), "output" (B,1,Dout),
                        ["sink_weight" (B,H,1)], "flops_cached", "flops_recompute",
                        "diffs" {stage: max|diff|}, "max_diff"}, ...],
             "full": the full causal run's stages, "max_diff": over everything}.
    With a 2-D x the batch axis is dropped from arrays and shapes.
    """
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug: expected one of {BUGS}, got {bug!r}")
    for name in ("memory", "attn_mask", "bias_k", "bias_v", "q_positions", "k_positions"):
        if name in bundle:
            raise ValueError(f"decode: {name} is not supported")
    if options.get("add_zero_attn"):
        raise ValueError("decode: add_zero_attn is not supported")
    options = dict(options)
    options.pop("causal", None)
    options.pop("causal_align", None)
    s = Setup(bundle, heads, causal=True, **options)
    if bug == "rope-position-zero" and not s.rope:
        raise ValueError("bug 'rope-position-zero' needs rope=True (it changes nothing without)")
    T, P = s.Tq, int(prefill)
    if not 0 <= P <= T:
        raise ValueError(f"prefill: expected 0..{T}, got {P}")
    full = s.run()
    pos = np.broadcast_to(np.arange(T), (s.B, T))

    def drop(a):
        return a[0] if s.unbatched else a

    def shape(t):
        return t[1:] if s.unbatched else t

    def diffs(st, rows):
        """max |st - full rows| per stage; key axes zero-padded to T."""
        out = {}
        for name in ("weights", "sink_weight", "context", "output"):
            if name not in st:
                continue
            a, f = st[name], full[name]
            if name == "weights":
                a = np.concatenate([a, np.zeros(a.shape[:-1] + (T - a.shape[-1],))], -1)
                f = f[:, :, rows]
            elif name == "output":
                f = f[:, rows]
            else:
                f = f[:, :, rows]
            out[name] = float(np.max(np.abs(a - f), initial=0.0))
        return out

    # Prefill: positions 0..P-1 as one causal run.
    Q, K, V = s.project(s.x[:, :P], s.x[:, :P])
    K_cache = s.rotate(K, pos[:, :P])                              # (B, G, P, Dk)
    V_cache = V                                                    # (B, G, P, Dv)
    pre = {}
    if P:
        pre = s.core(s.rotate(Q, pos[:, :P]), K_cache, V_cache, pos[:, :P], pos[:, :P],
                     cols=slice(0, P))
    pd = diffs(pre, slice(0, P)) if P else {}
    result = {"prefill": {"length": P, "stages": {k: drop(v) for k, v in pre.items()},
                          "flops": _flops(s, P, P, P) if P else 0,
                          "max_diff": max(pd.values(), default=0.0)},
              "steps": [], "full": s.unbatch(full)}
    worst = result["prefill"]["max_diff"]

    # Steps t = P..T-1: one query against the growing cache.
    for t in range(P, T):
        Q, K, V = s.project(s.x[:, t:t + 1], s.x[:, t:t + 1])      # (B,H,1,Dk), (B,G,1,.)
        q_at = t - 1 if bug == "off-by-one" else t
        rot_at = 0 if bug == "rope-position-zero" else None
        q_rope = np.full((s.B, 1), q_at if rot_at is None else rot_at)
        k_rope = np.full((s.B, 1), t if rot_at is None else rot_at)
        Q_rot = s.rotate(Q, q_rope)
        K_new = s.rotate(K, k_rope)
        q_pos = np.full((s.B, 1), q_at)
        if bug == "attend-before-append":
            st = s.core(Q_rot, K_cache, V_cache, q_pos, pos[:, :t],
                        rows=slice(t, t + 1), cols=slice(0, t))
            st["weights"] = np.concatenate([st["weights"], np.zeros((s.B, s.H, 1, 1))], -1)
        K_cache = np.concatenate([K_cache, K_new], axis=2)         # (B, G, t+1, Dk)
        V_cache = np.concatenate([V_cache, V], axis=2)             # (B, G, t+1, Dv)
        if bug != "attend-before-append":
            st = s.core(Q_rot, K_cache, V_cache, q_pos, pos[:, :t + 1],
                        rows=slice(t, t + 1), cols=slice(0, t + 1))
        d = diffs(st, slice(t, t + 1))
        L = t + 1
        step = {"t": t, "cache_length": L,
                "k_cache_shape": shape(K_cache.shape), "v_cache_shape": shape(V_cache.shape),
                "weights": drop(st["weights"]), "context": drop(st["context"]),
                "output": drop(st["output"])}
        if "sink_weight" in st:
            step["sink_weight"] = drop(st["sink_weight"])
        step.update(flops_cached=_flops(s, 1, L, 1), flops_recompute=_flops(s, L, L, L),
                    diffs=d, max_diff=max(d.values()))
        worst = max(worst, step["max_diff"])
        result["steps"].append(step)
    result["max_diff"] = worst
    return result


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _scale_arg(text):
    if text.strip().lower() == "none":
        return "none"
    return float(text)


def parser():
    p = argparse.ArgumentParser(description="numpy float64 reference of the modern "
                                "attention variants (GQA, RoPE, ALiBi, windows, sinks, ...)")
    p.add_argument("bundle")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--rope", action="store_true")
    p.add_argument("--rope-base", type=float, default=10000.0)
    p.add_argument("--rope-dim", type=int, default=None)
    p.add_argument("--rope-style", choices=ROPE_STYLES, default="half")
    p.add_argument("--alibi", action="store_true")
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--softcap", type=float, default=None)
    p.add_argument("--attn-mask-means", choices=MASK_MEANINGS, default=None)
    p.add_argument("--add-zero-attn", action="store_true")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--causal-align", choices=ALIGNS, default="top-left")
    p.add_argument("--scale", type=_scale_arg, default=None, metavar="S|none")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--layout", choices=["math", "torch"], default="math")
    p.add_argument("--stages", default=None, metavar="LIST|none",
                   help="comma-separated stage names (default: every stage the run has)")
    p.add_argument("--dump-npz", default=None, metavar="FILE",
                   help="write the chosen stages to FILE with np.savez")
    p.add_argument("--decode", type=int, default=None, metavar="P",
                   help="KV-cache decoding after a prefill of P positions (implies --causal)")
    p.add_argument("--bug", choices=BUGS, default=None, help="with --decode: emulate a bug")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    return p


def options_from_args(a):
    """attention()'s keyword options from parsed arguments."""
    return dict(kv_heads=a.kv_heads, causal=a.causal, causal_align=a.causal_align,
                scale=a.scale, temperature=a.temperature, layout=a.layout, rope=a.rope,
                rope_base=a.rope_base, rope_dim=a.rope_dim, rope_style=a.rope_style,
                alibi=a.alibi, window=a.window, softcap=a.softcap,
                attn_mask_means=a.attn_mask_means, add_zero_attn=a.add_zero_attn)


def main(argv=None):
    a = parser().parse_args(argv)
    bundle = ref.load_bundle(a.bundle)
    opts = options_from_args(a)
    np.set_printoptions(precision=4, suppress=True, linewidth=120)
    if a.decode is not None:
        r = decode(bundle, a.heads, a.decode, bug=a.bug, **opts)
        if not a.quiet:
            print(f"prefill {r['prefill']['length']}: flops {r['prefill']['flops']}, "
                  f"max|diff| vs full run {r['prefill']['max_diff']:.3e}")
            for st in r["steps"]:
                print(f"step t={st['t']}: cache {st['cache_length']} K{st['k_cache_shape']} "
                      f"V{st['v_cache_shape']} flops cached {st['flops_cached']} "
                      f"recompute {st['flops_recompute']} max|diff| {st['max_diff']:.3e}")
            print(f"max|diff| vs full run: {r['max_diff']:.3e}")
        if a.dump_npz:
            arrays = {}
            for st in r["steps"]:
                for name in ("weights", "sink_weight", "context", "output"):
                    if name in st:
                        arrays[f"step{st['t']}_{name}"] = st[name]
            np.savez(a.dump_npz, **arrays)
        return 0
    stages = attention(bundle, a.heads, **opts)
    if a.stages is None:
        chosen = [n for n in STAGES if n in stages]
    elif a.stages.strip().lower() == "none":
        chosen = []
    else:
        chosen = [n.strip() for n in a.stages.split(",") if n.strip()]
        missing = [n for n in chosen if n not in stages]
        if missing:
            print(f"modern_reference: error: stage(s) {', '.join(missing)} not in this run "
                  f"(it has {', '.join(n for n in STAGES if n in stages)})", file=sys.stderr)
            return 2
    if not a.quiet:
        for name in chosen:
            print(f"== {name} {stages[name].shape}")
            print(stages[name])
    if a.dump_npz:
        np.savez(a.dump_npz, **{n: stages[n] for n in chosen})
    return 0


if __name__ == "__main__":
    sys.exit(main())
