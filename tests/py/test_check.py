#!/usr/bin/python3
"""`attnscope check` as a user (or an autograder) runs it: a student's stages in, the
verdict, the first divergent stage, the named mistake and the exit code out.

The students are scripts/make_mistakes.py's numpy attention, one per mistake of the
catalogue, written from the mistakes' descriptions and independent of the C++ code. The
correct student is itself checked against the numpy reference scripts/attn_reference.py.

    /usr/bin/python3 tests/py/test_check.py            (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import itertools
import json
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, ROOT, CliTestCase, ref, run, run_text  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import make_mistakes as mm  # noqa: E402

HEADS = 2
STUDENT_STAGES = ("Q", "K", "V", "scores", "masked_scores", "weights", "context", "output")
# Aliases a student may use, per stage (the check is case-insensitive).
# TransformerLens's names (hook_attn_scores are after the causal mask: masked_scores).
ALIASES = {"Q": ["Q", "q", "query", "blocks.0.attn.hook_q"], "K": ["K", "k", "key", "hook_k"],
           "V": ["V", "v", "value"], "scores": ["scores", "logits"],
           "masked_scores": ["masked_scores", "MASKED_SCORES", "attn_scores", "blocks.3.attn.hook_attn_scores"],
           "weights": ["weights", "attn", "attn_weights", "probs", "p_attn", "attention", "pattern",
                       "blocks.0.attn.hook_pattern"],
           "context": ["context", "z", "attn_output_per_head", "hook_z"],
           "output": ["output", "out", "attn_output", "attn_out", "blocks.0.hook_attn_out"]}

# (dtype, batched, padding, causal): the matrix every mistake is checked over.
CONFIGS = [(dt, b, p, c) for dt in (np.float64, np.float32) for b in (True, False)
           for p, c in ((False, False), (True, False), (False, True), (True, True))]


# ---------------------------------------------------------------------------
# Axis orders: a stage in our order -> the same numbers in another accepted order
# ---------------------------------------------------------------------------

def layouts(stage, a, batched, H):
    """[(order, array)]: every accepted order of stage `stage` (our order `a`)."""
    out = []
    if stage in ("Q", "K", "V", "context"):
        if not batched:
            a = a[None]
        B, H_, T, D = a.shape
        bthd = a.transpose(0, 2, 1, 3)
        out += [("bhtd", a), ("bthd", bthd), ("bt(hd)", bthd.reshape(B, T, H_ * D)), ("(bh)td", a.reshape(B * H_, T, D))]
        if B == 1:
            out += [("htd", a[0]), ("thd", bthd[0]), ("t(hd)", bthd[0].reshape(T, H_ * D))]
        if B == 1 and H_ == 1:
            out += [("td", a[0, 0])]
    elif stage in ("scores", "masked_scores", "weights"):
        if not batched:
            a = a[None]
        B, H_, Tq, Tk = a.shape
        out += [("bhqk", a), ("(bh)qk", a.reshape(B * H_, Tq, Tk))]
        if B == 1:
            out += [("hqk", a[0])]
        if B == 1 and H_ == 1:
            out += [("qk", a[0, 0])]
    else:  # output (B, Tq, Dout)
        if not batched:
            a = a[None]
        out += [("btd", a)]
        if a.shape[0] == 1:
            out += [("td", a[0])]
    return [(name, np.ascontiguousarray(x)) for name, x in out]


def in_layout(stages, k, batched, H, names=0):
    """The stages, each in its k-th accepted order (cycling), under the names-th alias."""
    out = {}
    for s, a in stages.items():
        if s not in STUDENT_STAGES:
            continue
        options = layouts(s, a, batched, H)
        order, arr = options[k % len(options)]
        alias = ALIASES[s][names % len(ALIASES[s])]
        out[alias] = arr
    return out


class CheckCase(CliTestCase):
    def check(self, theirs, inputs, *options, causal=False, heads=HEADS, name="theirs.npz"):
        """Runs attnscope check --json; returns (exit code, document or None, result)."""
        bundle = self.save_npz("bundle.npz", **inputs)
        args = ["check", self.save_npz(name, **theirs) if isinstance(theirs, dict) else theirs,
                "--against", bundle, "--heads", heads, "--json"] + (["--causal"] if causal else []) + list(options)
        r = run_text(*args)
        doc = json.loads(r.out) if r.code in (0, 1) and r.out else None
        return r.code, doc, r

    def assert_named(self, bug, doc, r, what):
        self.assertIsNotNone(doc, f"{what}: {r}")
        self.assertEqual(r.code, 1, f"{what}: {r}")
        self.assertEqual(doc["verdict"], "mismatch", what)
        ids = [d["id"] for d in doc["diagnosis"]]
        self.assertTrue(ids and ids[0] == bug,
                        f"{what}: expected {bug} first, diagnosed {ids} at {doc['first_divergent_stage']}; "
                        f"where: {doc['where']} note: {doc['note']}")


# ---------------------------------------------------------------------------
# Every mistake is named first, over dtypes, batch axis, masks and axis orders
# ---------------------------------------------------------------------------

class Mistakes(CheckCase):
    """One test per mistake id; each runs the CONFIGS matrix where the mistake applies."""


def _mistake_test(bug):
    def test(self):
        tried = 0
        for n, (dtype, batched, padding, causal) in enumerate(CONFIGS):
            if not mm.applies(bug, HEADS, causal, padding, True, True):
                continue
            inputs = mm.make_inputs(batched=batched, padding=padding)
            stages = mm.student_attention(inputs, HEADS, causal=causal, bug=bug, dtype=dtype)
            theirs = in_layout(stages, n, batched, HEADS, names=n)
            what = f"{bug} {np.dtype(dtype).name} batched={batched} padding={padding} causal={causal} layout#{n}"
            with self.subTest(what=what):
                code, doc, r = self.check(theirs, inputs, causal=causal)
                self.assert_named(bug, doc, r, what)
            tried += 1
        self.assertGreater(tried, 0)
    return test


for _bug in mm.BUGS:
    setattr(Mistakes, "test_" + _bug.replace("-", "_"), _mistake_test(_bug))


class MistakesPartial(CheckCase):
    """Fewer stages given: the first divergent one is still diagnosed from the rest."""

    def test_only_weights_and_output(self):
        inputs = mm.make_inputs(padding=True)
        for bug in ("no-scale", "scale-by-dk", "softmax-over-queries", "mask-fill-zero", "causal-includes-next",
                    "causal-upper", "mask-inverted"):
            stages = mm.student_attention(inputs, HEADS, causal=True, bug=bug)
            code, doc, r = self.check({"attn": stages["weights"], "out": stages["output"]}, inputs, causal=True)
            with self.subTest(bug=bug):
                self.assertEqual(doc["first_divergent_stage"], "weights", r)
                self.assert_named(bug, doc, r, bug)

    def test_cross_attention(self):
        """Tq = 5 queries, Tk = 7 keys from a memory of width 6, its last 3 keys padded."""
        rng = np.random.default_rng(11)
        inputs = mm.make_inputs(padding=False)
        inputs["memory"] = rng.normal(size=(2, 7, 6))
        inputs["W_K"], inputs["W_V"] = rng.normal(size=(6, 8)) / 3, rng.normal(size=(6, 8)) / 3
        inputs["key_padding_mask"] = np.array([[0] * 7, [0] * 4 + [1] * 3], dtype=bool)
        for dtype in (np.float64, np.float32):
            for bug in ("no-scale", "scale-multiplied", "softmax-over-queries", "mask-fill-zero", "mask-inverted",
                        "mask-after-softmax", "values-are-keys", "heads-reshaped-not-transposed", "bias-missing",
                        "no-output-projection"):
                stages = mm.student_attention(inputs, HEADS, bug=bug, dtype=dtype)
                code, doc, r = self.check(in_layout(stages, 1, True, HEADS), inputs)
                with self.subTest(bug=bug, dtype=np.dtype(dtype).name):
                    self.assert_named(bug, doc, r, bug)

    def test_only_output(self):
        inputs = mm.make_inputs(padding=False)
        for bug in ("values-are-keys", "no-output-projection", "weights-transposed", "bias-missing"):
            stages = mm.student_attention(inputs, HEADS, bug=bug)
            code, doc, r = self.check({"output": stages["output"]}, inputs)
            with self.subTest(bug=bug):
                self.assert_named(bug, doc, r, bug)
                self.assertEqual(doc["diagnosis"][0]["stage"], "output")


# ---------------------------------------------------------------------------
# A correct student matches in every layout; noise is never a catalogued mistake
# ---------------------------------------------------------------------------

class Correct(CheckCase):
    def test_correct_student_is_the_reference(self):
        """The student code itself, without a bug, equals the independent reference."""
        for batched, padding, causal in itertools.product((True, False), repeat=3):
            inputs = mm.make_inputs(batched=batched, padding=padding)
            mine = mm.student_attention(inputs, HEADS, causal=causal)
            want = ref.attention(inputs, HEADS, causal=causal)
            for s in STUDENT_STAGES:
                common.assert_close(mine[s], want[s], 1e-12, f"{s} batched={batched} padding={padding}")

    def test_match_in_every_layout(self):
        for n, (dtype, batched, padding, causal) in enumerate(CONFIGS):
            inputs = mm.make_inputs(batched=batched, padding=padding)
            stages = mm.student_attention(inputs, HEADS, causal=causal, dtype=dtype)
            count = max(len(layouts(s, stages[s], batched, HEADS)) for s in STUDENT_STAGES)
            # Every layout with both masks, in both dtypes, with and without the batch axis;
            # one (cycling) in the other configurations.
            for k in range(count) if padding and causal else [n]:
                what = f"{np.dtype(dtype).name} batched={batched} padding={padding} causal={causal} layout#{k}"
                with self.subTest(what=what):
                    code, doc, r = self.check(in_layout(stages, k, batched, HEADS, names=k + n), inputs,
                                              causal=causal)
                    self.assertEqual(code, 0, f"{what}: {r}")
                    self.assertEqual(doc["verdict"], "match")
                    self.assertIsNone(doc["first_divergent_stage"])
                    self.assertEqual(doc["diagnosis"], [])
                    for s in STUDENT_STAGES:
                        self.assertTrue(doc["stages"][s]["given"] and doc["stages"][s]["match"], (what, s))
                    self.assertFalse(doc["stages"]["mask"]["given"])
                    self.assertIsNone(doc["stages"]["mask"]["match"])

    def test_single_head_td_layout(self):
        inputs = mm.make_inputs(batched=False, padding=False, Dm=4)
        stages = mm.student_attention(inputs, 1, causal=True)
        theirs = {"q": stages["Q"][0], "k": stages["K"][0], "v": stages["V"][0], "logits": stages["scores"][0],
                  "attn": stages["weights"][0], "z": stages["context"][0], "out": stages["output"]}
        code, doc, r = self.check(theirs, inputs, causal=True, heads=1)
        self.assertEqual(code, 0, r)
        self.assertEqual(doc["stages"]["Q"]["axes"], "td")
        self.assertEqual(doc["stages"]["scores"]["axes"], "qk")

    def test_mask_stage_and_large_negative_fill(self):
        """Our `mask` stage may be given; -1e9 in masked cells stands for -inf."""
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, causal=True)
        ms = np.where(np.isinf(stages["masked_scores"]), -1e9, stages["masked_scores"])
        code, doc, r = self.check({"mask": stages["mask"], "masked_scores": ms}, inputs, causal=True)
        self.assertEqual(code, 0, r)
        self.assertTrue(doc["stages"]["mask"]["match"])

    def test_noise_is_not_a_mistake(self):
        rng = np.random.default_rng(3)
        for dtype in (np.float64, np.float32):
            for padding, causal in ((False, False), (True, True)):
                inputs = mm.make_inputs(padding=padding)
                stages = mm.student_attention(inputs, HEADS, causal=causal, dtype=dtype)
                for s in STUDENT_STAGES:
                    noisy = {k: v for k, v in stages.items() if k in STUDENT_STAGES}
                    a = noisy[s]
                    noisy[s] = np.where(np.isfinite(a), a + rng.normal(scale=1e-3, size=a.shape), a).astype(dtype)
                    what = f"noise on {s} {np.dtype(dtype).name} padding={padding} causal={causal}"
                    with self.subTest(what=what):
                        code, doc, r = self.check(noisy, inputs, causal=causal)
                        self.assertEqual(code, 1, f"{what}: {r}")
                        self.assertEqual(doc["first_divergent_stage"], s, what)
                        self.assertEqual(doc["diagnosis"], [], what)
                        self.assertTrue(doc["where"], what)

    def test_theirs_as_directory_and_json(self):
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, bug="no-scale")
        d = self.path("mine")
        d.mkdir()
        for s in ("Q", "K", "scores", "weights"):
            np.save(d / f"{s}.npy", stages[s])
        code, doc, r = self.check(d, inputs)
        self.assert_named("no-scale", doc, r, "directory")
        obj = {"q": stages["Q"].tolist(), "logits": stages["scores"].tolist()}
        j = self.save_json("mine.json", obj)
        code, doc, r = self.check(j, inputs)
        self.assert_named("no-scale", doc, r, "json")
        self.assertEqual(doc["stages"]["Q"]["dtype"], "json")


class Modern(CheckCase):
    """A Llama-style run (4 query heads sharing 1 K/V head, RoPE): its own dump matches,
    and mistakes made on it by hand are named."""

    def setUp(self):
        super().setUp()
        self.args = ["--against", DATA / "rope.json", "--heads", "4", "--kv-heads", "1", "--rope", "--causal"]
        r = run("run", DATA / "rope.json", *self.args[2:], "--dump", self.path("ref"), "-q")
        self.assertEqual(r.code, 0, r)
        self.ref = {p.stem: np.load(p) for p in self.path("ref").glob("*.npy")}

    def check_modern(self, theirs):
        r = run_text("check", self.save_npz("mine.npz", **theirs), *self.args, "--json")
        return r, json.loads(r.out) if r.code in (0, 1) else None

    def test_own_dump_matches(self):
        r, doc = self.check_modern({k: v for k, v in self.ref.items() if k != "mask"})
        self.assertEqual((r.code, doc["verdict"]), (0, "match"), r)
        self.assertTrue(doc["stages"]["Q_rot"]["match"])

    def test_mistakes_on_grouped_rope_heads(self):
        d = self.ref
        r, doc = self.check_modern({"q_rot": d["Q_rot"], "k_rot": d["K_rot"],
                                    "logits": d["scores"] * np.sqrt(d["Q"].shape[-1])})
        self.assert_named("no-scale", doc, r, "no-scale")
        group = d["Q"].shape[1] // d["K"].shape[1]
        z = d["weights"] @ np.repeat(d["K"], group, axis=1)
        r, doc = self.check_modern({"attn": d["weights"], "z": z})
        self.assert_named("values-are-keys", doc, r, "values-are-keys")


# ---------------------------------------------------------------------------
# What a person reads: text in pipeline order, exit codes, --axes, tolerances
# ---------------------------------------------------------------------------

class Text(CheckCase):
    def run_check(self, theirs, inputs, *options, causal=False):
        bundle = self.save_npz("bundle.npz", **inputs)
        path = self.save_npz("mine.npz", **theirs) if isinstance(theirs, dict) else theirs
        return run_text("check", path, "--against", bundle, "--heads", HEADS, *(["--causal"] if causal else []),
                        *options)

    def test_lines_in_pipeline_order_then_first_divergent_then_diagnosis(self):
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, causal=True, bug="mask-fill-zero")
        r = self.run_check({"logits": stages["scores"], "attn": stages["weights"]}, inputs, causal=True)
        self.assertEqual(r.code, 1, r)
        self.assertEqual(r.err, "")
        lines = r.out.splitlines()
        self.assertTrue(lines[0].startswith("attnscope check: "), r)
        names = [ln.split()[0] for ln in lines[1:] if ln.startswith("  ") and not ln.startswith("   ")]
        self.assertEqual([n for n in names if n in ref.STAGES], list(ref.STAGES), r.out)
        status = {ln.split()[0]: ln.split()[1] for ln in lines[1:] if ln.startswith("  ") and not ln.startswith("   ")}
        self.assertEqual(status["scores"], "matches")
        self.assertEqual(status["weights"], "differs")
        self.assertEqual(status["Q"], "not")
        i = lines.index("first divergent stage: weights")
        self.assertTrue(lines[i + 1].startswith("diagnosis:"), r.out)
        self.assertIn("1. mask-fill-zero", lines[i + 2])
        self.assertIn("Fix:", r.out)

    def test_match_exit_0(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        r = self.run_check({"out": stages["output"]}, inputs)
        self.assertEqual(r.code, 0, r)
        self.assertIn("verdict: match", r.out)

    def test_no_fit_says_where(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        w = stages["weights"].copy()
        w[0, 1] *= 1.0 + 1e-2       # only head 1 of item 0
        r = self.run_check({"attn": w}, inputs)
        self.assertEqual(r.code, 1, r)
        self.assertIn("no catalogued mistake reproduces weights", r.out)
        self.assertIn("only in heads 1", r.out)
        self.assertIn("only in batch items 0", r.out)

    def test_transposed_scores_are_named_as_a_reading(self):
        """Scores stored (key, query): the description offers the order that matches."""
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        r = self.run_check({"logits": stages["scores"].swapaxes(-1, -2).copy()}, inputs)
        self.assertEqual(r.code, 1, r)
        # K·Qᵀ is in the catalogue too: scores-transposed names it.
        self.assertIn("scores-transposed", r.out)

    def test_axes_settles_an_order(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        # (B, Tk, Tq): not an order recognised by itself, then read as bhkq.
        t = stages["weights"].swapaxes(-1, -2).copy()
        r = self.run_check({"attn": t}, inputs, "--axes", "attn=bhkq")
        self.assertEqual(r.code, 0, r)
        # (B, T, H, D) context named with --axes, two entries.
        z = stages["context"].transpose(0, 2, 1, 3).copy()
        r = self.run_check({"z": z, "attn": t}, inputs, "--axes", "z=bthd", "--axes", "attn=bhkq")
        self.assertEqual(r.code, 0, r)

    def test_tolerance_options(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        noisy = stages["output"] + 1e-4
        r = self.run_check({"out": noisy}, inputs)
        self.assertEqual(r.code, 1, r)
        r = self.run_check({"out": noisy}, inputs, "--atol", "2e-4", "--rtol", "0")
        self.assertEqual(r.code, 0, r)

    def test_float32_tolerance_follows_dtype(self):
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, causal=True, dtype=np.float32)
        code, doc, r = CheckCase.check(self, {k: stages[k] for k in STUDENT_STAGES}, inputs, causal=True)
        self.assertEqual(code, 0, r)
        self.assertEqual(doc["stages"]["weights"]["tolerance"]["atol"], 2e-5)
        # The same float32 numbers widened to float64 are held to 1e-9: they differ.
        wide = {k: stages[k].astype(np.float64) for k in ("Q", "output")}
        code, doc, r = CheckCase.check(self, wide, inputs, causal=True)
        self.assertEqual(code, 1, r)

    def test_terminal_safe(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS, bug="no-scale")
        path = self.save_npz("mine\x1b[31m.npz", q=stages["Q"], logits=stages["scores"])
        r = self.run_check(path, inputs)
        self.assertEqual(r.code, 1, r)
        self.assertNotIn("\x1b", r.out)
        self.assertIn("\\x1b", r.out)


# ---------------------------------------------------------------------------
# A TransformerLens cache; JSON an autograder can read; precisions and their rounding
# ---------------------------------------------------------------------------

def transformer_lens_hooks(inputs, heads, causal, fill):
    """One layer's attention hooks as TransformerLens's AbstractAttention records them,
    in torch float32, from the bundle's inputs (no padding): hook_q, hook_k, hook_v and
    hook_z (B, T, H, d); hook_attn_scores (B, H, Tq, Tk) = q·kᵀ/√d with the causal mask
    applied, masked cells = `fill` (-inf in recent versions, IGNORE = -1e5 in older ones);
    hook_pattern = softmax(attn_scores); hook_result (B, T, H, d_model) = each head's
    z · W_O[h] (no b_O); hook_attn_out = Σ_h result + b_O."""
    import torch
    t = lambda name: torch.tensor(np.asarray(inputs[name]), dtype=torch.float32)
    x = t("x")
    B, T, Dm = x.shape
    d = t("W_Q").shape[1] // heads
    q, k, v = ((x @ t("W_" + n) + t("b_" + n)).reshape(B, T, heads, d) for n in "QKV")
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d ** 0.5
    if causal:
        scores = torch.where(torch.ones(T, T).tril().bool(), scores, torch.tensor(fill, dtype=torch.float32))
    pattern = torch.softmax(scores, dim=-1)
    z = torch.einsum("bhqk,bkhd->bqhd", pattern, v)
    result = torch.einsum("bqhd,hdm->bqhm", z, t("W_O").reshape(heads, d, Dm))
    hooks = {"attn.hook_q": q, "attn.hook_k": k, "attn.hook_v": v, "attn.hook_attn_scores": scores,
             "attn.hook_pattern": pattern, "attn.hook_z": z, "attn.hook_result": result,
             "hook_attn_out": result.sum(2) + t("b_O")}
    return {"blocks.0." + name: a.numpy() for name, a in hooks.items()}


class TransformerLens(CheckCase):
    """A TransformerLens cache matches: hook_attn_scores are the masked scores, hook_pattern
    the weights, hook_result the heads' shares of the output."""

    def test_cache_matches(self):
        inputs = mm.make_inputs(padding=False)
        for causal, fill in ((True, -np.inf), (True, -1e5), (False, -np.inf)):
            hooks = transformer_lens_hooks(inputs, HEADS, causal, fill)
            with self.subTest(causal=causal, fill=fill):
                code, doc, r = self.check(hooks, inputs, causal=causal)
                self.assertEqual((code, doc and doc["verdict"]), (0, "match"), r)
                for stage in ("Q", "K", "V", "masked_scores", "weights", "context", "head_output", "output"):
                    self.assertTrue(doc["stages"][stage]["given"] and doc["stages"][stage]["match"], stage)
                self.assertEqual(doc["stages"]["masked_scores"]["name"], "blocks.0.attn.hook_attn_scores")
                self.assertFalse(doc["stages"]["scores"]["given"])

    def test_short_names(self):
        """cache["pattern", 0] and cache["attn_scores", 0] saved under their short names."""
        inputs = mm.make_inputs(padding=False)
        hooks = transformer_lens_hooks(inputs, HEADS, True, -np.inf)
        code, doc, r = self.check({"attn_scores": hooks["blocks.0.attn.hook_attn_scores"],
                                   "pattern": hooks["blocks.0.attn.hook_pattern"]}, inputs, causal=True)
        self.assertEqual((code, doc and doc["verdict"]), (0, "match"), r)

    def test_two_layers_are_refused(self):
        inputs = mm.make_inputs(padding=False)
        hooks = transformer_lens_hooks(inputs, HEADS, True, -np.inf)
        hooks["blocks.1.attn.hook_pattern"] = hooks["blocks.0.attn.hook_pattern"]
        code, doc, r = self.check(hooks, inputs, causal=True)
        self.assertEqual(code, 2, r)
        self.assertIn("names the stage weights", r.err)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class BareAttnScores(CheckCase):
    """A bare `attn_scores` is read by its content: scaled scores before the mask (finite
    where the mask hides keys) are `scores`, scores after it (-inf or a fill value there)
    `masked_scores`; the report says which, in text and JSON. The student is
    scripts/make_mistakes.py's numpy attention, padded."""

    def student(self, bug):
        inputs = mm.make_inputs(padding=True)
        return inputs, mm.student_attention(inputs, HEADS, causal=False, bug=bug)

    def test_raw_scores_of_a_padded_student_are_diagnosed(self):
        for bug in ("no-scale", None):
            inputs, st = self.student(bug)
            self.assertTrue(np.isfinite(st["scores"]).all() and np.isinf(st["masked_scores"]).any())
            with self.subTest(bug=bug):
                code, doc, r = self.check({"attn_scores": st["scores"], "weights": st["weights"]}, inputs)
                self.assertTrue(doc["stages"]["scores"]["given"], r)
                self.assertFalse(doc["stages"]["masked_scores"]["given"])
                self.assertEqual(doc["stages"]["scores"]["name"], "attn_scores")
                self.assertIn("read as scores", doc["stages"]["scores"]["reading"])
                if bug:
                    self.assertEqual(doc["first_divergent_stage"], "scores")
                    self.assert_named(bug, doc, r, "raw scores under attn_scores")
                else:
                    self.assertEqual((code, doc["verdict"]), (0, "match"), r)

    def test_masked_scores_with_inf_or_a_fill_value(self):
        inputs, st = self.student(None)
        for fill in (-np.inf, -1e9, np.finfo(np.float32).min):
            with self.subTest(fill=fill):
                ms = np.where(np.isinf(st["masked_scores"]), fill, st["masked_scores"])
                code, doc, r = self.check({"attn_scores": ms}, inputs)
                self.assertEqual((code, doc["verdict"]), (0, "match"), r)
                self.assertTrue(doc["stages"]["masked_scores"]["given"])
                self.assertIn("read as masked_scores", doc["stages"]["masked_scores"]["reading"])

    def test_the_text_report_says_which(self):
        inputs, st = self.student("no-scale")
        self.save_npz("bundle.npz", **inputs)
        self.save_npz("theirs.npz", attn_scores=st["scores"])
        r = run_text("check", "theirs.npz", "--against", "bundle.npz", "--heads", str(HEADS), cwd=self.tmp)
        self.assertEqual(r.code, 1, r)
        text = " ".join(r.out.split())
        self.assertIn("scores differs attn_scores", text)
        self.assertIn("read as scores: a bare attn_scores with no -inf and no fill value", text)
        self.assertIn("first divergent stage: scores", text)
        self.assertIn("no-scale", text)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)


