#!/usr/bin/python3
"""Model checkpoints, run as a user runs them: `attnscope run --checkpoint PATH --layer N
BUNDLE` and `attnscope inspect PATH`.

The checkpoints are written here by independent writers: a safetensors writer written
from the format's description and torch.save (Debian's torch 1.13), both in
scripts/checkpoint_reference.py, with a config.json for each preset. Every stage of the
chosen layer is compared with the float64 torch references of the same script (GPT-2's
Conv1D attention, BERT self-attention, Llama attention with rotate_half RoPE, repeat_kv,
Mistral's window and Qwen2's biases, nn.MultiheadAttention, TransformerLens), run on the
weights as stored (float32/float16/bfloat16 widen exactly): ≤ 1e-12.

Also: what `inspect` lists (text and --json), the refusals (one line, exit 2), and
hostile files (a pickle that calls os.system, overlapping offsets, a header length past
the file, a 10 GB shape), each refused with one line and nothing executed or allocated.

    /usr/bin/python3 tests/py/test_checkpoint.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import io
import json
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/, on the path through common)
import torch  # noqa: E402

PRESETS = ("gpt2", "bert", "llama", "mistral", "qwen2", "mha", "tl")
CONTAINERS = ("safetensors", "sharded", "pt", "bin_dir")
DTYPES = ("F64", "F32", "F16", "BF16")
NUMPY_DTYPE = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
TOL = 1e-12
T = 6


def encoder(seed, dm=8, heads=2, layers=3):
    """An nn.TransformerEncoder (float64) with every bias random (PyTorch starts them at 0)."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(dm, heads, dim_feedforward=2 * dm, batch_first=True,
                                             dtype=torch.float64)
    enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    enc.eval()  # no dropout
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return enc


def model(preset, seed=0, **config_over):
    """(state: name -> float64 array as stored, config.json dict or None, extra argv,
    reference keyword arguments)."""
    if preset in ("gpt2", "bert", "llama", "mistral", "qwen2"):
        config = cref.make_config(preset, **config_over)
        return cref.make_state(preset, config, seed=seed), config, [], {}
    if preset == "mha":
        state = OrderedDict((k, v.numpy().copy()) for k, v in encoder(seed).state_dict().items())
        return state, None, ["--preset", "mha", "--heads", "2"], {"heads": 2}
    if preset == "tl":
        state = cref.make_state("tl", layers=3, dm=8, heads=2, dk=3, seed=seed)
        return state, None, ["--preset", "tl", "--causal"], {"causal": True}
    raise ValueError(preset)


def width(state):
    """Dm of a model: the input width of its first attention weight."""
    for name, a in state.items():
        if name.endswith(("c_attn.weight",)):
            return a.shape[0]
        if name.endswith(("q_proj.weight", "query.weight", "in_proj_weight")):
            return a.shape[1]
        if name.endswith("attn.W_Q"):
            return a.shape[1]
    raise ValueError("no attention weight")


def inputs(dm, seed=1, padded=True):
    rng = np.random.default_rng(seed)
    b = {"x": rng.standard_normal((2, T, dm))}
    if padded:
        b["key_padding_mask"] = np.array([[0] * T, [0] * (T - 1) + [1]], dtype=bool)
    return b


def stage_arrays_from_json(doc):
    out = {}
    for name, st in doc["stages"].items():
        data = st["data"]
        out[name] = np.array(data, dtype=bool if st.get("dtype") == "bool" else float)
    return out


