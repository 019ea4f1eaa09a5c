#!/usr/bin/python3
"""Record what an attention module receives in a PyTorch model and write it as
attnscope bundles: one .npz per call, with the module's own output beside it.

As a module:

    from capture_bundle import capture
    with capture(model, "captured") as cap:        # every nn.MultiheadAttention in model
        model(src, tgt, tgt_mask=causal, tgt_key_padding_mask=pad)
    print("\\n".join(cap.commands))                 # attnscope run captured/... --heads 8 ...

From the command line, on a script that builds and runs a model:

    /usr/bin/python3 scripts/capture_bundle.py --out captured [--max-calls N] SCRIPT.py [ARGS...]

Each call N of a module named NAME writes, under OUT/NAME/ (OUT itself for a module
captured alone):
    callN.npz           the bundle: only the arrays attnscope knows (x, memory, weights,
                        key_padding_mask, attn_mask, bias_k, bias_v), and `config`, the
                        run options as one JSON string ({"heads": 8, "layout": "torch",
                        "causal": true, ...}): every attnscope command applies them
    callN.expected.npz  the module's own results: `output` (B, Tq, Dout), and `weights`
                        (B, H, Tq, Tk) or `weights_mean` (B, Tq, Tk) when it returned them
    callN.cmd           the attnscope command that runs the bundle (shell-quoted): `attnscope
                        run OUT/NAME/callN.npz`, the options being in the bundle
    callN.json          the options (as flags and as the config), shapes, dtype and notes

`attnscope report --html PAGE.html OUT` draws every call found under OUT, each with its
own options, its row labelled NAME/callN.

nn.MultiheadAttention (self- and cross-attention, batch_first or not, in_proj or separate
q/k/v weights, add_bias_kv, add_zero_attn) is read as it is; weights stay in PyTorch's
(out, in) layout and the command says `--layout torch`. Any other module is read through
a name mapping (see `capture`). Masks, as attnscope reads them:
  - key_padding_mask bool (true = PAD): written as it is. A float key_padding_mask is
    additive (PyTorch >= 2.0; 1.13 when alone): of 0 and -inf only, it is the bool mask
    (-inf = PAD); otherwise it joins a float attn_mask.
  - attn_mask bool (nn.MultiheadAttention: true = blocked): `--attn-mask-means block`;
    float: added to the scores, written as a float attn_mask; (B*H, Tq, Tk) becomes
    (B, H, Tq, Tk); a bool mask that differs by head is written as a float one (0 / -inf).
    A mask equal to the top-left causal mask (true or -inf above the diagonal, nothing
    else) becomes `--causal`, as does is_causal=True with no mask.
A fused path that skips MultiheadAttention.forward cannot be seen, so the fast paths of
nn.TransformerEncoderLayer / nn.TransformerEncoder are turned off during the capture (pad
rows of the encoder's output are then computed rather than zero; the attention is the
same). Anything attnscope cannot express (keys and values from different tensors, dropout
in training mode, a +inf or NaN in a mask, and in PyTorch 1.x a float key_padding_mask
beside a float attn_mask, which 1.13 silently ignores) is refused with CaptureError,
never written approximately.
"""

import argparse
import functools
import importlib
import inspect
import json
import re
import runpy
import shlex
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

__all__ = ["capture", "CaptureError", "Capture", "Call"]

ATTNSCOPE = "attnscope"
TORCH_2 = int(torch.__version__.split(".")[0]) >= 2


class CaptureError(ValueError):
    """What a module received cannot be written as an attnscope bundle exactly."""


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

