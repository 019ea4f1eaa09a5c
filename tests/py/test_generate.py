#!/usr/bin/python3
"""Greedy generation with a KV cache in every layer, `attnscope decode --model DIR --generate N`
(src/lm/generate.cpp), run as a user runs it, against scripts/lm_reference.py's generate():
a float64 numpy forward pass written from the GPT-2 and Llama/Qwen2 definitions, run over
the whole sequence for every new token (no cache), independent of attnscope's code.

Small random models are written as tests/py/test_lm.py writes them (its LmCase). Checked:
the generated ids equal the reference's greedy ids, with their probabilities; each step's
attention rows (every layer, from --json) equal the rows of the reference's forward on the
final sequence (<= 1e-12); --text gives what --tokens gives; and the refusals (an encoder,
too many positions, ids outside the vocabulary, N too large), each one line and exit 2.

    /usr/bin/python3 tests/py/test_generate.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import run_text  # noqa: E402
import test_lm  # noqa: E402  (its LmCase writes the small models in Hugging Face layout)

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)
import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass and greedy generation)

ROWS = 1e-12  # each step's weights vs the reference's rows, absolute
TOL = 1e-10  # probabilities, relative


def ids_text(ids):
    return ",".join(map(str, ids))


class GenerateCase(test_lm.LmCase):

    def generate_json(self, model, source, n, *more):
        r = run_text("decode", "--model", model, *source, "--generate", str(n), "--json", *more)
        self.assert_ok(r)
        return json.loads(r.out)


class Greedy(GenerateCase):
    """The generated ids and every step's rows of every layer, against the reference."""

    def check(self, arch, prompt, n, seed=0):
        model, config, state = self.write_model(arch, seed)
        want_ids, want_probs, final = lref.generate(config, state, prompt, n)
        doc = self.generate_json(model, ["--tokens", ids_text(prompt)], n, "--layer", "all")
        self.assertEqual(doc["schema"], "attnscope.generate/1")
        self.assertEqual(doc["prompt"]["ids"], prompt)
        self.assertEqual(doc["generated"]["ids"], want_ids, f"{arch}: greedy ids")
        common.assert_close(np.array(doc["generated"]["probabilities"]), np.array(want_probs), TOL,
                            f"{arch}: probabilities", "generate (float64)", rtol=1)
        self.assertEqual(len(doc["steps"]), n)
        P = len(prompt)
        for k, step in enumerate(doc["steps"]):
            t = P - 1 + k
            self.assertEqual((step["t"], step["cache_length"], step["next"]["id"]), (t, t + 1, want_ids[k]))
            for layer in step["layers"]:
                got = np.array(layer["weights"])  # (H, t + 1)
                want = final["weights"][layer["layer"]][:, t, : t + 1]
                common.assert_close(got, want, ROWS, f"{arch} step t={t} layer {layer['layer']}: weights",
                                    "generate (float64)", rtol=0)
                self.assertLessEqual(layer["max_abs_diff"], ROWS)
            self.assertEqual(len(step["layers"]), config.get("n_layer", config.get("num_hidden_layers")))
        self.assertLessEqual(doc["max_abs_diff"], 1e-10)

    def test_gpt2(self):
        self.check("gpt2", [3, 17, 5, 0], 6)

    def test_llama_grouped_kv_heads_and_rope(self):
        self.check("llama", [1, 10, 19, 3, 39], 6)

    def test_qwen2_biases_window_and_tied_head(self):
        self.check("qwen2", [1, 10, 19], 7, seed=2)

    def test_mistral_window_slides_over_the_cache(self):
        self.check("mistral", [1, 10, 19, 3], 5)

    def test_one_token_is_the_prefill_alone(self):
        self.check("gpt2", [7], 1)

    def test_ties_go_to_the_lowest_id(self):
        # An untied head of zeros but for two equal rows: every logit ties with another.
        config, state = lref.make_model("gpt2", 1)
        head = np.zeros_like(state["transformer.wte.weight"])
        head[6] = head[9] = np.random.default_rng(3).standard_normal(head.shape[1])
        config["tie_word_embeddings"] = False
        state["lm_head.weight"] = head
        d = self.path("tied-logits")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F64")
        want = lref.generate(config, state, [3, 4], 4)[0]
        self.assertTrue(set(want) <= {0, 6}, want)
        self.assertEqual(self.generate_json(d, ["--tokens", "3,4"], 4)["generated"]["ids"], want)

    def test_to_the_last_position(self):
        # 32 positions: a 28-token prompt and 4 new tokens fill them all
        self.check("gpt2", [3, 9] * 14, 4)