class CheckpointCase(CliTestCase):

    def write(self, container, state, config, dtype, name="ckpt"):
        """Writes `state` (already rounded to `dtype`) as `container` in a new directory
        with config.json; returns what to pass to --checkpoint."""
        d = self.path(name)
        d.mkdir()
        if config is not None:
            (d / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        if container == "safetensors":
            return cref.write_safetensors(d / "model.safetensors", state, dtype)
        if container == "sharded":
            return Path(cref.write_sharded(d, state, 2, dtype))
        if container == "sharded_dir":
            cref.write_sharded(d, state, 2, dtype)
            return d
        if container == "pt":
            return cref.write_torch(d / "model.pt", state, dtype)
        if container == "bin_dir":
            cref.write_torch(d / "pytorch_model.bin", state, dtype)
            return d
        raise ValueError(container)

    def run_layer(self, ckpt, bundle, extra, via="dump", layer=1, dtype_flag=()):
        """attnscope's stages (name -> array) for one layer."""
        src = self.save_npz("in.npz", **bundle)
        args = ["run", "--checkpoint", ckpt, src, *(["--layer", str(layer)] if layer is not None else []),
                *extra, *dtype_flag]
        if via == "dump":
            out = self.path("out.npz")
            r = run_text(*args, "--dump", out, "-q", "--force")
            self.assert_ok(r, stdout_empty=True)
            with np.load(out) as z:
                return {n: z[n] for n in z.files}
        r = run_text(*args, "--json")
        self.assert_ok(r)
        return stage_arrays_from_json(json.loads(r.out))

    def compare(self, got, want, what, tol=TOL, category="checkpoint stages (float64)"):
        self.assertEqual(sorted(got), sorted(want), f"{what}: stages")
        for n, w in want.items():
            g = got[n]
            self.assertEqual(g.shape, w.shape, f"{what}: {n} shape")
            if w.dtype == bool:
                np.testing.assert_array_equal(g.astype(bool), w, err_msg=f"{what}: {n}")
            else:
                common.assert_close(g, w, tol, f"{what}: {n}", category=category)

    def check_layer(self, preset, container, dtype, layer=1, via="dump", seed=0):
        state, config, extra, kw = model(preset, seed)
        state = cref.widened(state, dtype)  # the values as stored: every writer keeps them exactly
        ckpt = self.write(container, state, config, dtype)
        b = inputs(width(state))
        got = self.run_layer(ckpt, b, extra, via=via, layer=layer)
        want = cref.layer_reference(preset, state, config or {}, layer, b["x"], b["key_padding_mask"], **kw)
        self.compare(got, want, f"{preset} {container} {dtype} layer {layer}")
        return got, state


class Traces(CheckpointCase):
    """Every preset from every container, each stage against the reference (≤ 1e-12).
    The stored dtype rotates so that every preset and every container meets F64, F32,
    F16 and BF16; half of them read the dump (.npz), half the --json document."""


def _add_trace_tests():
    for i, preset in enumerate(PRESETS):
        for j, container in enumerate(CONTAINERS):
            dtype = DTYPES[(i + j) % len(DTYPES)]
            via = "json" if (i + j) % 2 else "dump"

            def test(self, preset=preset, container=container, dtype=dtype, via=via):
                self.check_layer(preset, container, dtype, via=via)

            test.__doc__ = f"{preset} layer 1 from {container} ({dtype}), read from the {via}"
            setattr(Traces, f"test_{preset}_{container}_{dtype.lower()}", test)


_add_trace_tests()


class Presets(CheckpointCase):
    """What config.json says, followed as the model family does."""

    def test_every_layer_of_a_llama(self):
        state, config, _, _ = model("llama", 3)
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(16)
        for layer in range(3):
            got = self.run_layer(ckpt, b, [], layer=layer)
            want = cref.layer_reference("llama", state, config, layer, b["x"], b["key_padding_mask"])
            self.compare(got, want, f"llama layer {layer}")

    def test_qwen2_window_from_max_window_layers(self):
        # use_sliding_window with max_window_layers 2: layers 0, 1 see everything, layer 2 slides.
        state, config, _, _ = model("qwen2", 4, max_window_layers=2, sliding_window=2)
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(16, padded=False)
        masks = {}
        for layer in range(3):
            got = self.run_layer(ckpt, b, [], layer=layer)
            want = cref.layer_reference("qwen2", state, config, layer, b["x"])
            self.compare(got, want, f"qwen2 layer {layer}")
            masks[layer] = got["mask"][0]
        np.testing.assert_array_equal(masks[0], np.tril(np.ones((T, T), bool)))
        self.assertEqual(masks[2].sum(axis=1).tolist(), [1, 2, 2, 2, 2, 2])

    def test_qwen2_without_use_sliding_window_does_not_slide(self):
        state, config, _, _ = model("qwen2", 4, use_sliding_window=False, max_window_layers=0)
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(16, padded=False)
        got = self.run_layer(ckpt, b, [], layer=2)
        np.testing.assert_array_equal(got["mask"][0], np.tril(np.ones((T, T), bool)))
        self.compare(got, cref.layer_reference("qwen2", state, config, 2, b["x"]), "qwen2 no window")

    def test_partial_rotary_factor_and_head_dim(self):
        # head_dim 8 (not hidden_size / heads = 4), RoPE on half of it, theta 500.
        config = cref.make_config("llama", head_dim=8, partial_rotary_factor=0.5, rope_theta=500.0,
                                  num_key_value_heads=1)
        state = cref.make_state("llama", config, seed=5)
        ckpt = self.write("pt", state, config, "F64")
        b = inputs(16)
        got = self.run_layer(ckpt, b, [])
        self.compare(got, cref.layer_reference("llama", state, config, 1, b["x"], b["key_padding_mask"]),
                     "llama head_dim 8, rope on 4 of 8 features")
        # Features past the rotary ones pass unchanged.
        np.testing.assert_array_equal(got["Q_rot"][..., 4:], got["Q"][..., 4:])
        self.assertEqual(got["Q"].shape, (2, 4, T, 8))

    def test_gpt2_without_biases_and_scale_by_inverse_layer_idx(self):
        config = cref.make_config("gpt2", scale_attn_by_inverse_layer_idx=True)
        state = cref.make_state("gpt2", config, seed=6, biases=False)
        ckpt = self.write("safetensors", state, config, "F32")
        state = cref.widened(state, "F32")
        b = inputs(8)
        got = self.run_layer(ckpt, b, [], layer=2)
        self.compare(got, cref.layer_reference("gpt2", state, config, 2, b["x"], b["key_padding_mask"]),
                     "gpt2 scale / (layer + 1)")

    def test_gpt2_without_the_transformer_root(self):
        # GPT2Model.state_dict() (no LM head) names its blocks h.N.
        config = cref.make_config("gpt2")
        state = {k[len("transformer."):]: v for k, v in cref.make_state("gpt2", config, seed=7).items()}
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, [], layer=0)
        self.compare(got, cref.layer_reference("gpt2", state, config, 0, b["x"], b["key_padding_mask"],
                                               root="h."), "gpt2 h.N")

    def test_mha_output_equals_the_torch_module(self):
        enc = encoder(8)
        state = OrderedDict((k, v.numpy().copy()) for k, v in enc.state_dict().items())
        d = self.path("ckpt")
        d.mkdir()
        torch.save(enc.state_dict(), d / "encoder.pt")  # a real state_dict(): an OrderedDict with _metadata
        b = inputs(8)
        got = self.run_layer(d / "encoder.pt", b, ["--preset", "mha", "--heads", "2"], layer=2)
        self.compare(got, cref.layer_reference("mha", state, {}, 2, b["x"], b["key_padding_mask"], heads=2),
                     "nn.TransformerEncoder layer 2")
        x = torch.tensor(b["x"])
        with torch.no_grad():
            out, w = enc.layers[2].self_attn(x, x, x, key_padding_mask=torch.tensor(b["key_padding_mask"]),
                                             average_attn_weights=False)
        common.assert_close(got["output"], out.numpy(), TOL, "output vs nn.MultiheadAttention", "torch module")
        common.assert_close(got["weights"], w.numpy(), TOL, "weights vs nn.MultiheadAttention", "torch module")

    def test_mha_nested_under_a_users_names(self):
        # A model holding its encoder as self.encoder: encoder.layers.N.self_attn.
        state, _, extra, kw = model("mha", 9)
        state = OrderedDict(("encoder." + k, v) for k, v in state.items())
        state["decoder.weight"] = np.ones((3, 8))
        ckpt = self.write("safetensors", state, None, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, extra, layer=0)
        self.compare(got, cref.layer_reference("mha", state, {}, 0, b["x"], b["key_padding_mask"],
                                               root="encoder.layers.", **kw), "encoder.layers.0")

    def test_prefix_chooses_names_for_anything_else(self):
        rng = np.random.default_rng(10)
        w = {n: rng.standard_normal((8, 8)) / 3 for n in ("W_Q", "W_K", "W_V", "W_O")}
        state = {"stack.blk1.W_Q": w["W_Q"], "stack.blk1.W_K": w["W_K"], "stack.blk1.W_V": w["W_V"],
                 "stack.blk1.W_O": w["W_O"], "stack.blk1.norm": np.ones(8), "stack.blk0.W_Q": np.ones((8, 8))}
        ckpt = self.write("safetensors", state, None, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, ["--prefix", "stack.blk1.", "--heads", "2"], layer=None)
        # The math layout (x·W), not causal: TransformerLens's form with W split by head.
        tl = {n: w[n].reshape(8, 2, 4).transpose(1, 0, 2) for n in ("W_Q", "W_K", "W_V")}
        want = cref.tl_attention(b["x"], tl["W_Q"], tl["W_K"], tl["W_V"], w["W_O"].reshape(2, 4, 8),
                                 key_padding_mask=b["key_padding_mask"])
        self.compare(got, want, "--prefix stack.blk1.")

    def test_cross_attention_of_an_nn_transformer(self):
        # nn.Transformer: decoder.layers.N.multihead_attn attends the encoder's memory. The
        # torch module itself is the reference (its output and per-head weights).
        torch.manual_seed(15)
        net = torch.nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16,
                                   batch_first=True, dtype=torch.float64)
        net.eval()
        with torch.no_grad():
            for name, p in net.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
        d = self.path("ckpt")
        d.mkdir()
        torch.save(net.state_dict(), d / "transformer.pt")
        rng = np.random.default_rng(15)
        x, memory = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, T, 8))
        pad = np.array([[0] * T, [0] * (T - 2) + [1, 1]], dtype=bool)
        got = self.run_layer(d / "transformer.pt", {"x": x, "memory": memory, "key_padding_mask": pad},
                             ["--preset", "mha", "--prefix", "decoder.layers.1.multihead_attn.", "--heads", "2"],
                             layer=None)
        with torch.no_grad():
            out, w = net.decoder.layers[1].multihead_attn(torch.tensor(x), torch.tensor(memory),
                                                          torch.tensor(memory), key_padding_mask=torch.tensor(pad),
                                                          average_attn_weights=False)
        common.assert_close(got["output"], out.numpy(), TOL, "cross-attention output", "torch module")
        common.assert_close(got["weights"], w.numpy(), TOL, "cross-attention weights", "torch module")
        # Without --prefix the encoder's and decoder's stacks are two: refused, naming --prefix.
        self.assert_error(run_text("run", "--checkpoint", d / "transformer.pt", "--preset", "mha", "--heads", "2",
                                   "--layer", "0", self.save_npz("x.npz", x=x)), "--prefix")

    def test_prefix_with_an_unknown_model_type(self):
        # config.json names a family without a preset; --prefix names the weights, so the
        # run needs no preset.
        rng = np.random.default_rng(16)
        w = {n: rng.standard_normal((8, 8)) / 3 for n in ("W_Q", "W_K", "W_V")}
        state = {f"enc.block.0.{n}": v for n, v in w.items()}
        ckpt = self.write("safetensors", state, {"model_type": "t5", "num_heads": 2}, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, ["--prefix", "enc.block.0.", "--heads", "2"], layer=None)
        tl = {n: w[n].reshape(8, 2, 4).transpose(1, 0, 2) for n in w}
        want = cref.tl_attention(b["x"], tl["W_Q"], tl["W_K"], tl["W_V"], np.eye(8).reshape(2, 4, 8),
                                 key_padding_mask=b["key_padding_mask"])
        self.compare(got, want, "--prefix with model_type t5")

    def test_tl_names_under_a_prefix(self):
        state, _, _, _ = model("tl", 17)
        ckpt = self.write("safetensors", state, None, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, ["--prefix", "blocks.2.attn.", "--layout", "tl"], layer=None)
        self.compare(got, cref.layer_reference("tl", state, {}, 2, b["x"], b["key_padding_mask"]),
                     "--prefix blocks.2.attn. --layout tl")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--preset", "tl", "--layer", "0",
                                   self.save_npz("x.npz", x=b["x"]), "--heads", "3"), "--heads 3", "2")

    def test_tl_layout_heads_from_w_q(self):
        state, _, _, _ = model("tl", 11)
        ckpt = self.write("pt", state, None, "F64")
        b = inputs(8)
        got = self.run_layer(ckpt, b, ["--preset", "tl"], layer=0)  # not causal unless asked
        self.compare(got, cref.layer_reference("tl", state, {}, 0, b["x"], b["key_padding_mask"]), "tl")

    def test_unbatched_x(self):
        state, config, _, _ = model("mistral", 12)
        ckpt = self.write("sharded", state, config, "F64")
        x = inputs(16)["x"][0]
        got = self.run_layer(ckpt, {"x": x}, [], layer=1)
        want = cref.layer_reference("mistral", state, config, 1, x[None])
        self.compare(got, {k: v[0] for k, v in want.items()}, "mistral, 2-D x")

    def test_x_from_its_own_file(self):
        state, config, _, _ = model("bert", 13)
        ckpt = self.write("safetensors", state, config, "F64")
        x = inputs(8)["x"]
        xf = self.save_npy("x.npy", x)
        out = self.path("out.npz")
        r = run_text("run", "--checkpoint", ckpt, "--layer", "0", "--x", xf, "--dump", out, "-q")
        self.assert_ok(r)
        with np.load(out) as z:
            got = {n: z[n] for n in z.files}
        self.compare(got, cref.layer_reference("bert", state, config, 0, x), "bert --x")

    def test_float32_run(self):
        state, config, _, _ = model("llama", 14)
        state = cref.widened(state, "F32")
        ckpt = self.write("safetensors", state, config, "F32")
        b = inputs(16)
        got = self.run_layer(ckpt, b, [], dtype_flag=("--dtype", "float32"))
        want = cref.layer_reference("llama", state, config, 1, b["x"], b["key_padding_mask"])
        self.assertEqual(got["output"].dtype, np.float32)
        self.compare(got, want, "llama --dtype float32", tol=1e-5, category="checkpoint stages (--dtype float32)")


