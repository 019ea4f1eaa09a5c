#!/usr/bin/python3
"""The family table's families and RoPE scalings (src/model/family.cpp, src/lm/), run as a
user runs them, against scripts/lm_reference.py: a float64 numpy reference written from
each family's Hugging Face modeling file and from transformers' modeling_rope_utils.py,
independent of attnscope's code.

Small random models in Hugging Face layout (config.json and model.safetensors written
here); for every layer its attention input, its attention weights and the logits at every
position agree with the reference to 1e-10 relative. Also: each refusal is one line.

    /usr/bin/python3 tests/py/test_families.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import shutil
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import run_text  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)
import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)
import test_generate  # noqa: E402
from test_lm import TOL, LmCase  # noqa: E402

IDS = [1, 10, 19, 3, 39, 0, 22, 5, 7, 31, 2, 14]
F32_BOUND = 1e-5  # relative, |a - e| / (1 + |e|)
# Llama 3.2's rope_scaling, with an original context small enough that a small model's
# pairs fall in all three of its bands (kept, smoothed, divided by the factor).
LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 512}


class FamilyCase(LmCase):

    def check(self, arch, ids=IDS, config_over=None, seed=0, layers=None, **kw):
        """Every layer's attention input and weights, and the logits, against the reference
        (kw: make_model's own, e.g. head_dim)."""
        model, config, state = self.write_model(arch, seed, config_over=config_over, tokenizer=False, **kw)
        want = lref.forward(config, state, ids)
        count = config.get("n_layer", config.get("num_hidden_layers"))
        for layer in (range(count) if layers is None else layers):
            got_ids, x, logits, weights = self.run_layer(model, layer, ["--tokens", ",".join(map(str, ids))])
            what = f"{arch} layer {layer}"
            common.assert_close(x, want["inputs"][layer], TOL, f"{what}: attention input", "families (float64)",
                                rtol=1)
            common.assert_close(weights.reshape(want["weights"][layer].shape), want["weights"][layer], TOL,
                                f"{what}: weights", "families (float64)", rtol=1)
            common.assert_close(logits, want["logits"], TOL, f"{what}: logits", "families (float64)", rtol=1)
        return model, config, state

    def refused(self, model, *fragments, ids="1,2,3"):
        return self.assert_error(run_text("run", "--model", model, "--tokens", ids), *fragments)


class RopeScaling(FamilyCase):
    """rope_scaling as transformers' modeling_rope_utils.py defines each type."""

    def test_llama3_on_a_llama_3_2_shaped_model(self):
        # Llama 3.2: tied embeddings, grouped K/V heads, rope_theta 500000, llama3 scaling
        self.check("llama", config_over={"rope_scaling": LLAMA3, "rope_theta": 500000.0,
                                         "tie_word_embeddings": True, "max_position_embeddings": 1024},
                   head_dim=8)

    def test_llama3_bands(self):
        """The reference's llama3 frequencies: the first pair kept, the last divided by the factor."""
        config = {"rope_scaling": LLAMA3, "rope_theta": 500000.0}
        inv, att = lref.rope_parameters(config, 8, 4)
        plain = 1.0 / 500000.0 ** (lref.np.arange(0, 8, 2) / 8)
        self.assertEqual(att, 1.0)
        self.assertEqual(inv[0], plain[0])
        self.assertAlmostEqual(inv[-1], plain[-1] / 32, delta=1e-18)
        self.assertTrue(plain[1] / 32 < inv[1] < plain[1])  # wavelength 167: between 128 and 512

    def test_linear(self):
        self.check("llama", config_over={"rope_scaling": {"type": "linear", "factor": 4.0}}, layers=[1])

    def test_dynamic_beyond_the_positions(self):
        # dynamic NTK changes the base only past max_position_embeddings, which it allows
        self.check("llama", config_over={"rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
                                         "max_position_embeddings": 8}, layers=[0, 2])

    def test_yarn(self):
        self.check("llama", config_over={"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 16},
                                         "max_position_embeddings": 64}, layers=[2], head_dim=8)

    def test_yarn_attention_factor_given(self):
        self.check("llama", config_over={"rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 8.0,
                                                          "attention_factor": 1.3, "truncate": False}},
                   layers=[1], head_dim=8)

    def test_longrope_short_and_long(self):
        short, long = [1.0, 1.5], [2.0, 7.0]
        over = {"rope_scaling": {"rope_type": "longrope", "short_factor": short, "long_factor": long},
                "original_max_position_embeddings": 8, "max_position_embeddings": 64}
        model, _, _ = self.check("llama", ids=IDS[:6], config_over=over, layers=[1])  # 6 tokens: short factors
        shutil.rmtree(model)
        self.check("llama", ids=IDS, config_over=over, layers=[1], seed=1)  # 12 > 8: long factors

    def test_su_is_longrope(self):
        over = {"rope_scaling": {"type": "su", "short_factor": [1.0, 2.0], "long_factor": [3.0, 4.0],
                                 "factor": 4.0}}
        self.check("llama", config_over=over, layers=[0])

    def test_unknown_type_refused_by_name(self):
        model, _, _ = self.write_model("llama", config_over={"rope_scaling": {"rope_type": "wavy", "factor": 2.0}})
        self.refused(model, "config.json: rope_scaling: rope_type 'wavy' is not a RoPE scaling", "llama3", "yarn",
                     "longrope")

    def test_missing_member_refused(self):
        model, _, _ = self.write_model("llama", config_over={"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
        self.refused(model, "rope_scaling.low_freq_factor: missing (rope_type llama3 needs it)")

    def test_factors_of_the_wrong_length_refused(self):
        over = {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0, 2.0]}}
        model, _, _ = self.write_model("llama", config_over=over)
        self.refused(model, "rope_scaling.short_factor: expected 2 numbers (one per rotated pair), found 1")


