#!/usr/bin/python3
"""Hostile and careless uses, each a regression test of a defect once found: outputs
that must never replace what they should not, races between runs, options checked in
the run's precision, numbers that overflow, messages that say what was found.

    /usr/bin/python3 tests/py/test_hardening.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, CliTestCase, run, run_text  # noqa: E402

EXAMPLE = DATA / "sentence.json"


def bundle_g(rng_seed=0):
    """G: a valid 2x4x8 float64 bundle."""
    rng = np.random.default_rng(rng_seed)
    return {"x": rng.standard_normal((2, 4, 8)),
            **{k: rng.standard_normal((8, 8)) / 3 for k in ("W_Q", "W_K", "W_V", "W_O")}}


class OutputTargets(CliTestCase):
    """--html, --svg and --dump never replace a device, a FIFO or a dangling link; a link
    to a regular file only with --force (and then the link itself)."""

    def setUp(self):
        super().setUp()
        self.g = self.save_npz("g.npz", **bundle_g())

    def test_fifo_is_never_replaced(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        for option in ("--html", "--svg", "--dump"):
            target = fifo if option != "--dump" else self.path("fifo.npz")
            if option == "--dump":
                os.mkfifo(target)
            with self.subTest(option=option):
                r = run_text("run", self.g, option, target, "--force", "-q")
                self.assert_error(r, str(target), "FIFO", "not a regular file", code=1)
                self.assertTrue(Path(target).is_fifo())

    def test_character_device_is_never_replaced(self):
        device = self.path("full")
        try:
            os.mknod(device, 0o666 | 0o020000, os.makedev(1, 7))  # like /dev/full
        except PermissionError:
            self.skipTest("mknod needs root")
        r = run_text("run", self.g, "--html", device, "--force", "-q")
        self.assert_error(r, "character device", code=1)
        self.assertTrue(device.is_char_device())

    def test_dangling_link_is_never_replaced(self):
        link = self.path("dangling.html")
        link.symlink_to(self.path("nowhere"))
        for force in ([], ["--force"]):
            with self.subTest(force=force):
                r = run_text("run", self.g, "--html", link, "-q", *force)
                self.assert_error(r, "dangling symbolic link", code=2)  # a name taken, as by a file
                self.assertTrue(link.is_symlink())
                self.assertFalse(self.path("nowhere").exists())

    def test_link_to_a_regular_file_needs_force_and_keeps_the_file(self):
        real = self.path("real.html")
        real.write_text("mine")
        link = self.path("link.html")
        link.symlink_to(real)
        r = run_text("run", self.g, "--html", link, "-q")
        self.assert_error(r, "exists", "--force", code=2)
        self.assertTrue(link.is_symlink())
        r = run_text("run", self.g, "--html", link, "-q", "--force")
        self.assertEqual(r.code, 0, r)
        self.assertIn("symbolic link", r.err)
        self.assertFalse(link.is_symlink())
        self.assertIn("<html", link.read_text())
        self.assertEqual(real.read_text(), "mine")

    def test_every_output_is_checked_before_computing(self):
        d, svg = self.path("d"), self.path("ok.svg")
        r = run_text("run", self.g, "--dump", d, "--svg", svg, "--html", self.path("nope/r.html"), "-q")
        self.assert_error(r, "nope/r.html", "directory", "does not exist", code=1)
        self.assertFalse(d.exists())
        self.assertFalse(svg.exists())


class Races(CliTestCase):
    """Two runs writing one new path at the same moment: exactly one wins."""

    def test_two_runs_one_new_archive(self):
        g = self.save_npz("g.npz", **bundle_g())
        outcomes = []
        for k in range(50):
            target = self.path(f"race-{k}.npz")
            procs = [subprocess.Popen([str(common.BIN), "run", str(g), "--dump", str(target), "-q"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                     for _ in range(2)]
            results = [(p.wait(), p.stderr.read().decode()) for p in procs]
            for p in procs:
                p.stdout.close()
                p.stderr.close()
            codes = sorted(code for code, _ in results)
            outcomes.append(codes)
            self.assertEqual(codes[0], 0, results)
            if codes[1] != 0:  # the loser says so in one line
                err = [e for c, e in results if c != 0][0]
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(str(target), err)
            with np.load(target) as z:  # whoever won, the archive is whole
                self.assertEqual(z["output"].shape, (2, 4, 8))
            self.assertEqual([p.name for p in self.tmp.glob("*.tmp-*")], [])
        # Runs that overlap must not both claim the name; runs that do not overlap
        # (the first finished before the second looked) fail on the existence check.
        self.assertTrue(all(c[0] == 0 and c[1] != 0 for c in outcomes), outcomes)


    def test_two_runs_one_new_dump_directory(self):
        # A dump directory is built under a temporary name and renamed into place with
        # RENAME_NOREPLACE: exactly one of two runs gets the name; the other says so in
        # one line, and the winner's dump is whole, never mixed with the loser's files.
        g = self.save_npz("g.npz", **bundle_g())
        g2 = self.save_npz("g2.npz", **bundle_g(1))
        outcomes = []
        for k in range(50):
            target = self.path(f"race-{k}")
            procs = [subprocess.Popen([str(common.BIN), "run", str(src), "--dump", str(target), "-q"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                     for src in (g, g2)]
            results = [(p.wait(), p.stderr.read().decode()) for p in procs]
            for p in procs:
                p.stdout.close()
                p.stderr.close()
            codes = [code for code, _ in results]
            outcomes.append(sorted(codes))
            self.assertEqual(sorted(codes)[0], 0, results)
            for code, err in results:
                if code != 0:
                    self.assertEqual(len(err.splitlines()), 1, err)
                    self.assertIn(str(target), err)
            winner = common.reference(dict(np.load((g, g2)[codes.index(0)])), heads=1)
            self.assertEqual(sorted(os.listdir(target)), sorted(f"{s}.npy" for s in common.STAGES))
            for s in common.STAGES:
                np.testing.assert_allclose(np.load(target / f"{s}.npy").astype(float),
                                           np.asarray(winner[s], dtype=float), rtol=1e-12, atol=1e-12, err_msg=s)
            self.assertEqual([p.name for p in self.tmp.glob("*.tmp-*")], [])
        self.assertTrue(all(c[0] == 0 and c[1] != 0 for c in outcomes), outcomes)


class DumpDirectory(CliTestCase):
    """--dump DIR is whole or absent; --force replaces an old dump as a whole."""

    def setUp(self):
        super().setUp()
        self.g = self.save_npz("g.npz", **bundle_g())

    def test_force_leaves_no_stale_stage(self):
        d = self.path("d")
        self.assert_ok(run_text("run", self.g, "--dump", d, "-q"))
        self.assertIn("Q.npy", os.listdir(d))
        self.assert_ok(run_text("run", EXAMPLE, "--dump", d, "--force", "--stages", "weights", "-q"))
        self.assertEqual(os.listdir(d), ["weights.npy"])
        self.assertEqual(np.load(d / "weights.npy").shape, (1, 6, 6))  # sentence.json's, not G's
        self.assertEqual([p.name for p in self.tmp.glob("*.tmp-*")], [])

    def test_force_refuses_a_directory_that_is_not_a_dump(self):
        d = self.path("mine")
        d.mkdir()
        (d / "notes.txt").write_text("keep")
        np.save(d / "Q.npy", np.zeros(2))
        r = run_text("run", self.g, "--dump", d, "--force", "-q")
        self.assert_error(r, "--force replaces a dump directory as a whole", code=2)
        self.assertIn("notes.txt", r.err)
        self.assertEqual(sorted(os.listdir(d)), ["Q.npy", "notes.txt"])
        self.assertEqual((d / "notes.txt").read_text(), "keep")

    def test_existing_directory_without_force_gets_new_files_only(self):
        d = self.path("empty")
        d.mkdir()
        self.assert_ok(run_text("run", self.g, "--dump", d, "--stages", "weights", "-q"))
        self.assertEqual(os.listdir(d), ["weights.npy"])
        r = run_text("run", self.g, "--dump", d, "--stages", "weights,Q", "-q")
        self.assert_error(r, "weights.npy", code=2)
        self.assertEqual(os.listdir(d), ["weights.npy"])


class TerminalSafeLabels(CliTestCase):
    """Token labels reach a terminal escaped in every view, and a JSON document exactly."""

    HOSTILE = ["\x1b[31mRED", "\x1b]0;title\x07", "a\nb", "ok"]

    def test_labels_never_act_on_the_terminal(self):
        # The output with hostile labels is the output with labels that spell their
        # escapes out literally: nothing acts on the terminal, no label breaks a line.
        b = json.loads(EXAMPLE.read_text())
        T = len(b["query_tokens"])
        hostile = (self.HOSTILE * T)[:T]
        spelled = [t.encode("unicode_escape").decode() for t in hostile]
        paths = {}
        for name, labels in (("hostile", hostile), ("spelled", spelled)):
            (self.tmp / name).mkdir()
            paths[name] = self.tmp / name / "b.json"
            paths[name].write_text(json.dumps({**b, "query_tokens": labels, "key_tokens": labels}))
        for view in ([], ["--heatmap"], ["--panels"], ["--diagnose"], ["--explain"],
                     ["--cell", "0,1,2"], ["--full"]):
            with self.subTest(view=view):
                r = run_text("run", paths["hostile"], *view)
                self.assertEqual(r.code, 0, r)
                for c in ("\x1b", "\x07", "\x00"):
                    self.assertNotIn(c, r.out)
                ok = run_text("run", paths["spelled"], *view)
                self.assertEqual(r.out.replace("/hostile/", "/spelled/"), ok.out)
        html = self.path("r.html")
        self.assert_ok(run_text("run", paths["hostile"], "--html", html, "-q"))
        self.assertNotIn("\x1b", html.read_text())
        doc = json.loads(run_text("run", paths["hostile"], "--json").out)  # JSON keeps them exactly
        self.assertEqual(doc["tokens"]["query"], hostile)


class Compare(CliTestCase):

    def test_outputs_of_a_single_run_are_refused(self):
        for extra in (["--dump", self.path("d")], ["--html", self.path("r.html")], ["--jsonl", self.path("r.jsonl")]):
            with self.subTest(extra=extra):
                r = run_text("run", EXAMPLE, "--compare", "--scale none", *extra)
                self.assert_error(r, "--compare", str(extra[0]))
        self.assertFalse(self.path("d").exists())

    def test_json_is_one_document(self):
        r = run_text("run", EXAMPLE, "--heads", "2", "--compare", "--causal", "--json")
        self.assertEqual(r.code, 0, r)
        doc = json.loads(r.out)
        self.assertEqual(doc["compare"]["b_adds"], ["--causal"])
        self.assertEqual(doc["stages"]["masked_scores"]["max_abs_diff"], "inf")
        self.assertEqual(doc["stages"]["Q"]["max_abs_diff"], 0)

    def test_an_option_given_again_replaces_the_first(self):
        r = run_text("run", EXAMPLE, "--heads", "2", "--compare", "--heads 1")
        self.assertEqual(r.code, 0, r)
        self.assertIn("(shapes differ)", r.out)


class NumbersAndMessages(CliTestCase):

    def setUp(self):
        super().setUp()
        self.g = self.save_npz("g.npz", **bundle_g())

    def test_scale_checked_in_the_run_precision(self):
        for args, what in ((["--scale", "1e39"], "infinite in float32"),
                           (["--temperature", "1e-300"], "infinite in float32"),
                           (["--scale", "1e-50"], "rounds to 0 in float32")):
            with self.subTest(args=args):
                r = run_text("run", self.g, "--dtype", "float32", *args, "-q")
                self.assert_error(r, args[0], what)
        r = run_text("run", self.g, "--scale", "1e39", "-q")  # finite in float64
        self.assertEqual(r.code, 0, r)

    def test_subnormal_scale_is_a_number(self):
        r = run_text("run", self.g, "--scale", "1e-320", "-q")
        self.assertEqual(r.code, 0, r)

    def test_negative_indices_are_named_as_such(self):
        for args in (["--zero-key", "-1"], ["--cell", "0,0,-1,0"], ["--batch", "-1"], ["--head", "0,-1"]):
            with self.subTest(args=args):
                r = run_text("run", self.g, *args)
                msg = self.assert_error(r, args[0], "-1")
                self.assertNotIn("18446744073709551615", msg)

    def test_many_threads_on_a_small_run(self):
        r = run_text("run", self.g, "--threads", "4096", "-q")
        self.assertEqual(r.code, 0, r)

    def test_array_option_from_stdin(self):
        r = run_text("run", self.g, "--x", "-", "-q")
        self.assert_error(r, "--x -", "standard input")

    def test_zero_width_weights(self):
        for name in ("W_Q", "W_O"):
            with self.subTest(name=name):
                w = self.save_npy(f"{name}.npy", np.zeros((8, 0)))
                r = run_text("run", self.g, f"--{name}", w, "--json")
                self.assert_error(r, name, "(8, 0)")
                self.assertNotIn("W_K", r.err)

    def test_json_stays_valid_for_a_file_name_that_is_not_utf8(self):
        name = os.fsencode(str(self.tmp)) + b"/bad\xff.npz"
        with open(name, "wb") as f:
            np.savez(f, **bundle_g())
        r = common.run("run", os.fsdecode(name), "--json")
        self.assertEqual(r.code, 0, r)
        doc = json.loads(r.out.decode("utf-8"))  # strict UTF-8: the raw byte is replaced
        self.assertIn("bad\ufffd.npz", doc["config"]["source"])

    def test_errors_echo_nothing_a_terminal_acts_on(self):
        bad = self.path("esc.json")
        bad.write_text('{"x\\u001b[31mRED\\u0007": [[1]], "x": [[1, 2]]}', encoding="utf-8")
        r = run_text("run", bad)
        msg = self.assert_error(r, "x\\x1b[31mRED\\x07")
        self.assertNotIn("\x1b", msg)
        self.assertNotIn("\x07", msg)

    def test_finite_inputs_that_overflow_are_reported(self):
        eye = np.eye(2)
        cases = {"scores": {"x": np.array([[1e160, 0.0], [0.0, 1e160]]), "W_Q": eye, "W_K": eye, "W_V": eye},
                 "Q": {"x": np.array([[1e308, 1e308], [1.0, 1.0]]), "W_Q": np.ones((2, 2)), "W_K": eye, "W_V": eye}}
        for stage, arrays in cases.items():
            with self.subTest(stage=stage):
                r = run_text("run", self.save_npz(f"{stage}.npz", **arrays), "-q")
                self.assertEqual(r.code, 0, r)
                lines = r.err.splitlines()
                self.assertEqual(len(lines), 1, r)
                self.assertIn("warning: every input is finite, but " + stage, lines[0])
        r = run_text("run", self.g, "-q")
        self.assert_ok(r)



def measured(*args, timeout=120, address_space=None):
    """(exit code, stdout, stderr, peak RSS in bytes, seconds) of one attnscope run under
    GNU time, with a timeout and optionally its address space capped. Under a sanitizer
    no cap and a peak of 0 (its shadow memory is not the program's)."""
    if common.sanitized():
        address_space = None

    def cap():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.monotonic()
        p = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, str(common.BIN)] +
                           [str(a) for a in args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=timeout, preexec_fn=cap)
        seconds = time.monotonic() - t0
        text = rss.read().split()
        peak = int(text[-1]) * 1024 if text and not common.sanitized() else 0
        return p.returncode, p.stdout, p.stderr, peak, seconds