class Configs(CheckpointCase):
    """config.json fields each family uses, and what cannot be followed."""

    def x(self, dm):
        return self.save_npz("in.npz", **inputs(dm))

    def test_layer_types_list(self):
        # Newer configs list each layer's kind; only the sliding ones slide.
        state, config, _, _ = model("llama", 60, sliding_window=2,
                                    layer_types=["full_attention", "sliding_attention", "full_attention"])
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(16)
        for layer in (0, 1):
            got = self.run_layer(ckpt, b, [], layer=layer)
            self.compare(got, cref.layer_reference("llama", state, config, layer, b["x"], b["key_padding_mask"]),
                         f"layer_types, layer {layer}")
            self.assertEqual(int(got["mask"][0].sum()), 21 if layer == 0 else 11)

    def test_roberta(self):
        config = cref.make_config("bert", model_type="roberta")
        state = {k.replace("bert.", "roberta.", 1): v for k, v in cref.make_state("bert", config, seed=61).items()}
        ckpt = self.write("safetensors", state, config, "F32")
        state = cref.widened(state, "F32")
        b = inputs(8)
        self.compare(self.run_layer(ckpt, b, [], layer=2),
                     cref.layer_reference("bert", state, config, 2, b["x"], b["key_padding_mask"],
                                          root="roberta.encoder.layer."), "roberta")

    def test_rope_scaling_default_is_plain_rope(self):
        state, config, _, _ = model("llama", 62, rope_scaling={"rope_type": "default"})
        ckpt = self.write("safetensors", state, config, "F64")
        b = inputs(16)
        self.compare(self.run_layer(ckpt, b, [], layer=0),
                     cref.layer_reference("llama", state, config, 0, b["x"], b["key_padding_mask"]),
                     "rope_scaling default")

    def test_rope_scaling_rotates_with_its_own_frequencies(self):
        # Q_rot and K_rot are Q and K rotated by modeling_rope_utils.py's frequencies and
        # attention factor (scripts/lm_reference.py's rope_parameters) at the bundle's T.
        import lm_reference as lref
        for scaling in ({"type": "linear", "factor": 2.0}, {"rope_type": "yarn", "factor": 4.0},
                        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}):
            with self.subTest(scaling=scaling):
                kind = scaling.get("rope_type") or scaling["type"]
                state, config, _, _ = model("llama", 63, rope_scaling=scaling)
                ckpt = self.write("safetensors", state, config, "F64", name=kind)
                b = inputs(16)
                got = self.run_layer(ckpt, b, [], layer=0)
                q, k = got["Q"][0], got["K"][0]  # (H, T, Dk), (G, T, Dk)
                inv, att = lref.rope_parameters(config, q.shape[-1], q.shape[1])
                theta = config.get("rope_theta", 10000.0)
                common.assert_close(got["Q_rot"][0], lref.rope(q, theta, inv, att), TOL, f"{kind}: Q_rot",
                                    category="checkpoint stages (float64)")
                common.assert_close(got["K_rot"][0], lref.rope(k, theta, inv, att), TOL, f"{kind}: K_rot",
                                    category="checkpoint stages (float64)")

    def test_unknown_rope_scaling_is_refused(self):
        state, config, _, _ = model("llama", 63, rope_scaling={"rope_type": "wavy", "factor": 2.0})
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)), "rope_scaling",
                          "'wavy'", "llama3")

    def test_bert_relative_positions_are_refused(self):
        state, config, _, _ = model("bert", 64, position_embedding_type="relative_key")
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8)),
                          "position_embedding_type", "relative_key")

    def test_head_dim_contradicting_the_weights(self):
        config = cref.make_config("llama")
        state = cref.make_state("llama", config, seed=65)
        config["head_dim"] = 8  # the weights have 4 × 4 outputs
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)), "head width 8", "16")

    def test_kv_heads_not_dividing_heads(self):
        config = cref.make_config("llama", num_key_value_heads=3, head_dim=4)
        state = cref.make_state("llama", config, seed=66)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)))

    def test_layout_option_against_a_preset(self):
        state, config, _, _ = model("bert", 67)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--layout", "math"),
                          "--layout", "torch")
        # The layout the preset has anyway is accepted.
        self.assert_ok(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--layout", "torch", "-q"))

    def test_several_stacks(self):
        config = cref.make_config("gpt2")
        state = cref.make_state("gpt2", config, seed=68)
        state.update({k[len("transformer."):]: v for k, v in state.items() if k.startswith("transformer.h.0.")})
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8)), "--prefix")

    def test_layers_with_a_gap(self):
        state, config, _, _ = model("bert", 69)
        state = {k: v for k, v in state.items() if ".layer.1." not in k}
        ckpt = self.write("safetensors", state, config, "F64")
        msg = self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "1", self.x(8)), "no layer 1")
        self.assertIn("2 layers", msg)
        b = inputs(8)
        self.compare(self.run_layer(ckpt, b, [], layer=2),
                     cref.layer_reference("bert", state, config, 2, b["x"], b["key_padding_mask"]), "bert layer 2")

    def test_sharded_index_naming_a_missing_shard(self):
        state, config, _, _ = model("llama", 70)
        index = self.write("sharded", state, config, "F32")
        (index.parent / "model-00002-of-00002.safetensors").unlink()
        self.assert_error(run_text("inspect", index), "model-00002-of-00002.safetensors")

    def test_sharded_index_disagreeing_with_its_shards(self):
        state, config, _, _ = model("llama", 71)
        index = self.write("sharded", state, config, "F32")
        doc = json.loads(index.read_text())
        name = "model.layers.0.self_attn.q_proj.weight"
        doc["weight_map"][name] = ("model-00002-of-00002.safetensors" if doc["weight_map"][name].startswith(
            "model-00001") else "model-00001-of-00002.safetensors")
        index.write_text(json.dumps(doc))
        self.assert_error(run_text("inspect", index), name)

    def test_config_that_is_not_json(self):
        state, config, _, _ = model("llama", 72)
        ckpt = self.write("safetensors", state, config, "F64")
        (ckpt.parent / "config.json").write_text("{\"model_type\": \"llama\",")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)), "config.json")
        (ckpt.parent / "config.json").write_text(json.dumps(dict(config, num_attention_heads="four")))
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)), "num_attention_heads",
                          "four")


