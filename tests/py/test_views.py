#!/usr/bin/python3
"""The views for a person (--explain, --heatmap, --panels, --diagnose, --cell), the
experiments (--zero-key, --scale none, --temperature, --ignore-padding, --no-causal,
--compare) and their errors, run as a user runs them: argv in; stdout, stderr and the
exit code out.

Expected numbers come from the numpy reference scripts/attn_reference.py or are
computed here from attnscope's own --json stages (for properties such as "entropy is
-sum w ln w of the printed weights"), never from the code that prints them. The text
snapshots under tests/golden_text/ are compared exactly, and their numbers are checked
against the reference too, so a wrong snapshot cannot pass for a right one.

    /usr/bin/python3 tests/py/test_views.py          (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import difflib
import json
import math
import os
import pty
import re
import shlex
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, DATA, ROOT, STAGES, CliTestCase, assert_close, ref, run  # noqa: E402
import make_golden_text as golden  # noqa: E402  (scripts/, on sys.path through common)

TOL = 1e-12
GOLDEN = ROOT / "tests" / "golden_text"
RAMP = ".,:-=+*#%@"          # the no-colour heatmap ramp, from 0 to 1 of the legend's range (no blank)
MASKED = "××"
ESC = "\033"

# The data/ examples with the options data/README.md runs them with:
# (attnscope options, reference keyword arguments).
EXAMPLES = {
    "sentence": (["--heads", "2"], {"heads": 2}),
    "causal": (["--causal"], {"heads": 1, "causal": True}),
    "padded": (["--heads", "2"], {"heads": 2}),
    "cross": (["--heads", "2"], {"heads": 2}),
    "induction": (["--causal"], {"heads": 1, "causal": True}),
    "reverse": ([], {"heads": 1}),
}

# Each view, as the options that show it (the cell is one every example has).
VIEWS = {
    "heatmap": ["--heatmap"],
    "panels": ["--panels"],
    "explain": ["--explain"],
    "diagnose": ["--diagnose", "--stages", "weights"],
    "cell": ["--cell", "CELL", "--stages", "none"],
}

DIAGNOSTIC_KEYS = {
    "batch": int, "head": int, "query": int, "visible_keys": int, "max_key": int,
    "max_contribution_key": int,
    "entropy": float, "effective_keys": float, "max_weight": float, "row_sum": float,
    "score_spread_raw": float, "score_spread_scaled": float,
    "contribution": list,
    "fully_masked": bool, "nearly_uniform": bool, "nearly_one_hot": bool,
}
UNIFORM_FRACTION = ONE_HOT_WEIGHT = 0.9   # diagnostics.hpp


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def example_args(name, *extra):
    return ["run", f"data/{name}.json", *EXAMPLES[name][0], *extra]


def view_env(**extra):
    """The environment of a run whose look must not depend on the caller's terminal."""
    env = golden.environment()
    env.update(extra)
    return env


def run_in_root(*args, env=None):
    """Run attnscope from the repository root (relative paths, as the snapshots are)."""
    proc = subprocess.run([str(BIN)] + [str(a) for a in args], cwd=ROOT, env=env or view_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, encoding="utf-8")
    return common.Result([str(a) for a in args], proc)


