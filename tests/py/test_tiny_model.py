#!/usr/bin/python3
"""data/tiny-gpt2, the small GPT-2 trained by scripts/train_model.py, run as a user runs it:

* its attention, from `attnscope run --model data/tiny-gpt2 --tokens IDS --layer L --json`,
  equals scripts/lm_reference.py's (the float64 numpy forward pass) within 1e-10 on a fixed
  repeated random sequence, and on it the best heads score what data/README.md says: as a
  previous-token head (mean weight from token i to i − 1) and as an induction head (from
  each token of the second copy to the token after its first occurrence), each ≥ 0.5;
* its tokenizer.json gives attnscope the ids and decodes Hugging Face's JavaScript port
  (tests/tokenizers/reference.mjs) gives, on the tokenizer corpus and on text of the docs;
  without node or tests/tokenizers/node_modules the comparison skips and says so;
* the folder is a Hugging Face folder under 5 MB, float32;
* `scripts/train_model.py --check` (the model's own PyTorch forward against attnscope) passes.

    /usr/bin/python3 tests/py/test_tiny_model.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import ROOT, CliTestCase, run_text  # noqa: E402

import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)
import train_model  # noqa: E402  (scripts/: the probe sequence, the scores, the file reader)
import test_tokenizers as ttok  # noqa: E402  (the JavaScript reference, run as there)

MODEL = ROOT / "data" / "tiny-gpt2"
TOL = 1e-10          # relative: |a - e| <= TOL (1 + |e|)
PREVIOUS = (0, 2)    # (layer, head) of the best previous-token head, as data/README.md says
INDUCTION = (1, 1)   # (layer, head) of the best induction head
SCORES = (0.563, 0.860)  # their scores, as data/README.md says
# Text of the kind the model was trained on, the README's example, special-token text.
EXTRA = ["The cat sat on the mat. The cat sat on the mat.",
         "attnscope run --model data/tiny-gpt2 --text \"…\" --layer 1 --heatmap",
         "| `--layer N` | which layer's attention to show (from 0) |",
         "weights = softmax over keys of masked_scores; each row sums to 1",
         "```cpp\nLanguageModel m = LanguageModel::open(\"models/gpt2\");\n```",
         "<|endoftext|>Hello<|endoftext|> <|endoftext|>\n",
         "  indented  \t tabs\n\n\nand    runs of spaces   ",
         "naïve café — 1,327 strings; 65,536 tokens ≤ 1e-10 × √2"]


def attention(ids, layer):
    """attnscope's weights (H, T, T) of one layer, from --json."""
    r = run_text("run", "--model", MODEL, "--tokens", ",".join(map(str, ids)), "--layer", str(layer),
                 "--stages", "weights", "--json")
    if r.code != 0:
        raise AssertionError(r)
    return np.array(json.loads(r.out)["stages"]["weights"]["data"], dtype=np.float64)


class Heads(CliTestCase):
    """The attention of both layers on the probe sequence, against the reference, and the
    scores of the heads data/README.md names."""

    @classmethod
    def setUpClass(cls):
        config, state = train_model.load_model(str(MODEL))
        cls.config = config
        cls.ids = train_model.probe_ids()
        cls.want = lref.forward(config, {k: v.astype(np.float64) for k, v in state.items()}, cls.ids)["weights"]
        cls.got = [attention(cls.ids, l) for l in range(config["n_layer"])]

    def test_weights_equal_the_reference(self):
        for l in range(self.config["n_layer"]):
            common.assert_close(self.got[l], self.want[l], TOL, f"tiny-gpt2 layer {l} weights", "lm (float64)",
                                rtol=1)

    def test_probe_is_a_repeated_random_sequence(self):
        n = train_model.PROBE_LEN
        self.assertEqual(len(self.ids), 2 * n)
        self.assertEqual(self.ids[:n], self.ids[n:])
        self.assertGreater(len(set(self.ids[:n])), n - 3)  # random ids, nearly all distinct

    def probe_scores(self):
        """(previous-token, induction) scores of every head from attnscope's weights, (L, H)."""
        n = train_model.PROBE_LEN
        i, k = np.arange(1, 2 * n), np.arange(n)
        return (np.array([w[:, i, i - 1].mean(-1) for w in self.got]),
                np.array([w[:, n + k, k + 1].mean(-1) for w in self.got]))

    def test_scores_are_those_documented(self):
        previous, induction = self.probe_scores()
        print(f"\nprevious-token scores {np.round(previous, 3).tolist()}\n"
              f"induction scores {np.round(induction, 3).tolist()}", flush=True)
        self.assertEqual(np.unravel_index(previous.argmax(), previous.shape), PREVIOUS)
        self.assertEqual(np.unravel_index(induction.argmax(), induction.shape), INDUCTION)
        self.assertAlmostEqual(previous.max(), SCORES[0], places=3)
        self.assertAlmostEqual(induction.max(), SCORES[1], places=3)

    def test_heads_reach_one_half(self):
        """The goal: a previous-token head and an induction head each scoring ≥ 0.5, the first
        in layer 0, the second in layer 1 (the induction circuit's order)."""
        previous, induction = self.probe_scores()
        self.assertGreaterEqual(min(previous.max(), induction.max()), 0.5)
        self.assertEqual(np.unravel_index(previous.argmax(), previous.shape)[0], 0)
        self.assertEqual(np.unravel_index(induction.argmax(), induction.shape)[0], 1)