class JsonFields(CheckCase):

    def test_infinite_difference_is_a_number_and_never_small(self):
        """A masked cell left finite (a broken mask): |Δ| is infinite, and so is the relative
        error; both stay JSON numbers (the largest double), never a string or a tiny value."""
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS, causal=True)
        ms = stages["masked_scores"].copy()
        ms[0, 0, 0, 1] = 0.0                          # query 0 sees key 1: a masked cell
        code, doc, r = self.check({"masked_scores": ms, "weights": stages["weights"]}, inputs, causal=True)
        self.assertEqual(code, 1, r)
        s = doc["stages"]["masked_scores"]
        self.assertFalse(s["match"])
        for key in ("max_abs_diff", "relative_error", "rtol_needed"):
            self.assertTrue(is_number(s[key]), (key, s[key]))
            self.assertGreaterEqual(s[key], 1.7976931348623157e308, key)
        self.assertEqual((s["nonfinite_cells"], s["mismatched_cells"]), (1, 1))
        self.assertFalse(s["rounding_level"])
        w = doc["stages"]["weights"]
        for key in ("max_abs_diff", "relative_error", "rtol_needed"):
            self.assertTrue(is_number(w[key]), (key, w[key]))
        r = run_text("check", self.path("theirs.npz"), "--against", self.path("bundle.npz"), "--heads", HEADS,
                     "--causal")
        self.assertIn("relative error inf; 1 of 100 cells differ, 1 is ±inf or NaN on one side only",
                      " ".join(r.out.split()))

    def test_nan_makes_the_relative_error_infinite(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS)
        w = stages["weights"].copy()
        w[1, 1, 2, 3] = np.nan
        code, doc, r = self.check({"attn": w}, inputs)
        self.assertEqual(code, 1, r)
        self.assertGreaterEqual(doc["stages"]["weights"]["relative_error"], 1e308)


