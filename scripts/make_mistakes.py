#!/usr/bin/python3
"""Students' attention, right and wrong: tensors for `attnscope check`.

`student_attention` is a plain numpy multi-head attention written the way a student
writes it for homework, with a `bug` switch that makes one classic mistake. It is
written from the mistakes' descriptions (docs/check.md),
independently of attnscope's C++ code, and is what the tests of `attnscope check`
run: each buggy version's stages must be diagnosed as that mistake.

Running it writes data/mistakes/: `bundle.npz` (the inputs: a batch of two
sentences, the second padded, two heads, biases and an output projection; run with
--heads 2 --causal) and one `<mistake>.npz` of stages per buggy student, plus
`correct.npz`:

    /usr/bin/python3 scripts/make_mistakes.py            # rewrites data/mistakes/
    /usr/bin/python3 scripts/make_mistakes.py --check    # fails when the files are stale

Stage names in the files are the students' own (q, k, v, logits, attn, z, out ...),
as `attnscope check` accepts them.
"""

import argparse
import io
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "mistakes"

# Every mistake id, with what the student's code does wrong.
BUGS = {
    "no-scale": "scores = Q K^T, never divided by sqrt(d_k)",
    "scale-by-dk": "scores divided by d_k instead of sqrt(d_k)",
    "scale-multiplied": "scores multiplied by sqrt(d_k)",
    "scale-by-dmodel": "scores divided by sqrt(d_model), the width of x, instead of sqrt(d_k)",
    "softmax-over-queries": "softmax over axis -2 (the queries) instead of -1",
    "mask-inverted": "key_padding_mask read as 1 = keep (or the causal 'allowed' matrix negated)",
    "mask-fill-zero": "masked scores set to 0 instead of -inf",
    "mask-after-softmax": "softmax of the unmasked scores, then the hidden weights zeroed (no renormalising)",
    "causal-includes-next": "causal mask j <= i + 1",
    "causal-excludes-self": "causal mask j < i",
    "causal-upper": "np.triu instead of np.tril: j >= i",
    "padding-on-queries": "the padding mask broadcast over the query axis",
    "weights-transposed": "x @ W.T instead of x @ W, every projection",
    "heads-reshaped-not-transposed": "q.reshape(B, H, T, d) without the transpose, and back",
    "heads-interleaved": "q.reshape(B, T, d, H).transpose(0, 3, 1, 2): the feature axis before the head axis, "
                         "and back",
    "scores-transposed": "K @ Q^T instead of Q @ K^T",
    "values-are-keys": "context = weights @ K",
    "no-output-projection": "the concatenated heads returned without W_O",
    "bias-missing": "every projection without its bias",
    "mask-ignored": "the mask never applied",
}

# What each mistake needs in the inputs to make a difference.
NEEDS = {
    "mask-inverted": "mask", "mask-fill-zero": "mask", "mask-after-softmax": "mask", "mask-ignored": "mask",
    "causal-includes-next": "causal", "causal-excludes-self": "causal", "causal-upper": "causal",
    "padding-on-queries": "padding", "bias-missing": "bias", "no-output-projection": "W_O",
    "heads-reshaped-not-transposed": "heads", "heads-interleaved": "heads", "scale-by-dmodel": "heads",
}

# The students whose stages data/mistakes/ keeps (the tests generate every one).
SHIPPED = ("correct", "no-scale", "softmax-over-queries", "mask-fill-zero", "causal-includes-next",
           "heads-reshaped-not-transposed", "values-are-keys", "weights-transposed", "scale-by-dmodel",
           "heads-interleaved")


def applies(bug, heads, causal, padding, bias, w_o):
    need = NEEDS.get(bug)
    return {None: True, "mask": causal or padding, "causal": causal, "padding": padding,
            "bias": bias, "W_O": w_o, "heads": heads > 1}[need]


