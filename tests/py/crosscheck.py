#!/usr/bin/python3
"""Live cross-check of attnscope against torch.nn.MultiheadAttention.

Seeded random cases: batched (B = 1..3) or unbatched (2-D x), self- or
cross-attention (memory width Dkv = kdim = vdim, equal to E or not), heads H
dividing E, biases on or off, random key padding, causal masks in both
alignments. Each case builds an nn.MultiheadAttention (float64, batch_first),
saves its state dict and inputs with np.savez, runs

    attnscope run CASE.npz --layout torch --heads H [--causal ...] --dump OUT.npz -q

in float64 and with --dtype float32, and compares `weights` (B, H, Tq, Tk) and
`output` (B, Tq, E) with what PyTorch returns (average_attn_weights=False).

Cases in which a query row would see no key are redrawn: PyTorch 1.13 returns
NaN there while attnscope returns zeros (docs/design.md, "The stage table"), so they are
not comparable.

    /usr/bin/python3 tests/py/crosscheck.py          (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
    ATTNSCOPE_ALLOW_NO_TORCH=1 turns a missing torch into a skip instead of a failure.
"""

import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, max_difference, run  # noqa: E402

SEED = 20240607
CASES = 30
TOL = {"float64": 1e-10, "float32": 1e-5}   # float32: relative to max(1, |torch value|)

try:
    import torch
except ImportError as exc:  # a clear message, then pass or fail as the environment asks
    print(f"crosscheck: cannot import torch ({exc}); this check needs /usr/bin/python3 "
          "with python3-torch.")
    if os.environ.get("ATTNSCOPE_ALLOW_NO_TORCH") == "1":
        print("crosscheck: skipped (ATTNSCOPE_ALLOW_NO_TORCH=1)")
        sys.exit(0)
    sys.exit(1)


def causal_blocked(Tq, Tk, align):
    """torch's boolean attn_mask, True = may NOT attend: (Tq, Tk)."""
    ones = torch.ones(Tq, Tk, dtype=torch.bool)
    if align == "top-left":
        return torch.triu(ones, diagonal=1)
    return torch.triu(ones, diagonal=1 + Tk - Tq)      # bottom-right: query i at i + Tk - Tq


def draw_case(rng):
    """One random configuration, or None when some query row would see no key."""
    c = {"B": [None, 1, 2, 3][rng.integers(4)]}
    c["E"] = int(rng.choice([4, 8, 12]))
    c["H"] = int(rng.choice([h for h in range(1, c["E"] + 1) if c["E"] % h == 0]))
    c["cross"] = bool(rng.integers(2))
    c["Tq"] = int(rng.integers(1, 10))
    c["Tk"] = int(rng.integers(1, 10)) if c["cross"] else c["Tq"]
    c["Dkv"] = int(rng.choice([3, 5, c["E"]])) if c["cross"] else c["E"]
    c["bias"] = bool(rng.integers(2))
    c["causal"] = bool(rng.integers(2))
    c["align"] = "top-left"
    if c["causal"] and c["Tq"] != c["Tk"] and rng.integers(2):
        c["align"] = "bottom-right"
    # Key padding (True = PAD) for about half the cases.
    nb = c["B"] or 1
    pad = rng.random((nb, c["Tk"])) < 0.3 if rng.integers(2) else None
    c["pad"] = pad

    visible = np.ones((nb, c["Tq"], c["Tk"]), bool)           # (B, Tq, Tk)
    if pad is not None:
        visible &= ~pad[:, None, :]
    if c["causal"]:
        visible &= ~causal_blocked(c["Tq"], c["Tk"], c["align"]).numpy()[None]
    if not visible.any(axis=-1).all():
        return None
    return c


def describe(c):
    batch = "unbatched" if c["B"] is None else f"B={c['B']}"
    mode = f"cross Dkv={c['Dkv']}" if c["cross"] else "self"
    masks = ("pad " if c["pad"] is not None else "") + \
            (f"causal({c['align']})" if c["causal"] else "")
    return (f"{batch} Tq={c['Tq']} Tk={c['Tk']} E={c['E']} H={c['H']} {mode} "
            f"{'bias' if c['bias'] else 'no-bias'} {masks or 'no-mask'}")


