#!/usr/bin/python3
"""The options as groups (issue 22, item 1): every row of the table of options that
contradict each other is refused with its message; choices are typed, and a number
standing for a choice is still refused; a library message names an option as the
command line spells it; each command lists its limits under Limits.

The expected messages are the command line's contract (the help and the issue say which
options need which); they are written here, never taken from attnscope.

    /usr/bin/python3 tests/py/test_options.py          (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import BIN, ROOT, CliTestCase  # noqa: E402

BUNDLE = "data/sentence.json"
NO_ROPE = "has no effect without --rope"
TEXT_VIEW = ("a view of the printed report, which --json replaces; run it without --json (the JSON holds every "
             "number it shows)")
DECODE_SELECTION = ("decode's selections choose the rows of the text view; --json and --dump hold every batch item "
                    "and head")


def run_root(*args):
    proc = subprocess.run([str(BIN)] + [str(a) for a in args], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, encoding="utf-8")
    return common.Result([str(a) for a in args], proc)


class Conflicts(CliTestCase):
    """Each row of the table: the options given together, and the one line that refuses them."""
    run_together = True

    def assert_refused(self, args, line):
        r = run_root(*args)
        self.assertEqual((r.code, r.out, r.err), (2, "", f"attnscope: error: {line}\n"), r)

    def test_the_model_options_that_need_another(self):
        rows = [
            (["--scale", "0.5", "--temperature", "2"], "--temperature: contradicts --scale; give one of them"),
            (["--rope-base", "500"], f"--rope-base: {NO_ROPE}"),
            (["--rope-dim", "2"], f"--rope-dim: {NO_ROPE}"),
            (["--rope-style", "interleaved"], f"--rope-style: {NO_ROPE}"),
            (["--causal-align", "bottom-right"],
             "--causal-align: has no effect without --causal (or --rope, --alibi, --window)"),
        ]
        for extra, line in rows:
            with self.subTest(extra=extra):
                self.assert_refused(["run", BUNDLE] + extra, line)
        # Anything that reads positions gives the alignment a meaning.
        for extra in (["--causal"], ["--rope"], ["--alibi"], ["--window", "2"]):
            with self.subTest(extra=extra):
                self.assertEqual(run_root("run", BUNDLE, "--causal-align", "bottom-right", *extra, "-q").code, 0)

    def test_the_inputs_that_exclude_each_other(self):
        self.assert_refused(["run", "--qkv", "mine.npz", "--checkpoint", "model.safetensors"],
                            "--qkv: starts the run at Q, K and V; --checkpoint's weights would not be used")
        self.assert_refused(["run", BUNDLE, "--axes", "q=bthd"],
                            "--axes: says how --qkv's arrays are laid out; give --qkv FILE")
        self.assert_refused(["run"], "run: expected a bundle (.npz, .json or -) or arrays given with --x, --W_Q, ...")

    def test_a_bundles_config_meets_the_same_rows(self):
        data = json.loads((ROOT / BUNDLE).read_text(encoding="utf-8"))
        data["config"] = {"rope_base": 500}
        path = self.save_json("config.json", data)
        self.assert_refused(["run", path], f"--rope-base: {NO_ROPE}")

    def test_the_views_of_the_printed_report_with_json(self):
        for extra, flag in ((["--explain"], "--explain"), (["--cell", "0,0,0"], "--cell"),
                            (["--heatmap"], "--heatmap"), (["--panels"], "--panels")):
            with self.subTest(flag=flag):
                self.assert_refused(["run", BUNDLE, "--json"] + extra, f"{flag}: {TEXT_VIEW}")

    def test_panels_with_stages_it_does_not_draw(self):
        self.assert_refused(["run", BUNDLE, "--panels", "--stages", "Q,K"],
                            "--panels: draws scores, masked_scores and weights; --stages Q,K names none of them")
        self.assertEqual(run_root("run", BUNDLE, "--panels", "--stages", "Q,weights").code, 0)

    def test_the_outputs_and_views_of_a_single_run_with_compare(self):
        for extra, flag in ((["--dump", self.path("d")], "--dump"), (["--html", self.path("r.html")], "--html"),
                            (["--svg", self.path("w.svg")], "--svg"),
                            (["--panels"], "--panels"), (["--explain"], "--explain"), (["--diagnose"], "--diagnose"),
                            (["--cell", "0,0,0"], "--cell")):
            with self.subTest(flag=flag):
                self.assert_refused(["run", BUNDLE, "--compare", "--scale none"] + extra,
                                    f"--compare: prints the differences of two runs; {flag} belongs to a single run "
                                    "(run it without --compare)")
        self.assertFalse(self.path("d").exists())

    def test_decode(self):
        decode = ["decode", "data/causal.json", "--prefill", "1"]
        self.assert_refused(decode + ["--no-causal"],
                            "--no-causal: decode is causal by construction (a step sees only the cache: its own "
                            "position and those before)")
        self.assert_refused(decode + ["--json", "--heatmap"],
                            "--heatmap: a text view; --json gives every weight row as numbers")
        self.assert_refused(decode + ["--batch", "0", "--json"], f"--batch: {DECODE_SELECTION}")
        self.assert_refused(decode + ["--head", "0", "--dump", self.path("d.npz")], f"--head: {DECODE_SELECTION}")
        self.assertFalse(self.path("d.npz").exists())
        # --causal says what decode does anyway; the later of --no-causal and --causal wins.
        self.assertEqual(run_root(*decode, "--no-causal", "--causal", "-q").code, 0)


class ModeMatrix(CliTestCase):
    """Run's modes against every option of run (src/cli/conflicts.cpp's matrix): each pair
    is taken or refused with its own sentence, never refused for want of a verdict, never
    a crash. The options come from `run --help`, so a new one joins the loop by itself."""
    run_together = True

    MODEL = ["--model", "data/tiny-gpt2", "--text", "the cat sat"]
    MODES = {
        "--compare": ["run", BUNDLE, "--compare", "--scale none"],
        "--sweep": ["run", BUNDLE, "--sweep", "scale=1,2"],
        "--why": ["run", BUNDLE, "--why", "0,1"],
        "--layer all": ["run"] + MODEL + ["--layer", "all", "--summary"],
        "--model": ["run"] + MODEL,
    }
    # A value for each option of run that takes one (a flag takes none).
    VALUES = {
        "--x": "x.npy", "--memory": "x.npy", "--W_Q": "w.npy", "--W_K": "w.npy", "--W_V": "w.npy",
        "--W_O": "w.npy", "--b_Q": "b.npy", "--b_K": "b.npy", "--b_V": "b.npy", "--b_O": "b.npy",
        "--key_padding_mask": "m.npy", "--model": "data/tiny-gpt2", "--text": "a b", "--text-file": "t.txt",
        "--tokens": "1,2", "--predict": "2", "--save-forward": "f.npz", "--checkpoint": "data/tiny-gpt2",
        "--layer": "0", "--preset": "auto", "--prefix": "h.0.", "--qkv": "qkv.npz", "--axes": "q=bthd",
        "--heads": "1", "--scale": "0.5", "--dtype": "float32", "--layout": "math", "--causal-align": "top-left",
        "--kv-heads": "1", "--rope-base": "100", "--rope-dim": "2", "--rope-style": "half", "--window": "2",
        "--softcap": "30", "--attn-mask-means": "allow", "--stages": "weights", "--dump": "out",
        "--html": "r.html", "--svg": "w.svg", "--svg-stage": "weights", "--batch": "0", "--head": "0",
        "--decimals": "3", "--edgeitems": "2", "--cell": "0,0,0", "--why": "0,1", "--color": "never",
        "--range": "auto", "--width": "80", "--temperature": "2", "--zero-key": "0", "--compare": "--causal",
        "--sweep": "temperature=1,2", "--threads": "1", "--max-memory": "1G", "--topk": "2", "--sink-keys": "1",
        "--local": "2", "--jsonl": "rows.jsonl"}
    OUTPUTS = ("--dump", "--html", "--svg", "--save-forward", "--jsonl")
    UNPLACED = "no verdict places it with this mode"

    def run_options(self):
        r = run_root("run", "--help")
        self.assertEqual(r.code, 0, r)
        options = []
        for line in r.out.splitlines():
            m = re.match(r"\s+(?:-\w, )?(--[\w-]+)(?:,\s*--[\w-]+)?(\s+\S+)?", line)
            if m and m.group(1) not in ("--help", "--no-causal") and m.group(1) not in options:
                options.append(m.group(1))
        self.assertGreater(len(options), 50)
        return options

    def test_every_pair_is_taken_or_refused_with_its_sentence(self):
        options = self.run_options()
        flags = [o for o in options if o not in self.VALUES]
        self.assertIn("--json", flags)
        for mode, args in self.MODES.items():
            for option in options:
                with self.subTest(mode=mode, option=option):
                    value = self.VALUES.get(option)
                    if option in self.OUTPUTS:  # written into the test's own directory
                        value = str(self.path(value))
                    extra = [option] + ([value] if value is not None else [])
                    r = run_root(*(args + extra + ["--force"] * (option in ("--dump", "--html", "--svg"))))
                    self.assertIn(r.code, (0, 1, 2), r)
                    self.assertNotIn(self.UNPLACED, r.err, r)
                    self.assertNotIn("internal error", r.err, r)
                    if r.code == 2:
                        self.assertEqual(r.err.count("\n"), 1, r)

    def test_compare_refuses_the_outputs_it_would_drop(self):
        for extra in (["--jsonl", self.path("rows.jsonl")], ["--summary"], ["--topk", "3"], ["--timings"],
                      ["--sink-keys", "2"], ["--local", "4"], ["--predict", "2"], ["-q"], ["--decimals", "2"]):
            flag = "--quiet" if extra[0] == "-q" else extra[0]
            with self.subTest(flag=flag):
                r = run_root("run", BUNDLE, "--compare", "--scale none", *extra)
                self.assertEqual((r.code, r.out), (2, ""), r)
                self.assertEqual(r.err, f"attnscope: error: --compare: prints the differences of two runs; {flag} "
                                 "belongs to a single run (run it without --compare)\n")
        self.assertFalse(self.path("rows.jsonl").exists())


class TypedChoices(CliTestCase):
    """A choice is one of its names: the number an enum holds inside is no name."""
    run_together = True

    def test_every_name_is_accepted_and_a_number_is_refused(self):
        choices = {"--dtype": ["float32", "float64"], "--layout": ["math", "torch"],
                   "--color": ["auto", "always", "never"], "--causal-align": ["top-left", "bottom-right"],
                   "--rope-style": ["half", "interleaved"]}
        for flag, names in choices.items():
            for name in names:
                with self.subTest(flag=flag, name=name):
                    r = run_root("run", BUNDLE, "--causal", "--rope", flag, name, "-q")
                    self.assertEqual((r.code, r.err), (0, ""), r)
            with self.subTest(flag=flag, name="0"):
                r = run_root("run", BUNDLE, "--rope", flag, "0")
                self.assertEqual(r.code, 2, r)
                self.assertEqual(r.err, f"attnscope: error: {flag}: unknown value '0' (expected one of: "
                                        f"{', '.join(names + (['tl'] if flag == '--layout' else []))})\n")

    def test_a_wrong_name_gets_the_nearest(self):
        r = run_root("run", BUNDLE, "--dtype", "float16")
        self.assertEqual(r.err, "attnscope: error: --dtype: unknown value 'float16'; did you mean float32? "
                                "(expected one of: float32, float64)\n")

    def test_the_choice_is_used(self):
        # The JSON's config says which precision ran.
        for name in ("float32", "float64"):
            r = run_root("run", BUNDLE, "--dtype", name, "--json", "--stages", "weights")
            self.assertEqual(r.code, 0, r)
            self.assertIn(name, json.dumps(json.loads(r.out)["config"]))


class Spelling(CliTestCase):
    """A library message names a field; the command line shows the option that sets it."""
    run_together = True

    def test_fields_are_spelled_as_their_options(self):
        r = run_root("run", BUNDLE, "--heads", "2", "--kv-heads", "3")
        self.assertEqual(r.code, 2, r)
        self.assertTrue(r.err.startswith("attnscope: error: --kv-heads 3: does not divide --heads 2"), r)
        r = run_root("run", BUNDLE, "--max-memory", "1x")
        self.assertEqual(r.err, "attnscope: error: --max-memory: expected a size such as 8G, 512M or 1000000, "
                                "found '1x'\n")

    def test_limits_are_listed_under_limits_by_every_command_that_computes(self):
        for command in ("run", "check", "decode", "report"):
            with self.subTest(command=command):
                help_text = run_root(command, "--help").out
                limits = help_text.split("\nLimits:\n", 1)[1].split("\n\n", 1)[0]
                self.assertIn("--max-memory SIZE", limits)
                self.assertIn("--threads N", limits)
                self.assertEqual(help_text.count("--max-memory"), 1)


if __name__ == "__main__":
    common.main("attnscope options as groups (issue 22)")