def _np(t):
    """A tensor as a C-ordered numpy array (bfloat16 widened exactly to float32)."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return np.ascontiguousarray(t.cpu().numpy())


def _attr(obj, path):
    """obj.a.b.c for path "a.b.c" (a callable path is called with obj)."""
    if callable(path):
        return path(obj)
    for part in str(path).split("."):
        obj = getattr(obj, part)
    return obj


def _same(a, b):
    """a and b hold the same numbers (one tensor, or equal tensors)."""
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))


def _causal_pattern(tq, tk):
    """True where query i may NOT see key j under the top-left causal mask (j > i)."""
    return np.triu(np.ones((tq, tk), dtype=bool), k=1)


def _check_01(m, what):
    if m.dtype.kind not in "biuf" or (m.dtype.kind != "b" and not np.isin(m, (0, 1)).all()):
        raise CaptureError(f"{what}: expected bool or 0/1 ({m.dtype}), found other values")


class _Masks:
    """The masks of one call, gathered before they are written:
    pad (B, Tk) bool, true = PAD; block (Bm, Hm, Tq, Tk) bool, true = hidden;
    add (Bm, Hm, Tq, Tk) float, added to the scores; causal (top-left)."""

    def __init__(self, B, H, Tq, Tk):
        self.B, self.H, self.Tq, self.Tk = B, H, Tq, Tk
        self.pad = None
        self.block = None
        self.add = None
        self.causal = False
        self.notes = []

    def _four(self, m, what):
        """A mask given as (Tq, Tk), (B, Tq, Tk), (B*H, Tq, Tk), (H, Tq, Tk) or
        (B|1, H|1, Tq, Tk) as (Bm, Hm, Tq, Tk)."""
        B, H, Tq, Tk = self.B, self.H, self.Tq, self.Tk
        if m.shape[-2:] != (Tq, Tk):
            raise CaptureError(f"{what}: expected its last axes (Tq, Tk) = ({Tq}, {Tk}), found shape {m.shape}")
        if m.ndim == 2:
            return m[None, None]
        if m.ndim == 3 and m.shape[0] == B * H:  # nn.MultiheadAttention's (B*H, Tq, Tk)
            return m.reshape(B, H, Tq, Tk)
        if m.ndim == 3 and m.shape[0] == B:  # (B, Tq, Tk): the same for every head
            return m[:, None]
        if m.ndim == 4 and m.shape[0] in (1, B) and m.shape[1] in (1, H):
            return m
        raise CaptureError(f"{what}: shape {m.shape} is none of (Tq, Tk), (B*H, Tq, Tk), (B, H, Tq, Tk) "
                           f"with B = {B}, H = {H}, Tq = {Tq}, Tk = {Tk}")

    def set_pad(self, m, means=None, what="key_padding_mask"):
        """A key padding mask (B, Tk) or (Tk,), as `means` says: "pad" (1/true = PAD) or
        "keep" (1/true = a real token), values 0/1 of any dtype; None: as
        nn.MultiheadAttention reads it, bool true = PAD and a float mask additive."""
        B, Tk = self.B, self.Tk
        m = np.asarray(m)
        if m.shape not in ((B, Tk), (Tk,)):
            raise CaptureError(f"{what}: expected (B, Tk) = ({B}, {Tk}) or (Tk,), found shape {m.shape}")
        m = np.broadcast_to(m, (B, Tk))
        if m.dtype.kind == "f" and means is None:
            if np.isnan(m).any() or np.isposinf(m).any():
                raise CaptureError(f"{what}: a float mask holds NaN or +inf, which attnscope does not add")
            if np.all((m == 0) | np.isneginf(m)):
                self.pad = np.isneginf(m)
            else:
                self.notes.append(f"the float {what} is added to the scores (a float attn_mask)")
                self.add_float(np.broadcast_to(m[:, None, None, :], (B, 1, self.Tq, Tk)).copy(), what)
            return
        if means not in (None, "pad", "keep"):
            raise CaptureError(f"{what}: a key padding mask means 'pad' or 'keep', not {means!r}")
        _check_01(m, what)
        m = m.astype(bool)
        if means == "keep":
            m = ~m
        self.pad = m if self.pad is None else (self.pad | m)

    def add_float(self, m, what="attn_mask"):
        m = self._four(np.asarray(m), what)
        if np.isnan(m).any() or np.isposinf(m).any():
            raise CaptureError(f"{what}: a float mask holds NaN or +inf, which attnscope does not add")
        self.add = m if self.add is None else self.add + m

    def set_attn_mask(self, m, means=None, bool_means=None, what="attn_mask"):
        """An attention mask, as `means` says: "additive" (a float mask added to the
        scores), "block" (1/true = hidden) or "allow" (1/true = may attend), values 0/1
        of any dtype; None: a float mask is additive and a bool one means `bool_means`
        (nn.MultiheadAttention: "block")."""
        m = np.asarray(m)
        if means is None:
            means = "additive" if m.dtype.kind == "f" else bool_means
            if means is None:
                raise CaptureError(f"{what}: a boolean mask needs its meaning: ('ARG', 'block') for true = hidden "
                                   "or ('ARG', 'allow') for true = may attend")
        if means == "additive":
            if m.dtype.kind != "f":
                raise CaptureError(f"{what}: an additive mask holds floats, found {m.dtype}")
            self.add_float(m, what)
            return
        if means not in ("block", "allow"):
            raise CaptureError(f"{what}: a mask means 'additive', 'block' or 'allow', not {means!r}")
        _check_01(m, what)
        b = self._four(m.astype(bool), what)
        if means == "allow":
            b = ~b
        self.block = b if self.block is None else (self.block | b)

    def finish(self, batched):
        """(arrays, options) for attnscope."""
        arrays, options = {}, []
        block, add = self.block, self.add
        # A boolean mask that differs by head, or beside a float mask, becomes -inf.
        if block is not None and (add is not None or (block.shape[1] > 1 and not (block == block[:, :1]).all())):
            fill = np.where(block, -np.inf, 0.0)
            add = fill if add is None else add + fill
            block = None
        if block is not None:
            block = block[:, :1]
        causal = _causal_pattern(self.Tq, self.Tk)
        if not self.causal and block is not None and block.shape[0] == 1 and (block[0, 0] == causal).all():
            self.causal, block = True, None
        if (not self.causal and add is not None and add.shape[:2] == (1, 1)
                and (np.isneginf(add[0, 0]) == causal).all() and (add[0, 0][~causal] == 0).all()):
            self.causal, add = True, None
        if self.pad is not None and self.pad.any():
            arrays["key_padding_mask"] = self.pad if batched else self.pad[0]
        if block is not None:
            arrays["attn_mask"] = block[0, 0] if block.shape[0] == 1 else block  # (Tq, Tk) or (B, 1, Tq, Tk)
            options += ["--attn-mask-means", "block"]
        if add is not None:
            arrays["attn_mask"] = add[0, 0] if add.shape[:2] == (1, 1) else add  # (Tq, Tk) or 4-D
        if self.causal:
            options.append("--causal")
        return arrays, options


# ---------------------------------------------------------------------------
# One call of a module, read into a bundle
# ---------------------------------------------------------------------------

# attnscope's flags as the keys of a bundle's config record: flags that take a value, and
# flags that stand alone (true when given).
_CONFIG_VALUES = {"--heads": ("heads", int), "--kv-heads": ("kv_heads", int), "--layout": ("layout", str),
                  "--scale": ("scale", float), "--attn-mask-means": ("attn_mask_means", str)}
_CONFIG_FLAGS = {"--causal": "causal", "--add-zero-attn": "add_zero_attn"}


def config_of(options):
    """The config record (a dict) of a call's options, e.g. ["--heads", 2, "--causal"] ->
    {"heads": 2, "causal": True}; causal is always said, true or false."""
    config, k = {"causal": False}, 0
    while k < len(options):
        flag = str(options[k])
        if flag in _CONFIG_FLAGS:
            config[_CONFIG_FLAGS[flag]] = True
            k += 1
        elif flag in _CONFIG_VALUES:
            key, kind = _CONFIG_VALUES[flag]
            config[key] = kind(options[k + 1])
            k += 2
        else:
            raise CaptureError(f"option {flag}: has no key in a bundle's config")
    return config


class Call:
    """One recorded call: the bundle's arrays, attnscope's options (also as the bundle's
    `config`), the module's results."""

    def __init__(self, name, index, arrays, options, expected, info):
        self.name, self.index = name, index
        self.arrays, self.options, self.expected, self.info = arrays, options, expected, info
        self.bundle = self.expected_path = self.cmd_path = self.json_path = None

    @property
    def config(self):
        return config_of(self.options)

    @property
    def argv(self):
        return [ATTNSCOPE, "run", str(self.bundle)]  # the options travel in the bundle's config

    @property
    def command(self):
        return " ".join(shlex.quote(a) for a in self.argv)

    def write(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = directory / f"call{self.index}"
        self.bundle = Path(f"{stem}.npz")
        self.expected_path = Path(f"{stem}.expected.npz")
        self.cmd_path = Path(f"{stem}.cmd")
        self.json_path = Path(f"{stem}.json")
        np.savez(self.bundle, config=np.array(json.dumps(self.config)), **self.arrays)
        np.savez(self.expected_path, **self.expected)
        self.cmd_path.write_text(self.command + "\n", encoding="utf-8")
        doc = dict(self.info, module=self.name, call=self.index, bundle=str(self.bundle),
                   expected=str(self.expected_path), options=[str(o) for o in self.options], config=self.config,
                   command=self.command,
                   arrays={k: f"{v.dtype} {tuple(v.shape)}" for k, v in self.arrays.items()},
                   torch=torch.__version__)
        self.json_path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _bind(forward, args, kwargs):
    sig = inspect.signature(forward)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _read_mha(mha, args, kwargs, result, forward):
    """The bundle of one nn.MultiheadAttention call."""
    a = _bind(forward, args, kwargs)
    query, key, value = a["query"], a["key"], a["value"]
    if mha.training and mha.dropout > 0:
        raise CaptureError(f"the module is in training mode with dropout {mha.dropout}: its weights are random; "
                           "call model.eval() before capturing")
    if not (_same(key, value)):
        raise CaptureError("key and value are different tensors: attnscope projects keys and values from one "
                           "source (x for self-attention, memory for cross-attention)")
    batched = query.dim() == 3
    cross = not _same(query, key)
    if batched and not mha.batch_first:  # (T, B, D) -> (B, T, D)
        query, key = query.transpose(0, 1), key.transpose(0, 1)
    arrays = {"x": _np(query)}
    if cross:
        arrays["memory"] = _np(key)
    B = query.shape[0] if batched else 1
    Tq, Tk, H = query.shape[-2], key.shape[-2], mha.num_heads

    # Weights, as the module holds them (PyTorch's (out, in) layout: --layout torch).
    if mha._qkv_same_embed_dim:
        arrays["in_proj_weight"] = _np(mha.in_proj_weight)
    else:
        for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
            arrays[n] = _np(getattr(mha, n))
    if mha.in_proj_bias is not None:
        arrays["in_proj_bias"] = _np(mha.in_proj_bias)
    arrays["out_proj.weight"] = _np(mha.out_proj.weight)
    if mha.out_proj.bias is not None:
        arrays["out_proj.bias"] = _np(mha.out_proj.bias)
    if mha.bias_k is not None:
        arrays["bias_k"], arrays["bias_v"] = _np(mha.bias_k), _np(mha.bias_v)
    options = ["--heads", H, "--layout", "torch"]
    if mha.add_zero_attn:
        options.append("--add-zero-attn")

    # Masks.
    masks = _Masks(B, H, Tq, Tk)
    kpm, attn_mask = a.get("key_padding_mask"), a.get("attn_mask")
    if kpm is not None:
        if (not TORCH_2 and kpm.is_floating_point() and attn_mask is not None and attn_mask.is_floating_point()
                and bool((kpm != 0).any())):
            raise CaptureError(f"PyTorch {torch.__version__} ignores a float key_padding_mask beside a float "
                               "attn_mask (its masked_fill with a float mask fills nothing), so this output has "
                               "no padding; give key_padding_mask as bool (true = PAD)")
        if (not TORCH_2 and kpm.is_floating_point() and attn_mask is not None
                and not bool(((kpm == 0) | torch.isneginf(kpm)).all())):
            raise CaptureError("a float key_padding_mask with values other than 0 and -inf beside an attn_mask: "
                               f"PyTorch {torch.__version__} combines them by a rule attnscope cannot express")
        masks.set_pad(_np(kpm))  # bool true = PAD; float additive
    if attn_mask is not None:
        if attn_mask.dtype == torch.uint8:
            attn_mask = attn_mask.bool()
        masks.set_attn_mask(_np(attn_mask), bool_means="block")
    if a.get("is_causal"):
        if attn_mask is None:
            masks.causal = True
        else:
            m = _np(attn_mask)
            causal = _causal_pattern(Tq, Tk)
            hidden = m if m.dtype == bool else np.isneginf(m)
            if hidden.shape != (Tq, Tk) or not (hidden == causal).all():
                raise CaptureError("is_causal=True with an attn_mask that is not the causal mask: PyTorch's "
                                   "result then depends on the path it takes")
    more, mask_options = masks.finish(batched)
    arrays.update(more)
    options += mask_options

    # The module's own results.
    out, weights = (result if isinstance(result, tuple) else (result, None))
    if batched and not mha.batch_first:
        out = out.transpose(0, 1)
    expected = {"output": _np(out)}
    if weights is not None:
        expected["weights_mean" if a.get("average_attn_weights", True) else "weights"] = _np(weights)
    info = {"kind": "cross-attention" if cross else "self-attention", "module_type": type(mha).__name__,
            "batch_first": bool(mha.batch_first), "batched": batched, "dtype": str(query.dtype).replace("torch.", ""),
            "sizes": {"B": B, "Tq": Tq, "Tk": Tk, "H": H}, "notes": masks.notes}
    return arrays, options, expected, info


# The keys of a name mapping (see capture()).
_MAP_INPUTS = ("x", "memory", "key_padding_mask", "attn_mask", "is_causal")
_MAP_LINEAR = {"Q": "Q", "K": "K", "V": "V", "O": "O"}
_MAP_TENSORS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
_MAP_OTHER = ("heads", "kv_heads", "scale", "output", "batch_first", "weights_output")
_MAP_KEYS = set(_MAP_INPUTS) | set(_MAP_LINEAR) | set(_MAP_TENSORS) | set(_MAP_OTHER)


def _argument(bound, spec, what):
    """A forward argument named by `spec` (a name, a position, or a callable of the
    bound arguments)."""
    if callable(spec):
        return spec(bound)
    if isinstance(spec, int):
        values = list(bound.values())
        if spec >= len(values):
            raise CaptureError(f"mapping {what!r}: forward has no argument at position {spec}")
        return values[spec]
    if spec not in bound:
        raise CaptureError(f"mapping {what!r}: forward has no argument {spec!r} (it has {', '.join(bound)})")
    return bound[spec]


def _read_mapped(module, args, kwargs, result, forward, mapping):
    """The bundle of one call of any module, read through a name mapping."""
    unknown = set(mapping) - _MAP_KEYS
    if unknown:
        raise CaptureError(f"mapping: unknown key(s) {', '.join(sorted(unknown))} "
                           f"(known: {', '.join(sorted(_MAP_KEYS))})")
    if "x" not in mapping or "heads" not in mapping:
        raise CaptureError("mapping: 'x' (the forward argument holding the queries' input) and 'heads' are required")
    bound = _bind(forward, args, kwargs)
    batch_first = mapping.get("batch_first", True)

    def inp(name):
        t = _argument(bound, mapping[name], name) if name in mapping else None
        if t is not None and batch_first is False and t.dim() == 3:
            t = t.transpose(0, 1)
        return t

    x, memory = inp("x"), inp("memory")
    if x is None:
        raise CaptureError("mapping 'x': the argument is None")
    arrays = {"x": _np(x)}
    if memory is not None and not _same(memory, x):
        arrays["memory"] = _np(memory)
    src = memory if memory is not None else x
    batched = x.dim() == 3

    def number(name):
        v = mapping[name]
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else _attr(module, v)

    H = int(number("heads"))
    options = ["--heads", H]
    if "kv_heads" in mapping:
        options += ["--kv-heads", int(number("kv_heads"))]
    if "scale" in mapping:
        options += ["--scale", repr(float(number("scale")))]
    # Weights: an nn.Linear-like submodule (weight (out, in), bias) or a math-layout tensor.
    for letter in "QKVO":
        if letter in mapping:
            lin = _attr(module, mapping[letter])
            arrays[f"W_{letter}"] = _np(lin.weight).T.copy()
            if getattr(lin, "bias", None) is not None:
                arrays[f"b_{letter}"] = _np(lin.bias)
        for kind in ("W", "b"):
            name = f"{kind}_{letter}"
            if name in mapping:
                t = _attr(module, mapping[name])
                if t is not None:
                    arrays[name] = _np(t)
    for letter in "QKV":
        if f"W_{letter}" not in arrays:
            raise CaptureError(f"mapping: no weight for {letter} (give '{letter}': a Linear submodule, or "
                               f"'W_{letter}': a tensor in the (in, out) layout)")

    B = x.shape[0] if batched else 1
    masks = _Masks(B, H, x.shape[-2], src.shape[-2])
    for name in ("key_padding_mask", "attn_mask"):
        if name not in mapping:
            continue
        spec = mapping[name]
        spec, means = spec if isinstance(spec, tuple) else (spec, None)
        m = _argument(bound, spec, name)
        if m is None:
            continue
        m = _np(m)
        if name == "key_padding_mask":
            masks.set_pad(m, means, what="mapping 'key_padding_mask'")
        else:
            masks.set_attn_mask(m, means, what="mapping 'attn_mask'")
    if "is_causal" in mapping:
        v = mapping["is_causal"]
        masks.causal = bool(v) if isinstance(v, bool) else bool(_argument(bound, v, "is_causal"))
    more, mask_options = masks.finish(batched)
    arrays.update(more)
    options += mask_options

    which = mapping.get("output", 0)
    if callable(which):
        out = which(result)
    elif isinstance(result, (tuple, list)):
        out = result[which]
    elif isinstance(result, dict):
        out = result[which if isinstance(which, str) else "output"]
    else:
        out = result
    if batch_first is False and out.dim() == 3:
        out = out.transpose(0, 1)
    expected = {"output": _np(out)}
    info = {"kind": "cross-attention" if "memory" in arrays else "self-attention",
            "module_type": type(module).__name__, "batch_first": bool(batch_first), "batched": batched,
            "dtype": str(x.dtype).replace("torch.", ""),
            "sizes": {"B": B, "Tq": int(x.shape[-2]), "Tk": int(src.shape[-2]), "H": H}, "notes": masks.notes}
    return arrays, options, expected, info


# ---------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------

def _wrap(module, record):
    """Replace module.forward (on the instance) by one that records each call; returns
    a function that undoes it. A forward wrapper, not a hook: torch 1.13's forward
    pre-hooks do not see keyword arguments (with_kwargs came in 2.0), and
    nn.Transformer*Layer pass every mask by keyword."""
    had_own = "forward" in module.__dict__
    original = module.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        result = original(*args, **kwargs)
        with torch.no_grad():
            record(module, original, args, kwargs, result)
        return result

    module.forward = forward

    def undo():
        if had_own:
            module.forward = original
        else:
            del module.forward

    return undo


def _no_fastpath(root):
    """Turn off the fused paths that skip MultiheadAttention.forward inside root
    (nn.TransformerEncoderLayer / nn.TransformerEncoder, whose fast path checks
    activation_relu_or_gelu); returns a function that restores them."""
    saved = []
    for m in root.modules():
        if isinstance(m, nn.TransformerEncoderLayer) and getattr(m, "activation_relu_or_gelu", 0):
            saved.append((m, m.activation_relu_or_gelu))
            m.activation_relu_or_gelu = 0
    try:  # PyTorch >= 2.2: one switch for MultiheadAttention and the encoder
        mha = importlib.import_module("torch.backends.mha")
        was = mha.get_fastpath_enabled()
        mha.set_fastpath_enabled(False)
    except (ImportError, AttributeError):
        mha = None

    def undo():
        for m, v in saved:
            m.activation_relu_or_gelu = v
        if mha is not None:
            mha.set_fastpath_enabled(was)

    return undo


class Capture:
    """The calls recorded by capture(): `calls` (Call objects, written), `commands`."""

    def __init__(self, out_dir, max_calls, strict, warn=True):
        self.out_dir = Path(out_dir)
        self.warn = warn
        self.max_calls = max_calls
        self.strict = strict
        self.calls = []
        self.skipped = []  # (module name, call index, reason) when strict is False
        self._counts = {}
        self._undo = []

    @property
    def commands(self):
        return [c.command for c in self.calls]

    def _record(self, name, mapping, module, forward, args, kwargs, result):
        index = self._counts.get(name, 0)
        if self.max_calls is not None and index >= self.max_calls:
            return
        self._counts[name] = index + 1
        try:
            if mapping is None:
                parts = _read_mha(module, args, kwargs, result, forward)
            else:
                parts = _read_mapped(module, args, kwargs, result, forward, mapping)
        except CaptureError as e:
            if self.strict:
                raise CaptureError(f"{name or type(module).__name__} call {index}: {e}") from None
            self.skipped.append((name, index, str(e)))
            if self.warn:
                warnings.warn(f"capture_bundle: {name} call {index} not written: {e}")
            return
        call = Call(name, index, *parts)
        if np.isnan(call.expected["output"]).any():
            call.info["notes"].append("the module's output holds NaN (a query with every key masked?); "
                                      "attnscope gives such a row zero weights")
        call.write(self.out_dir / _dir_name(name) if name else self.out_dir)
        self.calls.append(call)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        while self._undo:
            self._undo.pop()()


def _dir_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def capture(root, out_dir, *, modules=None, mapping=None, max_calls=None, strict=True):
    """Record the attention modules under `root` while the returned context is open.

    root       an nn.Module: a model, or the attention module itself.
    out_dir    where the bundles go: OUT/NAME/callN.* per module (NAME its qualified name
               in root, dots kept), or OUT/callN.* when root itself is the module.
    modules    which modules: None = every nn.MultiheadAttention under root (or root
               itself when a mapping is given); else a list of qualified names, module
               instances or module classes.
    mapping    how to read a module that is not nn.MultiheadAttention, a dict:
                 "x"                forward argument (name or position) holding the queries' input
                 "memory"           forward argument holding the keys' and values' input
                                    (cross-attention; absent or None: self-attention)
                 "key_padding_mask" argument, or (argument, "pad"|"keep"): 1/true = PAD, or
                                    1/true = a real token (a Hugging Face attention_mask);
                                    without a meaning, bool true = PAD and a float mask is additive
                 "attn_mask"        argument, or (argument, "additive"|"block"|"allow"): added to
                                    the scores, 1/true = hidden, 1/true = may attend; without a
                                    meaning, a float mask is additive and a bool one is refused
                 "is_causal"        True, or an argument holding it
                 "Q", "K", "V", "O" attribute path of an nn.Linear-like submodule (weight
                                    (out, in), optional bias), e.g. "q_proj"
                 "W_Q".."b_O"       attribute path (or callable of the module) of a tensor in
                                    the math layout (in, out), instead of a Linear
                 "heads", "kv_heads", "scale"  numbers, or attribute paths holding them
                 "output"           which item of the result is the output (default 0)
                 "batch_first"      False when inputs and output are (T, B, D)
    max_calls  at most this many calls recorded per module.
    strict     True: a call attnscope cannot express raises CaptureError; False: it is
               skipped with a warning and listed in `skipped`.
    """
    cap = Capture(out_dir, max_calls, strict)
    named = dict(root.named_modules())
    if modules is None:
        if mapping is None:
            chosen = [(n, m) for n, m in named.items() if isinstance(m, nn.MultiheadAttention)]
        else:
            chosen = [("", root)]
    else:
        chosen = []
        for sel in modules:
            if isinstance(sel, str):
                if sel not in named:
                    raise CaptureError(f"no module named {sel!r} under the root")
                chosen.append((sel, named[sel]))
            elif isinstance(sel, type):
                chosen += [(n, m) for n, m in named.items() if isinstance(m, sel)]
            else:
                chosen += [(n, m) for n, m in named.items() if m is sel]
    if not chosen:
        raise CaptureError("no module to capture (no nn.MultiheadAttention under the root, and no `modules`)")
    for name, m in chosen:
        use = mapping if mapping is not None else (None if isinstance(m, nn.MultiheadAttention) else "?")
        if use == "?":
            raise CaptureError(f"{name}: a {type(m).__name__} needs a mapping (which arguments are x, memory, ...)")

        def record(module, forward, args, kwargs, result, _name=name, _mapping=use):
            cap._record(_name, _mapping, module, forward, args, kwargs, result)

        cap._undo.append(_wrap(m, record))
    cap._undo.insert(0, _no_fastpath(root))
    return cap


# ---------------------------------------------------------------------------
# Command line: run a script with every nn.MultiheadAttention captured
# ---------------------------------------------------------------------------

def _capture_everywhere(out_dir, max_calls, strict):
    """Capture every nn.MultiheadAttention any code calls, by wrapping the classes'
    forward methods; returns (Capture, undo)."""
    cap = Capture(out_dir, max_calls, strict, warn=False)  # main() lists what was skipped
    names = {}
    mha_forward = nn.MultiheadAttention.forward

    @functools.wraps(mha_forward)
    def forward(self, *args, **kwargs):
        result = mha_forward(self, *args, **kwargs)
        name = names.setdefault(id(self), f"mha{len(names)}")
        with torch.no_grad():
            cap._record(name, None, self, mha_forward.__get__(self), args, kwargs, result)
        return result

    def no_fast(cls):
        original = cls.forward

        @functools.wraps(original)
        def wrapped(self, *args, **kwargs):
            undo = _no_fastpath(self)
            try:
                return original(self, *args, **kwargs)
            finally:
                undo()

        cls.forward = wrapped
        return lambda: setattr(cls, "forward", original)

    nn.MultiheadAttention.forward = forward
    undos = [lambda: setattr(nn.MultiheadAttention, "forward", mha_forward),
             no_fast(nn.TransformerEncoder), no_fast(nn.TransformerEncoderLayer)]

    def undo():
        for u in undos:
            u()

    return cap, undo


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Run a Python script with every nn.MultiheadAttention call recorded as an attnscope "
                    "bundle (OUT/mhaN/callK.npz, .expected.npz, .cmd, .json); prints each attnscope command.",
        usage="%(prog)s --out DIR [--max-calls N] [--keep-going] SCRIPT [ARGS...]")
    p.add_argument("--out", required=True, help="directory for the bundles")
    p.add_argument("--max-calls", type=int, default=None, help="at most N calls per module")
    p.add_argument("--keep-going", action="store_true",
                   help="skip a call attnscope cannot express (with a warning) instead of stopping")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    o = p.parse_args(argv)
    if not Path(o.script).is_file():
        print(f"capture_bundle: no such script: {o.script}", file=sys.stderr)
        return 2
    cap, undo = _capture_everywhere(o.out, o.max_calls, not o.keep_going)
    sys.argv = [o.script] + o.args
    try:
        runpy.run_path(o.script, run_name="__main__")
    except CaptureError as e:
        print(f"capture_bundle: {e}", file=sys.stderr)
        return 2
    finally:
        undo()
    for c in cap.calls:
        print(c.command)
    for name, index, why in cap.skipped:
        print(f"capture_bundle: {name} call {index} not written: {why}", file=sys.stderr)
    if not cap.calls:
        print("capture_bundle: no nn.MultiheadAttention was called", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