def student_attention(inputs, heads, causal=False, bug=None, dtype=np.float64):
    """A student's multi-head attention in numpy, in `dtype` throughout.

    inputs: x (T, D) or (B, T, D), optional memory, W_Q W_K W_V (in, out), optional
    W_O and b_Q b_K b_V b_O, optional key_padding_mask (1 = PAD). Returns the stages
    under our names, shaped (B, H, T, d) etc., batch axis dropped for a 2-D x. Rows
    whose every key is masked come out NaN, as a plain softmax makes them.
    """
    get = lambda name: None if name not in inputs else np.asarray(inputs[name]).astype(dtype)
    x = get("x")
    batched = x.ndim == 3
    if not batched:
        x = x[None]
    src = get("memory")
    src = x if src is None else (src if batched else src[None])
    B, Tq, _ = x.shape
    Tk = src.shape[1]

    def linear(a, W, b):
        if bug == "weights-transposed":
            W = W.T
        y = a @ W
        if b is not None and bug != "bias-missing":
            y = y + b
        return y

    def split(t):                                    # (B, T, H*d) -> (B, H, T, d)
        n, T, width = t.shape
        d = width // heads
        if bug == "heads-reshaped-not-transposed":
            return t.reshape(n, heads, T, d)
        if bug == "heads-interleaved":               # (B, T, d, H): feature j of head h is j*H + h
            return t.reshape(n, T, d, heads).transpose(0, 3, 1, 2)
        return t.reshape(n, T, heads, d).transpose(0, 2, 1, 3)

    Q = split(linear(x, get("W_Q"), get("b_Q")))
    K = split(linear(src, get("W_K"), get("b_K")))
    V = split(linear(src, get("W_V"), get("b_V")))
    d_k = Q.shape[-1]

    raw = K @ Q.transpose(0, 1, 3, 2) if bug == "scores-transposed" else Q @ K.transpose(0, 1, 3, 2)
    if bug == "no-scale":
        scores = raw
    elif bug == "scale-by-dk":
        scores = raw / dtype(d_k)
    elif bug == "scale-multiplied":
        scores = raw * dtype(math.sqrt(d_k))
    elif bug == "scale-by-dmodel":
        scores = raw / dtype(math.sqrt(x.shape[-1]))
    else:
        scores = raw / dtype(math.sqrt(d_k))

    keep = np.ones((B, 1, Tq, Tk), dtype=bool)     # True: this query may look at this key
    pad = inputs.get("key_padding_mask")
    if pad is not None:
        pad = np.broadcast_to(np.asarray(pad).astype(bool), (B, Tk))
        if bug == "padding-on-queries":
            keep &= ~pad[:, None, :, None]
        elif bug == "mask-inverted":
            keep &= pad[:, None, None, :]          # 1 read as "keep"
        else:
            keep &= ~pad[:, None, None, :]
    if causal:
        i = np.arange(Tq)[:, None]
        j = np.arange(Tk)[None, :]
        if bug == "causal-includes-next":
            tri = j <= i + 1
        elif bug == "causal-excludes-self":
            tri = j < i
        elif bug == "causal-upper":
            tri = np.triu(np.ones((Tq, Tk), dtype=bool))
        elif bug == "mask-inverted" and pad is None:
            tri = ~np.tril(np.ones((Tq, Tk), dtype=bool))
        else:
            tri = np.tril(np.ones((Tq, Tk), dtype=bool))
        keep &= tri

    if bug in ("mask-ignored", "mask-after-softmax"):
        masked = scores
    elif bug == "mask-fill-zero":
        masked = np.where(keep, scores, dtype(0))
    else:
        masked = np.where(keep, scores, dtype(-np.inf))

    axis = -2 if bug == "softmax-over-queries" else -1
    with np.errstate(invalid="ignore"):
        e = np.exp(masked - masked.max(axis=axis, keepdims=True))
        weights = e / e.sum(axis=axis, keepdims=True)
    if bug == "mask-after-softmax":
        weights = weights * keep

    context = weights @ (K if bug == "values-are-keys" else V)
    n, H, T, d = context.shape
    if bug == "heads-reshaped-not-transposed":
        merged = context.reshape(n, T, H * d)
    elif bug == "heads-interleaved":                # back through (B, T, d, H)
        merged = context.transpose(0, 2, 3, 1).reshape(n, T, d * H)
    else:
        merged = context.transpose(0, 2, 1, 3).reshape(n, T, H * d)
    W_O = get("W_O")
    output = merged if W_O is None or bug == "no-output-projection" else linear(merged, W_O, get("b_O"))

    stages = {"Q": Q, "K": K, "V": V, "scores": scores, "mask": keep[:, 0], "masked_scores": masked,
              "weights": weights, "context": context, "output": output}
    if not batched:
        stages = {name: t[0] for name, t in stages.items()}
    return {name: np.ascontiguousarray(t) for name, t in stages.items()}