class Containers(CheckpointCase):
    """What a directory holds, how torch.save lays tensors out, and what each dtype is."""

    def test_directory_with_an_index(self):
        state, config, _, _ = model("bert", 20)
        ckpt = self.write("sharded_dir", state, config, "F32")
        state = cref.widened(state, "F32")
        b = inputs(8)
        self.compare(self.run_layer(ckpt, b, []),
                     cref.layer_reference("bert", state, config, 1, b["x"], b["key_padding_mask"]), "dir")
        r = run_text("inspect", ckpt, "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertEqual(doc["format"], "sharded safetensors")
        files = {os.path.basename(t["file"]) for t in doc["tensors"]}
        self.assertEqual(files, {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})

    def test_directory_prefers_safetensors_to_pytorch_model_bin(self):
        state, config, _, _ = model("gpt2", 21)
        d = self.path("ckpt")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        cref.write_safetensors(d / "model.safetensors", state, "F64")
        other = {k: v * 0 for k, v in state.items()}
        cref.write_torch(d / "pytorch_model.bin", other, "F64")
        b = inputs(8)
        self.compare(self.run_layer(d, b, []),
                     cref.layer_reference("gpt2", state, config, 1, b["x"], b["key_padding_mask"]),
                     "model.safetensors over pytorch_model.bin")

    def test_unaligned_data(self):
        # A header of odd length and no padding: every float32/float64 tensor starts at an
        # odd address, and must still read exactly.
        state, config, _, _ = model("llama", 26)
        d = self.path("ckpt")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        for dtype in ("F32", "F64"):
            with self.subTest(dtype=dtype):
                stored = cref.widened(state, dtype)
                for extra in range(8):  # some metadata length gives an odd data start
                    f = d / f"{dtype}.safetensors"
                    cref.write_safetensors(f, stored, dtype, metadata={"format": "pt", "pad": "x" * extra}, align=1)
                    if struct.unpack("<Q", f.read_bytes()[:8])[0] % 2 == 1:
                        break
                self.assertEqual(struct.unpack("<Q", f.read_bytes()[:8])[0] % 2, 1)
                b = inputs(16)
                self.compare(self.run_layer(f, b, []),
                             cref.layer_reference("llama", stored, config, 1, b["x"], b["key_padding_mask"]),
                             f"unaligned {dtype}")

    def test_torch_views_share_one_storage(self):
        # q, k, v as row blocks of one tensor, and a transposed (non-contiguous) output weight:
        # torch.save keeps the views on one storage with their offsets and strides.
        state, config, _, _ = model("bert", 22)
        p = "bert.encoder.layer.1.attention."
        qkv = torch.tensor(np.concatenate([state[p + f"self.{n}.weight"] for n in ("query", "key", "value")]))
        od = torch.tensor(state[p + "output.dense.weight"].T.copy()).T  # strides (1, 8)
        self.assertFalse(od.is_contiguous())
        sd = OrderedDict((k, torch.tensor(v)) for k, v in state.items())
        sd[p + "self.query.weight"], sd[p + "self.key.weight"], sd[p + "self.value.weight"] = qkv[0:8], qkv[8:16], \
            qkv[16:24]
        sd[p + "output.dense.weight"] = od
        d = self.path("ckpt")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        torch.save(sd, d / "views.pt")
        with zipfile.ZipFile(d / "views.pt") as z:  # the views really share storages
            self.assertLess(len([n for n in z.namelist() if "/data/" in n]), len(sd))
        b = inputs(8)
        self.compare(self.run_layer(d / "views.pt", b, []),
                     cref.layer_reference("bert", state, config, 1, b["x"], b["key_padding_mask"]), "views")

    def test_saved_parameters(self):
        # torch.save(dict(model.named_parameters())) pickles nn.Parameter (_rebuild_parameter).
        enc = encoder(23)
        state = OrderedDict((k, v.detach().numpy().copy()) for k, v in enc.state_dict().items())
        d = self.path("ckpt")
        d.mkdir()
        torch.save(dict(enc.named_parameters()), d / "params.pt")
        b = inputs(8)
        self.compare(self.run_layer(d / "params.pt", b, ["--preset", "mha", "--heads", "2"], layer=0),
                     cref.layer_reference("mha", state, {}, 0, b["x"], b["key_padding_mask"], heads=2),
                     "named_parameters")

    def test_nested_checkpoint_dict(self):
        # {"model": state_dict, "epoch": 3, "lr": 1e-3}: a training checkpoint.
        enc = encoder(24)
        state = OrderedDict((k, v.numpy().copy()) for k, v in enc.state_dict().items())
        d = self.path("ckpt")
        d.mkdir()
        torch.save({"model": enc.state_dict(), "epoch": 3, "lr": 1e-3, "note": "run 7"}, d / "train.pt")
        r = run_text("inspect", d / "train.pt", "--json")
        self.assert_ok(r)
        names = [t["name"] for t in json.loads(r.out)["tensors"]]
        self.assertIn("model.layers.0.self_attn.in_proj_weight", names)
        b = inputs(8)
        got = self.run_layer(d / "train.pt", b, ["--prefix", "model.layers.1.self_attn.", "--heads", "2",
                                                 "--layout", "torch"], layer=None)
        self.compare(got, cref.layer_reference("mha", state, {}, 1, b["x"], b["key_padding_mask"], heads=2),
                     "nested dict, --prefix")

    def test_float16_and_bfloat16_widen_exactly(self):
        # W_V holds edge values of each dtype (largest, smallest normal and subnormal, ...);
        # with x = I and one head, V = x·W_V is W_V itself, so the dump shows the widened values.
        rng = np.random.default_rng(25)
        edges = {"F16": [65504.0, -6.103515625e-05, 5.960464477539063e-08, 3.140625, -0.0, 1.0, -2.5, 0.1],
                 "BF16": [3.3895313892515355e+38, -1.1754943508222875e-38, 9.183549615799121e-41, 3.140625,
                          -0.0, 1.0, -2.5, 0.1]}
        for dtype, row in edges.items():
            m = rng.standard_normal((8, 8))
            m[0] = row
            m = cref.stored(m, dtype)
            small = cref.stored(rng.standard_normal((8, 8)) / 8, dtype)
            state = {"m.W_Q": small, "m.W_K": small, "m.W_V": m}
            for container in ("safetensors", "pt"):
                with self.subTest(dtype=dtype, container=container):
                    ckpt = self.write(container, state, None, dtype, name=f"{dtype}_{container}")
                    got = self.run_layer(ckpt, {"x": np.eye(8)}, ["--prefix", "m.", "--heads", "1",
                                                                  "--stages", "V"], layer=None)
                    np.testing.assert_array_equal(got["V"][0], m)

    def test_legacy_torch_save_is_refused(self):
        f = self.path("legacy.pt")
        torch.save({"w": torch.zeros(2)}, f, _use_new_zipfile_serialization=False)
        self.assert_error(run_text("inspect", f), "legacy", str(f))
        self.assert_error(run_text("run", "--checkpoint", f, "--preset", "mha", "--heads", "1",
                                   self.save_npz("in.npz", x=np.zeros((2, 2)))), "legacy")


class Inspect(CheckpointCase):
    """`attnscope inspect`: tensors by layer, the preset, each layer's attention."""

    def inspect_json(self, path, *extra):
        r = run_text("inspect", path, "--json", *extra)
        self.assert_ok(r)
        return json.loads(r.out)

    def expected_tensors(self, state, dtype):
        size = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}[dtype]
        return {n: (NUMPY_DTYPE[dtype], list(a.shape), size * a.size) if cref.is_float(a) else
                (a.dtype.name, list(a.shape), a.nbytes) for n, a in state.items()}

    def test_text_llama_sharded(self):
        state, config, _, _ = model("llama", 30)
        ckpt = self.write("sharded", state, config, "F32")
        r = run_text("inspect", ckpt)
        self.assert_ok(r)
        lines = r.out.splitlines()
        self.assertTrue(lines[0].startswith(f"{ckpt}: sharded safetensors, {len(state)} tensors, "), r)
        self.assertIn("preset: llama (config.json model_type)", lines)
        for n in range(3):
            self.assertIn(f"model.layers.{n}", lines)
            att = [ln for ln in lines if ln.startswith(f"  attention: model.layers.{n}.self_attn.")]
            self.assertEqual(len(att), 1, r.out)
            for part in ("heads 4", "K/V heads 2", "head width 4", "RoPE base 10000", "causal"):
                self.assertIn(part, att[0])
            self.assertNotIn("window", att[0])
        for name, a in state.items():
            line = [ln for ln in lines if ln.strip().startswith(name + " ")]
            self.assertEqual(len(line), 1, name)
            self.assertIn(f"float32 {tuple(a.shape)}", line[0])
        # Grouped by layer: the tensor lines under a layer's heading are that layer's.
        for n in range(3):
            start = lines.index(f"model.layers.{n}")
            end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")),
                       len(lines))
            names = [ln.split()[0] for ln in lines[start + 1:end] if ln.startswith("  ") and
                     not ln.startswith(("  attention:", "  from:"))]
            self.assertEqual(names, [k for k in state if k.startswith(f"model.layers.{n}.")])

    def test_json_qwen2_bf16(self):
        state, config, _, _ = model("qwen2", 31)
        ckpt = self.write("safetensors", state, config, "BF16")
        doc = self.inspect_json(ckpt)
        self.assertEqual(doc["format"], "safetensors")
        self.assertEqual(doc["preset"], "qwen2")
        self.assertEqual(doc["config"], str(ckpt.parent / "config.json"))
        got = {t["name"]: (t["dtype"], t["shape"], t["bytes"]) for t in doc["tensors"]}
        self.assertEqual(got, self.expected_tensors(state, "BF16"))
        # Grouped by layer, each group in the file's order.
        groups = list(dict.fromkeys(t["group"] for t in doc["tensors"]))
        order = [n for g in groups for n in state if (".".join(n.split(".")[:3]) if n.startswith("model.layers.")
                                                       else "") == g]
        self.assertEqual([t["name"] for t in doc["tensors"]], order)
        for t in doc["tensors"]:
            want_group = ".".join(t["name"].split(".")[:3]) if t["name"].startswith("model.layers.") else ""
            self.assertEqual(t["group"], want_group, t["name"])
        layers = {l["layer"]: l for l in doc["layers"]}
        self.assertEqual(sorted(layers), [0, 1, 2])
        for n, l in layers.items():
            self.assertEqual(l["prefix"], f"model.layers.{n}.self_attn.")
            self.assertEqual((l["preset"], l["heads"], l["kv_heads"], l["head_dim"], l["causal"]),
                             ("qwen2", 4, 2, 4, True))
            self.assertEqual(l["rope"]["base"], 500000.0)
            self.assertIsNone(l["rope"]["dim"])
            self.assertEqual(l["rope"]["style"], "half")
            self.assertEqual(l["window"], None if n < 1 else 2, n)  # max_window_layers 1

    def test_json_gpt2_bert_mistral(self):
        cases = {
            "gpt2": dict(heads=2, kv_heads=2, head_dim=None, causal=True, window=None, rope=None),
            "bert": dict(heads=2, kv_heads=2, head_dim=None, causal=False, window=None, rope=None),
            "mistral": dict(heads=4, kv_heads=1, head_dim=4, causal=True, window=3,
                            rope={"base": 1000000.0, "dim": 2, "style": "half"}),
        }
        for preset, want in cases.items():
            with self.subTest(preset=preset):
                over = {"partial_rotary_factor": 0.5} if preset == "mistral" else {}
                state, config, _, _ = model(preset, 32, **over)
                ckpt = self.write("pt", state, config, "F16", name=preset)
                doc = self.inspect_json(ckpt)
                self.assertEqual(doc["format"], "torch zip")
                self.assertEqual(doc["preset"], preset)
                got = {t["name"]: (t["dtype"], t["shape"], t["bytes"]) for t in doc["tensors"]}
                self.assertEqual(got, self.expected_tensors(state, "F16"))
                self.assertEqual(len(doc["layers"]), 3)
                for l in doc["layers"]:
                    self.assertEqual({k: l[k] for k in want}, want, l)

    def test_json_mha_and_tl(self):
        state, _, _, _ = model("mha", 33)
        doc = self.inspect_json(self.write("safetensors", state, None, "F32", name="mha"), "--preset", "mha")
        self.assertEqual(doc["preset"], "mha")
        self.assertIsNone(doc["config"])
        self.assertEqual([l["prefix"] for l in doc["layers"]], [f"layers.{n}.self_attn." for n in range(3)])
        self.assertTrue(all(l["heads"] is None for l in doc["layers"]), doc["layers"])  # a state dict does not say
        state, _, _, _ = model("tl", 34)
        doc = self.inspect_json(self.write("pt", state, None, "F32", name="tl"), "--preset", "tl")
        self.assertEqual([l["heads"] for l in doc["layers"]], [2, 2, 2])
        self.assertEqual([l["layout"] for l in doc["layers"]], ["tl"] * 3)

    def test_no_preset_lists_tensors(self):
        # Llama's names without its config.json: the preset needs the config (RoPE, K/V heads).
        state, _, _, _ = model("llama", 35)
        ckpt = self.write("safetensors", state, None, "F64")
        doc = self.inspect_json(ckpt)
        self.assertIsNone(doc["preset"])
        self.assertIn("no config.json", doc["preset_note"])
        self.assertEqual(len(doc["tensors"]), len(state))
        self.assertEqual(doc["layers"], [])

    def test_inspect_reads_no_tensor_data(self):
        # A sparse 10 GB tensor is listed without touching its bytes.
        f = self.path("huge.safetensors")
        head, _ = cref.safetensors_header([("layers.0.self_attn.in_proj_weight", "F32", (50000, 50000))])
        with open(f, "wb") as fh:
            fh.write(head)
            fh.truncate(len(head) + 50000 * 50000 * 4)  # sparse: no disk used
        code, out, err, rss = peak_rss(["inspect", f, "--json"])
        self.assertEqual(code, 0, err)
        self.assertLess(rss, 200 << 20, "inspect touched the tensor's data")
        t = json.loads(out)["tensors"][0]
        self.assertEqual((t["shape"], t["bytes"]), ([50000, 50000], 10_000_000_000))