def run_on_terminal(*args, env):
    """Run attnscope with stdout on a pseudo-terminal; returns (exit code, output)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(BIN)] + [str(a) for a in args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=subprocess.PIPE)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:        # EIO: the terminal's other side is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.stderr.read()
    code = proc.wait()
    proc.stderr.close()
    return code, b"".join(chunks).decode("utf-8")


def json_doc(testcase, *args):
    r = run_in_root(*args, "--json")
    testcase.assert_ok(r)
    return json.loads(r.out)


def stage(doc, name):
    """A --json stage as a numpy array ("-inf" strings restored)."""
    st = doc["stages"][name]
    return np.array(st["data"], dtype=bool if st["dtype"] == "bool" else float)


def batched(doc, name):
    """A stage with its batch axis, also for a 2-D x."""
    a = stage(doc, name)
    return a if doc["config"]["batched"] else a[None]


def reference_for(name, **overrides):
    bundle = ref.load_bundle(str(DATA / f"{name}.json"))
    kwargs = dict(EXAMPLES[name][1], **overrides)
    return bundle, ref.attention(bundle, **kwargs)


def with_batch_axis(bundle, stages):
    """Reference stages with their batch axis, also for a 2-D x."""
    if np.asarray(bundle["x"]).ndim == 3:
        return stages
    return {k: v[None] for k, v in stages.items()}


def softmax_rows(masked):
    """Softmax over the last axis; a row of -inf only gives 0 (the documented convention)."""
    mx = np.max(masked, axis=-1, keepdims=True)
    e = np.exp(masked - np.where(np.isfinite(mx), mx, 0.0))      # exp(-inf) = 0
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def long_lines(text, width=80):
    """(display width, line) of every line wider than `width` code points."""
    return [(len(line), line) for line in text.splitlines() if len(line) > width]


def describe_long(found, limit=6):
    return "\n".join(f"  {n:3d}: {line}" for n, line in found[:limit]) + (
        f"\n  ... and {len(found) - limit} more" if len(found) > limit else "")


def demo_commands():
    """The `run ...` command lines of scripts/demo, as argv lists."""
    out = []
    for line in (ROOT / "scripts" / "demo").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s+(run\s.*?)\s*$", line)
        if m:
            out.append(shlex.split(m.group(1)))
    return out


def options_of(args):
    """Reference keyword arguments for an attnscope argv."""
    kw = {"heads": 1}
    for k, a in enumerate(args):
        if a == "--heads":
            kw["heads"] = int(args[k + 1])
        elif a == "--causal":
            kw["causal"] = True
        elif a == "--scale":
            kw["scale"] = 1.0 if args[k + 1] == "none" else float(args[k + 1])
    return kw


def clip_label(s, n):
    return s if len(s) <= n else s[:n] + "…"


# ---------------------------------------------------------------------------
# Snapshots of the text views
# ---------------------------------------------------------------------------

def snapshot(name):
    return (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")


def command(name):
    return next(c for c in golden.load_commands() if c["name"] == name)


class GoldenText(CliTestCase):
    """Exact stdout of the commands in tests/golden_text/commands.json."""

    def test_snapshots_match(self):
        commands = golden.load_commands()
        self.assertGreaterEqual(len(commands), 6)
        for c in commands:
            with self.subTest(c["name"]):
                proc = golden.run_command(BIN, c["args"])
                self.assertEqual((proc.returncode, proc.stderr), (0, ""), c["args"])
                self.assertEqual(golden.problems(proc.stdout), [])
                expected = snapshot(c["name"])
                if proc.stdout != expected:
                    diff = "".join(list(difflib.unified_diff(
                        expected.splitlines(True), proc.stdout.splitlines(True),
                        f"tests/golden_text/{c['name']}.txt", "now", n=1))[:60])
                    self.fail(f"attnscope {' '.join(c['args'])}\n{diff}\n(if the change is right: "
                              f"/usr/bin/python3 scripts/make_golden_text.py, then read the diff)")

    def test_every_snapshot_is_listed_and_relative(self):
        commands = golden.load_commands()
        names = {c["name"] for c in commands}
        self.assertEqual(len(names), len(commands), "duplicate names")
        self.assertEqual({p.stem for p in GOLDEN.glob("*.txt")}, names)
        for c in commands:
            self.assertEqual(c["args"][0], "run")
            for a in c["args"]:
                self.assertFalse(str(a).startswith("/"), f"{c['name']}: absolute path {a}")
            self.assertNotIn("--timings", c["args"])
            text = snapshot(c["name"])
            self.assertEqual(golden.problems(text), [], c["name"])
            self.assertNotIn(ESC, text, c["name"])

    # The snapshots are checked against the reference: a snapshot is only right if its
    # numbers are.

    def test_explain_snapshot_numbers(self):
        name = "causal_explain"
        args = command(name)["args"]
        kw = options_of(args)
        bundle = ref.load_bundle(str(ROOT / args[1]))
        expected = ref.attention(bundle, **kw)
        text = snapshot(name)
        for st in ("Q", "K", "V", "scores", "masked_scores", "weights", "context"):
            with self.subTest(st):
                printed = printed_matrix(text, st)
                assert_close(printed, expected[st][0], 0.5e-4 + TOL, f"{name}: {st}")
        mask = expected["mask"]
        self.assertIn(f"{int(mask.sum())} of {mask.size} (query, key) pairs are visible, "
                      f"{int(mask.size - mask.sum())} hidden.", " ".join(text.split()))
        qk = expected["scores"] / 0.5
        self.assertIn(f"Range before scaling [{qk.min():.4g}, {qk.max():.4g}], after "
                      f"[{expected['scores'].min():.4g}, {expected['scores'].max():.4g}]", " ".join(text.split()))

    def test_cell_snapshot_numbers(self):
        for name in ("causal_cell", "induction_cell"):
            with self.subTest(name):
                args = command(name)["args"]
                kw = options_of(args)
                cell = [int(v) for v in args[args.index("--cell") + 1].split(",")]
                decimals = int(args[args.index("--decimals") + 1]) if "--decimals" in args else 4
                bundle = ref.load_bundle(str(ROOT / args[1]))
                e = with_batch_axis(bundle, ref.attention(bundle, **kw))
                b, h, i, j = cell if len(cell) == 4 else [0, *cell]
                q, k, v = e["Q"][b, h, i], e["K"][b, h, j], e["V"][b, h, j]
                m = e["masked_scores"][b, h, i]
                w = e["weights"][b, h, i, j]
                text = snapshot(name)
                tol = 0.5 * 10.0 ** -decimals + TOL
                numbers = {
                    "sum = ": float(q @ k),
                    "] = ": e["scores"][b, h, i, j],
                    "row max over the visible keys = ": m.max(),
                    # the keys the sum runs over: the visible ones (issue 21: not all Tk)
                    (f"over the {n} visible key{'s' if n > 1 else ''} = " if (n := int(np.isfinite(m).sum())) < m.size
                     else f"over the {m.size} keys = "): np.exp(m - m.max()).sum(),
                    "[weights = ": w,
                }
                for marker, want in numbers.items():
                    assert_close(number_after(text, marker), want, tol, f"{name}: {marker!r}")
                rows = [line.split() for line in text.splitlines() if re.match(r"^\s+d\d+\s", line)]
                self.assertEqual(len(rows), v.size)
                printed = np.array([[float(x) for x in r[1:]] for r in rows])
                assert_close(printed, np.stack([v, w * v, e["context"][b, h, i]], axis=1), tol,
                             f"{name}: v_j, w·v_j, context")

    def test_diagnose_snapshot_numbers(self):
        for name in ("sentence_diagnose", "sentence_unscaled_diagnose"):
            with self.subTest(name):
                args = command(name)["args"]
                kw = options_of(args)
                bundle = ref.load_bundle(str(ROOT / args[1]))
                e = ref.attention(bundle, **kw)
                tokens = list(bundle["key_tokens"])
                scale = kw.get("scale", 1 / math.sqrt(e["Q"].shape[-1]))
                tables = diagnostic_tables(snapshot(name))
                self.assertEqual(sorted(tables), [f"head {h}" for h in range(kw["heads"])])
                for h in range(kw["heads"]):
                    rows = tables[f"head {h}"]
                    self.assertEqual(len(rows), e["weights"].shape[1])
                    for i, row in enumerate(rows):
                        w = e["weights"][h, i]
                        c = np.linalg.norm(w[:, None] * e["V"][h], axis=1)
                        H = -np.sum(w[w > 0] * np.log(w[w > 0]))
                        s = e["scores"][h, i]
                        what = f"{name}: head {h} query {i}"
                        self.assertEqual(int(row[1]), w.size, what)
                        assert_close(float(row[2]), H, 0.5e-3 + TOL, f"{what}: entropy")
                        assert_close(float(row[3]), np.exp(H), 0.5e-2 + TOL, f"{what}: effective keys")
                        assert_close(float(row[4]), w.max(), 0.5e-3 + TOL, f"{what}: max weight")
                        self.assertEqual(row[5], tokens[int(np.argmax(w))], what)
                        top, share = row[6].split()  # the key and its share (%) of sum_j ||w_ij v_j||
                        self.assertEqual(top, tokens[int(np.argmax(c))], what)
                        self.assertEqual(share, f"{int(np.floor(100 * c.max() / c.sum() + 0.5))}", what)
                        raw, scaled = (float(x) for x in row[7].replace(" ", "").split("→"))
                        self.assertAlmostEqual(raw / (np.ptp(s) / scale), 1, delta=5e-3, msg=what)
                        self.assertAlmostEqual(scaled / np.ptp(s), 1, delta=5e-3, msg=what)
                        flag = row[9] if len(row) > 9 else ""
                        want = ("uniform" if np.exp(H) >= UNIFORM_FRACTION * w.size else
                                "one-hot" if w.max() >= ONE_HOT_WEIGHT else "")
                        self.assertIn(want, flag, what)
                        if not want:
                            self.assertEqual(flag, "", what)

    def test_heatmap_snapshot_cells(self):
        for name in ("padded_heatmap", "padded_masked_heatmap", "cross_heatmap_wide", "reverse_panels"):
            with self.subTest(name):
                args = command(name)["args"]
                kw = options_of(args)
                bundle = ref.load_bundle(str(ROOT / args[1]))
                e = with_batch_axis(bundle, ref.attention(bundle, **kw))
                qt = bundle.get("query_tokens")
                qt = [list(qt)] * e["Q"].shape[0] if qt is not None and np.ndim(qt) == 1 else qt
                panels, legends = heatmap_panels(snapshot(name))
                self.assertGreater(len(panels), 0)
                checked = check_heatmap_panels(self, name, panels, legends, e, qt, "--panels" in args)
                self.assertGreater(checked, 0)


def printed_matrix(text, st):
    """The numbers of the first table under the `== ST = ...` heading of a text report:
    its lines are indented by 4+ spaces (explanations by 3), a header line, then one line
    per row, a label (without spaces) first."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(f"== {st} = "))
    table = []
    for line in lines[start + 1:]:
        if line.startswith("== "):
            break
        if line.startswith("    ") and line.strip():
            table.append(line.split())
        elif table:
            break
    return np.array([[float(x) for x in row[1:]] for row in table[1:]])