class Views(GenerateCase):
    """--text and --tokens agree; the text view's lines."""

    def test_text_equals_tokens(self):
        for arch in ("gpt2", "llama"):
            with self.subTest(arch=arch):
                model, config, state = self.write_model(arch)
                r = run_text("tokens", "--model", model, "--text", test_lm.TEXT[arch], "--json")
                self.assert_ok(r)
                ids = json.loads(r.out)["ids"]
                by_text = self.generate_json(model, ["--text", test_lm.TEXT[arch]], 3)
                by_ids = self.generate_json(model, ["--tokens", ids_text(ids)], 3)
                self.assertEqual(by_text, by_ids)
                self.assertEqual(by_text["generated"]["ids"], lref.generate(config, state, ids, 3)[0])
                self.assertIn("text", by_text["generated"])  # null: the fixture's tokenizer lacks ids 20..39
                model.rename(self.path(f"done-{arch}"))

    def test_default_view_a_line_per_layer(self):
        model, config, state = self.write_model("gpt2")
        want = lref.generate(config, state, [3, 17, 5], 3)[0]
        r = run_text("decode", "--model", model, "--tokens", "3,17,5", "--generate", "3")
        self.assert_ok(r)
        lines = r.out.splitlines()
        self.assertIn("greedy generation of 3 tokens with a KV cache in every layer", r.out)
        self.assertIn("prompt (3 tokens): 0 ", r.out)
        self.assertTrue(any(line.startswith("position 2 ") and line.endswith(": cache 3") for line in lines), lines)
        self.assertTrue(any(line.startswith("step t=4 ") for line in lines), lines)
        self.assertEqual(sum(line.startswith("  L2   top keys ") for line in lines), 3, lines)
        nexts = [line for line in lines if line.startswith("  next: ")]
        self.assertEqual([int(line.split("(id ")[1].split(")")[0]) for line in nexts], want)
        self.assertIn("the cache gives the same rows):", r.out)

    def test_one_layer_as_heatmap(self):
        model, _, _ = self.write_model("llama")
        r = run_text("decode", "--model", model, "--tokens", "1,10,19", "--generate", "2", "--layer", "1",
                     "--heatmap")
        self.assert_ok(r)
        self.assertIn("rows: layer 1's heads", r.out)
        self.assertEqual(sum(line.startswith("  h3   |") for line in r.out.splitlines()), 2, r.out)


class Refusals(GenerateCase):
    """One line, exit 2, before any work."""

    def refused(self, model, *fragments, args=("--tokens", "1,2,3", "--generate", "2")):
        return self.assert_error(run_text("decode", "--model", model, *args), *fragments)

    def test_bert_is_an_encoder(self):
        for arch in ("bert", "roberta"):
            with self.subTest(arch=arch):
                model, _, _ = self.write_model(arch)
                self.refused(model, f"model_type {arch}: an encoder", "generation needs a decoder: gpt2, llama, mistral, qwen2")
                model.rename(self.path(f"done-{arch}"))

    def test_more_positions_than_the_model_has(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--generate 30: the 3-token prompt and 30 new tokens need more than the model's 32 "
                     "positions", "n_positions", args=("--tokens", "1,2,3", "--generate", "30"))

    def test_id_outside_the_vocabulary(self):
        model, _, _ = self.write_model("llama")
        self.refused(model, "token 1: id 40 is outside the vocabulary", args=("--tokens", "1,40", "--generate", "2"))

    def test_huge_n(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--generate", "expected a number from 1 to",
                     args=("--tokens", "1", "--generate", "99999999999999999999"))
        self.refused(model, "--generate", "expected a number from 1 to", args=("--tokens", "1", "--generate", "0"))

    def test_memory_limit(self):
        model, _, _ = self.write_model("llama")  # 3 layers, about 25 KB each with x (60, 16)
        self.refused(model, "generating holds every layer's weights and inputs", "--max-memory",
                     args=("--tokens", "1", "--generate", "59", "--max-memory", "40K"))

    def test_layer_outside_the_model(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--layer 3: the model has 3 layers (0–2, or all)",
                     args=("--tokens", "1", "--generate", "1", "--layer", "3"))

    def test_options_of_a_bundles_decode(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--model: --prefill belongs to a bundle's decode",
                     args=("--tokens", "1", "--generate", "1", "--prefill", "1"))
        self.refused(model, "--generate N", args=("--tokens", "1"))
        self.assert_error(run_text("decode", str(common.DATA / "causal.npz"), "--generate", "2"),
                          "--generate: generates from a model folder")
        self.assert_error(run_text("decode", str(common.DATA / "causal.npz"), "--prefill", "2", "--layer", "all"),
                          "--layer all")


class Limits(GenerateCase):
    """What run refuses, generation refuses; the memory plan counts the KV caches and every
    step's records; the text stays within 80 columns."""

    def test_head_dim_contradicting_the_weights(self):
        model, _, _ = self.write_model("llama", config_over={"head_dim": 8})  # 4 heads × 4 features in q_proj
        run = self.assert_error(run_text("run", "--model", model, "--tokens", "1,2"), "query projection has 16 outputs",
                                "head width 8")
        gen = self.assert_error(run_text("decode", "--model", model, "--tokens", "1,2", "--generate", "2"),
                                "query projection has 16 outputs", "head width 8")
        self.assertIn("config.json head_dim", gen)

    def test_cache_and_records_are_counted(self):
        # 3 layers of 4 heads, 16 wide: weights and x about 40 KB in float64; 40 tokens of 59
        # positions keep the caches (3 × 59 × 2 × 16 doubles), the prefill's and every step's
        # rows (3 × 5 × Σ t) and 40 rows of logits, about 250 KB, and the check's full forward
        # (3 × 4 × 59 × 63 doubles) 360 KB.
        model, _, _ = self.write_model("llama")
        args = ("--tokens", ",".join(["1"] * 19), "--generate", "40")
        self.assert_ok(run_text("decode", "--model", model, *args, "--max-memory", "2M"))
        self.assert_error(run_text("decode", "--model", model, *args, "--max-memory", "400K"), "each step's rows",
                          "--max-memory")

    def test_prefill_line_within_80_columns(self):
        model, _, _ = self.write_model("llama")
        r = run_text("decode", "--model", model.name, "--tokens", "1,2,3,4,5,6,7,8,9,10,11", "--generate", "3",
                     cwd=model.parent)  # a short name: the header's width is the name's
        self.assert_ok(r)
        for line in r.out.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertIn("prefill: positions 0..10 in one causal run through every layer;", r.out)


if __name__ == "__main__":
    common.main("test_generate", against="lm_reference.py")