def peak_rss(argv):
    """(exit code, stdout, stderr, peak RSS bytes) of one attnscope process, measured by
    /usr/bin/time (a process forked from this one would start with Python's own memory)."""
    with tempfile.NamedTemporaryFile("r") as rss:
        p = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, str(common.BIN)] +
                           [str(a) for a in argv], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr, int(rss.read().split()[-1]) * 1024


class Refusals(CheckpointCase):
    """Exit 2 and one line naming what is wrong; never a silent guess."""

    def x(self, dm):
        return self.save_npz("in.npz", **inputs(dm))

    def test_state_dict_without_heads(self):
        state, _, _, _ = model("mha", 40)
        ckpt = self.write("safetensors", state, None, "F64")
        msg = self.assert_error(run_text("run", "--checkpoint", ckpt, "--preset", "mha", "--layer", "0", self.x(8)),
                                "--heads")
        self.assertIn("number of heads", msg)
        # A config.json that does not name the heads: refused too.
        config = cref.make_config("gpt2")
        del config["n_head"]
        state = cref.make_state("gpt2", cref.make_config("gpt2"), seed=40)
        ckpt = self.write("safetensors", state, config, "F64", name="gpt2")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8)), "--heads",
                          "config.json")

    def test_layer_out_of_range(self):
        state, config, _, _ = model("llama", 41)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "7", self.x(16)), "no layer 7",
                          "3 layers", "0–2")

    def test_several_layers_and_no_layer(self):
        state, config, _, _ = model("bert", 42)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, self.x(8)), "3 layers", "--layer")

    def test_unknown_model_type(self):
        state, config, _, _ = model("llama", 43, model_type="t5")
        ckpt = self.write("safetensors", state, config, "F64")
        msg = self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16)), "'t5'",
                                "config.json")
        for p in PRESETS:
            self.assertIn(p, msg)
        # inspect still lists the tensors and says why there is no preset.
        r = run_text("inspect", ckpt, "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertIsNone(doc["preset"])
        self.assertIn("t5", doc["preset_note"])

    def test_unknown_preset_name(self):
        state, config, _, _ = model("llama", 44)
        ckpt = self.write("safetensors", state, config, "F64")
        msg = self.assert_error(run_text("run", "--checkpoint", ckpt, "--preset", "falcon", "--layer", "0",
                                         self.x(16)), "--preset", "falcon")
        for p in PRESETS:
            self.assertIn(p, msg)

    def test_bundle_with_weights_and_checkpoint(self):
        state, config, _, _ = model("gpt2", 46)
        ckpt = self.write("safetensors", state, config, "F64")
        src = self.save_npz("both.npz", x=np.zeros((T, 8)), W_Q=np.eye(8))
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", src), "W_Q", "--checkpoint")
        wq = self.save_npy("wq.npy", np.eye(8))
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--W_Q", wq), "W_Q")

    def test_heads_contradicting_config(self):
        state, config, _, _ = model("gpt2", 47)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--heads", "4"),
                          "--heads 4", "2")
        # The same number is fine.
        self.assert_ok(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--heads", "2", "-q"))

    def test_kv_heads_contradicting_config(self):
        state, config, _, _ = model("llama", 48)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16), "--kv-heads", "4"),
                          "--kv-heads 4", "2")

    def test_window_option_replaces_the_configs(self):
        # mistral's config says sliding_window 3; --window 5 on the command line must win (or be
        # refused), never be dropped silently.
        state, config, _, _ = model("mistral", 51)
        ckpt = self.write("safetensors", state, config, "F64")
        out = self.path("out.npz")
        r = run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(16), "--window", "5", "--stages", "mask",
                     "--dump", out, "-q")
        if r.code == 0:
            with np.load(out) as z:
                self.assertEqual(z["mask"][0].sum(axis=1).tolist(), [1, 2, 3, 4, 5, 5], "--window 5 was ignored")
        else:
            self.assert_error(r, "--window")

    def test_temperature_with_a_config_scale(self):
        # GPT-2 with scale_attn_weights false: scale 1; --temperature 2 must give 1/2 (or be refused).
        config = cref.make_config("gpt2", scale_attn_weights=False)
        ckpt = self.write("safetensors", cref.make_state("gpt2", config, seed=52), config, "F64")
        r = run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), "--temperature", "2", "--json",
                     "--stages", "scores")
        if r.code == 0:
            self.assertEqual(json.loads(r.out)["config"]["scale"], 0.5, "--temperature 2 was ignored")
        else:
            self.assert_error(r, "--temperature")

    def test_causal_flags_replace_the_presets(self):
        for preset, flag, causal in (("bert", "--causal", True), ("gpt2", "--no-causal", False)):
            with self.subTest(preset=preset):
                state, config, _, _ = model(preset, 53)
                ckpt = self.write("safetensors", state, config, "F64", name=preset)
                out = self.path(f"{preset}.npz")
                self.assert_ok(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(8), flag, "--stages",
                                        "mask", "--dump", out, "-q"))
                with np.load(out) as z:
                    m = z["mask"][0]
                self.assertEqual(bool(m[0, 1]), not causal, preset)

    def test_prefix_and_layer_together(self):
        state, config, _, _ = model("llama", 49)
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", "--prefix",
                                   "model.layers.0.self_attn.", "--heads", "4", self.x(16)), "--layer", "--prefix")

    def test_missing_projection(self):
        state, config, _, _ = model("llama", 50)
        del state["model.layers.1.self_attn.k_proj.weight"]
        ckpt = self.write("safetensors", state, config, "F64")
        self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "1", self.x(16)),
                          "model.layers.1.self_attn.k_proj.weight")

    def test_config_values_are_named_by_their_key(self):
        # Issue 21: a value config.json gives was reported as a flag nobody gave (--rope-base,
        # --kv-heads, --heads): it is named by its file and key.
        cases = [("llama", {"rope_theta": 0}, 16, "rope_theta 0: expected a finite number above 1"),
                 ("llama", {"num_attention_heads": 2, "num_key_value_heads": 4}, 16,
                  "num_key_value_heads 4: does not divide num_attention_heads 2"),
                 ("gpt2", {"n_head": 3}, 8, "n_head 3: does not divide the 8 output features")]
        for preset, over, dm, fragment in cases:
            with self.subTest(over=over):
                state = cref.make_state(preset, cref.make_config(preset), seed=46)
                ckpt = self.write("safetensors", state, cref.make_config(preset, **over), "F64", name=str(len(over)) +
                                  preset)
                msg = self.assert_error(run_text("run", "--checkpoint", ckpt, "--layer", "0", self.x(dm)),
                                        str(ckpt.parent / "config.json") + ": " + fragment)
                for flag in ("--rope-base", "--kv-heads", "--heads"):
                    self.assertNotIn(flag, msg)

    def test_no_such_checkpoint(self):
        self.assert_error(run_text("run", "--checkpoint", self.path("nope.safetensors"), "--preset", "mha",
                                   "--heads", "1", self.x(8)), "nope.safetensors")
        self.assert_error(run_text("inspect", self.path("empty")), "empty")

    def test_f8_is_refused_by_name(self):
        f = self.path("f8.safetensors")
        head, _ = cref.safetensors_header([("layers.0.self_attn.in_proj_weight", "F8_E4M3", (24, 8)),
                                           ("layers.0.self_attn.out_proj.weight", "F32", (8, 8))])
        f.write_bytes(head + bytes(24 * 8) + bytes(8 * 8 * 4))
        self.assert_error(run_text("run", "--checkpoint", f, "--preset", "mha", "--heads", "2", "--layer", "0",
                                   self.x(8)), "F8_E4M3")