def number_after(text, marker):
    at = text.index(marker) + len(marker)
    return float(re.match(r"\s*(-?(?:\d+\.?\d*|inf))", text[at:]).group(1))


def diagnostic_tables(text):
    """{"head h" or "batch b, head h": [row fields, ...]} of a --diagnose report; fields are
    split on runs of 2+ spaces (a spread "a→b" stays one field)."""
    tables, title, rows = {}, None, None
    for line in text.splitlines():
        if line.startswith("  -- "):
            title = line[5:].strip()
        elif title and line.strip().startswith("query"):
            rows = tables.setdefault(title, [])
        elif rows is not None and re.match(r"^    \S", line) and not re.match(r"^    \d+ rows:", line):
            rows.append(re.split(r"\s{2,}", line.strip()))
        elif rows is not None and not line.startswith("    "):
            rows = None
    return tables


TITLE = re.compile(r"(masked_scores|scores|mask|weights)(?:, batch (\d+))?(?:, head (\d+))?")


def title_positions(line):
    """[(column, match)] when `line` is a row of panel titles (and nothing else), else []."""
    if not line.startswith("  ") or line.startswith("  -- "):
        return []
    found = list(TITLE.finditer(line))
    rest = TITLE.sub("", line)
    return [(m.start(), m) for m in found] if found and not rest.strip() else []


def heatmap_panels(text):
    """The panels of a no-colour heatmap report, in order, as (stage, batch, head, rows):
    rows are the panel's non-blank lines under its title, cut to the panel's columns;
    and the legends as {stage: (low, high) strings}: one labelled line per stage,
    "  legend  STAGE  LOW RAMP HIGH" (later ones indented alike)."""
    lines = text.splitlines()
    panels, legends = [], {}
    k = 0
    while k < len(lines):
        legend = re.match(r"^  (?:legend|      )  (\w+)\s+(\S+) ([.,:=+*#%@-]{20}) (\S+)", lines[k])
        if legend:
            legends[legend.group(1)] = (legend.group(2), legend.group(4))
        titles = title_positions(lines[k])
        k += 1
        if not titles:
            continue
        block = []
        while k < len(lines) and lines[k].strip():
            block.append(lines[k])
            k += 1
        for n, (col, m) in enumerate(titles):
            end = titles[n + 1][0] if n + 1 < len(titles) else None
            rows = [row[col:end] for row in block if row[col:end].strip()]
            panels.append((m.group(1), int(m.group(2) or 0), int(m.group(3) or 0), rows))
    return panels, legends