class Families(FamilyCase):
    """Each family of the table, every layer, as its Hugging Face modeling file defines it."""

    def test_qwen3_qk_norms_and_head_dim(self):
        self.check("qwen3")

    def test_gpt_neox_fused_heads_partial_rotary_parallel_residual(self):
        self.check("gpt_neox")

    def test_gpt_neox_sequential_residual(self):
        self.check("gpt_neox", config_over={"use_parallel_residual": False}, layers=[2])

    def test_gemma_scaled_embeddings_geglu_unit_offset_norms(self):
        self.check("gemma")

    def test_gemma2_caps_sandwich_norms_alternating_windows(self):
        self.check("gemma2")

    def test_gemma3_text_qk_norms_local_and_global_bases(self):
        self.check("gemma3_text")

    def test_phi3_fused_matrices_and_longrope(self):
        self.check("phi3")  # 12 tokens past original_max_position_embeddings 8: the long factors

    def test_phi3_short_factors(self):
        self.check("phi3", ids=IDS[:5], layers=[1])

    def test_mixtral_top2_router(self):
        self.check("mixtral")

    def test_unknown_model_type_lists_the_families(self):
        model, _, _ = self.write_model("llama", config_over={"model_type": "t5"})
        self.refused(model, "config.json: model_type: 't5' is not a model attnscope runs",
                     "gpt2, bert, roberta, llama, mistral, qwen2, qwen3, gpt_neox, gemma, gemma2, gemma3_text, phi3, "
                     "mixtral")


class Generation(test_generate.GenerateCase):
    """decode --model --generate: the greedy ids, their probabilities and every step's
    weights of every layer against the reference's full forward per token (test_generate's
    check), through the KV cache of each newer family."""

    check = test_generate.Greedy.check

    def test_qwen3(self):
        self.check("qwen3", [1, 10, 19], 5)

    def test_gpt_neox(self):
        self.check("gpt_neox", [1, 10, 19], 5)

    def test_gemma2(self):
        self.check("gemma2", [1, 10, 19], 5)

    def test_gemma3_text(self):
        self.check("gemma3_text", [1, 10, 19], 5)

    def test_phi3(self):
        self.check("phi3", [1, 10, 19], 4)  # 7 positions: within the original context, short factors

    def test_mixtral(self):
        self.check("mixtral", [1, 10, 19], 5)


class Float32(FamilyCase):
    """--dtype float32 on each family stored as F32: every layer's attention input and
    weights, and the logits, within float32's error of the float64 reference (at most
    F32_BOUND relative, about 80 float32 epsilons: PyTorch's own float32 forward of the older
    families errs by 1e-7 to 2e-6 on models of this size, test_lm_float32.py), and not
    equal to it (the run really is float32)."""

    def check32(self, arch, config_over=None):
        config, state = lref.make_model(arch, 0)
        config.update(config_over or {})
        state = cref.widened(state, "F32")
        d = self.path(f"{arch}-f32")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F32")
        want = lref.forward(config, state, IDS)
        worst = 0.0
        for layer in range(config["num_hidden_layers"]):
            fwd, dump = self.path(f"f{layer}.npz"), self.path(f"d{layer}.npz")
            self.assert_ok(run_text("run", "--model", d, "--tokens", ",".join(map(str, IDS)), "--layer", str(layer),
                                    "--dtype", "float32", "--save-forward", fwd, "--dump", dump, "--stages",
                                    "weights", "-q", "--force"), stdout_empty=True)
            with np.load(fwd) as f, np.load(dump) as w:
                pairs = ((f["x"], want["inputs"][layer]), (w["weights"].reshape(want["weights"][layer].shape),
                                                           want["weights"][layer]), (f["logits"], want["logits"]))
                for got, expected in pairs:
                    worst = max(worst, common.max_difference(got, expected, rtol=1)[0])
        common.note_maxdiff("families float32", worst)
        print(f"  {arch} float32: largest error {worst:.2e}", file=sys.stderr)
        self.assertGreater(worst, 0.0)
        self.assertLessEqual(worst, F32_BOUND, f"{arch}: float32 error {worst:.3e}")

    def test_llama3_scaling(self):
        self.check32("llama", {"rope_scaling": LLAMA3, "rope_theta": 500000.0})

    def test_qwen3(self):
        self.check32("qwen3")

    def test_gpt_neox(self):
        self.check32("gpt_neox")

    def test_gemma(self):
        self.check32("gemma")

    def test_gemma2(self):
        self.check32("gemma2")

    def test_gemma3_text(self):
        self.check32("gemma3_text")

    def test_phi3(self):
        self.check32("phi3")

    def test_mixtral(self):
        self.check32("mixtral")


if __name__ == "__main__":
    common.main("test_families", against="lm_reference.py")