class Folder(CliTestCase):
    """A Hugging Face GPT-2 folder, small, float32."""

    def test_files_and_size(self):
        names = sorted(p.name for p in MODEL.iterdir())
        self.assertEqual(names, ["config.json", "model.safetensors", "tokenizer.json"])
        size = sum(p.stat().st_size for p in MODEL.iterdir())
        self.assertLess(size, 5_000_000)

    def test_config_and_tensors(self):
        config, state = train_model.load_model(str(MODEL))
        self.assertEqual(config["model_type"], "gpt2")
        self.assertEqual(state["transformer.wte.weight"].shape, (config["vocab_size"], config["n_embd"]))
        self.assertEqual(state["transformer.h.0.attn.c_attn.weight"].shape, (config["n_embd"], 3 * config["n_embd"]))
        self.assertNotIn("lm_head.weight", state)  # tied to wte
        self.assertTrue(all(v.dtype == np.float32 for v in state.values()))

    def test_text_equals_tokens(self):
        text = EXTRA[0]
        r = run_text("tokens", "--model", MODEL, "--text", text, "--json")
        self.assert_ok(r)
        ids = json.loads(r.out)["ids"]
        a = run_text("run", "--model", MODEL, "--text", text, "--layer", "1", "--stages", "weights", "--json")
        b = run_text("run", "--model", MODEL, "--tokens", ",".join(map(str, ids)), "--layer", "1", "--stages",
                     "weights", "--json")
        self.assert_ok(a)
        self.assert_ok(b)
        self.assertEqual(json.loads(a.out)["stages"], json.loads(b.out)["stages"])


class Tokenizer(CliTestCase):
    """attnscope's ids and decodes equal the JavaScript port's, with and without special
    tokens, on the tokenizer corpus (tests/tokenizers/corpus.jsonl) and EXTRA."""

    def test_ids_equal_the_javascript_reference(self):
        reason = ttok.needs_reference(MODEL)
        if reason:
            self.skipTest(f"the JavaScript reference is not here: {reason}")
        texts = ttok.corpus_lines() + EXTRA
        corpus = self.path("corpus.jsonl")
        corpus.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
        reference = ttok.reference(MODEL, corpus)
        for mode, options in (("special", ()), ("plain", ("--no-special-tokens",))):
            actual, r = ttok.ours(MODEL, corpus, *options)
            self.assertEqual(r.code, 0, r)
            ids, decodes, shown = ttok.differences(texts, [line[mode] for line in reference], actual)
            summary = f"tiny-gpt2 {mode}: {ids}/{len(texts)} ids equal, {decodes}/{len(texts)} decodes equal"
            print("\n" + summary, flush=True)
            self.assertEqual((ids, decodes), (len(texts), len(texts)), summary + "\n" + "\n".join(shown))


class TrainScript(unittest.TestCase):
    """scripts/train_model.py --check: the model's own PyTorch forward against attnscope."""

    def test_check(self):
        env = dict(os.environ, ATTNSCOPE_BIN=str(common.BIN))
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_model.py"), "--check"],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("induction head", r.stdout)


if __name__ == "__main__":
    common.main("test_tiny_model", against="lm_reference.py")
