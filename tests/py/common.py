"""Shared helpers for the command-line tests of attnscope (test_cli.py, crosscheck.py).

The binary is run exactly as a user runs it: argv in; stdout, stderr and the exit
code out. Expected numbers come from the independent numpy reference
scripts/attn_reference.py (and from PyTorch in crosscheck.py), never from attnscope.

Each script runs all of its tests, or those named (`SCRIPT.py Class[.test_method]...`);
`SCRIPT.py --list` prints what ctest registers one test each for (see main()).

Environment:
    ATTNSCOPE_BIN   the attnscope binary   (default: ROOT/build/attnscope)
    ATTNSCOPE_ROOT  the repository root    (default: two directories above this file)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

ROOT = Path(os.environ.get("ATTNSCOPE_ROOT") or Path(__file__).resolve().parents[2]).resolve()
BIN = Path(os.environ.get("ATTNSCOPE_BIN") or ROOT / "build" / "attnscope").resolve()
DATA = ROOT / "data"

sys.path.insert(0, str(ROOT / "scripts"))
import attn_reference as ref  # noqa: E402  (the numpy float64 oracle)

STAGES = ref.STAGES


def sanitized():
    """Whether the binary is the AddressSanitizer build: its shadow memory and quarantine
    make resident sizes meaningless, and it cannot start under a capped address space
    (RLIMIT_AS), so memory tests drop the cap and the RSS bound under it."""
    if not hasattr(sanitized, "answer"):
        sanitized.answer = BIN.exists() and b"__asan_init" in BIN.read_bytes()
    return sanitized.answer

ERROR_PREFIX = "attnscope: error: "
WARNING_PREFIX = "attnscope: warning: "

# The classroom examples under data/ and the options they are meant to run with
# (data/README.md). Values: (attnscope options, reference keyword arguments).
EXAMPLES = {
    "sentence": (["--heads", "2"], {"heads": 2}),
    "causal": (["--causal", "--heads", "1"], {"heads": 1, "causal": True}),
    "padded": (["--heads", "2"], {"heads": 2}),
    "cross": (["--heads", "2"], {"heads": 2}),
}


class Result:
    """One finished run of the binary."""

    def __init__(self, args, proc):
        self.args = args
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return (f"attnscope {' '.join(map(str, self.args))}\n  exit {self.code}\n"
                f"  stdout: {self.out[:600]!r}\n  stderr: {self.err[:600]!r}")


def run(*args, stdin=None, cwd=None, binary=True, timeout=None):
    """Run `attnscope ARGS...`; stdout/stderr are bytes when binary else str. No time
    limit unless asked: a slow machine must not fail a test (ctest's own timeout catches
    a hang)."""
    args = [str(a) for a in args]
    kwargs = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    proc = subprocess.run([str(BIN)] + args, capture_output=True, cwd=cwd,
                          timeout=timeout, text=not binary, **kwargs)
    return Result(args, proc)


def run_text(*args, **kwargs):
    """run() with stdout/stderr decoded as UTF-8 text."""
    return run(*args, binary=False, **kwargs)


# ---------------------------------------------------------------------------
# Comparisons that say how far off and where (llm.c: "maxdiff = ...")
# ---------------------------------------------------------------------------

# Largest difference seen per category over the whole test run, for the summary.
MAXDIFF = {}


def max_difference(actual, expected, rtol=0.0):
    """(max excess, index) where excess = |actual - expected| / (1 + rtol*|expected|)
    over finite entries; non-finite entries must match exactly (the same infinity,
    NaN where NaN) or their excess is inf."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"shape {a.shape} != expected {e.shape}")
    if a.size == 0:
        return 0.0, ()
    finite = np.isfinite(e)
    with np.errstate(invalid="ignore"):
        same_special = ~finite & ((a == e) | (np.isnan(a) & np.isnan(e)))
        ef = np.where(finite, e, 0.0)
        diff = np.where(finite, np.abs(a - ef) / (1.0 + rtol * np.abs(ef)),
                        np.where(same_special, 0.0, np.inf))
    diff = np.where(np.isnan(diff), np.inf, diff)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return float(diff[idx]), tuple(int(i) for i in idx)


def note_maxdiff(category, value):
    MAXDIFF[category] = max(MAXDIFF.get(category, 0.0), value)