def check_heatmap_panels(tc, name, panels, legends, e, query_tokens, panel_mode):
    """Every cell of every panel against the reference: "××" exactly where the mask is
    false, else the ramp character of the value's place in the legend's range: one
    range per stage, shared by every head and panel drawn (scores and masked_scores
    share one when the run has both: with --panels), [0, 1] for weights. Returns the
    number of cells checked."""
    checked = 0
    for n, (st, b, h, rows) in enumerate(panels):
        matrix = e[st][b] if st == "mask" else e[st][b, h]
        mask = e["mask"][b]
        Tq, Tk = matrix.shape
        if st in ("mask", "weights"):
            rng = (0.0, 1.0)
        else:
            group = ("scores", "masked_scores") if panel_mode else (st,)
            shown = [(s, pb, ph) for s, pb, ph, _ in panels if s in group]
            values = np.concatenate([e[s][pb, ph].ravel() for s, pb, ph in shown])
            values = values[np.isfinite(values)]
            rng = (values.min(), values.max())
        if st != "mask":
            tc.assertEqual(legends[st], (f"{rng[0]:.4g}", f"{rng[1]:.4g}"), f"{name}: legend of {st}")
        labels = [clip_label(str(t), 8) for t in query_tokens[b]] if query_tokens is not None else \
            [f"q{i}" for i in range(Tq)]
        label_w = max(1, *(len(s) for s in labels))
        for i, row in enumerate(rows[-Tq:]):
            tc.assertEqual(row[:label_w].rstrip(), labels[i], f"{name}: {st} batch {b} head {h} row {i}")
            cells = row[label_w + 1:label_w + 1 + 2 * Tk]
            for j in range(Tk):
                got = cells[2 * j:2 * j + 2]
                what = f"{name}: {st} batch {b} head {h} [{i}, {j}]"
                if not mask[i, j]:
                    tc.assertEqual(got, MASKED, what)
                    continue
                t = (matrix[i, j] - rng[0]) / (rng[1] - rng[0]) * 9
                want = {math.floor(t + 0.5)}
                if abs(t - math.floor(t) - 0.5) < 1e-9:      # on a rounding boundary: either side
                    want.add(math.floor(t))
                tc.assertIn(got, {RAMP[min(9, max(0, x))] * 2 for x in want}, f"{what}: value {matrix[i, j]}")
                checked += 1
    return checked


# ---------------------------------------------------------------------------
# Colour and width
# ---------------------------------------------------------------------------

class Colour(CliTestCase):
    ARGS = example_args("sentence", "--stages", "weights", "--heatmap", "--width", "80")

    def test_never_and_a_pipe_give_plain_text(self):
        for extra, env in ((["--color", "never"], {}), ([], {}), (["--color", "auto"], {"COLORTERM": "truecolor"}),
                           (["--color", "never"], {"COLORTERM": "truecolor"})):
            with self.subTest(extra=extra, env=env):
                r = run_in_root(*self.ARGS, *extra, env=view_env(**env))
                self.assert_ok(r)
                self.assertNotIn(ESC, r.out)
                self.assertIn(MASKED + " masked", r.out)   # the legend is there, uncoloured

    def test_always_gives_256_colours_or_truecolor(self):
        r = run_in_root(*self.ARGS, "--color", "always")
        self.assert_ok(r)
        self.assertIn(ESC + "[48;5;", r.out)
        self.assertNotIn(ESC + "[48;2;", r.out)
        for value in ("truecolor", "24bit"):
            with self.subTest(COLORTERM=value):
                r = run_in_root(*self.ARGS, "--color", "always", env=view_env(COLORTERM=value))
                self.assert_ok(r)
                self.assertIn(ESC + "[48;2;", r.out)
                self.assertNotIn(ESC + "[48;5;", r.out)

    def test_auto_on_a_terminal_and_no_color(self):
        env = view_env(TERM="xterm-256color")
        code, out = run_on_terminal(*self.ARGS, env=env)
        self.assertEqual(code, 0)
        self.assertIn(ESC + "[48;5;", out)             # a terminal gets colour ...
        env["NO_COLOR"] = "1"
        code, out = run_on_terminal(*self.ARGS, env=env)
        self.assertEqual(code, 0)
        self.assertNotIn(ESC, out)                     # ... unless NO_COLOR is set
        code, out = run_on_terminal(*self.ARGS, "--color", "always", env=env)
        self.assertIn(ESC + "[48;5;", out)             # an explicit --color always wins

    def test_width_sets_how_many_heads_sit_side_by_side(self):
        # padded: 2 items x 2 heads, panels 24 columns wide ("weights, batch 0, head 0").
        counts = {}
        for width in (80, 160):
            r = run_in_root(*example_args("padded", "--stages", "weights", "--heatmap", "--color", "never",
                                          "--width", width))
            self.assert_ok(r)
            counts[width] = [len(TITLE.findall(line)) for line in r.out.splitlines()
                             if line.startswith("  weights, ")]
            self.assertEqual(sum(counts[width]), 4)
            for line in r.out.splitlines():
                if not line.startswith("  legend"):
                    self.assertLessEqual(len(line.rstrip()), width, line)
        self.assertEqual(counts[80], [3, 1])
        self.assertEqual(counts[160], [4])


def wcwidth(text):
    """Terminal columns of text, from Python's unicodedata (an oracle independent of
    attnscope): East Asian Wide/Fullwidth 2, combining marks and format characters 0."""
    import unicodedata
    n = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