class Precision(CheckCase):

    def test_float16_has_its_own_tolerance(self):
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, causal=True, dtype=np.float16)
        code, doc, r = self.check({k: stages[k] for k in STUDENT_STAGES}, inputs, causal=True)
        self.assertEqual(code, 0, r)
        self.assertEqual(doc["stages"]["weights"]["tolerance"]["atol"], 1e-2)
        self.assertEqual(doc["stages"]["weights"]["precision"], "float16")
        for bug in ("no-scale", "mask-fill-zero", "scale-by-dmodel", "heads-interleaved"):
            stages = mm.student_attention(inputs, HEADS, causal=True, bug=bug, dtype=np.float16)
            code, doc, r = self.check({k: stages[k] for k in STUDENT_STAGES}, inputs, causal=True)
            with self.subTest(bug=bug):
                self.assert_named(bug, doc, r, bug)

    def test_float32_rounding_shows_its_digits_and_the_rtol_that_accepts_it(self):
        inputs = mm.make_inputs(padding=False)
        stages = mm.student_attention(inputs, HEADS, dtype=np.float32)
        out = (stages["output"].astype(np.float64) * (1 + 4e-5)).astype(np.float32)  # 2 × the tolerance
        bundle = self.save_npz("bundle.npz", **inputs)
        mine = self.save_npz("mine.npz", out=out)
        r = run_text("check", mine, "--against", bundle, "--heads", HEADS)
        self.assertEqual(r.code, 1, r)
        flat = " ".join(r.out.split())
        m = re.search(r"theirs (\S+), reference (\S+)", flat)
        self.assertIsNotNone(m, r.out)
        self.assertNotEqual(m.group(1), m.group(2).rstrip(","), r.out)  # not "0.583, 0.583"
        rt = re.search(r"at float32's rounding level .*?--rtol (\S+) accepts it", flat)
        self.assertIsNotNone(rt, r.out)
        self.assertLess(float(rt.group(1)), 1e-4)
        self.assertEqual(run_text("check", mine, "--against", bundle, "--heads", HEADS, "--rtol",
                                  rt.group(1)).code, 0)
        # Noise of 1e-3 is no rounding.
        noisy = (stages["output"] + 1e-3).astype(np.float32)
        r = run_text("check", self.save_npz("noisy.npz", out=noisy), "--against", bundle, "--heads", HEADS)
        self.assertEqual(r.code, 1, r)
        self.assertNotIn("rounding level", r.out)

    def test_dtype_says_what_theirs_was_computed_in(self):
        """float32 numbers saved as float64: --dtype float32 holds them to float32's tolerance."""
        inputs = mm.make_inputs(padding=True)
        stages = mm.student_attention(inputs, HEADS, causal=True, dtype=np.float32)
        wide = {k: stages[k].astype(np.float64) for k in ("Q", "weights", "output")}
        code, doc, r = self.check(wide, inputs, causal=True)
        self.assertEqual(code, 1, r)
        code, doc, r = self.check(wide, inputs, "--dtype", "float32", causal=True)
        self.assertEqual(code, 0, r)
        s = doc["stages"]["output"]
        self.assertEqual((s["dtype"], s["precision"], s["tolerance"]["atol"]), ("float64", "float32", 2e-5))
        r = run_text("check", self.path("theirs.npz"), "--against", self.path("bundle.npz"), "--heads", HEADS,
                     "--causal", "--dtype", "float32")
        self.assertIn("tolerance |Δ| <= 2e-05 · max(1, |ref|) (float64, computed in float32)", r.out)
        # A float16 array stays float16 whatever --dtype says.
        half = {"out": stages["output"].astype(np.float16)}
        code, doc, r = self.check(half, inputs, "--dtype", "float32", causal=True)
        self.assertEqual(doc["stages"]["output"]["precision"], "float16", r)


