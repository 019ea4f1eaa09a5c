#!/usr/bin/python3
"""attnscope as a user runs it: argv in; exact stdout, stderr and exit code out.

Expected numbers come from the numpy reference scripts/attn_reference.py (and, for
--layout torch, from torch.nn.MultiheadAttention), never from attnscope itself.
Every test works in its own temporary directory.

    /usr/bin/python3 tests/py/test_cli.py            (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, EXAMPLES, STAGES, CliTestCase, assert_close, ref, run, run_text  # noqa: E402

# Tolerances against the float64 reference (the reference sums in another order).
TOL_JSON = 1e-12   # --json, float64
TOL_DUMP = 1e-10   # --dump, float64
TOL_F32 = 1e-5     # --dtype float32 (relative to max(1, |value|)), inputs rounded alike

FLOAT_STAGES = tuple(s for s in STAGES if s != "mask")


# ---------------------------------------------------------------------------
# Reading attnscope's outputs
# ---------------------------------------------------------------------------

HEADING = re.compile(r"^== (\w+) = ")


def headings(text):
    """Stage names of the `== NAME = formula` headings, in printed order."""
    return [m.group(1) for m in map(HEADING.match, text.splitlines()) if m]


def text_tables(text, stage):
    """The tables printed under one stage heading: {block title: (columns, rows)}.

    A block title is the `-- head 0` / `-- batch 1, head 0` line without its dashes
    ("" when the stage has no such line); rows are (label, [cell, ...]). Labels
    must not contain spaces (true of every bundle these tests use).
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {stage} = "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    tables, title, table = {}, "", None
    for line in lines[start + 2:end]:          # skip the heading and the shape line
        if not line.strip():
            table = None
        elif line.startswith("  -- "):
            title, table = line[5:].strip(), None
        elif line.lstrip().startswith("(… stands for"):  # the note under a cut table
            continue
        elif table is None:                    # a column header opens a table
            table = (line.split(), [])
            tables[title] = table
        else:
            label, *cells = line.split()
            table[1].append((label, cells))
    return tables


def json_stage(doc, name):
    """A stage of a --json document as a numpy array ("-inf" strings restored)."""
    st = doc["stages"][name]
    dtype = bool if st["dtype"] == "bool" else float
    arr = np.array(st["data"], dtype=dtype)
    assert list(arr.shape) == st["shape"], (name, arr.shape, st["shape"])
    return arr


def example_run(name, *extra, ext="json"):
    """argv for running a data/ example with its intended options."""
    return ["run", DATA / f"{name}.{ext}", *EXAMPLES[name][0], *extra]


# ---------------------------------------------------------------------------
# The printed report
# ---------------------------------------------------------------------------

class TextReport(CliTestCase):

    def test_all_stages_in_pipeline_order(self):
        r = run_text(*example_run("sentence"))
        self.assert_ok(r)
        self.assertEqual(headings(r.out), list(STAGES))
        self.assertTrue(r.out.startswith(
            f"attnscope: self-attention, 2 heads, float64, {DATA / 'sentence.json'}\n"), r)
        self.assertIn("== Q = x · W_Q", r.out)

    def test_token_labels_label_rows_and_columns(self):
        r = run_text(*example_run("sentence", "--stages", "scores"))
        self.assert_ok(r)
        tables = text_tables(r.out, "scores")
        self.assertEqual(sorted(tables), ["head 0", "head 1"])
        columns, rows = tables["head 0"]
        words = "the cat sat on the mat".split()
        self.assertEqual(columns, words)
        self.assertEqual([label for label, _ in rows], words)

    def test_stages_filter_keeps_pipeline_order(self):
        r = run_text(*example_run("sentence", "--stages", "weights,Q,mask"))
        self.assert_ok(r)
        self.assertEqual(headings(r.out), ["Q", "mask", "weights"])

    def test_values_match_reference_to_the_printed_decimals(self):
        bundle = common.load_example("causal")
        expected = common.reference(bundle, **EXAMPLES["causal"][1])
        for decimals in (4, 2, 7):
            with self.subTest(decimals=decimals):
                r = run_text(*example_run("causal", "--decimals", decimals))
                self.assert_ok(r)
                # A number shows `decimals` decimals; an exact 0 (a masked weight) is "0".
                cell = re.compile(rf"^(-?\d+\.\d{{{decimals}}}|-inf)$")
                for stage in ("scores", "masked_scores", "weights", "context"):
                    (_, rows), = text_tables(r.out, stage).values()
                    printed = np.array([[float(c) for c in row] for _, row in rows])
                    for (i, j), value in np.ndenumerate(expected[stage][0]):
                        c = rows[i][1][j]
                        if value == 0.0:
                            self.assertEqual(c, "0", f"{stage}[{i}, {j}]: exact zero")
                        else:
                            self.assertRegex(c, cell, f"{stage}[{i}, {j}]")
                    assert_close(printed, expected[stage][0], 0.5 * 10.0**-decimals + 1e-12,
                                 f"printed {stage} (--decimals {decimals})")

    def test_head_filter(self):
        r = run_text(*example_run("sentence", "--head", "1", "--stages", "Q,weights,output"))
        self.assert_ok(r)
        self.assertEqual(sorted(text_tables(r.out, "Q")), ["head 1"])
        self.assertEqual(sorted(text_tables(r.out, "weights")), ["head 1"])
        self.assertEqual(sorted(text_tables(r.out, "output")), [""])   # no head axis

    def test_batch_and_head_filter(self):
        r = run_text(*example_run("padded", "--batch", "1", "--head", "0,1",
                                  "--stages", "mask,weights"))
        self.assert_ok(r)
        self.assertEqual(sorted(text_tables(r.out, "mask")), ["batch 1"])
        tables = text_tables(r.out, "weights")
        self.assertEqual(sorted(tables), ["batch 1, head 0", "batch 1, head 1"])
        columns, rows = tables["batch 1, head 0"]
        self.assertEqual(columns, ["birds", "sing", "loudly", "<pad>", "<pad>", "<pad>"])
        for label, cells in rows:  # PAD keys get exactly 0, printed "0"
            self.assertEqual(cells[3:], ["0"] * 3, label)
            self.assertNotIn("0", cells[:3], label)

    def long_bundle(self, Tq=20):
        rng = np.random.default_rng(7)
        return self.save_json("long.json", {
            "x": np.round(rng.standard_normal((Tq, 4)), 1).tolist(),
            "W_Q": np.eye(4).tolist(), "W_K": np.eye(4).tolist(), "W_V": np.eye(4).tolist()})

    def test_long_axis_is_summarised(self):
        path = self.long_bundle()
        r = run_text("run", path, "--stages", "weights")
        self.assert_ok(r)
        (columns, rows), = text_tables(r.out, "weights").values()
        ends = lambda p: [f"{p}0", f"{p}1", f"{p}2", "…", f"{p}17", f"{p}18", f"{p}19"]
        self.assertEqual(columns, ends("k"))
        self.assertEqual([label for label, _ in rows], ends("q"))
        self.assertEqual(rows[3][1], ["…"] * 7)

        r = run_text("run", path, "--stages", "weights", "--edgeitems", "1")
        self.assert_ok(r)
        (columns, rows), = text_tables(r.out, "weights").values()
        self.assertEqual(columns, ["k0", "…", "k19"])

    def test_full_never_summarises(self):
        path = self.long_bundle()
        r = run_text("run", path, "--full")
        self.assert_ok(r)
        self.assertNotIn("…", r.out)
        (columns, rows), = text_tables(r.out, "weights").values()
        self.assertEqual(columns, [f"k{j}" for j in range(20)])
        self.assertEqual([label for label, _ in rows], [f"q{i}" for i in range(20)])
        self.assertTrue(all(len(cells) == 20 for _, cells in rows))

    def test_quiet_prints_nothing(self):
        r = run("run", DATA / "sentence.json", "-q")
        self.assert_ok(r, stdout_empty=True)

    def test_fully_masked_rows_warn_once(self):
        bundle = json.loads((DATA / "padded.json").read_text())
        bundle["key_padding_mask"][1] = [1] * 6
        path = self.save_json("allpad.json", bundle)
        r = run_text("run", path, "--heads", "2", "--json", "--stages", "weights")
        self.assert_ok(r, warnings=1)
        self.assertIn("6 query rows", r.err)
        doc = json.loads(r.out)
        self.assertEqual(doc["fully_masked_rows"], [{"batch": 1, "query": q} for q in range(6)])
        w = json_stage(doc, "weights")
        self.assertTrue(np.all(w[1] == 0.0) and not np.isnan(w).any())