def make_inputs(seed=7, batched=True, padding=True, bias=True, w_o=True, T=5, Dm=8, heads=2):
    """Inputs of a small self-attention: x (B=2, T, Dm) or (T, Dm), square weights
    (Dm, Dm), optional biases, W_O and key padding (the second item's last 2 keys)."""
    rng = np.random.default_rng(seed)
    B = 2 if batched else 1
    inputs = {"x": rng.normal(size=(B, T, Dm)) if batched else rng.normal(size=(T, Dm))}
    for name in ("W_Q", "W_K", "W_V") + (("W_O",) if w_o else ()):
        inputs[name] = rng.normal(size=(Dm, Dm)) / math.sqrt(Dm)
    if bias:
        for name in ("b_Q", "b_K", "b_V") + (("b_O",) if w_o else ()):
            inputs[name] = rng.normal(size=(Dm,)) * 0.5
    if padding:
        pad = np.zeros((B, T), dtype=bool)
        pad[-1, T - 2:] = True                     # the last item ends with 2 PAD
        if not batched:
            pad = np.zeros(T, dtype=bool)
            pad[T - 2:] = True
        inputs["key_padding_mask"] = pad
    return inputs


# The names a student gives the stages in data/mistakes/.
STUDENT_NAMES = {"Q": "q", "K": "k", "V": "v", "scores": "logits", "masked_scores": "masked_scores",
                 "weights": "attn", "context": "z", "output": "out"}


def npz_bytes(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def files():
    """{file name: bytes} of data/mistakes/ (not README.md)."""
    inputs = make_inputs()
    out = {"bundle.npz": npz_bytes(inputs)}
    for who in SHIPPED:
        stages = student_attention(inputs, heads=2, causal=True, bug=None if who == "correct" else who)
        out[f"{who}.npz"] = npz_bytes({STUDENT_NAMES[s]: t for s, t in stages.items() if s in STUDENT_NAMES})
    return out


def same_arrays(a, b):
    """The same arrays (names, dtypes, shapes; floats to a few ulps: numpy picks its matmul
    and exp kernels by the CPU's instruction set, and their last bits differ between them)."""
    with np.load(io.BytesIO(a)) as x, np.load(io.BytesIO(b)) as y:
        if sorted(x.files) != sorted(y.files):
            return False
        for n in x.files:
            u, v = x[n], y[n]
            if u.dtype != v.dtype or u.shape != v.shape:
                return False
            if u.dtype.kind == "f":
                if not np.allclose(u, v, rtol=8 * np.finfo(u.dtype).eps, atol=8 * np.finfo(u.dtype).eps,
                                   equal_nan=True):
                    return False
            elif not np.array_equal(u, v):
                return False
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="fail when data/mistakes/ differs from what this writes")
    a = p.parse_args(argv)
    stale = []
    for name, data in files().items():
        path = OUT / name
        if a.check:
            if not path.exists() or not same_arrays(path.read_bytes(), data):
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    if stale:
        print("stale in data/mistakes/: " + ", ".join(stale) + " (run scripts/make_mistakes.py)", file=sys.stderr)
        return 1
    if not a.check:
        print(f"wrote {len(files())} files to {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