class Labels(CliTestCase):
    """Item 9: CJK and emoji labels line up by display width; the READMEs say what the
    code does."""

    TOKENS = ["日本語", "a", "😀", "naïve", "東京", "bb", "한국어", "x"]

    def bundle(self):
        rng = np.random.default_rng(8)
        T, D = len(self.TOKENS), 4
        return self.save_json("cjk.json", {
            "x": rng.normal(size=(T, D)).round(2).tolist(), "W_Q": np.eye(D).tolist(), "W_K": np.eye(D).tolist(),
            "W_V": np.eye(D).tolist(), "query_tokens": self.TOKENS, "key_tokens": self.TOKENS})

    def test_heatmap_rows_line_up(self):
        bundle = self.bundle()
        for args in (["--stages", "weights", "--heatmap"], ["--panels"]):
            with self.subTest(args=args):
                r = run("run", bundle, *args, "--color", "never", "--width", "100", binary=False)
                self.assert_ok(r)
                rows = [line for line in r.out.splitlines()
                        if any(line.startswith("  " + t) for t in self.TOKENS)]
                self.assertEqual(len(rows), len(self.TOKENS))
                # Every row as wide as the others, and each panel's cells start in one column.
                self.assertEqual(len({wcwidth(line) for line in rows}), 1, "\n".join(rows))
                starts = set()
                for line in rows:
                    label = next(t for t in self.TOKENS if line.startswith("  " + t))
                    rest = line[2 + len(label):]
                    starts.add(2 + wcwidth(label) + (len(rest) - len(rest.lstrip(" "))))
                self.assertEqual(len(starts), 1, starts)

    def test_printed_numbers_line_up(self):
        r = run("run", self.bundle(), "--stages", "weights", "--width", "120", binary=False)
        self.assert_ok(r)
        lines = r.out.splitlines()
        start = next(k for k, line in enumerate(lines) if line.startswith("== weights"))
        table = [line for line in lines[start + 2:] if line.startswith("    ")][:len(self.TOKENS) + 1]
        self.assertEqual(len({wcwidth(line) for line in table}), 1, "\n".join(table))

    def test_readme_pointers_exist(self):
        # (README.md and docs/: test_readme.py checks every link of those pages.)
        for readme in (ROOT / "data" / "README.md",):
            text = readme.read_text(encoding="utf-8")
            for name in re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text):
                found = (readme.parent / name).exists() or (ROOT / name).exists()
                self.assertTrue(found, f"{readme.relative_to(ROOT)} points at {name}, which does not exist")
            for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
                if not target.startswith("http"):
                    self.assertTrue((readme.parent / target).exists(), f"{readme.name}: link {target}")

    def test_readme_says_which_wins_no_color_or_color_always(self):
        text = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
        self.assertIn("`--color always` colours even with `NO_COLOR`", text)
        self.assertNotIn("never with `NO_COLOR` set", text)
        # ... and the code does what it says (Colour.test_auto_on_a_terminal_and_no_color
        # runs it on a terminal; a pipe with --color always gives colour too).
        r = run_in_root(*example_args("sentence", "--stages", "weights", "--heatmap", "--color", "always"),
                        env=view_env(NO_COLOR="1"))
        self.assert_ok(r)
        self.assertIn(ESC + "[48;5;", r.out)

    def test_range_and_log_scale_options(self):
        base = example_args("causal", "--stages", "weights", "--heatmap", "--color", "never", "--width", "80")
        for extra, words in ((["--range", "row"], "each query row on its own scale"),
                             (["--range", "fixed"], "0..1"),
                             (["--range", "0,0.5"], "0..0.5 as given"),
                             (["--log-scale"], "log10, the smallest positive value to 1")):
            with self.subTest(extra=extra):
                r = run_in_root(*base, *extra)
                self.assert_ok(r)
                self.assertIn(words, " ".join(r.out.split()))
        for extra, fragment in ((["--range", "wide"], "--range: expected auto, fixed, row or LO,HI"),
                                (["--range", "1,0"], "--range: expected LO < HI"),
                                (["--range", "0,1", "--log-scale"], "with --log-scale LO must be above 0")):
            with self.subTest(extra=extra):
                r = run_in_root(*base, *extra)
                self.assert_error(r, fragment)


class FitsIn80Columns(CliTestCase):
    """The teaching demo must be readable on an 80-column terminal."""

    def cell_for(self, name):
        return "0,0,1" if name in ("sentence", "causal", "cross") else "0,0,1,1"

    def test_views_of_every_example(self):
        for name in EXAMPLES:
            for view, options in VIEWS.items():
                with self.subTest(example=name, view=view):
                    options = [self.cell_for(name) if o == "CELL" else o for o in options]
                    r = run_in_root(*example_args(name, *options, "--color", "never", "--width", "80"))
                    self.assert_ok(r)
                    found = long_lines(r.out)
                    self.assertFalse(found, f"attnscope {' '.join(r.args)}: {len(found)} lines over 80 "
                                            f"columns:\n{describe_long(found)}")

    def test_demo_commands(self):
        commands = demo_commands()
        self.assertGreaterEqual(len(commands), 5)
        for args in commands:
            with self.subTest(" ".join(args)):
                r = run_in_root(*args, "--width", "80", env=view_env(NO_COLOR="1"))
                self.assert_ok(r)
                found = long_lines(r.out)
                self.assertFalse(found, f"{len(found)} lines over 80 columns:\n{describe_long(found)}")


# ---------------------------------------------------------------------------
# Diagnostics as JSON
# ---------------------------------------------------------------------------

