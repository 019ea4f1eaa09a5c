#!/usr/bin/python3
"""Hostile and careless uses, each a regression test of a defect once found: outputs
that must never replace what they should not, races between runs, options checked in
the run's precision, numbers that overflow, messages that say what was found.

    /usr/bin/python3 tests/py/test_hardening.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, CliTestCase, run_text  # noqa: E402

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
