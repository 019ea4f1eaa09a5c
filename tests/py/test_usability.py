#!/usr/bin/python3
"""What a new user's eye would otherwise have to catch (issue 14, the command line):
the demo's commands run as printed; --compare's run B overrides an option; the compare
mean is never 0 where the max is inf; --panels keeps the header and honours --stages;
unknown names get "did you mean"; selections and experiments are recorded in every
output; --help is grouped, wrapped and ends with examples that run; -V; the man page and
the shell completions.

Expected numbers come from the numpy reference (scripts/attn_reference.py) or are
counted here by hand, never taken from attnscope.

    /usr/bin/python3 tests/py/test_usability.py          (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import fcntl
import json
import os
import pty
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import unicodedata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import BIN, ROOT, CliTestCase  # noqa: E402

SEPARATOR = "\n" + "-" * 80 + "\n"
HEADINGS = ["Inputs", "Checkpoint", "Model", "Masks", "Modern attention", "Outputs", "Selections", "Views",
            "Experiments", "Limits"]


def plain_env(**extra):
    """An environment whose output does not depend on the caller's terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "COLORTERM", "TERM")}
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def run_root(*args, env=None):
    proc = subprocess.run([str(BIN)] + [str(a) for a in args], cwd=ROOT, env=env or plain_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, encoding="utf-8")
    return common.Result([str(a) for a in args], proc)


def columns(line):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def on_terminal(args, cols):
    """Run attnscope with stdout on a pseudo-terminal `cols` wide; returns its output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    proc = subprocess.Popen([str(BIN)] + args, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=ROOT, env=plain_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait()
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


# ---------------------------------------------------------------------------
# 1. The demo
# ---------------------------------------------------------------------------

class ManPageExamples(CliTestCase):
    """The man page's examples come from the command list: every command has some, and
    each one parses (it runs, or stops only at an input file the example names)."""

    MISSING = ("mine.npz", "mine/", "bundle.npz", "model.safetensors", "gpt2/", "bert/", "notes.txt")

    def test_every_command_has_examples_that_parse(self):
        man = common.run_text("--man").out
        examples = man[man.index(".SH EXAMPLES"):man.index(".SH EXIT STATUS")]
        lines = [line[len(".B attnscope "):].replace("\\-", "-") for line in examples.splitlines()
                 if line.startswith(".B attnscope ")]
        top = common.run_text("--help").out
        listing = top[top.index("Commands:"):]
        commands = re.findall(r"^  (\w+)\s", listing[:listing.index("\n\n")], re.M)
        self.assertGreaterEqual(len(commands), 8, top)
        for command in commands:
            self.assertTrue(any(line.split()[0] == command for line in lines), f"no example of {command}")
        (self.tmp / "data").symlink_to(ROOT / "data")
        for line in lines:
            with self.subTest(example=line):
                r = common.run_text(*shlex.split(line), cwd=self.tmp, timeout=300)
                if r.code != 0:
                    self.assertTrue(any(f in r.err for f in self.MISSING), r)
                    self.assertNotIn("unknown option", r.err)


class Demo(CliTestCase):

    def demo_sections(self):
        """The demo's steps: (command as printed, its output as shown)."""
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo")], env=plain_env(ATTNSCOPE_BIN=str(BIN)),
                              capture_output=True, text=True, encoding="utf-8", stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        sections = []
        for chunk in proc.stdout.split(SEPARATOR)[1:]:
            lines = chunk.split("\n")
            self.assertTrue(lines[0].startswith("### "), lines[0])
            k = 1
            command = []
            while True:
                line = lines[k]
                command.append(line[2:] if k == 1 else line)
                self.assertTrue(k > 1 or line.startswith("$ attnscope "), line)
                self.assertLessEqual(columns(line), 80, line)
                k += 1
                if not line.endswith(" \\"):
                    break
            sections.append(("\n".join(command), "\n".join(lines[k:])))
        return sections

    def test_every_printed_command_runs_as_shown_and_prints_what_the_demo_showed(self):
        sections = self.demo_sections()
        self.assertGreaterEqual(len(sections), 12)
        # `attnscope` on PATH is the binary under test; the command goes through a shell as typed.
        bindir = self.path("bin")
        bindir.mkdir()
        (bindir / "attnscope").symlink_to(BIN)
        env = plain_env(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        for command, shown in sections:
            with self.subTest(command=command):
                proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                                      encoding="utf-8", stdin=subprocess.DEVNULL)
                self.assertIn(proc.returncode, (0, 1), proc.stderr)  # check exits 1: a stage differs
                self.assertEqual(proc.stdout.rstrip("\n"), shown.rstrip("\n"))

    def test_a_value_with_a_space_is_printed_quoted(self):
        commands = [c for c, _ in self.demo_sections()]
        self.assertIn("$ attnscope run data/sentence.json --heads 2 --compare '--scale none'".replace("$ ", ""),
                      commands)