# ---------------------------------------------------------------------------
# --json
# ---------------------------------------------------------------------------

class JsonOutput(CliTestCase):

    def test_every_example_equals_reference(self):
        for name, (_, kwargs) in EXAMPLES.items():
            with self.subTest(example=name):
                r = run_text(*example_run(name, "--json"))
                self.assert_ok(r)
                doc = json.loads(r.out)
                self.assertEqual(set(doc), {"schema", "config", "dims", "tokens", "fully_masked_rows",
                                            "warnings", "stages"})
                self.assertEqual(list(doc["stages"]), list(STAGES))
                expected = common.reference(common.load_example(name, "json"), **kwargs)
                for stage in STAGES:
                    got = json_stage(doc, stage)
                    self.assertEqual(doc["stages"][stage]["dtype"],
                                     "bool" if stage == "mask" else "float64")
                    if stage == "mask":
                        np.testing.assert_array_equal(got, expected[stage])
                    else:
                        assert_close(got, expected[stage], TOL_JSON, f"{name} {stage} (json)",
                                     category="json float64")

    def test_json_parses_with_json_load_and_jq(self):
        r = run(*example_run("padded", "--json"))
        self.assert_ok(r)
        out = self.path("out.json")
        out.write_bytes(r.out)
        with open(out, encoding="utf-8") as f:
            json.load(f)
        jq = shutil.which("jq")
        if jq is None:
            self.skipTest("jq not installed")
        proc = subprocess.run([jq, "."], stdin=open(out, "rb"), capture_output=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_minus_inf_survives(self):
        r = run_text(*example_run("causal", "--json", "--stages", "masked_scores,weights"))
        self.assert_ok(r)
        doc = json.loads(r.out)
        data = doc["stages"]["masked_scores"]["data"]
        self.assertEqual(data[0][0][1], "-inf")            # key 1 is in query 0's future
        masked = np.array(data, dtype=float)
        expected = np.triu(np.ones((5, 5), bool), k=1)
        np.testing.assert_array_equal(np.isneginf(masked[0]), expected)
        self.assertTrue(np.all(json_stage(doc, "weights")[0][expected] == 0.0))

    def test_float32_json_round_trips_to_float32_dump(self):
        dump = self.path("f32.npz")
        r = run_text(*example_run("causal", "--json", "--dtype", "float32", "--dump", dump))
        self.assertEqual((r.code, r.err), (0, f"attnscope: wrote {dump} (the stages in one .npz archive)\n"), r)
        doc = json.loads(r.out)
        with np.load(dump) as npz:
            for stage in FLOAT_STAGES:
                self.assertEqual(doc["stages"][stage]["dtype"], "float32")
                got = np.array(doc["stages"][stage]["data"], dtype=float).astype(np.float32)
                np.testing.assert_array_equal(got, npz[stage], err_msg=stage)


# ---------------------------------------------------------------------------
# --dump
# ---------------------------------------------------------------------------

class Dump(CliTestCase):

    def check_dump(self, arrays, expected, dtype, what):
        self.assertEqual(sorted(arrays), sorted(STAGES), what)
        for stage in STAGES:
            a = arrays[stage]
            self.assertEqual(a.shape, expected[stage].shape, f"{what} {stage}")
            if stage == "mask":
                self.assertEqual(a.dtype, np.bool_, f"{what} mask")
                np.testing.assert_array_equal(a, expected[stage], err_msg=what)
            elif dtype == "float64":
                self.assertEqual(a.dtype, np.float64, f"{what} {stage}")
                assert_close(a, expected[stage], TOL_DUMP, f"{what} {stage}",
                             category="dump float64")
            else:
                self.assertEqual(a.dtype, np.float32, f"{what} {stage}")
                assert_close(a, expected[stage], TOL_F32, f"{what} {stage}",
                             category="dump float32 (relative)", rtol=1.0)

    def test_every_example_dir_and_npz_float64_and_float32(self):
        for name, (_, kwargs) in EXAMPLES.items():
            bundle = common.load_example(name)
            for dtype in ("float64", "float32"):
                inputs = bundle if dtype == "float64" else common.as_float32_inputs(bundle)
                expected = common.reference(inputs, **kwargs)
                for target in ("dump_dir", "dump.npz"):
                    with self.subTest(example=name, dtype=dtype, target=target):
                        path = self.path(f"{name}-{dtype}-{target}")
                        r = run(*example_run(name, "--dtype", dtype, "--dump", path, "-q",
                                             ext="npz"))
                        self.assert_ok(r, stdout_empty=True)
                        if target == "dump_dir":
                            self.assertEqual(sorted(os.listdir(path)),
                                             sorted(f"{s}.npy" for s in STAGES))
                            arrays = {s: np.load(path / f"{s}.npy") for s in STAGES}
                        else:
                            with np.load(path) as npz:
                                arrays = {k: npz[k] for k in npz.files}
                        self.check_dump(arrays, expected, dtype, f"{name} {dtype} {target}")

    def test_large_stages_computed_in_their_files_load_in_numpy_and_torch(self):
        # (B, H, T, T) stages of 1 MiB and more are computed straight into their .npy
        # files, whose data start at byte 4096; np.load and torch must read them alike.
        rng = np.random.default_rng(5)
        B, T, Dm, H = 2, 200, 24, 4
        bundle = {"x": rng.standard_normal((B, T, Dm)),
                  **{k: rng.standard_normal((Dm, Dm)) / 5 for k in ("W_Q", "W_K", "W_V", "W_O")},
                  "key_padding_mask": np.arange(T)[None, :] >= np.array([[T], [T - 30]])}
        src = self.save_npz("big.npz", **bundle)
        for dtype, causal in (("float64", False), ("float32", True), ("float32", False)):
            with self.subTest(dtype=dtype, causal=causal):
                inputs = bundle if dtype == "float64" else common.as_float32_inputs(bundle)
                expected = common.reference(inputs, heads=H, causal=causal)
                out = self.path(f"dump-{dtype}-{causal}")
                r = run("run", src, "--heads", str(H), "--dtype", dtype, "--dump", out, "-q",
                        *(["--causal"] if causal else []))
                self.assert_ok(r, stdout_empty=True)
                self.assertEqual(sorted(os.listdir(out)), sorted(f"{s}.npy" for s in STAGES))
                arrays = {s: np.load(out / f"{s}.npy") for s in STAGES}
                self.check_dump(arrays, expected, dtype, f"big {dtype} causal={causal}")
                with open(out / "weights.npy", "rb") as f:
                    head = f.read(10)
                self.assertEqual(10 + int.from_bytes(head[8:10], "little"), 4096)
                mapped = np.load(out / "weights.npy", mmap_mode="r")
                np.testing.assert_array_equal(mapped, arrays["weights"])
                import torch
                t = torch.from_numpy(np.load(out / "scores.npy"))
                self.assertEqual(tuple(t.shape), (B, H, T, T))
                self.assertTrue(torch.equal(t, torch.from_numpy(arrays["scores"])))

    def test_interrupted_dump_leaves_nothing(self):
        # Ctrl-C while large stages are being computed into their files: the temporaries
        # (gigabytes reserved on disk) and the temporary dump directory are removed, an old
        # dump that --force was replacing is untouched, and the process dies of SIGINT.
        import signal
        import time
        rng = np.random.default_rng(9)
        T, D = 8192, 16
        src = self.save_npz("long.npz", x=rng.standard_normal((1, T, D), dtype=np.float32),
                            **{k: rng.standard_normal((D, D), dtype=np.float32) / 4
                               for k in ("W_Q", "W_K", "W_V")})
        for target in ("fresh", "existing", "replaced"):
            with self.subTest(target=target):
                out = self.path(f"dump-{target}")
                force = []
                if target == "existing":
                    out.mkdir()
                    (out / "keep.txt").write_text("mine")
                elif target == "replaced":
                    out.mkdir()
                    np.save(out / "Q.npy", np.arange(3.0))
                    force = ["--force"]
                before = {p.name: p.read_bytes() for p in out.iterdir()} if out.exists() else None
                proc = subprocess.Popen([str(common.BIN), "run", str(src), "--heads", "4",
                                         "--dtype", "float32", "--threads", "1", "--dump", str(out), "-q",
                                         *force], stdout=subprocess.PIPE, stderr=subprocess.PIPE)

                def temporaries():
                    # A new or replaced dump is built in a directory beside its path; an
                    # existing directory without --force gets temporary files inside.
                    if target == "existing":
                        return [n for n in os.listdir(out) if ".tmp-" in n]
                    return [n for d in self.tmp.iterdir() if d.name.startswith(out.name + ".tmp-")
                            for n in os.listdir(d) if ".tmp-" in n]

                seen = False
                while proc.poll() is None:  # no time limit: a slow machine must not fail this
                    try:
                        seen = bool(temporaries())
                    except FileNotFoundError:
                        pass
                    if seen:
                        break
                    time.sleep(0.002)
                if not seen:
                    proc.kill()
                    proc.communicate()
                    self.fail("the run ended before its temporaries could be seen")
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate()
                self.assertEqual(proc.returncode, -signal.SIGINT, err.decode())
                beside = sorted(d.name for d in self.tmp.iterdir() if d.name.startswith(out.name))
                if target == "fresh":
                    self.assertEqual(beside, [])
                else:
                    self.assertEqual(beside, [out.name])
                    self.assertEqual({p.name: p.read_bytes() for p in out.iterdir()}, before)

    def test_unbatched_shapes_drop_batch_axis(self):
        path = self.path("cross.npz")
        r = run("run", DATA / "cross.npz", "--heads", "2", "--dump", path, "-q")
        self.assert_ok(r)
        shapes = {"Q": (2, 4, 4), "K": (2, 6, 4), "V": (2, 6, 4), "scores": (2, 4, 6),
                  "mask": (4, 6), "masked_scores": (2, 4, 6), "weights": (2, 4, 6),
                  "context": (2, 4, 4), "output": (4, 8)}
        with np.load(path) as npz:
            self.assertEqual({k: npz[k].shape for k in npz.files}, shapes)

    def test_stages_choose_the_dumped_files(self):
        d = self.path("some")
        r = run("run", DATA / "sentence.json", "--stages", "weights,Q", "--dump", d, "-q")
        self.assert_ok(r)
        self.assertEqual(sorted(os.listdir(d)), ["Q.npy", "weights.npy"])
        f = self.path("some.npz")
        r = run("run", DATA / "sentence.json", "--stages", "mask", "--dump", f, "-q")
        self.assert_ok(r)
        with np.load(f) as npz:
            self.assertEqual(npz.files, ["mask"])


# ---------------------------------------------------------------------------
# Input sources: stdin, single-array files, .npz vs .json, .npy dtypes
# ---------------------------------------------------------------------------

class Inputs(CliTestCase):

    def test_stdin_equals_file(self):
        src = DATA / "sentence.json"
        stdin = src.read_bytes()
        for extra in ([], ["--json"]):
            with self.subTest(extra=extra):
                a = run("run", "-", "--heads", "2", *extra, stdin=stdin)
                b = run("run", src, "--heads", "2", *extra)
                self.assert_ok(a)
                self.assert_ok(b)
                quoted = json.dumps(str(src)).encode() if extra else str(src).encode()
                stdin_name = b'"<stdin>"' if extra else b"<stdin>"
                self.assertIn(stdin_name, a.out)
                self.assertEqual(a.out, b.out.replace(quoted, stdin_name))

    def test_array_override_changes_results(self):
        bundle = common.load_example("sentence")
        x2 = np.random.default_rng(3).standard_normal(bundle["x"].shape)
        xfile = self.save_npy("x2.npy", x2)
        out = self.path("out.npz")
        r = run("run", DATA / "sentence.npz", "--heads", "2", "--x", xfile, "--dump", out, "-q")
        self.assert_ok(r)
        expected = common.reference({**bundle, "x": x2}, heads=2)
        original = common.reference(bundle, heads=2)
        with np.load(out) as npz:
            assert_close(npz["output"], expected["output"], TOL_DUMP, "output with --x",
                         category="dump float64")
            self.assertGreater(np.abs(npz["output"] - original["output"]).max(), 1e-3)

    def test_json_single_array_files(self):
        bundle = common.load_example("cross")
        rng = np.random.default_rng(4)
        memory = np.round(rng.standard_normal(bundle["memory"].shape), 3)
        W_V = np.round(rng.standard_normal(bundle["W_V"].shape), 3)
        mfile = self.save_json("memory.json", memory.tolist())           # a nested list
        wfile = self.save_json("wv.json", {"W_V": W_V.tolist()})         # one named entry
        out = self.path("out.npz")
        r = run("run", DATA / "cross.json", "--heads", "2", "--memory", mfile, "--W_V", wfile,
                "--dump", out, "-q")
        self.assert_ok(r)
        expected = common.reference({**bundle, "memory": memory, "W_V": W_V}, heads=2)
        with np.load(out) as npz:
            for stage in FLOAT_STAGES:
                assert_close(npz[stage], expected[stage], TOL_DUMP, f"{stage} with .json arrays",
                             category="dump float64")

    def test_json_with_a_utf8_byte_order_mark(self):
        """A leading EF BB BF (RFC 8259 lets a parser skip it) in a bundle, on standard
        input and in a single-array file gives the same results as without it."""
        bom = b"\xef\xbb\xbf"
        src = DATA / "cross.json"
        plain = run("run", src, "--heads", "2", "--json")
        self.assert_ok(plain)
        marked = self.path("cross.json")
        marked.write_bytes(bom + src.read_bytes())
        r = run("run", marked, "--heads", "2", "--json")
        self.assert_ok(r)
        self.assertEqual(r.out, plain.out.replace(json.dumps(str(src)).encode(), json.dumps(str(marked)).encode()))
        r = run("run", "-", "--heads", "2", "--json", stdin=bom + src.read_bytes())
        self.assert_ok(r)
        self.assertEqual(r.out, plain.out.replace(json.dumps(str(src)).encode(), b'"<stdin>"'))
        W_V = json.loads(src.read_text())["W_V"]
        wfile = self.path("wv.json")
        wfile.write_bytes(bom + json.dumps(W_V).encode())
        r = run("run", src, "--heads", "2", "--json", "--W_V", wfile)
        self.assert_ok(r)
        self.assertEqual(r.out, plain.out)

    def test_arrays_without_bundle(self):
        bundle = common.load_example("causal")
        args = []
        for name in ("x", "W_Q", "W_K", "W_V"):
            args += [f"--{name}", self.save_npy(f"{name}.npy", bundle[name])]
        out = self.path("out.npz")
        r = run("run", *args, "--causal", "--dump", out, "-q")
        self.assert_ok(r)
        expected = common.reference(bundle, heads=1, causal=True)
        with np.load(out) as npz:
            assert_close(npz["weights"], expected["weights"], TOL_DUMP, "weights",
                         category="dump float64")

    def test_npz_and_json_examples_agree(self):
        for name in EXAMPLES:
            with self.subTest(example=name):
                a = run_text(*example_run(name, "--json", ext="npz"))
                b = run_text(*example_run(name, "--json", ext="json"))
                self.assert_ok(a)
                self.assert_ok(b)
                da, db = json.loads(a.out), json.loads(b.out)
                self.assertEqual(da["stages"], db["stages"])
                self.assertEqual(da["tokens"], db["tokens"])
                self.assertEqual(da["dims"], db["dims"])

    def test_npy_dtypes_and_layouts(self):
        """float16, float32, int64, Fortran order, big-endian: exact widening to float64."""
        base = common.load_example("sentence")
        rng = np.random.default_rng(5)
        cases = {
            "x float16": ("x", (base["x"]).astype(np.float16)),
            "x int64": ("x", rng.integers(-3, 4, size=base["x"].shape).astype(np.int64)),
            "x int32 big-endian": ("x", rng.integers(-3, 4, size=base["x"].shape).astype(">i4")),
            "W_Q float32": ("W_Q", base["W_Q"].astype(np.float32)),
            "W_K Fortran order": ("W_K", np.asfortranarray(base["W_K"] + 0.5 * np.eye(8))),
            "W_V big-endian >f8": ("W_V", (base["W_V"] * 1.5).astype(">f8")),
            "W_O big-endian >f4 Fortran": ("W_O", np.asfortranarray(base["W_O"].astype(">f4"))),
        }
        for what, (name, array) in cases.items():
            with self.subTest(case=what):
                f = self.save_npy(f"{name}.npy", array)
                if "Fortran" in what:
                    self.assertIn(b"'fortran_order': True", f.read_bytes()[:128])
                out = self.path(f"{what.replace(' ', '_')}.npz")
                r = run("run", DATA / "sentence.npz", "--heads", "2", f"--{name}", f,
                        "--dump", out, "-q")
                self.assert_ok(r)
                expected = common.reference({**base, name: array.astype(np.float64)}, heads=2)
                with np.load(out) as npz:
                    for stage in FLOAT_STAGES:
                        assert_close(npz[stage], expected[stage], TOL_DUMP, f"{what}: {stage}",
                                     category="dump float64")

    def test_key_padding_mask_dtypes(self):
        base = common.load_example("padded")
        pad = np.asarray(base["key_padding_mask"]).astype(bool)
        expected = common.reference(base, heads=2)
        for what, array in {"bool": pad, "int8": pad.astype(np.int8),
                            "float64 0/1": pad.astype(np.float64),
                            "uint8 Fortran": np.asfortranarray(pad.astype(np.uint8))}.items():
            with self.subTest(mask=what):
                f = self.save_npy("kpm.npy", array)
                out = self.path("out.npz")
                r = run("run", DATA / "padded.npz", "--heads", "2", "--key_padding_mask", f,
                        "--dump", out, "--force", "-q")
                self.assert_ok(r)
                with np.load(out) as npz:
                    np.testing.assert_array_equal(npz["mask"], expected["mask"])
                    assert_close(npz["weights"], expected["weights"], TOL_DUMP, "weights",
                                 category="dump float64")


# ---------------------------------------------------------------------------
# PyTorch layout
# ---------------------------------------------------------------------------

class TorchLayout(CliTestCase):

    def setUp(self):
        super().setUp()
        try:
            import torch
        except ImportError:
            self.skipTest("torch not importable")
        self.torch = torch

    def mha_bundle(self, E=8, H=2, B=2, Tq=5):
        torch = self.torch
        torch.manual_seed(11)
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        state = {k: v.detach().numpy().copy() for k, v in mha.state_dict().items()}
        self.assertEqual(sorted(state), ["in_proj_bias", "in_proj_weight",
                                         "out_proj.bias", "out_proj.weight"])
        x = np.random.default_rng(8).standard_normal((B, Tq, E))
        mha.eval()
        with torch.no_grad():
            t = torch.tensor(x)
            out, w = mha(t, t, t, need_weights=True, average_attn_weights=False)
        return self.save_npz("mha.npz", x=x, **state), out.numpy(), w.numpy()

    def test_mha_state_dict_equals_torch(self):
        path, out, w = self.mha_bundle()
        dump = self.path("out.npz")
        r = run("run", path, "--layout", "torch", "--heads", "2", "--dump", dump, "-q")
        self.assert_ok(r)
        with np.load(dump) as npz:
            assert_close(npz["weights"], w, 1e-10, "weights vs torch", category="torch float64")
            assert_close(npz["output"], out, 1e-10, "output vs torch", category="torch float64")

    def test_mha_state_dict_needs_layout_torch(self):
        path, _, _ = self.mha_bundle()
        dump = self.path("out")
        r = run_text("run", path, "--heads", "2", "--dump", dump)
        self.assert_error(r, str(path), "--layout torch")
        self.assert_no_output_files(dump)

    def test_linear_layout_weights(self):
        """W_* stored (out, in) like nn.Linear.weight, read with --layout torch."""
        base = common.load_example("cross")
        stored = {k: (v.T.copy() if k.startswith("W_") else v) for k, v in base.items()}
        path = self.save_npz("linear.npz", **stored)
        dump = self.path("out.npz")
        r = run("run", path, "--layout", "torch", "--heads", "2", "--dump", dump, "-q")
        self.assert_ok(r)
        expected = common.reference(base, heads=2)
        with np.load(dump) as npz:
            assert_close(npz["output"], expected["output"], TOL_DUMP, "output",
                         category="dump float64")

    def test_transposed_W_Q_in_math_layout_names_the_fix(self):
        # Dm = 6 != H*Dk = 8, so (out, in) = (8, 6) is recognisably W_Q transposed.
        rng = np.random.default_rng(9)
        path = self.save_npz("t.npz", x=rng.standard_normal((5, 6)),
                             W_Q=rng.standard_normal((8, 6)),          # stored (out, in)
                             W_K=rng.standard_normal((6, 8)), W_V=rng.standard_normal((6, 8)))
        dump = self.path("out")
        r = run_text("run", path, "--heads", "2", "--dump", dump)
        self.assert_error(r, str(path), "W_Q", "(8, 6)", "transpose would fit", "--layout torch")
        self.assert_no_output_files(dump)


# ---------------------------------------------------------------------------
# Non-finite inputs: NaN must stay visible wherever it reaches
# ---------------------------------------------------------------------------

class NonFinite(CliTestCase):

    def test_nan_in_x_reaches_every_stage_like_the_reference(self):
        """x[1][2] = NaN makes query row 1 all NaN in `scores`; its weights must be
        NaN too (numpy and PyTorch agree), not silently 0 like a fully masked row."""
        bundle = common.load_example("sentence")
        x = bundle["x"].copy()
        x[1, 2] = np.nan
        xfile = self.save_npy("x.npy", x)
        out = self.path("out.npz")
        r = run_text("run", DATA / "sentence.npz", "--heads", "2", "--x", xfile,
                     "--dump", out, "-q")
        self.assert_ok(r, warnings=1)
        self.assertIn("x", r.err)
        self.assertIn("nan", r.err)
        with np.errstate(invalid="ignore"):
            expected = common.reference({**bundle, "x": x}, heads=2)
        self.assertTrue(np.isnan(expected["weights"][:, 1, :]).all())
        with np.load(out) as npz:
            for stage in FLOAT_STAGES:
                assert_close(npz[stage], expected[stage], TOL_DUMP, f"{stage} with a NaN in x")

    def test_minus_inf_and_nan_in_json_input(self):
        """The strings "-inf"/"nan" that --json writes are accepted on input too."""
        b = json.loads((DATA / "causal.json").read_text())
        b["W_V"][0][0] = "-inf"
        path = self.save_json("inf.json", b)
        r = run_text("run", path, "--causal", "--json", "--stages", "V")
        self.assert_ok(r, warnings=1)
        V = json_stage(json.loads(r.out), "V")
        expected = common.reference(ref.load_bundle(str(path)), heads=1, causal=True)["V"]
        assert_close(V, expected, TOL_JSON, "V with -inf in W_V")


# ---------------------------------------------------------------------------
# Bad input: one error line, exit 2, nothing on stdout, nothing written
# ---------------------------------------------------------------------------

class BadInput(CliTestCase):

    def example(self, name="sentence"):
        return json.loads((DATA / f"{name}.json").read_text())

    def check(self, args, *fragments, code=2, stdin=None):
        """Run once with --dump DIR and once with --dump FILE.npz over an old file."""
        d = self.path("dump_dir")
        r = run_text(*args, "--dump", d, stdin=stdin)
        msg = self.assert_error(r, *fragments, code=code)
        self.assert_no_output_files(d)

        old = self.path("old.npz")
        old.write_bytes(b"previous content")
        r = run_text(*args, "--dump", old, "--force", stdin=stdin)
        self.assert_error(r, *fragments, code=code)
        self.assertEqual(old.read_bytes(), b"previous content", "old dump damaged")
        self.assertEqual(list(self.tmp.glob("*.tmp-*")), [])
        return msg

    def test_missing_file(self):
        p = self.path("missing.json")
        self.check(["run", p], str(p))
        self.check(["run", DATA / "sentence.json", "--x", self.path("nox.npy")], "nox.npy")

    def test_bundle_is_a_directory(self):
        d = self.path("adir")
        d.mkdir()
        self.check(["run", d], str(d))
        self.check(["run", DATA / "sentence.json", "--W_Q", d], str(d))

    def test_invalid_json(self):
        p = self.path("bad.json")
        p.write_text('{"x": [[1, 2],')
        self.check(["run", p], str(p), "JSON")
        self.check(["run", "-"], "<stdin>", "JSON", stdin="{ not json")

    def test_ragged_json_array(self):
        b = self.example()
        b["W_Q"][1] = b["W_Q"][1][:-1]
        self.check(["run", self.save_json("ragged.json", b)], "ragged.json", "W_Q[1]")

    def test_non_numeric_json_element(self):
        b = self.example()
        b["x"][2][3] = "abc"
        self.check(["run", self.save_json("nan.json", b)], "nan.json", "x[2][3]", "abc")
        b = self.example()
        b["W_K"][0][0] = None
        self.check(["run", self.save_json("null.json", b)], "null.json", "W_K[0][0]")

    def test_json_element_error_names_the_array_once(self):
        b = self.example()
        b["x"][2][3] = "abc"
        p = self.save_json("once.json", b)
        msg = self.check(["run", p])
        self.assertEqual(msg, f'attnscope: error: {p}: x[2][3]: expected a number, found string "abc"')
        w = self.save_json("wq.json", [[1.0, 2.0], [3.0, None]])
        msg = self.check(["run", DATA / "sentence.json", "--W_Q", w])
        self.assertTrue(msg.startswith(f"attnscope: error: {w}: W_Q[1][1]: expected a number, found null"), msg)

    def test_npy_header_with_junk_after_the_dict(self):
        """numpy refuses a header whose dict is followed by anything but blanks (and
        comments); so does attnscope, naming the file, the array and what was found."""
        x = np.zeros((6, 8))
        good = self.save_npy("good.npy", x)
        raw = good.read_bytes()
        end = raw.index(b"}") + 1
        junk = self.path("junk.npy")
        junk.write_bytes(raw[:end] + b" junk" + raw[end + 5:])  # same header length
        with self.assertRaises(ValueError):
            np.load(junk)
        self.check(["run", DATA / "sentence.json", "--x", junk], f"{junk}: x: not a valid .npy header",
                   "after the closing '}'", 'found "junk"')

    def test_in_proj_weight_with_separate_qkv_weights(self):
        rng = np.random.default_rng(12)
        E = 4
        p = self.save_npz("both.npz", x=rng.standard_normal((3, E)),
                          in_proj_weight=rng.standard_normal((3 * E, E)),
                          q_proj_weight=rng.standard_normal((E, E)),
                          k_proj_weight=rng.standard_normal((E, E)),
                          v_proj_weight=rng.standard_normal((E, E)))
        self.check(["run", p, "--layout", "torch"], str(p), "both forms",
                   "in_proj_weight and q_proj_weight, k_proj_weight, v_proj_weight",
                   "remove q_proj_weight, k_proj_weight, v_proj_weight")

    def test_wrong_npy_dtype(self):
        c16 = self.save_npy("c16.npy", np.zeros((6, 8), dtype="<c16"))
        self.check(["run", DATA / "sentence.json", "--x", c16], "c16.npy", "x", "<c16")
        obj = self.path("obj.npy")
        np.save(obj, np.array([[1, None]], dtype=object), allow_pickle=True)
        self.check(["run", DATA / "sentence.json", "--x", obj], "obj.npy", "x")
        # The same inside an .npz bundle names the archive and the array.
        b = dict(common.load_example("sentence"))
        b["W_V"] = b["W_V"].astype(np.complex64)
        p = self.save_npz("complex.npz", **b)
        self.check(["run", p], "complex.npz", "W_V", "<c8")

    def test_truncated_npy(self):
        good = self.save_npy("good.npy", np.zeros((6, 8)))
        cut = self.path("cut.npy")
        cut.write_bytes(good.read_bytes()[:-10])
        self.check(["run", DATA / "sentence.json", "--x", cut], "cut.npy", "x", "384", "374")
        cut.write_bytes(good.read_bytes()[:40])                     # inside the header
        self.check(["run", DATA / "sentence.json", "--x", cut], "cut.npy")

    def test_W_K_rows_must_match_memory_width(self):
        b = self.example("cross")
        b["W_K"] = b["W_K"][:5]                                     # (5, 8), memory is (6, 6)
        self.check(["run", self.save_json("wk.json", b), "--heads", "2"],
                   "wk.json", "W_K", "6", "(5, 8)")

    def test_queries_and_keys_share_one_width(self):
        b = self.example("cross")
        b["W_K"] = [row[:6] for row in b["W_K"]]                   # (6, 6) against W_Q (8, 8)
        self.check(["run", self.save_json("qk.json", b), "--heads", "2"],
                   "qk.json", "W_K", "share one width", "8", "6")

    def test_heads_must_divide_width(self):
        self.check(["run", DATA / "sentence.json", "--heads", "3"], "--heads", "3", "8")

    def test_bad_stage_name(self):
        self.check(["run", DATA / "sentence.json", "--stages", "Q,attention"],
                   "--stages", "attention")

    def test_head_out_of_range(self):
        self.check(["run", DATA / "sentence.json", "--heads", "2", "--head", "2"],
                   "--head", "2", "0..1")

    def test_batch_out_of_range(self):
        self.check(["run", DATA / "padded.json", "--heads", "2", "--batch", "2"],
                   "--batch", "2", "0..1")

    def test_unknown_array_name(self):
        b = self.example()
        b["W_X"] = [[1.0]]
        self.check(["run", self.save_json("unk.json", b)], "unk.json", "W_X")

    def test_key_padding_mask_wrong_shape(self):
        b = self.example("padded")
        b["key_padding_mask"] = [row[:5] for row in b["key_padding_mask"]]
        self.check(["run", self.save_json("kpm.json", b), "--heads", "2"],
                   "kpm.json", "key_padding_mask", "(2, 5)")

    def test_key_padding_mask_not_boolean(self):
        b = self.example("padded")
        b["key_padding_mask"][0][5] = 0.5
        self.check(["run", self.save_json("kpm.json", b), "--heads", "2"],
                   "kpm.json", "key_padding_mask")

    def test_token_label_count(self):
        b = self.example()
        b["key_tokens"] = b["key_tokens"][:4]
        self.check(["run", self.save_json("tok.json", b)], "tok.json", "key_tokens", "6", "(4,)")

    def test_x_must_be_2d_or_3d(self):
        b = self.example()
        b["x"] = b["x"][0]
        self.check(["run", self.save_json("x1.json", b)], "x1.json", "x", "(8,)")

    def test_usage_errors(self):
        s = DATA / "sentence.json"
        self.check(["run", s, "--bogus"], "--bogus")
        self.check(["run", s, "--dtype", "float16"], "--dtype")
        self.check(["run", s, "--causal-align", "bottom-right"], "--causal-align", "--causal")
        self.check(["run", s, "--decimals", "99"], "--decimals")
        self.check(["run", s, "--heads", "0"], "--heads")
        self.check(["run", s, "extra.json"], "extra.json")
        self.check(["run"], "bundle")

    def test_unknown_subcommand_is_named(self):
        self.check(["frobnicate", DATA / "sentence.json"], "frobnicate")

    def test_heads_zero_message_is_short(self):
        msg = self.check(["run", DATA / "sentence.json", "--heads", "0"], "--heads", "0")
        self.assertLess(len(msg), 200, "a one-line message a person can read")


# ---------------------------------------------------------------------------
# Runtime failures: exit 1, one error line, no partial output
# ---------------------------------------------------------------------------

class RuntimeFailure(CliTestCase):

    def unwritable_target(self):
        """A .npz path that cannot be created, even by root."""
        if os.geteuid() != 0:
            d = self.path("readonly")
            d.mkdir()
            d.chmod(0o555)
            self.addCleanup(d.chmod, 0o755)
            return d / "out.npz"
        # Root ignores permissions; nobody can create a file in /proc.
        return Path("/proc/attnscope-test-dump.npz")

    def test_unwritable_dump(self):
        target = self.unwritable_target()
        r = run_text("run", DATA / "sentence.json", "--dump", target, "-q")
        self.assert_error(r, str(target), code=1)
        self.assert_no_output_files(target)

    def test_unwritable_stdout(self):
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        for extra in ([], ["--json"]):
            with self.subTest(extra=extra), open("/dev/full", "wb") as full:
                proc = subprocess.run([str(common.BIN), "run", str(DATA / "sentence.json"),
                                       *extra], stdout=full, stderr=subprocess.PIPE, text=True)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                lines = proc.stderr.splitlines()
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertTrue(lines[0].startswith(common.ERROR_PREFIX), proc.stderr)

    def test_failed_new_directory_dump_leaves_nothing(self):
        """A dump directory whose temporary twin (PATH.tmp-XXXXXX) leaves room for
        Q.npy.tmp-XXXXXX but not for masked_scores.npy.tmp-XXXXXX (PATH_MAX 4096):
        writing fails half-way, even for root. Neither directory nor any temporary may
        remain."""
        parent = self.tmp
        while len(str(parent)) < 4060 - 201:
            parent = parent / ("d" * 200)
        parent.mkdir(parents=True)
        target = parent / ("x" * (4059 - len(str(parent)) - 1))
        r = run_text("run", DATA / "sentence.json", "--dump", target, "-q")
        self.assert_error(r, "masked_scores.npy", code=1)
        self.assertEqual(list(parent.iterdir()), [])

    def test_failed_directory_dump_leaves_old_dump_intact(self):
        """A dump that fails half-way (weights.npy cannot be replaced: it is a
        directory) must not leave some stages new and others old."""
        d = self.path("dump")
        d.mkdir()
        (d / "weights.npy").mkdir()
        (d / "Q.npy").write_bytes(b"old Q")
        r = run_text("run", DATA / "sentence.json", "--dump", d, "--force", "-q")
        self.assert_error(r, "weights.npy", code=1)
        self.assertEqual(sorted(os.listdir(d)), ["Q.npy", "weights.npy"],
                         "a failed dump replaced some of the stages")
        self.assertEqual((d / "Q.npy").read_bytes(), b"old Q")


class ExistingOutputs(CliTestCase):
    """An existing output is replaced only with --force."""

    def test_existing_npz_is_kept_without_force(self):
        old = self.path("old.npz")
        old.write_bytes(b"previous content")
        r = run_text("run", DATA / "sentence.json", "--dump", old, "-q")
        self.assert_error(r, str(old), "--force", code=2)
        self.assertEqual(old.read_bytes(), b"previous content")
        r = run_text("run", DATA / "sentence.json", "--dump", old, "--force", "-q")
        self.assert_ok(r)
        with np.load(old) as npz:
            self.assertEqual(sorted(npz.files), sorted(common.STAGES))

    def test_existing_directory_dump_is_kept_without_force(self):
        d = self.path("dump")
        d.mkdir()
        (d / "weights.npy").write_bytes(b"old weights")
        (d / "notes.txt").write_bytes(b"mine")
        r = run_text("run", DATA / "sentence.json", "--dump", d, "-q")
        self.assert_error(r, "weights.npy", "--force", code=2)
        self.assertEqual(sorted(os.listdir(d)), ["notes.txt", "weights.npy"])
        # Only the chosen stages are written; other files in the directory stay.
        r = run_text("run", DATA / "sentence.json", "--dump", d, "--stages", "Q", "-q")
        self.assert_ok(r)
        self.assertEqual(sorted(os.listdir(d)), ["Q.npy", "notes.txt", "weights.npy"])


class MemoryLimit(CliTestCase):
    """Runs needing more than --max-memory are refused before allocating."""

    def test_run_over_the_limit_is_refused_with_the_figure(self):
        d = self.path("dump")
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--max-memory", "8K", "--dump", d)
        msg = self.assert_error(r, "memory limit", "--max-memory", code=2)
        self.assertRegex(msg, r"the run needs \d+(\.\d)? KiB")
        self.assert_no_output_files(d)

    def test_header_claiming_terabytes_is_refused_without_allocating(self):
        # A valid-looking header for (2**20, 2**20) float64 with no data behind it.
        f = self.path("huge.npy")
        header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1048576, 1048576), }"
        header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
        f.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        r = run_text("run", DATA / "sentence.json", "--x", f, "-q")
        self.assert_error(r, "huge.npy", code=2)

    def test_bad_size_option(self):
        r = run_text("run", DATA / "sentence.json", "--max-memory", "lots")
        self.assert_error(r, "--max-memory", code=2)

    def test_a_generous_limit_changes_nothing(self):
        a = run_text("run", DATA / "sentence.json", "--heads", "2")
        b = run_text("run", DATA / "sentence.json", "--heads", "2", "--max-memory", "1G")
        self.assert_ok(b)
        self.assertEqual(a.out, b.out)