# ---------------------------------------------------------------------------
# Bad input: exit 2 with one clear line
# ---------------------------------------------------------------------------

class BadInput(CheckCase):
    def setUp(self):
        super().setUp()
        self.inputs = mm.make_inputs(padding=False)
        self.stages = mm.student_attention(self.inputs, HEADS)
        self.bundle = self.save_npz("bundle.npz", **self.inputs)

    def bad(self, theirs, *fragments, options=()):
        path = self.save_npz("mine.npz", **theirs) if isinstance(theirs, dict) else theirs
        r = run("check", path, "--against", self.bundle, "--heads", HEADS, *options)
        return self.assert_error(r, *fragments)

    def test_unknown_name(self):
        self.bad({"q": self.stages["Q"], "attn_probabilities": self.stages["weights"]},
                 "mine.npz: attn_probabilities", "not a stage name")

    def test_shape_fits_no_order(self):
        other = mm.student_attention(mm.make_inputs(padding=False, T=6), HEADS)
        line = self.bad({"q": other["Q"]}, "mine.npz: q", "fits no axis order of Q", "(2, 2, 6, 4)", "bhtd (2, 2, 5, 4)",
                        "--heads")
        self.assertNotIn("{", line)

    def test_other_heads(self):
        # The same numbers as 4 heads of 2: a shape that fits no order of --heads 2.
        self.bad({"q": self.stages["Q"].reshape(2, 4, 5, 2)}, "fits no axis order")

    def test_inputs_from_another_bundle(self):
        other = mm.make_inputs(seed=99, padding=False)
        self.bad({"x": other["x"], "q": self.stages["Q"]}, "mine.npz: x", "differs from x of", "another bundle")

    def test_inputs_equal_are_accepted(self):
        r = run_text("check", self.save_npz("mine.npz", x=self.inputs["x"], W_Q=self.inputs["W_Q"],
                                            q=self.stages["Q"]), "--against", self.bundle, "--heads", HEADS)
        self.assertEqual(r.code, 0, r)
        self.assertIn("W_Q, x equal to the bundle's", r.out)

    def test_two_arrays_for_one_stage(self):
        self.bad({"q": self.stages["Q"], "query": self.stages["Q"]}, "names the stage Q", "keep one")

    def test_ambiguous_shape(self):
        inputs = mm.make_inputs(batched=False, padding=False, T=2)
        stages = mm.student_attention(inputs, HEADS)
        bundle = self.save_npz("b2.npz", **inputs)
        path = self.save_npz("mine.npz", q=stages["Q"])
        r = run("check", path, "--against", bundle, "--heads", HEADS)
        self.assert_error(r, "fits more than one axis order of Q", "htd (2, 2, 4)", "thd (2, 2, 4)",
                          "--axes q=ORDER")
        r = run_text("check", path, "--against", bundle, "--heads", HEADS, "--axes", "q=htd")
        self.assertEqual(r.code, 0, r)

    def test_bad_axes(self):
        q = {"q": self.stages["Q"]}
        self.bad(q, "--axes q=bxtd", "not an axis order of Q", options=("--axes", "q=bxtd"))
        self.bad(q, "--axes q=bthd", "means the shape (2, 5, 2, 4)", "(2, 2, 5, 4)", options=("--axes", "q=bthd"))
        self.bad(q, "--axes z=bhtd", "has no array z", options=("--axes", "z=bhtd"))
        self.bad(q, "--axes q", "expected NAME=ORDER", options=("--axes", "q"))

    def test_npy_file_and_missing_file(self):
        p = self.save_npy("q.npy", self.stages["Q"])
        self.bad(p, "q.npy", "one .npy holds one array")
        self.bad(self.path("absent.npz"), "absent.npz")

    def test_text_array(self):
        self.bad({"q": np.array(["a", "b"])}, "holds text")

    def test_nothing_to_compare_is_refused(self):
        """No stage at all is never a match: the bundle itself, inputs only, an empty .npz."""
        self.bad(self.bundle, "bundle.npz: no stage to compare", "only the input arrays", "the bundle itself?")
        self.bad({"x": self.inputs["x"]}, "no stage to compare")
        empty = self.path("empty.npz")
        np.savez(empty)
        r = run("check", empty, "--against", self.bundle, "--heads", HEADS, "--json")
        self.assertEqual(r.code, 2, r)
        self.assertNotIn(b"match", r.out)

    def test_transformer_lens_hook_that_is_no_stage(self):
        self.bad({"blocks.0.attn.hook_q": self.stages["Q"].transpose(0, 2, 1, 3),
                  "blocks.0.hook_resid_pre": self.inputs["x"]},
                 "blocks.0.hook_resid_pre", "a TransformerLens hook that is no attention stage")

    def test_no_theirs(self):
        r = run("check", "--against", self.bundle)
        self.assertEqual(r.code, 2, r)


# ---------------------------------------------------------------------------
# data/mistakes/: current, and each student diagnosed as named
# ---------------------------------------------------------------------------

class Data(CheckCase):
    def test_files_are_current(self):
        self.assertEqual(mm.main(["--check"]), 0)

    def test_each_shipped_student_is_diagnosed(self):
        d = DATA / "mistakes"
        for who in mm.SHIPPED:
            r = run_text("check", d / f"{who}.npz", "--against", d / "bundle.npz", "--heads", "2", "--causal",
                         "--json")
            doc = json.loads(r.out)
            with self.subTest(who=who):
                if who == "correct":
                    self.assertEqual((r.code, doc["verdict"]), (0, "match"), r)
                else:
                    self.assert_named(who, doc, r, who)


if __name__ == "__main__":
    common.main("test_check", against="students' numpy")