class Hostile(CheckpointCase):
    """Files made to harm: refused with one line, nothing executed, nothing allocated."""

    def evil_pt(self, name, func, arg):
        """A torch.save zip whose data.pkl calls func(arg) when unpickled (as torch.load with
        weights_only=False would)."""

        class Evil:
            def __reduce__(self):
                return func, (arg,)

        f = self.path(name)
        torch.save({"layers.0.self_attn.in_proj_weight": torch.zeros(24, 8), "hook": Evil()}, f)
        return f

    def globals_of(self, f):
        with zipfile.ZipFile(f) as z:
            pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
        return [arg for op, arg, _ in pickletools.genops(pkl) if op.name in ("GLOBAL", "STACK_GLOBAL")]

    def test_pickle_calling_os_system(self):
        marker = self.path("MARKER")
        f = self.evil_pt("evil.pt", os.system, f"touch {marker}")
        self.assertIn("posix system", self.globals_of(f))  # the file really calls os.system
        x = self.save_npz("in.npz", x=np.zeros((T, 8)))
        for argv in (["inspect", f], ["inspect", f, "--json"],
                     ["run", "--checkpoint", f, "--preset", "mha", "--heads", "2", "--layer", "0", x]):
            with self.subTest(argv=argv[0]):
                msg = self.assert_error(run_text(*argv), "not a plain tensor state dict", "posix.system")
                self.assertIn(str(f), msg)
        self.assertFalse(marker.exists(), "os.system ran")
        # The same call spelled with protocol 4's STACK_GLOBAL, in a zip laid out as torch.save's.
        g = self.path("evil4.pt")
        write_zip_pickle(g, {"w": _Tensor(_Storage("0", 4), (2, 2)), "hook": _Call(os.system, f"touch {marker}")},
                         {"0": bytes(16)}, protocol=4)
        self.assertIn("STACK_GLOBAL", [op.name for op, _, _ in pickletools.genops(zipfile.ZipFile(g).read(
            "archive/data.pkl"))])
        self.assert_error(run_text("inspect", g), "not a plain tensor state dict", "posix.system")
        self.assertFalse(marker.exists(), "os.system ran")

    def test_pickle_calling_eval(self):
        f = self.evil_pt("eval.pt", eval, "__import__('os').system('true')")
        self.assert_error(run_text("inspect", f), "not a plain tensor state dict", "builtins.eval")

    def test_pickled_module(self):
        # torch.save(model) pickles the module's classes: refused, naming the first of them.
        f = self.path("module.pt")
        torch.save(torch.nn.Linear(2, 2), f)
        self.assert_error(run_text("inspect", f), "not a plain tensor state dict", "torch.nn")

    def safetensors(self, name, header, data):
        f = self.path(name)
        text = json.dumps(header).encode()
        f.write_bytes(struct.pack("<Q", len(text)) + text + data)
        return f

    def refused_both_ways(self, f, *fragments):
        x = self.save_npz("in.npz", x=np.zeros((T, 8)))
        self.assert_error(run_text("inspect", f), *fragments)
        self.assert_error(run_text("run", "--checkpoint", f, "--preset", "mha", "--heads", "2", "--layer", "0",
                                   x), *fragments)

    def test_overlapping_offsets(self):
        f = self.safetensors("overlap.safetensors", {
            "layers.0.self_attn.in_proj_weight": {"dtype": "F32", "shape": [24, 8], "data_offsets": [0, 768]},
            "layers.0.self_attn.out_proj.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [512, 768]},
        }, bytes(768))
        self.refused_both_ways(f, str(f))

    def test_header_length_past_the_file(self):
        f = self.path("long.safetensors")
        f.write_bytes(struct.pack("<Q", 1 << 40) + b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}')
        self.refused_both_ways(f, str(f))
        f.write_bytes(struct.pack("<Q", 200) + b"{}")
        self.refused_both_ways(f, str(f))

    def test_ten_gigabyte_shape_in_a_small_file(self):
        f = self.safetensors("claim.safetensors", {
            "layers.0.self_attn.in_proj_weight": {"dtype": "F32", "shape": [50000, 50000],
                                                  "data_offsets": [0, 10_000_000_000]}}, bytes(64))
        self.refused_both_ways(f, str(f))
        code, _, err, rss = peak_rss(["inspect", f])
        self.assertEqual((code, len(err.splitlines())), (2, 1), err)
        self.assertLess(rss, 200 << 20)
        # The shape disagreeing with the offsets: refused too.
        g = self.safetensors("mismatch.safetensors", {
            "layers.0.self_attn.in_proj_weight": {"dtype": "F32", "shape": [50000, 50000],
                                                  "data_offsets": [0, 64]}}, bytes(64))
        self.refused_both_ways(g, str(g))

    def test_ten_gigabyte_tensor_in_a_sparse_file_is_not_allocated(self):
        # A valid file: the tensor is there (sparse), 10 GB. Running that layer must be refused
        # by the memory limit before anything is allocated (address space capped at 1 GiB).
        f = self.path("huge.safetensors")
        head, _ = cref.safetensors_header([("layers.0.self_attn.in_proj_weight", "F32", (150000, 50000)),
                                           ("layers.0.self_attn.out_proj.weight", "F32", (50000, 50000))])
        with open(f, "wb") as fh:
            fh.write(head)
            fh.truncate(len(head) + 200000 * 50000 * 4)
        x = self.save_npz("in.npz", x=np.zeros((2, 50000), dtype=np.float32))
        code, _, err, rss = peak_rss(["run", "--checkpoint", f, "--preset", "mha", "--heads", "2", "--layer", "0",
                                      x, "--max-memory", "512M"])
        self.assertEqual((code, len(err.splitlines())), (2, 1), err)
        self.assertIn("512", err)
        self.assertLess(rss, 200 << 20, "memory was allocated beyond the limit")

    def test_torch_zip_claiming_a_huge_storage(self):
        # A torch.save-style zip written by hand: the pickle says the storage holds 2.5e9
        # floats and the tensor is (50000, 50000); the storage member holds 64 bytes.
        f = self.path("claim.pt")
        write_torch_zip(f, {"layers.0.self_attn.in_proj_weight": ((50000, 50000), 2_500_000_000)},
                        {"0": bytes(64)})
        self.refused_both_ways(f, str(f))
        code, _, err, rss = peak_rss(["inspect", f])
        self.assertEqual((code, len(err.splitlines())), (2, 1), err)
        self.assertLess(rss, 200 << 20)

    def test_torch_zip_view_past_its_storage(self):
        f = self.path("past.pt")
        write_torch_zip(f, {"layers.0.self_attn.in_proj_weight": ((24, 8), 16)}, {"0": bytes(64)})
        self.refused_both_ways(f, str(f))