def assert_close(actual, expected, tol, what, category=None, rtol=0.0):
    """Assert |actual - expected| <= tol * (1 + rtol*|expected|) everywhere, with
    the same non-finite entries; the largest difference is recorded in MAXDIFF."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    d, idx = max_difference(a, e, rtol)
    if category:
        note_maxdiff(category, d)
    if not d <= tol:
        raise AssertionError(
            f"{what}: maxdiff = {d:.3e} > {tol:.0e} at {idx}: "
            f"found {a[idx]!r}, expected {e[idx]!r}")
    return d


def reference(bundle, **kwargs):
    """Reference stages (float64) for a bundle dict."""
    return ref.attention(bundle, **kwargs)


def load_example(name, ext="npz"):
    return ref.load_bundle(str(DATA / f"{name}.{ext}"))


def as_float32_inputs(bundle):
    """The bundle as attnscope sees it with --dtype float32: numbers rounded to float32."""
    out = {}
    for k, v in bundle.items():
        v = np.asarray(v)
        out[k] = v.astype(np.float32).astype(np.float64) if v.dtype.kind == "f" else v
    return out


# ---------------------------------------------------------------------------
# Test-case base: a fresh temporary directory per test
# ---------------------------------------------------------------------------

class CliTestCase(unittest.TestCase):
    maxDiff = 4000

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="attnscope-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def path(self, name):
        return self.tmp / name

    def save_npz(self, name, **arrays):
        p = self.path(name)
        np.savez(p, **arrays)
        return p

    def save_npy(self, name, array):
        p = self.path(name)
        np.save(p, array)
        return p

    def save_json(self, name, obj):
        p = self.path(name)
        p.write_text(json.dumps(obj), encoding="utf-8")
        return p

    def assert_ok(self, r, stdout_empty=False, warnings=0):
        """Exit 0, `warnings` warning lines and nothing else on stderr (but the line that
        says which file an output wrote, "attnscope: wrote FILE (...)")."""
        err = r.err.decode() if isinstance(r.err, bytes) else r.err
        self.assertEqual(r.code, 0, r)
        lines = [line for line in err.splitlines() if not line.startswith("attnscope: wrote ")]
        self.assertEqual(len(lines), warnings, r)
        for line in lines:
            self.assertTrue(line.startswith(WARNING_PREFIX), r)
        if stdout_empty:
            self.assertEqual(len(r.out), 0, r)

    def assert_error(self, r, *fragments, code=2):
        """Exactly one stderr line `attnscope: error: ...` containing every fragment,
        nothing on stdout, and the given exit code. Returns the message."""
        err = r.err.decode() if isinstance(r.err, bytes) else r.err
        self.assertEqual(r.code, code, r)
        self.assertEqual(len(r.out), 0, r)
        self.assertTrue(err.endswith("\n"), r)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, r)
        self.assertTrue(lines[0].startswith(ERROR_PREFIX), r)
        for f in fragments:
            self.assertIn(f, lines[0], r)
        return lines[0]

    def assert_no_output_files(self, target):
        """Neither the dump target nor a leftover temporary beside it exists."""
        target = Path(target)
        self.assertFalse(target.exists() or target.is_symlink(),
                         f"{target} was created by a failed run")
        leftovers = [p.name for p in target.parent.glob("*.tmp-*")]
        self.assertEqual(leftovers, [], f"temporary files left in {target.parent}")


def test_names(suite):
    """The tests of a suite, as `Class.test_method`, in the order they run."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from test_names(item)
        else:
            yield item.id().split(".", 1)[1] if "." in item.id() else item.id()


def ctest_units(module):
    """What ctest runs one process each for: one test class (all of its tests). A process
    per test would pay the interpreter, numpy and the reference's imports (torch: 1-2 s)
    for every test; per class, once for a group of related tests, and a failure still
    names its test in the output."""
    units = []
    for name in test_names(unittest.defaultTestLoader.loadTestsFromModule(module)):
        cls = name.split(".", 1)[0]
        if cls not in units:
            units.append(cls)
    return units


USAGE = """usage: {script} [--list | --list-tests | NAME...]
  (no argument)  run every test of the script
  --list         print what ctest runs, one a line: each test class (`Class`), and exit
  --list-tests   print every test, one `Class.test_method` a line, and exit
  NAME...        run only these: `Class` (all of its tests) or `Class.test_method`
ctest registers one test per line of --list (tests/CMakeLists.txt)."""


def main(title, against="reference", module_name="__main__"):
    """Run a module's tests (all, or those named on the command line); print a short
    summary; exit non-zero on failure. `--list` prints the tests' names instead."""
    module = sys.modules[module_name]
    args = sys.argv[1:]
    loader = unittest.defaultTestLoader
    if args in (["-h"], ["--help"]):
        print(USAGE.format(script=Path(sys.argv[0]).name))
        return
    if args == ["--list"]:
        print("\n".join(ctest_units(module)))
        return
    if args == ["--list-tests"]:
        print("\n".join(test_names(loader.loadTestsFromModule(module))))
        return
    options = [a for a in args if a.startswith("-")]
    if options:
        print(f"{title}: unknown option {options[0]}\n" + USAGE.format(script=Path(sys.argv[0]).name),
              file=sys.stderr)
        sys.exit(2)
    if not BIN.exists():
        print(f"{title}: binary not found: {BIN} (set ATTNSCOPE_BIN)", file=sys.stderr)
        sys.exit(1)
    # An unknown NAME becomes a test that fails with the loader's error.
    suite = loader.loadTestsFromNames(args, module) if args else loader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=int(os.environ.get("VERBOSE", "1")),
                                     stream=sys.stdout).run(suite)
    diffs = ", ".join(f"{k} {v:.2e}" for k, v in sorted(MAXDIFF.items()))
    what = f"{title} {' '.join(args)}" if args else title
    print(f"{what}: {result.testsRun} tests, {len(result.failures)} failures, "
          f"{len(result.errors)} errors, {len(result.skipped)} skipped")
    if diffs:
        print(f"{what}: max |diff| vs {against}: {diffs}")
    sys.exit(0 if result.wasSuccessful() else 1)