class VersionHelp(CliTestCase):

    def test_version(self):
        r = run_text("--version")
        self.assert_ok(r)
        self.assertRegex(r.out, r"^attnscope \d+\.\d+\.\d+\n$")

    def test_help(self):
        for args in (["--help"], ["run", "--help"]):
            with self.subTest(args=args):
                r = run_text(*args)
                self.assert_ok(r)
                self.assertIn("run", r.out)
        r = run_text("run", "--help")
        for option in ("--heads", "--causal", "--layout", "--dump", "--json", "--stages"):
            self.assertIn(option, r.out)


# ---------------------------------------------------------------------------
# Counts (issue 21): never read as 2^64 - n, in every subcommand
# ---------------------------------------------------------------------------

class Counts(CliTestCase):

    def assert_refused(self, args, line):
        r = run_text(*args)
        self.assertEqual((r.code, r.out, r.err), (2, "", f"attnscope: error: {line}\n"), r)

    def test_negative_counts_are_refused_in_every_subcommand(self):
        sentence, causal = DATA / "sentence.json", DATA / "causal.json"
        tera = "1000000000000"
        cases = [
            (["run", sentence, "--sink-keys", "-1"], f"--sink-keys: expected a number from 0 to {tera}, found '-1'"),
            (["run", sentence, "--window", "-1"], f"--window: expected a number from 1 to {tera}, found '-1'"),
            (["run", sentence, "--local", "-1"], f"--local: expected a number from 0 to {tera}, found '-1'"),
            (["run", sentence, "--layer", "-1"], "--layer: expected an index counted from 0, found '-1'"),
            (["decode", causal, "--prefill", "2", "--window", "-3"],
             f"--window: expected a number from 1 to {tera}, found '-3'"),
            (["decode", causal, "--prefill", "-1"], f"--prefill: expected a number from 0 to {tera}, found '-1'"),
            (["check", "mine.npz", "--against", sentence, "--window", "-1"],
             f"--window: expected a number from 1 to {tera}, found '-1'"),
            (["report", "--html", "r.html", sentence, "--threads", "-1"],
             "--threads: expected a number from 1 to 4096, found '-1'"),
        ]
        for args, line in cases:
            with self.subTest(args=args):
                self.assert_refused(args, f"{line} (see attnscope {args[0]} --help)")

    def test_huge_counts_are_refused_not_wrapped(self):
        # 2^63: as a signed position it is negative (the sink mass was 0 instead of 1).
        for option in ("--sink-keys", "--local", "--window"):
            with self.subTest(option=option):
                lo = "1" if option == "--window" else "0"
                self.assert_refused(["run", DATA / "sentence.json", option, "9223372036854775808"],
                                    f"{option}: expected a number from {lo} to 1000000000000, found "
                                    "'9223372036854775808' (see attnscope run --help)")

    def test_the_largest_sink_count_takes_every_key(self):
        r = run_text("run", DATA / "causal.json", "--causal", "--summary", "--sink-keys", "1000000000000", "--json")
        self.assertEqual(r.code, 0, r)
        sink = np.array([row["sink_mass"] for row in json.loads(r.out)["summary"]["rows"]], dtype=float)
        assert_close(sink, np.ones_like(sink), 1e-12, "sink mass over every key")