def run_limited(argv, timeout=60, address_space=None):
    """(exit code, stdout, stderr, peak RSS bytes) of one attnscope process, as peak_rss,
    with a timeout and optionally its address space capped (so that a reader with no
    bound fails fast instead of taking the machine's memory). Under AddressSanitizer no
    cap (its shadow memory cannot be mapped under one) and a peak of 0 (meaningless)."""
    import resource
    if common.sanitized():
        address_space = None

    def cap():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.NamedTemporaryFile("r") as rss:
        p = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, str(common.BIN)] +
                           [str(a) for a in argv], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=timeout, preexec_fn=cap)
        text = rss.read().split()
        peak = int(text[-1]) * 1024 if text and not common.sanitized() else 0
        return p.returncode, p.stdout, p.stderr, peak


def safetensors_bytes(header, data, pad_to=None):
    """A .safetensors file by the format's description: the 8-byte little-endian length, the
    JSON header (padded with spaces to `pad_to` bytes when given), the data."""
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad_to is not None:
        assert len(text) <= pad_to
        text += b" " * (pad_to - len(text))
    return struct.pack("<Q", len(text)) + text + data


class HostileFiles(CheckpointCase):
    """Files and file systems that once crashed, hung or exhausted `inspect` and `run`: each
    refused with one line, within --max-memory, or read as the format says."""

    def test_header_length_with_low_byte_0x80_is_safetensors(self):
        # 128 = 0x80 is also a pickle's PROTO opcode: the file is not a legacy torch file.
        w = np.arange(64, dtype=np.float32).reshape(8, 8)
        head = {"layers.0.self_attn.out_proj.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 256]}}
        for pad, name in ((128, "model.safetensors"), (384, "weights.st"), (640, "pytorch_model.bin")):
            with self.subTest(pad=pad, name=name):
                d = self.path(f"d{pad}")
                d.mkdir()
                f = d / name
                f.write_bytes(safetensors_bytes(head, w.tobytes(), pad_to=pad))
                self.assertEqual(f.read_bytes()[0], 0x80)
                for target in ((f, d) if name != "weights.st" else (f,)):  # a directory is searched by name
                    r = run_text("inspect", target, "--json")
                    self.assert_ok(r)
                    doc = json.loads(r.out)
                    self.assertEqual(doc["format"], "safetensors")
                    self.assertEqual([(t["name"], t["shape"]) for t in doc["tensors"]],
                                     [("layers.0.self_attn.out_proj.weight", [8, 8])])

    def test_inspect_inflating_pickle_is_refused_by_the_memory_limit(self):
        f = self.path("inflates.pt")
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            with z.open("archive/data.pkl", "w", force_zip64=True) as m:
                chunk = bytes(1 << 20)
                for _ in range(256):  # 256 MiB inflated, 250 KB in the file
                    m.write(chunk)
        self.assertLess(f.stat().st_size, 1 << 20)
        code, out, err, rss = run_limited(["inspect", f, "--max-memory", "64M"], address_space=1 << 30)
        self.assertEqual((code, out, len(err.splitlines())), (2, "", 1), err)
        self.assertIn("its pickle is 256.0 MiB decompressed, over the memory limit of 64.0 MiB (--max-memory)", err)
        self.assertLess(rss, 64 << 20)

    def test_inspect_of_a_link_to_dev_zero_is_refused_unread(self):
        link = self.path("zero.safetensors")
        os.symlink("/dev/zero", link)
        code, out, err, rss = run_limited(["inspect", link, "--max-memory", "48M"], address_space=1 << 30)
        self.assertEqual((code, out, len(err.splitlines())), (2, "", 1), err)
        self.assertIn("zero.safetensors: is a symbolic link to a character device, expected a file", err)
        self.assertLess(rss, 40 << 20)

    def sharded(self, name, index_extra=None, shard_writer=None):
        """A directory with a sharded index naming one shard a.safetensors (written by
        shard_writer(path) when given, else a valid one)."""
        d = self.path(name)
        d.mkdir()
        head = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
        if shard_writer:
            shard_writer(d / "a.safetensors")
        else:
            (d / "a.safetensors").write_bytes(safetensors_bytes(head, bytes(8)))
        index = {**(index_extra or {}), "weight_map": {"w": "a.safetensors"}}
        (d / "model.safetensors.index.json").write_text(json.dumps(index, separators=(",", ":")))
        return d

    def test_fifo_shard_is_refused_without_blocking(self):
        d = self.sharded("fifo", shard_writer=os.mkfifo)
        code, out, err, _ = run_limited(["inspect", d], timeout=20)
        self.assertEqual((code, out, len(err.splitlines())), (2, "", 1), err)
        self.assertIn("a.safetensors: is a FIFO, expected a regular file", err)

    def test_index_of_nested_arrays_is_counted(self):
        # 2 MB of empty arrays in the index's metadata: 700,000 JSON values in a tree.
        d = self.sharded("nested", {"metadata": {"pad": [[]] * 700_000}})
        self.assertGreater((d / "model.safetensors.index.json").stat().st_size, 2_000_000)
        code, out, err, rss = run_limited(["inspect", d, "--max-memory", "24M"], address_space=1 << 30)
        self.assertEqual((code, out, len(err.splitlines())), (2, "", 1), err)
        self.assertIn("its JSON needs more than the memory limit of 24.0 MiB (--max-memory)", err)
        self.assertLess(rss, (24 + 40) << 20)
        # Nested 100,000 deep: refused by its depth (nlohmann's tree would overflow the stack).
        deep = self.sharded("deep")
        (deep / "model.safetensors.index.json").write_text('{"weight_map": {"w": "a.safetensors"}, "m": ' +
                                                           "[" * 100_000 + "]" * 100_000 + "}")
        self.assert_error(run_text("inspect", deep), "nested more than 64 deep")
        # config.json beside a checkpoint, likewise.
        cfg = self.sharded("deep_config")
        (cfg / "config.json").write_text("[" * 100_000 + "]" * 100_000)
        self.assert_error(run_text("inspect", cfg), "config.json: objects and arrays nested more than 64 deep")

    def test_index_that_is_a_directory(self):
        d = self.path("indexdir")
        (d / "model.safetensors.index.json").mkdir(parents=True)
        self.assert_error(run_text("inspect", d), "model.safetensors.index.json: is a directory, expected a file")

    def test_one_tensor_listed_many_times_under_a_long_path(self):
        # A 1 MB pickle naming one tensor 150,000 times, in a directory 3.6 KB deep: each
        # name's record must not copy the path.
        d = self.tmp
        for k in range(18):
            d = d / (chr(ord("a") + k) * 200)
        d.mkdir(parents=True)
        f = d / "m.pt"
        t = _Tensor(_Storage("0", 4), (2, 2))
        write_zip_pickle(f, {"a": [t] * 150_000}, {"0": bytes(16)})
        self.assertGreater(len(str(f)), 3600)
        code, out, err, rss = run_limited(["inspect", f, "--max-memory", "256M"], timeout=120, address_space=1 << 30)
        if code == 0:  # each tensor is its own group ("a.7"): a blank line, the group, the tensor
            self.assertEqual(sum(line.startswith("  a.") for line in out.splitlines()), 150_000)
        else:
            self.assertEqual((code, len(err.splitlines())), (2, 1), err)
            self.assertIn("256.0 MiB (--max-memory)", err)
        self.assertLess(rss, 256 << 20)
        print(f"one tensor 150,000 times under a {len(str(f))}-byte path: exit {code}, peak RSS "
              f"{rss / (1 << 20):.0f} MiB", file=sys.stderr)

    def test_attention_line_escapes_the_prefix(self):
        evil = "\x1b]0;pwned\x07\x1b[2J\n"
        names = [f"{evil}layers.0.self_attn.{n}" for n in ("in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                               "out_proj.bias")]
        shapes = ([6, 2], [6], [2, 2], [2])
        head, off = {}, 0
        for n, s in zip(names, shapes):
            size = 4 * int(np.prod(s))
            head[n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + size]}
            off += size
        f = self.path("evil.safetensors")
        f.write_bytes(safetensors_bytes(head, bytes(off)))
        r = run_text("inspect", f, "--preset", "mha")
        self.assert_ok(r)
        self.assertIn("attention:", r.out)
        for c in ("\x1b", "\x07"):
            self.assertNotIn(c, r.out)
        attention = [line for line in r.out.splitlines() if "attention:" in line]
        self.assertEqual(len(attention), 1, r.out)
        self.assertIn("\\x1b]0;pwned\\x07\\x1b[2J\\n", attention[0])


class _Storage:
    """Pickles as a persistent id ('storage', torch.FloatStorage, key, 'cpu', numel)."""

    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _Tensor:
    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape

    def __reduce__(self):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.insert(0, acc)
            acc *= d
        return torch._utils._rebuild_tensor_v2, (self.storage, 0, tuple(self.shape), tuple(stride), False,
                                                 OrderedDict())


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None


class _Call:
    """Pickles as a call of func(arg)."""

    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, (self.arg,)


def write_zip_pickle(path, obj, members, protocol=2, prefix="archive"):
    """A zip laid out as torch.save lays it out, holding the pickle of `obj`."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{prefix}/data.pkl", buf.getvalue())
        for key, data in members.items():
            z.writestr(f"{prefix}/data/{key}", data)
        z.writestr(f"{prefix}/version", "3\n")


def write_torch_zip(path, tensors, members, prefix="archive"):
    """A zip laid out as torch.save lays it out: tensors {name: (shape, storage numel)}, each
    on its own storage key "0", "1", …; members {key: bytes}."""
    sd = OrderedDict()
    for i, (name, (shape, numel)) in enumerate(tensors.items()):
        sd[name] = _Tensor(_Storage(str(i), numel), shape)
    write_zip_pickle(path, sd, members, 2, prefix)


class EncoderStateDicts(CheckpointCase):
    """Issue 21: the state dict of an nn.TransformerEncoder, or of one
    nn.TransformerEncoderLayer, saved by torch 1.13 without a config.json, is recognised by
    its names (the mha preset); inspect aligns its columns and prints the command that runs
    a layer, and that command gives what the module itself gives."""

    def inspect_text(self, path):
        r = run_text("inspect", path)
        self.assert_ok(r)
        return r.out.splitlines()

    def assert_aligned(self, lines, state):
        """The tensor lines: name, dtype and shape, bytes, each column starting at one place."""
        rows = [ln for ln in lines if ln.startswith("  ") and ln.split()[0] in state]
        self.assertEqual(len(rows), len(state), lines)
        for column in (lambda ln: ln.index(" float64 ") + 1, lambda ln: len(ln) - len(ln.rsplit("  ", 1)[1])):
            self.assertEqual(len({column(ln) for ln in rows}), 1, "\n".join(rows))

    def run_command(self, line, bundle, heads, layer=None):
        """The words of inspect's `run:` line, with BUNDLE and H filled in (and another
        layer's number), and a dump asked for."""
        import shlex
        words = shlex.split(line.split("run: ", 1)[1])
        self.assertEqual(words[:2], ["attnscope", "run"])
        words = [str(bundle) if w == "BUNDLE" else str(heads) if w == "H" else w for w in words[1:]]
        if layer is not None:
            words[words.index("--layer") + 1] = str(layer)
        out = self.path("out.npz")
        r = run_text(*words, "--dump", out, "-q", "--force")
        self.assert_ok(r, stdout_empty=True)
        with np.load(out) as z:
            return {n: z[n] for n in z.files}

    def assert_module(self, got, module, b):
        x = torch.tensor(b["x"])
        with torch.no_grad():
            out, w = module(x, x, x, key_padding_mask=torch.tensor(b["key_padding_mask"]), average_attn_weights=False)
        common.assert_close(got["output"], out.numpy(), TOL, "output vs nn.MultiheadAttention", "torch module")
        common.assert_close(got["weights"], w.numpy(), TOL, "weights vs nn.MultiheadAttention", "torch module")

    def test_transformer_encoder(self):
        enc = encoder(70)
        f = self.path("encoder.pt")
        torch.save(enc.state_dict(), f)
        state = enc.state_dict()
        lines = self.inspect_text(f)
        self.assertIn("preset: mha (its tensors' names)", lines)
        self.assert_aligned(lines, state)
        runs = [ln for ln in lines if "run: " in ln]
        self.assertEqual(runs, [f"run: attnscope run BUNDLE --checkpoint {f} --layer 0 --heads H"])
        b = inputs(8)
        for n in (0, 2):
            self.assert_module(self.run_command(runs[0], self.save_npz("in.npz", **b), 2, layer=n),
                               enc.layers[n].self_attn, b)
        doc = json.loads(run_text("inspect", f, "--json").out)
        self.assertEqual(doc["preset"], "mha")
        self.assertEqual([l["prefix"] for l in doc["layers"]], [f"layers.{n}.self_attn." for n in range(3)])
        self.assertEqual(doc["layers"][0]["run"], f"attnscope run BUNDLE --checkpoint {f} --layer 0 --heads H")

    def test_one_encoder_layer(self):
        layer = encoder(71, layers=1).layers[0]
        f = self.path("layer.pt")
        torch.save(layer.state_dict(), f)
        lines = self.inspect_text(f)
        self.assertIn("preset: mha (its tensors' names)", lines)
        self.assert_aligned(lines, layer.state_dict())
        self.assertIn("  attention: self_attn.  layout torch", lines)
        runs = [ln for ln in lines if "run: " in ln]
        self.assertEqual(runs, [f"run: attnscope run BUNDLE --checkpoint {f} --heads H"])
        b = inputs(8)
        self.assert_module(self.run_command(runs[0], self.save_npz("in.npz", **b), 2), layer.self_attn, b)
        doc = json.loads(run_text("inspect", f, "--json").out)
        self.assertEqual([(l["layer"], l["prefix"], l["preset"]) for l in doc["layers"]], [(None, "self_attn.", "mha")])
        # A layer saved alone has no number to choose.
        self.assert_error(run_text("run", "--checkpoint", f, "--layer", "0", "--heads", "2",
                                   self.save_npz("in.npz", **b)), "--layer 0", "saved alone")


class Reference(CliTestCase):
    """The references themselves, against PyTorch's modules and complex-number RoPE."""

    def test_self_check(self):
        for what, d in cref.self_check().items():
            common.note_maxdiff("reference vs torch", d)
            self.assertLessEqual(d, 1e-12, what)

    def test_writers(self):
        # The safetensors writer's layout, read back by hand: length, header, data.
        f = self.path("w.safetensors")
        a = np.arange(6, dtype=np.float64).reshape(2, 3)
        cref.write_safetensors(f, {"a": (a, "F32"), "b": (a[0], "BF16")})
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        self.assertEqual((8 + n) % 8, 0)
        h = json.loads(raw[8:8 + n])
        self.assertEqual(h["a"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})
        self.assertEqual(h["b"], {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]})
        body = raw[8 + n:]
        self.assertEqual(len(body), 30)
        np.testing.assert_array_equal(np.frombuffer(body[:24], "<f4").reshape(2, 3), a)
        np.testing.assert_array_equal(cref.bf16_value(np.frombuffer(body[24:], "<u2")), a[0])
        # bfloat16 rounding agrees with torch's.
        v = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
        np.testing.assert_array_equal(cref.bf16_bits(v).astype(np.int16),
                                      torch.tensor(v).bfloat16().view(torch.int16).numpy())


if __name__ == "__main__":
    common.main("test_checkpoint")