# ---------------------------------------------------------------------------
# 2. --compare
# ---------------------------------------------------------------------------

class Compare(CliTestCase):

    def compare_json(self, *args):
        r = run_root(*args, "--json")
        self.assert_ok(r)
        return json.loads(r.out)

    def test_run_b_replaces_an_option_run_a_gave(self):
        doc = self.compare_json("run", "data/sentence.json", "--heads", "2", "--compare", "--heads 1")
        self.assertEqual(doc["stages"]["Q"]["shape_a"], [2, 6, 4])
        self.assertEqual(doc["stages"]["Q"]["shape_b"], [1, 6, 8])
        # --dtype: B runs in float32, so B differs from A by float32 rounding only.
        doc = self.compare_json("run", "data/sentence.json", "--heads", "2", "--dtype", "float64", "--compare",
                                "--dtype float32")
        w = doc["stages"]["weights"]["max_abs_diff"]
        self.assertGreater(w, 0)
        self.assertLess(w, 1e-6)
        # Within B too, the later value wins: scale 1/(sqrt(4) * 3).
        doc = self.compare_json("run", "data/sentence.json", "--heads", "2", "--compare",
                                "--temperature 2 --temperature 3")
        self.assertAlmostEqual(doc["compare"]["scale"]["b"], 1 / (2 * 3), places=15)

    def test_an_unknown_option_in_run_b_is_named(self):
        r = run_root("run", "data/sentence.json", "--compare", "--hedas 1")
        self.assert_error(r, "--compare '--hedas 1': unknown option --hedas; did you mean --heads?")

    def test_the_mean_is_inf_where_the_max_is(self):
        doc = self.compare_json("run", "data/causal.json", "--causal", "--compare", "--no-causal")
        # By hand: T = 5, the causal mask hides the 10 cells above the diagonal.
        ms = doc["stages"]["masked_scores"]
        self.assertEqual(ms["max_abs_diff"], "inf")
        self.assertEqual(ms["mean_abs_diff"], "inf")
        self.assertEqual(ms["infinite_diffs"], 10)
        self.assertEqual(ms["finite_mean_abs_diff"], 0)  # the visible scores are the same
        for name, d in doc["stages"].items():
            with self.subTest(stage=name):
                if d["max_abs_diff"] == "inf":
                    self.assertEqual(d["mean_abs_diff"], "inf")
        # The table: mean "inf" beside max "inf", and how many cells.
        r = run_root("run", "data/causal.json", "--causal", "--compare", "--no-causal")
        row = next(line for line in r.out.splitlines() if line.strip().startswith("masked_scores"))
        fields = re.split(r"\s{2,}", row.strip())
        self.assertEqual(fields[3], "inf")
        self.assertEqual(fields[5], "inf")
        self.assertEqual(fields[6], "10")


# ---------------------------------------------------------------------------
# 5. --panels
# ---------------------------------------------------------------------------