def build(c, rng, directory, index):
    """Make the MHA and its inputs; save them; return (npz path, torch weights, output)."""
    E, Dkv = c["E"], c["Dkv"]
    mha = torch.nn.MultiheadAttention(E, c["H"], bias=c["bias"], batch_first=True,
                                      kdim=Dkv, vdim=Dkv, dtype=torch.float64)
    with torch.no_grad():
        # Random parameters of the usual size (biases included: torch starts them at 0).
        for _, p in mha.named_parameters():
            fan_in = p.shape[-1] if p.dim() == 2 else 4
            p.copy_(torch.tensor(rng.normal(0.0, 1.0 / math.sqrt(fan_in), tuple(p.shape))))
    mha.eval()

    lead = () if c["B"] is None else (c["B"],)
    x = rng.standard_normal(lead + (c["Tq"], E))                  # ([B,] Tq, E)
    src = rng.standard_normal(lead + (c["Tk"], Dkv)) if c["cross"] else x
    kpm = None
    if c["pad"] is not None:
        kpm = c["pad"] if c["B"] is not None else c["pad"][0]      # ([B,] Tk), True = PAD
    attn_mask = causal_blocked(c["Tq"], c["Tk"], c["align"]) if c["causal"] else None

    with torch.no_grad():
        out, w = mha(torch.tensor(x), torch.tensor(src), torch.tensor(src),
                     key_padding_mask=None if kpm is None else torch.tensor(kpm),
                     need_weights=True, attn_mask=attn_mask, average_attn_weights=False)

    arrays = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
    arrays["x"] = x
    if c["cross"]:
        arrays["memory"] = src
    if kpm is not None:
        arrays["key_padding_mask"] = kpm
    path = directory / f"case{index:02d}.npz"
    np.savez(path, **arrays)
    return path, w.numpy(), out.numpy()


class CrossCheck(CliTestCase):

    def test_random_cases_against_torch(self):
        rng = np.random.default_rng(SEED)
        overall = {(d, s): 0.0 for d in TOL for s in ("weights", "output")}
        done = redrawn = 0
        while done < CASES:
            c = draw_case(rng)
            if c is None:
                redrawn += 1
                continue
            path, w_torch, out_torch = build(c, rng, self.tmp, done)
            args = ["run", path, "--layout", "torch", "--heads", c["H"]]
            if c["causal"]:
                args += ["--causal", "--causal-align", c["align"]]
            line = f"case {done:02d}: {describe(c):<62}"
            for dtype in TOL:
                with self.subTest(case=done, dtype=dtype, config=describe(c)):
                    dump = self.tmp / f"out{done:02d}-{dtype}.npz"
                    r = run(*args, "--dtype", dtype, "--dump", dump, "-q")
                    self.assert_ok(r, stdout_empty=True)
                    rtol = 1.0 if dtype == "float32" else 0.0
                    with np.load(dump) as npz:
                        for stage, expected in (("weights", w_torch), ("output", out_torch)):
                            self.assertEqual(npz[stage].shape, expected.shape, stage)
                            d, idx = max_difference(npz[stage], expected, rtol)
                            overall[dtype, stage] = max(overall[dtype, stage], d)
                            common.note_maxdiff(f"{dtype} {stage}", d)
                            line += f"  {dtype} {stage} maxdiff={d:.2e}"
                            self.assertLessEqual(d, TOL[dtype], f"{stage} at {idx}")
            print(line)
            done += 1
        print(f"crosscheck: {done} cases (seed {SEED}; {redrawn} draws with a fully "
              f"masked row redrawn)")
        for (dtype, stage), d in overall.items():
            print(f"crosscheck: max {stage} maxdiff {dtype} = {d:.3e} (tolerance {TOL[dtype]:.0e}"
                  f"{', relative' if dtype == 'float32' else ''})")


if __name__ == "__main__":
    common.main("crosscheck", against="torch")