MIB = 1 << 20


class HostileTokenizers(CliTestCase):
    """tokenizer.json files written to hurt: ids past the vocabulary, patterns that
    backtrack over the whole text, words that make WordPiece cubic, normalizers that
    double the text. Each is refused in one line (exit 2) or runs within its bounds."""

    def tokenizer(self, name="tokenizer.json", vocab=None, **parts):
        """A byte-level-free BPE tokenizer.json: `vocab` (default a, b and [UNK]), no merges,
        and the components given (normalizer=..., pre_tokenizer=..., ...)."""
        vocab = vocab or {"a": 0, "b": 1, "[UNK]": 2}
        doc = {"model": {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "[UNK]"}, **parts}
        return self.save_json(name, doc)

    def test_post_processor_ids_outside_the_vocabulary_are_refused(self):
        # Before: the table view crashed (SIGSEGV) and --json refused at decode.
        template = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                             {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [70000], "tokens": ["<s>"]}}}
        bert = {"type": "BertProcessing", "cls": ["[CLS]", 70000], "sep": ["[SEP]", 1]}
        for kind, post in (("template", template), ("bert", bert)):
            path = self.tokenizer(f"{kind}.json", post_processor=post)
            for view in ([], ["--json"], ["--ids-only"]):
                with self.subTest(kind=kind, view=view):
                    r = run_text("tokens", "--model", path, "--text", "ab", *view)
                    self.assert_error(r, str(path), "post_processor", "70000", "not in the vocabulary")

    def test_added_token_ids_past_the_vocabulary_bound_are_refused(self):
        # Before: accepted up to 2^31 - 1, then "out of memory", exit 1, naming nothing.
        for big in (2**26, 2**31 - 1):
            path = self.tokenizer(added_tokens=[{"id": big, "content": "<big>", "special": True}])
            with self.subTest(id=big):
                r = run_text("tokens", "--model", path, "--text", "ab <big>")
                self.assert_error(r, str(path), "added_tokens[0].id", str(big), "2^26 - 1")

    def test_tokens_views_hold_what_the_text_needs_not_the_largest_id(self):
        # Before: an added token's id of 2^23 made the views allocate per id up to it
        # (586 MiB under --max-memory 100M).
        path = self.tokenizer(added_tokens=[{"id": 2**23, "content": "<big>", "special": True}])
        for view in ([], ["--json"]):
            with self.subTest(view=view):
                code, out, err, peak, _ = measured("tokens", "--model", path, "--text", "ab <big>", "--max-memory",
                                                   "100M", *view)
                self.assertEqual((code, err), (0, ""), err)
                self.assertIn("8388608", out)
                if peak:
                    self.assertLess(peak, 100 * MIB)

    def test_normalizer_growth_is_counted_against_the_limit(self):
        # Before: 22 Replace steps doubling a 1-byte text held 499 MiB under 100M.
        double = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
        path = self.tokenizer(normalizer={"type": "Sequence", "normalizers": [double] * 22})
        code, out, err, peak, _ = measured("tokens", "--model", path, "--text", "a", "--max-memory", "100M",
                                           address_space=2 << 30)
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn(f"{path}: normalizer.normalizers[", err)
        self.assertIn("the normalized text grows from", err)
        self.assertIn("past the memory limit of 100 MiB (--max-memory)", err)
        if peak:
            self.assertLess(peak, 100 * MIB)
        # and a few doublings go through: 1 byte to 64
        path = self.tokenizer("six.json", normalizer={"type": "Sequence", "normalizers": [double] * 6})
        r = run_text("tokens", "--model", path, "--text", "a", "--ids-only")
        self.assertEqual(r.out, ",".join(["0"] * 64) + "\n", r)

    def test_regex_work_is_bounded_over_the_whole_text(self):
        # A look-ahead around nested runs costs n^3 at each of n places, each place
        # under PCRE2's per-match limit. Before: 1.2 KB took a minute, 4 KB hours.
        lookahead = {"Regex": "(?=a*a*a*b)a"}
        split = {"type": "Split", "pattern": lookahead, "behavior": "Isolated", "invert": False}
        cases = {"pre_tokenizer": split,
                 "normalizer": {"type": "Replace", "pattern": lookahead, "content": "b"},
                 "decoder": {"type": "Replace", "pattern": lookahead, "content": "b"}}
        long_a = {"a": 0, "b": 1, "[UNK]": 2, "a" * 4000: 3}  # a token of 4000 bytes to decode
        for where, part in cases.items():
            path = self.tokenizer(f"{where}.json", vocab=long_a, **{where: part})
            with self.subTest(where=where):
                args = ["--decode", "3"] if where == "decoder" else ["--text", "a" * 4000]
                code, out, err, _, seconds = measured("tokens", "--model", path, *args, timeout=120)
                self.assertEqual((code, out), (2, ""), err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(f"{path}: {where}.pattern.Regex: the regular expression takes more than", err)
                self.assertIn("it backtracks without bound", err)
        # an ordinary pattern on a long text is not refused
        gpt = {"Regex": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"}
        path = self.tokenizer("ordinary.json", pre_tokenizer={"type": "Split", "pattern": gpt,
                                                              "behavior": "Isolated", "invert": False})
        text = self.path("ordinary.txt")
        text.write_text("ab " * 100000, encoding="utf-8")
        r = run_text("tokens", "--model", path, "--text-file", text, "--ids-only")
        self.assertEqual(r.code, 0, r)

    def test_wordpiece_is_bounded_by_the_longest_entry(self):
        # Before: cubic in the word's length (an 8 KB word took 21 s; 32 KB, 20 minutes).
        doc = {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1, "##a": 2, "##ab": 3},
                         "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                         "max_input_chars_per_word": 10**9},
               "pre_tokenizer": {"type": "WhitespaceSplit"}}
        path = self.save_json("wordpiece.json", doc)
        code, out, err, _, seconds = measured("tokens", "--model", path, "--text", "a" * 32768 + "b",
                                              "--ids-only", timeout=120)
        self.assertEqual((code, err), (0, ""), err)
        self.assertEqual(out, ",".join(["1"] + ["2"] * 32766 + ["3"]) + "\n")

    def test_too_deep_json_is_refused_alike_everywhere(self):
        # One reader, one message: tokenizer.json (before: its own bound of 128 and its own
        # words), config.json, a bundle's arrays.
        deep = self.path("deep.json")
        deep.write_text('{"model": ' + "[" * 100 + "]" * 100 + "}", encoding="utf-8")
        r = run_text("tokens", "--model", deep, "--text", "a")
        self.assert_error(r, f"{deep}: objects and arrays nested more than 64 deep")
        bundle = self.path("bundle.json")
        bundle.write_text('{"x": ' + "[" * 40 + "1" + "]" * 40 + "}", encoding="utf-8")
        r = run_text("run", bundle)
        self.assert_error(r, f"{bundle}: x: objects and arrays nested more than 32 deep")


class DevicesAndListings(CliTestCase):
    """A character or block device is never read as an input (it never ends); inspect
    holds what a listing needs, whatever the machine's memory."""

    def test_character_devices_are_refused_as_inputs(self):
        # Before: /dev/zero behind a .safetensors name was read until memory ran out.
        link = self.path("zero.safetensors")
        os.symlink("/dev/zero", link)
        code, out, err, peak, _ = measured("inspect", link, address_space=4 << 30)
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(err.strip(), f"attnscope: error: {link}: is a symbolic link to a character device, "
                                      "expected a file")
        for args in (["run", "/dev/zero"], ["tokens", "--model", "/dev/zero", "--text", "a"],
                     ["tokens", "--model", common.ROOT / "tests/fixtures/tokenizers/bert-wordpiece",
                      "--text-file", "/dev/zero"]):
            with self.subTest(args=args):
                r = run_text(*args)
                self.assert_error(r, "/dev/zero: is a character device, expected a file")

    def test_inspect_bounds_a_pickle_without_max_memory(self):
        # Before: a torch.save whose pickle inflates to gigabytes was inflated (3 GiB held
        # for a 3 MB file); now a listing holds at most 1 GiB unless --max-memory says more.
        f = self.path("bomb.pt")
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            with z.open("archive/data.pkl", "w", force_zip64=True) as m:
                chunk = bytes(1 << 24)
                for _ in range(72):  # 1.125 GiB inflated
                    m.write(chunk)
        code, out, err, peak, _ = measured("inspect", f)
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("its pickle is 1.1 GiB decompressed, over the memory limit of 1.0 GiB (--max-memory)", err)
        if peak:
            self.assertLess(peak, 64 * MIB)


class EmptyHugeWeights(CliTestCase):
    """TransformerLens weights with no element but huge axes (issue 21): refused in one
    line, never a loop over the axes that are not empty."""

    SHAPES = ((1, 2**62, 0), (2**40, 8, 0))

    def npy_bytes(self, shape):
        """An .npy of float64 zeros of `shape`, written by hand: numpy refuses to make
        some of these arrays, though they hold no element."""
        header = "{'descr': '<f8', 'fortran_order': False, 'shape': %r, }" % (tuple(shape),)
        header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
        return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")

    def safetensors(self, name, tensors):
        """A .safetensors file of {name: (shape, float64 data)}, laid out one after another."""
        head, body, offset = {}, b"", 0
        for n, (shape, data) in tensors.items():
            raw = np.asarray(data, "<f8").tobytes()
            head[n] = {"dtype": "F64", "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
            body += raw
            offset += len(raw)
        text = json.dumps(head).encode()
        text += b" " * ((-(8 + len(text))) % 8)
        p = self.path(name)
        p.write_bytes(len(text).to_bytes(8, "little") + text + body)
        return p

    def test_bundle_with_layout_tl(self):
        import zipfile
        for shape in self.SHAPES:
            with self.subTest(shape=shape):
                p = self.path("tl.npz")
                with zipfile.ZipFile(p, "w") as z:
                    z.writestr("x.npy", self.npy_bytes((4, 8)) + np.zeros(32).tobytes())
                    for n in ("W_Q", "W_K", "W_V"):
                        z.writestr(n + ".npy", self.npy_bytes(shape))
                r = run_text("run", p, "--layout", "tl", "-q", timeout=120)
                self.assert_error(r, "W_Q", shape_text(shape), "no element")

    def test_checkpoint_with_preset_tl(self):
        x = self.save_npz("x.npz", x=np.zeros((4, 8)))
        for shape in self.SHAPES:
            with self.subTest(shape=shape):
                weights = {f"blocks.0.attn.{n}": (shape, []) for n in ("W_Q", "W_K", "W_V")}
                weights["blocks.0.attn.W_O"] = ((2, 4, 8), np.zeros(64))
                ckpt = self.safetensors("tl.safetensors", weights)
                r = run_text("run", x, "--checkpoint", ckpt, "--preset", "tl", "-q", timeout=120)
                self.assert_error(r, "blocks.0.attn.W_Q", shape_text(shape), "no element")


def shape_text(shape):
    """A shape as attnscope prints it: (1, 2, 3)."""
    return "(" + ", ".join(map(str, shape)) + ")"


if __name__ == "__main__":
    common.main("test_hardening")