class Panels(CliTestCase):

    def test_panels_keep_the_run_header(self):
        r = run_root("run", "data/causal.json", "--causal", "--panels", "--width", "80")
        self.assert_ok(r)
        lines = r.out.splitlines()
        self.assertTrue(lines[0].startswith("attnscope: self-attention, 1 head, float64, data/causal.json"), lines[0])
        self.assertTrue(any(line.startswith("  sizes   B=1 Tq=5 Tk=5") for line in lines), r.out)
        self.assertTrue(any(line.startswith("  scale   0.5 = 1/sqrt(Dk)") for line in lines), r.out)
        self.assertTrue(any(line.startswith("  masks   causal") for line in lines), r.out)

    def test_panels_honour_stages(self):
        r = run_root("run", "data/causal.json", "--causal", "--panels", "--stages", "weights", "--width", "80")
        self.assert_ok(r)
        self.assertIn("\n== head 0: weights (softmax along each row)\n", r.out)
        self.assertNotIn("scores", r.out.split("== head 0")[1])
        r = run_root("run", "data/causal.json", "--causal", "--panels", "--stages", "scores,weights")
        self.assertIn("\n== head 0: scores -> weights (softmax along each row)\n", r.out)
        panels = r.out.split("== head 0")[1].split("  legend")[0]  # (the legend states the shared rule)
        self.assertNotIn("masked_scores", panels)
        r = run_root("run", "data/causal.json", "--panels", "--stages", "Q")
        self.assert_error(r, "--panels", "--stages")


# ---------------------------------------------------------------------------
# 6. Unknown names
# ---------------------------------------------------------------------------