class DiagnosticsJson(CliTestCase):

    def cases(self):
        """(label, argv, bundle, reference kwargs)."""
        out = []
        for name in EXAMPLES:
            bundle = ref.load_bundle(str(DATA / f"{name}.json"))
            out.append((name, example_args(name), bundle, EXAMPLES[name][1]))
        bundle = ref.load_bundle(str(DATA / "sentence.json"))
        out.append(("sentence --scale 100 (one-hot)", example_args("sentence", "--scale", "100"), bundle,
                    {"heads": 2, "scale": 100.0}))
        out.append(("sentence --scale 0.01 (uniform)", example_args("sentence", "--scale", "0.01"), bundle,
                    {"heads": 2, "scale": 0.01}))
        # A batch item whose keys are all PAD: fully masked rows.
        padded = ref.load_bundle(str(DATA / "padded.json"))
        doc = json.loads((DATA / "padded.json").read_text(encoding="utf-8"))
        doc["key_padding_mask"][1] = [1] * len(doc["key_padding_mask"][1])
        path = self.save_json("all_pad.json", doc)
        padded = dict(padded, key_padding_mask=np.array(doc["key_padding_mask"], dtype=bool))
        out.append(("padded, item 1 all PAD", ["run", path, "--heads", "2"], padded, {"heads": 2}))
        return out

    def test_rows_keys_types_and_values(self):
        for label, args, bundle, kw in self.cases():
            with self.subTest(label):
                r = run_in_root(*args, "--json", "--diagnose")
                self.assertEqual(r.code, 0, r)
                doc = json.loads(r.out)
                self.check_document(label, doc, with_batch_axis(bundle, ref.attention(bundle, **kw)))

    def check_document(self, label, doc, e):
        d = doc["dims"]
        B, H, Tq, Tk = d["B"], d["H"], d["Tq"], d["Tk"]
        rows = doc["diagnostics"]
        self.assertIsInstance(rows, list)
        self.assertEqual(len(rows), B * H * Tq, label)
        self.assertEqual(sorted((r["batch"], r["head"], r["query"]) for r in rows),
                         [(b, h, i) for b in range(B) for h in range(H) for i in range(Tq)], label)
        W, V, M, S = (batched(doc, n) for n in ("weights", "V", "mask", "scores"))
        scale = doc["config"]["scale"]
        flags = {"nearly_uniform": 0, "nearly_one_hot": 0, "fully_masked": 0}
        for row in rows:
            b, h, i = row["batch"], row["head"], row["query"]
            what = f"{label}: batch {b} head {h} query {i}"
            self.assertEqual(set(row), set(DIAGNOSTIC_KEYS), what)
            for key, kind in DIAGNOSTIC_KEYS.items():
                value = row[key]
                if kind is int:
                    self.assertTrue(type(value) is int, f"{what}: {key} = {value!r} is not an integer")
                elif kind is float:
                    self.assertTrue(type(value) in (int, float), f"{what}: {key} = {value!r} is not a number")
                elif kind is bool:
                    self.assertTrue(type(value) is bool, f"{what}: {key} = {value!r} is not a bool")
            self.assertEqual(len(row["contribution"]), Tk, what)
            for c in row["contribution"]:
                self.assertTrue(type(c) in (int, float), f"{what}: contribution {c!r}")
            w, visible = W[b, h, i], M[b, i]
            n = int(visible.sum())
            # Entropy of the JSON weights, computed here; and of the reference weights.
            entropy = -float(np.sum(w[w > 0] * np.log(w[w > 0])))
            we = e["weights"][b, h, i]
            entropy_ref = -float(np.sum(we[we > 0] * np.log(we[we > 0])))
            assert_close(row["entropy"], entropy, TOL, f"{what}: entropy", "diagnostics")
            assert_close(row["entropy"], entropy_ref, TOL, f"{what}: entropy vs reference", "diagnostics")
            self.assertEqual(row["visible_keys"], n, what)
            self.assertEqual(row["fully_masked"], n == 0, what)
            contribution = np.linalg.norm(w[:, None] * V[b, h], axis=1)
            assert_close(row["contribution"], contribution, TOL, f"{what}: ||w v||", "diagnostics")
            self.assertEqual(row["max_contribution_key"], int(np.argmax(contribution)), what)
            if n == 0:
                self.assertEqual((row["row_sum"], row["entropy"], row["effective_keys"]), (0, 0, 0), what)
                self.assertFalse(row["nearly_uniform"] or row["nearly_one_hot"], what)
                flags["fully_masked"] += 1
                continue
            assert_close(row["row_sum"], 1.0, TOL, f"{what}: row sum")
            assert_close(row["effective_keys"], math.exp(entropy), TOL * n, f"{what}: effective keys")
            self.assertEqual(row["max_weight"], float(w.max()), what)
            self.assertEqual(row["max_key"], int(np.argmax(w)), what)
            self.assertLessEqual(row["entropy"], math.log(n) + TOL, what)
            s = S[b, h, i][visible]
            assert_close(row["score_spread_scaled"], np.ptp(s), TOL * (1 + np.ptp(s)), f"{what}: spread")
            assert_close(row["score_spread_raw"], np.ptp(e["scores"][b, h, i][visible]) / abs(scale),
                         TOL * (1 + row["score_spread_raw"]), f"{what}: raw spread")
            uniform = n >= 2 and row["effective_keys"] >= UNIFORM_FRACTION * n
            one_hot = n >= 2 and row["max_weight"] >= ONE_HOT_WEIGHT
            self.assertEqual(row["nearly_uniform"], uniform, what)
            self.assertEqual(row["nearly_one_hot"], one_hot, what)
            flags["nearly_uniform"] += uniform
            flags["nearly_one_hot"] += one_hot
        if "one-hot" in label:
            self.assertGreater(flags["nearly_one_hot"], 0)
        if "uniform" in label:
            self.assertEqual(flags["nearly_uniform"], B * H * Tq)
        if "all PAD" in label:
            self.assertEqual(flags["fully_masked"], H * Tq)

    def test_raw_spread_does_not_depend_on_the_scale(self):
        # score_spread_raw is max - min of the visible q_i · k_j: the same for every scale.
        _, e = reference_for("causal")
        qk = e["Q"] @ np.swapaxes(e["K"], -1, -2)              # (H, Tq, Tk), before scaling
        for scale in ("0.5", "2", "-1", "0"):
            with self.subTest(scale=scale):
                doc = json_doc(self, *example_args("causal", "--scale", scale, "--diagnose"))
                for row in doc["diagnostics"]:
                    i = row["query"]
                    want = np.ptp(qk[row["head"], i, : i + 1])
                    assert_close(row["score_spread_raw"], want, 1e-12 * (1 + want),
                                 f"--scale {scale}: query {i}: raw spread")


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------