# ---------------------------------------------------------------------------
# File outputs (issue 21): said when written, the report when asked for, one refusal
# ---------------------------------------------------------------------------

class FileOutputs(CliTestCase):

    def test_files_alone_print_one_line_each_and_no_report(self):
        html, svg, npz, jsonl = (self.path(n) for n in ("r.html", "r.svg", "d.npz", "r.jsonl"))
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--html", html, "--svg", svg, "--dump", npz,
                     "--jsonl", jsonl)
        self.assertEqual((r.code, r.out), (0, ""), r)
        self.assertEqual(r.err, f"attnscope: wrote {npz} (the stages in one .npz archive)\n"
                                f"attnscope: wrote {html} (HTML report)\n"
                                f"attnscope: wrote {svg} (SVG heatmap)\n"
                                f"attnscope: wrote {jsonl} (line-delimited JSON)\n")
        d = self.path("d")
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--dump", d)
        self.assertEqual((r.code, r.out, r.err), (0, "", f"attnscope: wrote {d} (the stages as NAME.npy)\n"), r)

    def test_a_view_asks_for_the_report_and_quiet_silences_the_lines(self):
        html = self.path("r.html")
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--html", html, "--stages", "weights")
        self.assertEqual((r.code, r.err), (0, f"attnscope: wrote {html} (HTML report)\n"), r)
        self.assertEqual(headings(r.out), ["weights"])
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--html", html, "--force", "--diagnose")
        self.assertIn("entropy", r.out)
        r = run_text("run", DATA / "sentence.json", "--heads", "2", "--html", html, "--force", "-q")
        self.assertEqual((r.code, r.out, r.err), (0, "", ""), r)

    def test_a_dangling_link_is_refused_as_an_existing_file_is(self):
        existing, dangling = self.path("old.html"), self.path("dangling.html")
        existing.write_text("mine")
        dangling.symlink_to(self.path("nowhere"))
        r = run_text("run", DATA / "sentence.json", "--html", existing)
        self.assertEqual((r.code, r.err), (2, f"attnscope: error: {existing}: exists; pass --force to replace it\n"))
        for force in ([], ["--force"]):
            with self.subTest(force=force):
                r = run_text("run", DATA / "sentence.json", "--html", dangling, *force)
                self.assertEqual((r.code, r.out, r.err), (2, "", f"attnscope: error: {dangling}: exists and is a "
                                 "dangling symbolic link (never replaced); remove it or choose another name\n"))

    def test_the_symbolic_link_note_escapes_the_path(self):
        real = self.path("real.html")
        real.write_text("mine")
        link = self.path("l\x1b[31m.html")
        link.symlink_to(real)
        r = run_text("run", DATA / "sentence.json", "--html", link, "--force", "-q")
        self.assertEqual(r.code, 0, r)
        shown = str(link).replace("\x1b", "\\x1b")
        self.assertEqual(r.err, f"attnscope: note: {shown} is a symbolic link; --force replaces the link itself "
                                "(the file it points to is kept)\n")

    def test_every_output_says_it_replaces_a_link(self):
        model = ["--model", DATA / "tiny-gpt2", "--text", "the cat sat"]
        outputs = {
            "make -o": (["make", "-o", "{}", "--pattern", "previous-token"], ".npz"),
            "--save-forward": (["run", *model, "--save-forward", "{}", "-q"], ".npz"),
            "report --model --html": (["report", *model, "--html", "{}"], ".html"),
            "--sweep --html": (["run", DATA / "sentence.json", "--sweep", "scale=1,2", "--html", "{}"], ".html"),
            "--jsonl": (["run", DATA / "sentence.json", "--summary", "--jsonl", "{}", "-q"], ".jsonl"),
            "decode --dump": (["decode", DATA / "causal.json", "--prefill", "1", "--dump", "{}", "-q"], ".npz"),
        }
        for what, (args, ext) in outputs.items():
            with self.subTest(output=what):
                real, link = self.path("real-" + what[:6].strip("-") + ext), self.path("link" + str(len(args)) + ext)
                real.write_text("mine")
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(real)
                r = run_text(*[link if a == "{}" else a for a in args], "--force")
                self.assertEqual(r.code, 0, r)
                self.assertIn(f"attnscope: note: {link} is a symbolic link; --force replaces the link itself "
                              "(the file it points to is kept)\n", r.err)
                self.assertEqual(r.err.count("attnscope: note:"), 1, r)
                self.assertFalse(link.is_symlink())
                self.assertEqual(real.read_text(), "mine")

    def test_a_dump_directory_given_with_a_slash(self):
        # docs/models.md prints --dump l0/: the slash names the directory, made in ".".
        r = run_text("run", DATA / "sentence.json", "--dump", "l0/", cwd=self.tmp)
        self.assertEqual(r.code, 0, r)
        self.assertTrue((self.path("l0") / "weights.npy").is_file())

    def test_report_says_what_it_wrote_and_names_layers(self):
        html = self.path("m.html")
        r = run_text("report", "--model", DATA / "tiny-gpt2", "--text", "the cat sat", "--html", html)
        self.assertEqual((r.code, r.out, r.err), (0, "", f"attnscope: wrote {html} (HTML model view, every layer)\n"))
        page = html.read_text()
        self.assertIn("A row per layer, a column per head", page)
        self.assertNotIn("bundle", page.split("<header>")[1].split("</header>")[0])
        r = run_text("report", DATA / "sentence.json", DATA / "causal.json", "--html", html, "--force")
        self.assertEqual((r.code, r.err), (0, f"attnscope: wrote {html} (HTML model view)\n"))


if __name__ == "__main__":
    common.main("test_cli")