class DidYouMean(CliTestCase):

    def test_an_unknown_option_is_named_with_the_nearest(self):
        cases = [
            (["run", "--hedas", "2", "data/sentence.json"], "unknown option --hedas; did you mean --heads?"),
            (["run", "data/sentence.json", "--casual"], "unknown option --casual; did you mean --causal?"),
            (["run", "data/sentence.json", "--stage=weights"], "unknown option --stage; did you mean --stages?"),
            (["check", "a.npz", "--against", "b.npz", "--rtoll", "1"], "unknown option --rtoll; did you mean --rtol?"),
            (["decode", "data/causal.json", "--prefil", "2"], "unknown option --prefil; did you mean --prefill?"),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                r = run_root(*args)
                self.assertEqual(r.code, 2, r)
                self.assertEqual(r.out, "")
                command = args[0]
                self.assertEqual(r.err, f"attnscope: error: {want} (see attnscope {command} --help)\n")
                self.assertNotIn("sentence.json", r.err)  # never blamed on the bundle

    def test_cli11_phrasing_is_said_in_ours(self):
        cases = [
            (["run", "data/sentence.json", "--heads", "0"], "--heads: expected a number from 1 to 1048576, found '0'"),
            (["run", "data/sentence.json", "--cell", "1,2"], "--cell: expected at least 3 values, found 2"),
            (["run", "data/sentence.json", "--heads"], "--heads: expected a value (--heads H)"),
            ([], "expected a command (run, check, decode, inspect, report, tokens, make, lesson)"),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                r = run_root(*args)
                self.assert_error(r, want)
                for junk in ("UINT", "At least", "At Most", "required", "Value "):
                    self.assertNotIn(junk, r.err)

    def test_an_option_nothing_is_near_gets_no_guess(self):
        r = run_root("run", "data/sentence.json", "--frobnicate-everything")
        self.assert_error(r, "unknown option --frobnicate-everything")
        self.assertNotIn("did you mean", r.err)

    def test_unknown_stage_value_and_command(self):
        cases = [
            (["run", "data/sentence.json", "--stages", "scores,weight"], "unknown stage 'weight'; did you mean weights?"),
            (["run", "data/sentence.json", "--svg-stage", "weight"], "did you mean weights?"),
            (["run", "data/sentence.json", "--dtype", "float16"], "did you mean float32?"),
            (["rn", "data/sentence.json"], "unknown command 'rn'"),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                self.assert_error(run_root(*args), want)

    def test_an_unknown_array_is_named_with_the_nearest(self):
        rng = np.random.default_rng(0)
        bundle = self.save_npz("b.npz", x=rng.normal(size=(3, 4)), W_q=rng.normal(size=(4, 4)),
                               W_K=rng.normal(size=(4, 4)), W_V=rng.normal(size=(4, 4)))
        r = run_root("run", bundle)
        self.assert_error(r, "unknown array 'W_q'; did you mean W_Q?")

    def test_svg_without_svg_stage_is_explained_in_the_users_terms(self):
        svg = self.path("x.svg")
        r = run_root("run", "data/sentence.json", "--stages", "scores", "--svg", svg)
        self.assert_error(r, f"--svg {svg}: draws the weights by default", "--stages scores",
                          "add weights to --stages", "--svg-stage scores")
        self.assertFalse(r.err.startswith("attnscope: error: --svg-stage"))
        self.assertFalse(svg.exists())


# ---------------------------------------------------------------------------
# 7. Selections and experiments are recorded
# ---------------------------------------------------------------------------

class Recorded(CliTestCase):

    def reference_weights(self):
        bundle = common.load_example("padded", "json")
        return common.reference(bundle, heads=2)

    def test_batch_and_head_cut_the_json(self):
        r = run_root("run", "data/padded.json", "--heads", "2", "--batch", "1", "--head", "0", "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertEqual(doc["config"]["selection"], {"batch": [1], "head": [0]})
        ref = self.reference_weights()
        for name in ("Q", "K", "V", "scores", "weights", "context"):
            with self.subTest(stage=name):
                got = np.array(doc["stages"][name]["data"], dtype=float)
                want = ref[name][1:2, 0:1]
                self.assertEqual(got.shape, want.shape)
                common.assert_close(got, want, 1e-12, name)
        out = np.array(doc["stages"]["output"]["data"], dtype=float)
        common.assert_close(out, ref["output"][1:2], 1e-12, "output")  # no head axis: the item only
        self.assertEqual(len(doc["tokens"]["query"]), 1)
        self.assertEqual(doc["tokens"]["query"][0][:3], ["birds", "sing", "loudly"])

    def test_batch_and_head_cut_the_dump(self):
        ref = self.reference_weights()
        for target in (self.path("d"), self.path("d.npz")):
            with self.subTest(dump=target.name):
                r = run_root("run", "data/padded.json", "--heads", "2", "--batch", "1", "--head", "1", "--dump",
                             target, "-q")
                self.assert_ok(r, stdout_empty=True)
                if target.suffix == ".npz":
                    got = dict(np.load(target))
                else:
                    got = {p.stem: np.load(p) for p in target.glob("*.npy")}
                common.assert_close(got["weights"], ref["weights"][1:2, 1:2], 1e-12, "weights")
                self.assertEqual(got["output"].shape, ref["output"][1:2].shape)

    def test_grouped_kv_heads_keep_the_head_a_query_head_reads(self):
        # H = 4 query heads over G = 2 K/V heads of Dk = 2: query head 3 reads K/V head 3 // 2 = 1.
        rng = np.random.default_rng(1)
        x, wq, wk, wv = (rng.normal(size=s) for s in ((2, 3, 4), (4, 8), (4, 4), (4, 4)))
        bundle = self.save_npz("gqa.npz", x=x, W_Q=wq, W_K=wk, W_V=wv)
        r = run_root("run", bundle, "--heads", "4", "--kv-heads", "2", "--head", "3", "--batch", "1", "--json",
                     "--stages", "K,Q")
        self.assert_ok(r)
        doc = json.loads(r.out)
        k = np.array(doc["stages"]["K"]["data"], dtype=float)
        want_k = (x @ wk).reshape(2, 3, 2, 2).transpose(0, 2, 1, 3)[1:2, 1:2]  # (B, G, Tk, Dk)
        common.assert_close(k, want_k, 1e-12, "K")
        q = np.array(doc["stages"]["Q"]["data"], dtype=float)
        want_q = (x @ wq).reshape(2, 3, 4, 2).transpose(0, 2, 1, 3)[1:2, 3:4]
        common.assert_close(q, want_q, 1e-12, "Q")

    def test_text_views_are_refused_with_json(self):
        for extra in (["--explain"], ["--cell", "0,0,1,1"], ["--heatmap"], ["--panels"]):
            with self.subTest(extra=extra):
                r = run_root("run", "data/padded.json", "--heads", "2", "--json", *extra)
                self.assert_error(r, extra[0], "--json")

    def test_zero_key_is_in_the_header_and_the_config(self):
        r = run_root("run", "data/sentence.json", "--heads", "2", "--zero-key", "1", "--stages", "none")
        self.assert_ok(r)
        self.assertIn("  zeroed  key 1's vector set to 0 in every head and batch item (--zero-key)\n", r.out)
        doc = json.loads(run_root("run", "data/sentence.json", "--heads", "2", "--zero-key", "1", "--stages",
                                  "none", "--json").out)
        self.assertEqual(doc["config"]["zero_key"], 1)
        doc = json.loads(run_root("run", "data/sentence.json", "--stages", "none", "--json").out)
        self.assertIsNone(doc["config"]["zero_key"])

    def test_ignore_padding_says_the_mask_was_dropped(self):
        r = run_root("run", "data/padded.json", "--heads", "2", "--ignore-padding", "--stages", "none")
        self.assert_ok(r)
        self.assertIn("  masks   none; the bundle's key_padding_mask was dropped (--ignore-padding)\n", r.out)
        doc = json.loads(run_root("run", "data/padded.json", "--heads", "2", "--ignore-padding", "--stages", "none",
                                  "--json").out)
        self.assertIs(doc["config"]["key_padding_mask"], False)
        self.assertIs(doc["config"]["key_padding_mask_dropped"], True)
        r = run_root("run", "data/sentence.json", "--ignore-padding", "--stages", "none")
        self.assertEqual(r.code, 0, r)
        self.assertIn("--ignore-padding: the inputs hold no key_padding_mask; nothing dropped", r.err)

    def test_the_header_says_what_is_shown(self):
        r = run_root("run", "data/padded.json", "--heads", "2", "--batch", "1", "--head", "0,1", "--stages",
                     "weights")
        self.assert_ok(r)
        self.assertIn("  shown   batch item 1 of 2; heads 0,1 of 2 (--batch, --head)\n", r.out)


# ---------------------------------------------------------------------------
# 8. Help, version, man page, completions
# ---------------------------------------------------------------------------

COMMANDS = ["", "run", "check", "decode", "inspect"]


def help_of(command, **kw):
    args = ([command] if command else []) + ["--help"]
    return run_root(*args, **kw)


class Help(CliTestCase):

    def test_run_help_groups_options_in_order(self):
        r = help_of("run")
        self.assert_ok(r)
        headings = [line[:-1] for line in r.out.splitlines() if line.endswith(":") and not line.startswith(" ")]
        self.assertEqual([h for h in headings if h in HEADINGS], HEADINGS)
        self.assertEqual(headings[-2:], ["Help", "Examples"])
        # Options sit under the heading they belong to.
        section = {}
        current = None
        for line in r.out.splitlines():
            if line.endswith(":") and not line.startswith(" "):
                current = line[:-1]
            m = re.match(r"\s{2,6}(?:-\w, )?(--[\w-]+)", line)  # not a wrapped description line
            if m and current:
                section.setdefault(m.group(1), current)
        for option, heading in [("--heads", "Model"), ("--causal", "Masks"), ("--rope", "Modern attention"),
                                ("--json", "Outputs"), ("--head", "Selections"), ("--heatmap", "Views"),
                                ("--zero-key", "Experiments"), ("--max-memory", "Limits"), ("--x", "Inputs"),
                                ("--checkpoint", "Checkpoint")]:
            self.assertEqual(section.get(option), heading, option)

    def test_no_cli11_boilerplate(self):
        for command in COMMANDS:
            with self.subTest(command=command):
                out = help_of(command).out
                for junk in ("{false}", "UINT", "INT in", "TEXT", "FLOAT", "--causal,--no-causal", "[1 - ",
                             "Excludes", "Needs:", "REQUIRED", "OPTIONS]:"):
                    self.assertNotIn(junk, out)
                self.assertIn("--causal, --no-causal", help_of("run").out)
                self.assertIn("--dtype float32|float64", help_of("run").out)

    def test_selections_apply_to_every_output_says_the_help(self):
        out = help_of("run").out.replace("\n", " ")
        self.assertIn("Selections (--batch, --head) apply to every output", re.sub(r"\s+", " ", out))

    def test_wrapped_to_80_in_a_pipe(self):
        for command in COMMANDS:
            with self.subTest(command=command):
                for line in help_of(command, env=plain_env(COLUMNS="200")).out.splitlines():
                    self.assertLessEqual(columns(line), 80, line)

    def test_wrapped_to_the_terminal_never_beyond_100(self):
        for cols, limit in ((60, 60), (100, 100), (160, 100)):
            with self.subTest(cols=cols):
                out = on_terminal(["run", "--help"], cols)
                widths = [columns(line) for line in out.splitlines()]
                self.assertLessEqual(max(widths), limit)
                if cols >= 100:
                    self.assertGreater(max(widths), 80)  # uses the room it has

    def test_help_ends_with_examples_that_run(self):
        for command in ("", "run"):
            out = help_of(command).out
            examples = out.split("\nExamples:\n")[1].splitlines()
            lines = [line.strip() for line in examples if line.startswith("  attnscope ")]
            self.assertGreaterEqual(len(lines), 4)
            self.assertLessEqual(len(lines), 5)
            for line in lines:
                if "mine.npz" in line:
                    continue  # the user's own tensors
                with self.subTest(example=line):
                    proc = subprocess.run(["bash", "-c", line.replace("attnscope", f"'{BIN}'", 1)], cwd=ROOT,
                                          env=plain_env(), capture_output=True, text=True)
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    self.assertEqual(proc.stderr, "")

    def test_version(self):
        # One version number: the project's VERSION in CMakeLists.txt, printed by -V and the man page.
        version = re.search(r"^project\(attnscope VERSION (\S+)", (ROOT / "CMakeLists.txt").read_text(), re.M)[1]
        for flag in ("-V", "--version"):
            r = run_root(flag)
            self.assertEqual((r.code, r.out), (0, f"attnscope {version}\n"))
        self.assertTrue(run_root("--man").out.startswith(f'.TH ATTNSCOPE 1 "" "attnscope {version}" '))


class CommandWords(CliTestCase):
    """Issue 21: one-dash long options, misspelt commands, `help COMMAND`, other shells."""

    def assert_refused(self, args, line):
        r = run_root(*args)
        self.assertEqual((r.code, r.out, r.err), (2, "", f"attnscope: error: {line}\n"), r)

    def test_a_long_option_with_one_dash_is_refused_with_the_right_spelling(self):
        for word, flag in (("-heads", "--heads"), ("-causal", "--causal"), ("-stages=weights", "--stages")):
            with self.subTest(word=word):
                self.assert_refused(["run", "data/sentence.json", word, "2"],
                                    f"unknown option {word.split('=')[0]}; did you mean {flag}? "
                                    "(see attnscope run --help)")
        self.assert_refused(["run", "data/sentence.json", "--compare", "-heads 1"],
                            "unknown option -heads; did you mean --heads? (see attnscope run --help)")
        self.assert_refused(["run", "data/sentence.json", "--heads", "2", "--compare", "--scale none -heads 1"],
                            "--compare '--scale none -heads 1': unknown option -heads; did you mean --heads? "
                            "(see attnscope run --help)")
        self.assertEqual(run_root("run", "data/sentence.json", "-q").code, 0)  # a short flag still is one

    def test_an_unknown_command_gets_the_nearest(self):
        for args in (["rnu", "data/sentence.json"], ["help", "rnu"]):
            with self.subTest(args=args):
                self.assert_refused(args, "unknown command 'rnu'; did you mean run? (expected: run, check, decode, "
                                          "inspect, report, tokens, make, lesson; see attnscope --help)")

    def test_help_command_prints_the_commands_help(self):
        for command in COMMANDS:
            with self.subTest(command=command):
                r = run_root("help", *([command] if command else []))
                self.assertEqual((r.code, r.err), (0, ""))
                self.assertEqual(r.out, help_of(command).out)
        self.assertIn("attnscope help COMMAND", help_of("").out)

    def test_completion_for_another_shell_names_the_two(self):
        self.assert_refused(["--completion", "fish"], "--completion fish: no script for this shell; expected bash "
                                                      "or zsh")
        self.assert_refused(["--completion"], "--completion: expected one shell, bash or zsh")


class ManPage(CliTestCase):

    def test_each_example_once_and_where_the_bundles_are(self):
        page = run_root("--man").out
        examples = re.findall(r"^\.B attnscope (.*)$", page.split("\n.SH EXAMPLES\n")[1].split("\n.SH ")[0], re.M)
        self.assertGreaterEqual(len(examples), 10)
        self.assertEqual(len(examples), len(set(examples)), examples)
        self.assertIn(".SH FILES\n.TP\n.I PREFIX/share/attnscope/data\n", page)
        self.assertIn("PREFIX/share/attnscope, where the install puts data/", page.replace("\n", " "))

    def test_the_man_page_holds_every_option_of_the_help(self):
        r = run_root("--man")
        self.assert_ok(r)
        self.assertTrue(r.out.startswith(".TH ATTNSCOPE 1"))
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXAMPLES", "EXIT STATUS"):
            self.assertIn(f"\n.SH {section}", r.out)
        page = r.out.replace("\\-", "-")
        for command in COMMANDS[1:]:
            for option in set(re.findall(r"^\s+(?:-\w, )?(--[\w-]+)", help_of(command).out, re.M)):
                if option != "--help":
                    self.assertIn(option, page, (command, option))

    def test_the_man_page_renders_without_warnings(self):
        if not shutil.which("groff"):
            self.skipTest("groff is not installed")
        page = run_root("--man").out
        proc = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True)
        self.assertEqual(proc.stderr, "")

    def test_the_build_generates_and_installs_it_with_the_completions(self):
        build = BIN.parent
        if not (build / "attnscope.1").exists():
            self.skipTest("the attnscope_docs target is not built")
        self.assertEqual((build / "attnscope.1").read_text(), run_root("--man").out)
        prefix = self.path("prefix")
        proc = subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for path in ("share/man/man1/attnscope.1", "share/bash-completion/completions/attnscope",
                     "share/zsh/site-functions/_attnscope", "bin/attnscope"):
            self.assertTrue((prefix / path).is_file(), path)
        # The bundles the examples read, where the man page says; the examples run there.
        data = prefix / "share/attnscope/data"
        for name in sorted(p.relative_to(ROOT / "data") for p in (ROOT / "data").rglob("*") if p.is_file()):
            self.assertEqual((data / name).read_bytes(), (ROOT / "data" / name).read_bytes(), name)
        proc = subprocess.run([str(prefix / "bin/attnscope"), "run", "data/sentence.json", "--heads", "2"],
                              cwd=prefix / "share/attnscope", capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))


class Setup(CliTestCase):
    """Issue 21: the demo's set-up installs what building and running need; the tests' the rest."""

    BUILD = ["cmake", "g++", "make", "libcli11-dev", "nlohmann-json3-dev", "libxtensor-dev", "xtl-dev",
             "libxsimd-dev", "libopenblas-dev", "zlib1g-dev", "doctest-dev", "libpcre2-dev", "libutf8proc-dev"]
    TEST_ONLY = ["python3-torch", "python3-numpy", "clang-14", "chromium", "nodejs", "jq", "zsh"]

    def setup_installs(self, *args):
        """What scripts/setup ARGS asks apt-get and npm for, on a machine that has nothing
        (dpkg-query, apt-get, npm and id are stand-ins that write down what they are asked)."""
        stubs, log = self.path("stubs"), self.path("log")
        stubs.mkdir()
        for name, body in (("dpkg-query", "exit 1"), ("id", "echo 0"),
                           ("apt-get", f'echo "apt-get $*" >> "{log}"'), ("npm", f'echo "npm $*" >> "{log}"')):
            (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
            (stubs / name).chmod(0o755)
        # A copy of the script whose tests/browser, tests/tokenizers and tests/llamacpp have no node_modules:
        # npm is asked when it is meant to be.
        root = self.path("repo")
        (root / "scripts").mkdir(parents=True)
        (root / "tests/browser").mkdir(parents=True)
        (root / "tests/tokenizers").mkdir(parents=True)
        (root / "tests/llamacpp").mkdir(parents=True)
        shutil.copy(ROOT / "scripts/setup", root / "scripts/setup")
        proc = subprocess.run(["bash", str(root / "scripts/setup"), *args], capture_output=True, text=True,
                              env=dict(os.environ, PATH=f"{stubs}:/usr/bin:/bin"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        calls = log.read_text().splitlines()
        install = next(c for c in calls if c.startswith("apt-get install"))
        return install.split()[5:], [c for c in calls if c.startswith("npm")]

    def test_the_demo_sets_up_only_what_building_and_running_need(self):
        packages, npm = self.setup_installs()
        self.assertEqual(packages, self.BUILD)
        self.assertEqual(npm, [])
        demo = (ROOT / "scripts/demo").read_text()
        self.assertIn("\n  scripts/setup\n", demo)

    def test_the_tests_set_up_the_rest(self):
        packages, npm = self.setup_installs("--test")
        self.assertEqual(packages[:len(self.BUILD)], self.BUILD)
        for p in self.TEST_ONLY:
            self.assertIn(p, packages)
        self.assertEqual(len(npm), 3)
        self.assertIn("puppeteer-core@", npm[0])
        self.assertEqual(npm[1].split()[:2], ["npm", "ci"])  # the tokenizer reference (tests/tokenizers)
        self.assertEqual(npm[2].split()[:2], ["npm", "ci"])  # llama.cpp (tests/llamacpp)
        self.assertIn("\nscripts/setup --test\n", (ROOT / "scripts/test").read_text())

    def test_an_unknown_option_is_refused(self):
        proc = subprocess.run(["bash", str(ROOT / "scripts/setup"), "--tests"], capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stderr),
                         (2, "setup: unknown option '--tests' (usage: scripts/setup [--test])\n"))


class Completion(CliTestCase):

    def bash_complete(self, *words):
        script = self.path("attnscope.bash")
        script.write_text(run_root("--completion", "bash").out)
        words_text = " ".join("'" + w + "'" for w in words)
        proc = subprocess.run(
            ["bash", "--norc", "-c",
             f"source '{script}' && COMP_WORDS=({words_text}) && COMP_CWORD={len(words) - 1} && _attnscope && "
             "printf '%s\\n' \"${COMPREPLY[@]}\" && complete -p attnscope"],
            cwd=ROOT, capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stderr, "")
        lines = proc.stdout.splitlines()
        self.assertTrue(lines[-1].startswith("complete ") and lines[-1].endswith(" attnscope"), lines[-1])
        return lines[:-1]

    def test_bash_completes_commands_options_and_values(self):
        self.assertEqual(sorted(self.bash_complete("attnscope", "r")), ["report", "run"])
        self.assertEqual(self.bash_complete("attnscope", "ru"), ["run"])
        self.assertEqual(sorted(self.bash_complete("attnscope", "run", "data/sentence.json", "--hea")),
                         ["--head", "--heads", "--heatmap"])
        self.assertEqual(self.bash_complete("attnscope", "run", "--dtype", ""), ["float32", "float64"])
        self.assertEqual(self.bash_complete("attnscope", "run", "--stages", "scores,wei"), ["scores,weights"])
        self.assertEqual(self.bash_complete("attnscope", "decode", "--bu"), ["--bug"])
        self.assertIn("data/sentence.json", self.bash_complete("attnscope", "run", "data/sent"))

    def test_zsh_loads_the_completion(self):
        if not shutil.which("zsh"):
            self.skipTest("zsh is not installed (scripts/setup installs it)")
        fpath = self.path("zfunc")
        fpath.mkdir()
        (fpath / "_attnscope").write_text(run_root("--completion", "zsh").out)
        proc = subprocess.run(["zsh", "-n", str(fpath / "_attnscope")], capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))
        proc = subprocess.run(
            ["zsh", "-f", "-c",
             f"fpath=('{fpath}' $fpath); autoload -Uz compinit && compinit -u -d '{self.path('zcompdump')}' && "
             "print -r -- $_comps[attnscope] && autoload +X _attnscope && print -r -- ${+functions[_attnscope]}"],
            capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout.split(), ["_attnscope", "1"])


if __name__ == "__main__":
    common.main("attnscope usability (issue 14)")