class Experiments(CliTestCase):

    def assert_same_stages(self, a, b, what, tol=0.0):
        for name in STAGES:
            x, y = stage(a, name), stage(b, name)
            self.assertEqual(x.shape, y.shape, f"{what}: {name}")
            assert_close(x, y, tol, f"{what}: {name}")

    def test_zero_key_collapses_its_score_column(self):
        for name in ("sentence", "causal", "padded", "cross", "reverse"):
            base = json_doc(self, *example_args(name))
            Tk = base["dims"]["Tk"]
            for j in sorted({0, Tk // 2, Tk - 1}):
                with self.subTest(example=name, key=j):
                    doc = json_doc(self, *example_args(name, "--zero-key", j))
                    S, S0, K = batched(doc, "scores"), batched(base, "scores"), batched(doc, "K")
                    M, MS = batched(doc, "mask"), batched(doc, "masked_scores")
                    self.assertTrue(np.all(K[:, :, j, :] == 0.0), "key vector j is 0 in every head")
                    self.assertTrue(np.all(S[..., j] == 0.0), "score column j is exactly 0")
                    others = [k for k in range(Tk) if k != j]
                    self.assertTrue(np.array_equal(S[..., others], S0[..., others]), "other columns change")
                    col = np.where(M[:, None, :, j], 0.0, -np.inf)
                    self.assertTrue(np.array_equal(MS[..., j], np.broadcast_to(col, MS[..., j].shape)))
                    # The weights are the softmax of those scores, computed here.
                    assert_close(batched(doc, "weights"), softmax_rows(MS), TOL, f"{name}: weights",
                                 "zero-key")
                    # ... and the scores are Q · K'ᵀ · scale with the reference's key j set to 0.
                    bundle, e = reference_for(name)
                    e = with_batch_axis(bundle, e)
                    k0 = e["K"].copy()
                    k0[:, :, j, :] = 0
                    want = e["Q"] @ np.swapaxes(k0, -1, -2) * doc["config"]["scale"]
                    assert_close(S, want, TOL, f"{name}: scores vs reference", "zero-key")

    def test_scale_none_equals_scale_1(self):
        for name in ("sentence", "causal", "padded"):
            with self.subTest(name):
                a = json_doc(self, *example_args(name, "--scale", "none"))
                b = json_doc(self, *example_args(name, "--scale", "1"))
                self.assertEqual(a["config"]["scale"], 1)
                for st in STAGES:
                    self.assertEqual(a["stages"][st]["data"], b["stages"][st]["data"], f"{name}: {st}")
                bundle, e = reference_for(name, scale=1.0)
                for st in STAGES:
                    assert_close(stage(a, st), e[st], TOL, f"{name} --scale none: {st}", "scale")

    def test_temperature_is_a_scale_of_one_over_t_sqrt_dk(self):
        for name in ("sentence", "causal", "cross", "induction"):
            for t in (2.0, 0.5):
                with self.subTest(example=name, temperature=t):
                    a = json_doc(self, *example_args(name, "--temperature", t))
                    dk = a["dims"]["Dk"]
                    scale = 1.0 / (t * math.sqrt(dk))
                    self.assertAlmostEqual(a["config"]["scale"] / scale, 1.0, delta=1e-15)
                    b = json_doc(self, *example_args(name, "--scale", repr(scale)))
                    self.assert_same_stages(a, b, f"{name} --temperature {t}", TOL)
                    _, e = reference_for(name, scale=scale)
                    for st in STAGES:
                        assert_close(stage(a, st), e[st], TOL, f"{name} --temperature {t}: {st}", "temperature")

    def test_ignore_padding_equals_a_bundle_without_the_mask(self):
        doc = json.loads((DATA / "padded.json").read_text(encoding="utf-8"))
        del doc["key_padding_mask"]
        path = self.save_json("unpadded.json", doc)
        a = json_doc(self, *example_args("padded", "--ignore-padding"))
        b = json_doc(self, "run", path, "--heads", "2")
        self.assertFalse(a["config"]["key_padding_mask"])
        self.assertTrue(np.all(stage(a, "mask")))
        self.assert_same_stages(a, b, "--ignore-padding")
        bundle = ref.load_bundle(str(DATA / "padded.json"))
        del bundle["key_padding_mask"]
        e = ref.attention(bundle, heads=2)
        for st in STAGES:
            assert_close(stage(a, st), e[st], TOL, f"--ignore-padding: {st}", "ignore-padding")
        masked = json_doc(self, *example_args("padded"))
        self.assertFalse(np.all(stage(masked, "mask")), "the example has PAD keys to ignore")

    def test_no_causal_after_causal_turns_it_off(self):
        a = json_doc(self, "run", "data/causal.json", "--causal", "--no-causal")
        b = json_doc(self, "run", "data/causal.json")
        self.assertFalse(a["config"]["causal"])
        self.assertTrue(np.all(stage(a, "mask")))
        self.assert_same_stages(a, b, "--causal --no-causal")
        c = json_doc(self, "run", "data/causal.json", "--causal")
        self.assertTrue(c["config"]["causal"])
        self.assertFalse(np.all(stage(c, "mask")))

    def compare_table(self, r):
        rows = {}
        for line in r.out.splitlines():
            fields = re.split(r"\s{2,}", line.strip())
            if fields and fields[0] in STAGES:
                rows[fields[0]] = fields
        return rows

    def test_compare_lists_every_stage_with_its_difference(self):
        r = run_in_root(*example_args("sentence", "--compare", "--scale none"))
        self.assert_ok(r)
        rows = self.compare_table(r)
        self.assertEqual(list(rows), list(STAGES))
        _, a = reference_for("sentence")
        _, b = reference_for("sentence", scale=1.0)
        for st in STAGES:
            with self.subTest(st):
                want = float(np.max(np.abs(a[st].astype(float) - b[st].astype(float))))
                got = float(rows[st][3])
                if st in ("Q", "K", "V", "mask"):
                    self.assertEqual(got, 0.0)
                else:
                    self.assertGreater(got, 0.0)
                    self.assertEqual(rows[st][3], f"{want:.4g}")
                    at = np.unravel_index(np.argmax(np.abs(a[st] - b[st])), a[st].shape)
                    self.assertEqual(rows[st][4], "(" + ", ".join(str(int(k)) for k in at) + ")")

    def test_compare_the_chosen_stages_of_the_chosen_head(self):
        # --stages limits the table and the heatmaps to those stages, --head the table to that head.
        r = run_in_root(*example_args("sentence", "--compare", "--scale none", "--stages", "scores,weights",
                                      "--head", "1", "--heatmap", "--color", "never"))
        self.assert_ok(r)
        rows = self.compare_table(r)
        self.assertEqual(list(rows), ["scores", "weights"])
        _, a = reference_for("sentence")
        _, b = reference_for("sentence", scale=1.0)
        for st in rows:
            head = (a[st] - b[st]).astype(float)
            head = head[:, 1] if head.ndim == 4 else head[1]  # (B, H, Tq, Tk), or (H, Tq, Tk) for a 2-D x
            self.assertEqual(rows[st][3], f"{float(np.max(np.abs(head))):.4g}", st)
        for st in rows:
            self.assertRegex(r.out, rf"== {st}, (batch 0, )?head 1: A \| B \| B - A")
        r = run_in_root(*example_args("sentence", "--compare", "--scale none", "--stages", "Q,K", "--heatmap"))
        self.assertEqual((r.code, r.err), (2, "attnscope: error: --compare with --heatmap: draws (query, key) "
                                              "stages such as scores and weights; --stages Q,K names none of them\n"))

    def test_compare_a_mask_change(self):
        r = run_in_root("run", "data/causal.json", "--causal", "--compare", "--no-causal")
        self.assert_ok(r)
        rows = self.compare_table(r)
        self.assertEqual(list(rows), list(STAGES))
        for st in ("Q", "K", "V", "scores"):
            self.assertEqual(float(rows[st][3]), 0.0, st)
        self.assertEqual(rows["mask"][3], "1")
        self.assertEqual(rows["masked_scores"][3], "inf")
        self.assertGreater(float(rows["weights"][3]), 0.0)


class TableCuts(CliTestCase):
    """A printed matrix cut around "…" says once what it left out, and that --full shows it."""

    NOTE = "    (… stands for the rows and columns left out; --full shows every one)"

    def test_a_cut_table_says_so_once(self):
        r = run_in_root(*example_args("sentence", "--stages", "scores,weights", "--edgeitems", "1"))
        self.assert_ok(r)
        self.assertIn("…", r.out)
        self.assertEqual(r.out.splitlines().count(self.NOTE), 1, r.out)
        self.assertLessEqual(max(len(line) for line in r.out.splitlines()), 80)
        r = run_in_root(*example_args("sentence", "--stages", "scores,weights", "--edgeitems", "1", "--full"))
        self.assertNotIn("…", r.out)
        self.assertNotIn(self.NOTE, r.out.splitlines())
        r = run_in_root(*example_args("sentence", "--stages", "weights"))  # 6 rows: nothing cut
        self.assertNotIn(self.NOTE, r.out.splitlines())


# ---------------------------------------------------------------------------
# Bad options
# ---------------------------------------------------------------------------

class BadOptions(CliTestCase):

    CASES = [
        # (argv after `run`, fragments of the one error line)
        (["data/padded.json", "--heads", "2", "--cell", "2,0,0,0"], ["--cell", "batch item 2", "0..1"]),
        (["data/padded.json", "--heads", "2", "--cell", "0,2,0,0"], ["--cell", "head 2", "0..1"]),
        (["data/padded.json", "--heads", "2", "--cell", "0,0,6,0"], ["--cell", "query 6", "0..5"]),
        (["data/padded.json", "--heads", "2", "--cell", "0,0,0,6"], ["--cell", "key 6", "0..5"]),
        (["data/padded.json", "--heads", "2", "--cell", "0,1,1"], ["--cell", "B,H,I,J", "3"]),
        (["data/causal.json", "--causal", "--cell", "0,0,1,1"], ["--cell", "H,I,J", "4"]),
        (["data/causal.json", "--cell", "0,1"], ["--cell"]),
        (["data/causal.json", "--cell", "0,1,2,3,4"], ["--cell"]),
        (["data/causal.json", "--temperature", "0"], ["--temperature", "positive"]),
        (["data/causal.json", "--temperature", "-2"], ["--temperature", "positive"]),
        (["data/causal.json", "--scale", "abc"], ["--scale", "abc"]),
        (["data/causal.json", "--scale", "2", "--temperature", "2"], ["--temperature", "--scale"]),
        (["data/causal.json", "--zero-key", "5"], ["--zero-key", "5", "0..4"]),
        (["data/causal.json", "--color", "sometimes"], ["--color"]),
        (["data/causal.json", "--width", "5"], ["--width"]),
    ]

    def test_one_error_line_and_exit_2(self):
        for args, fragments in self.CASES:
            for extra in ([], ["--json"], ["-q"]):
                with self.subTest(args=args + extra):
                    r = run_in_root("run", *args, *extra)
                    # --cell is a view of the printed report: refused with --json (when it parses).
                    refused = extra == ["--json"] and "--cell" in args
                    self.assert_error(r, *(["--cell"] if refused else fragments), code=2)


if __name__ == "__main__":
    common.main("test_views")
