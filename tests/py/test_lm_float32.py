#!/usr/bin/python3
"""`attnscope run --model DIR --dtype float32`: the forward pass in float32 (src/lm/), at
PyTorch's own float32 error.

The small random models of test_lm.py, stored as F32 (and gpt2 as F16, llama as BF16), so
that every run starts from the same weights, each exact in float32. Expected: scripts/lm_reference.py, the float64 numpy reference, on
those weights. Measured against it: attnscope's float32 run (every layer's attention input
from --save-forward, its attention weights from --dump, the logits) and PyTorch 1.13's own
float32 forward of the same model (torch_forward below, written from the same definitions
with torch.nn.functional; checked against the reference in float64 first). The error is
max |a - e| / (1 + |e|); ours must stay within 4× torch's (or 4 float32 epsilons when
torch's happens to be smaller), and both are printed.

    /usr/bin/python3 tests/py/test_lm_float32.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import math
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)
import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)

MULTIPLE = 4.0  # ours <= MULTIPLE × torch's float32 error
FLOOR = MULTIPLE * float(np.finfo(np.float32).eps)  # ... or this, when torch's is smaller still
IDS = {"gpt2": [3, 17, 5, 0, 39, 12, 12, 8], "bert": [2, 5, 4, 6, 7, 30, 3], "roberta": [0, 5, 1, 33, 7, 2],
       "llama": [1, 10, 19, 3, 39, 0, 22], "mistral": [1, 10, 19, 3, 39, 0, 22, 5],
       "qwen2": [1, 10, 19, 3, 39, 0, 22, 5]}


# ---- PyTorch's own forward, in a given dtype ---------------------------------------------

def torch_forward(c, state, ids, dtype):
    """{"inputs", "weights", "logits"} as lref.forward, every step in torch `dtype`."""
    import torch
    import torch.nn.functional as F
    s = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in state.items()}
    T, kind = len(ids), c["model_type"]
    ids_t = torch.tensor(ids, dtype=torch.long)
    acts = {"gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu, "silu": F.silu}

    def lin(x, name):  # nn.Linear, W (out, in)
        return F.linear(x, s[name + ".weight"], s.get(name + ".bias"))

    def heads(t, n):  # (T, n·d) -> (n, T, d)
        return t.reshape(T, n, -1).transpose(0, 1)

    def attend(q, k, v, scale, visible):
        w = torch.softmax((q @ k.transpose(1, 2) * scale).masked_fill(~visible, -math.inf), -1)
        return w, (w @ v).transpose(0, 1).reshape(T, -1)

    inputs, weights = [], []
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if kind == "gpt2":
        D, H, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
        p = "transformer."
        h = s[p + "wte.weight"][ids_t] + s[p + "wpe.weight"][:T]
        for l in range(c["n_layer"]):
            q = f"{p}h.{l}."
            a = F.layer_norm(h, (D,), s[q + "ln_1.weight"], s[q + "ln_1.bias"], eps)
            inputs.append(a)
            Q, K, V = (heads(t, H) for t in torch.addmm(s[q + "attn.c_attn.bias"], a,
                                                       s[q + "attn.c_attn.weight"]).split(D, 1))
            w, ctx = attend(Q, K, V, 1.0 / math.sqrt(D // H), causal)
            weights.append(w)
            h = h + torch.addmm(s[q + "attn.c_proj.bias"], ctx, s[q + "attn.c_proj.weight"])
            m = F.layer_norm(h, (D,), s[q + "ln_2.weight"], s[q + "ln_2.bias"], eps)
            u = acts[c["activation_function"]](torch.addmm(s[q + "mlp.c_fc.bias"], m, s[q + "mlp.c_fc.weight"]))
            h = h + torch.addmm(s[q + "mlp.c_proj.bias"], u, s[q + "mlp.c_proj.weight"])
        h = F.layer_norm(h, (D,), s[p + "ln_f.weight"], s[p + "ln_f.bias"], eps)
        return done(inputs, weights, h @ s[p + "wte.weight"].T)
    if kind in ("bert", "roberta"):
        D, H, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
        p = kind + "."
        e = p + "embeddings."
        if kind == "roberta":
            keep = (ids_t != c["pad_token_id"]).long()
            pos = torch.cumsum(keep, 0) * keep + c["pad_token_id"]
        else:
            pos = torch.arange(T)
        h = s[e + "word_embeddings.weight"][ids_t] + s[e + "position_embeddings.weight"][pos] + \
            s[e + "token_type_embeddings.weight"][torch.zeros(T, dtype=torch.long)]
        h = F.layer_norm(h, (D,), s[e + "LayerNorm.weight"], s[e + "LayerNorm.bias"], eps)
        for l in range(c["num_hidden_layers"]):
            q = f"{p}encoder.layer.{l}."
            inputs.append(h)
            Q, K, V = (heads(lin(h, q + "attention.self." + n), H) for n in ("query", "key", "value"))
            w, ctx = attend(Q, K, V, 1.0 / math.sqrt(D // H), torch.ones(T, T, dtype=torch.bool))
            weights.append(w)
            h = F.layer_norm(h + lin(ctx, q + "attention.output.dense"), (D,),
                             s[q + "attention.output.LayerNorm.weight"], s[q + "attention.output.LayerNorm.bias"], eps)
            f = lin(F.gelu(lin(h, q + "intermediate.dense")), q + "output.dense")
            h = F.layer_norm(h + f, (D,), s[q + "output.LayerNorm.weight"], s[q + "output.LayerNorm.bias"], eps)
        hp, norm, bias = (("lm_head.", "lm_head.layer_norm", "lm_head.bias") if kind == "roberta" else
                          ("cls.predictions.transform.", "cls.predictions.transform.LayerNorm",
                           "cls.predictions.bias"))
        t = F.layer_norm(F.gelu(lin(h, hp + "dense")), (D,), s[norm + ".weight"], s[norm + ".bias"], eps)
        return done(inputs, weights, t @ s[e + "word_embeddings.weight"].T + s[bias])
    D, H, G, eps = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    p, dk = "model.", D // H

    def rms(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * s[name + ".weight"]

    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, dk, 2, dtype=dtype) / dk))
    ang = torch.arange(T, dtype=dtype)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(t):  # rotate_half pairing
        return t * cos + torch.cat([-t[..., dk // 2:], t[..., :dk // 2]], -1) * sin

    h = s[p + "embed_tokens.weight"][ids_t]
    for l in range(c["num_hidden_layers"]):
        q = f"{p}layers.{l}."
        a = rms(h, q + "input_layernorm")
        inputs.append(a)
        Q = rope(heads(lin(a, q + "self_attn.q_proj"), H))
        K = rope(heads(lin(a, q + "self_attn.k_proj"), G)).repeat_interleave(H // G, 0)
        V = heads(lin(a, q + "self_attn.v_proj"), G).repeat_interleave(H // G, 0)
        window, visible = lref.window_of(c, l), causal
        if window is not None:
            visible = causal & ~torch.ones(T, T, dtype=torch.bool).tril(-window)
        w, ctx = attend(Q, K, V, 1.0 / math.sqrt(dk), visible)
        weights.append(w)
        h = h + lin(ctx, q + "self_attn.o_proj")
        m = rms(h, q + "post_attention_layernorm")
        h = h + lin(F.silu(lin(m, q + "mlp.gate_proj")) * lin(m, q + "mlp.up_proj"), q + "mlp.down_proj")
    h = rms(h, p + "norm")
    head = s[p + "embed_tokens.weight"] if c.get("tie_word_embeddings") else s["lm_head.weight"]
    return done(inputs, weights, h @ head.T)


def done(inputs, weights, logits):
    as_np = lambda t: t.double().numpy()  # noqa: E731
    return {"inputs": [as_np(a) for a in inputs], "weights": [as_np(w) for w in weights], "logits": as_np(logits)}


def error(actual, expected):
    return common.max_difference(actual, expected, rtol=1)[0]


# ---- the tests -----------------------------------------------------------------------------

class ModelCase(CliTestCase):

    def write_model(self, arch, dtype="F32"):
        """A small random model stored as `dtype`; its config and its weights as stored (float64)."""
        config, state = lref.make_model(arch, 0)
        state = cref.widened(state, dtype)
        d = self.path(f"{arch}-model")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, dtype)
        return d, config, state


class Float32(ModelCase):

    def run_layer(self, model, layer, ids, *extra):
        """attnscope's float32 (x, logits, weights) of one layer."""
        fwd, dump = self.path(f"fwd{layer}.npz"), self.path(f"dump{layer}.npz")
        r = run_text("run", "--model", model, "--tokens", ",".join(map(str, ids)), "--layer", str(layer),
                     "--dtype", "float32", "--save-forward", fwd, "--dump", dump, "--stages", "weights", "-q",
                     "--force", *extra)
        self.assert_ok(r, stdout_empty=True)
        with np.load(fwd) as f, np.load(dump) as d:
            return f["x"], f["logits"], d["weights"]

    def check(self, arch, dtype="F32"):
        import torch
        model, config, state = self.write_model(arch, dtype)
        ids = IDS[arch]
        want = lref.forward(config, state, ids)
        # the torch reference itself, in float64, against the numpy one
        t64 = torch_forward(config, state, ids, torch.float64)
        common.assert_close(t64["logits"], want["logits"], 1e-10, f"{arch}: torch float64 logits", rtol=1)
        t32 = torch_forward(config, state, ids, torch.float32)
        layers = len(want["inputs"])
        ours = {"inputs": [], "weights": [], "logits": None}
        for layer in range(layers):
            x, logits, w = self.run_layer(model, layer, ids)
            ours["inputs"].append(x)
            ours["weights"].append(w.reshape(want["weights"][layer].shape))
            ours["logits"] = logits
        for what in ("inputs", "weights", "logits"):
            pairs = [(ours[what], t32[what], want[what])] if what == "logits" else \
                zip(ours[what], t32[what], want[what])
            for k, (o, t, e) in enumerate(pairs):
                name = f"{arch} ({dtype}) {what}" + ("" if what == "logits" else f" of layer {k}")
                mine, theirs = error(o, e), error(t, e)
                common.note_maxdiff("lm float32 (ours)", mine)
                common.note_maxdiff("torch float32", theirs)
                print(f"  {name}: ours {mine:.2e}, torch {theirs:.2e}", file=sys.stderr)
                self.assertLessEqual(mine, max(MULTIPLE * theirs, FLOOR),
                                     f"{name}: float32 error {mine:.3e}, torch's {theirs:.3e}")

    def test_gpt2(self):
        self.check("gpt2")

    def test_bert(self):
        self.check("bert")

    def test_roberta_with_a_padding_token(self):
        self.check("roberta")

    def test_llama(self):
        self.check("llama")

    def test_mistral_window(self):
        self.check("mistral")

    def test_qwen2_biases_window_and_tied_head(self):
        self.check("qwen2")

    def test_gpt2_stored_as_float16(self):
        self.check("gpt2", "F16")

    def test_llama_stored_as_bfloat16(self):
        self.check("llama", "BF16")

    def test_float32_is_not_float64(self):
        """The run really is float32: its logits differ from the float64 run's by float32's
        rounding, not by 0 and not by more."""
        model, config, state = self.write_model("gpt2")
        ids = IDS["gpt2"]
        _, l32, _ = self.run_layer(model, 1, ids)
        fwd = self.path("f64.npz")
        self.assert_ok(run_text("run", "--model", model, "--tokens", ",".join(map(str, ids)), "--layer", "1",
                                "--save-forward", fwd, "-q", "--force", "--summary"), stdout_empty=True)
        with np.load(fwd) as f:
            l64 = f["logits"]
        d = error(l32, l64)
        self.assertGreater(d, 0.0)
        self.assertLess(d, 1e-4)
        np.testing.assert_array_equal(l32, l32.astype(np.float32).astype(np.float64))


class Explain(ModelCase):

    def test_explain_names_the_precision(self):
        d, _, _ = self.write_model("gpt2")
        for dtype in ("float32", "float64"):
            r = run_text("run", "--model", d, "--tokens", "1,2,3", "--layer", "1", "--dtype", dtype, "--explain")
            self.assert_ok(r)
            self.assertIn(f"width 8, {dtype}):", r.out, r)


class Refusals(ModelCase):

    def test_generation_is_float64_only(self):
        """decode --model --generate runs in float64 only: --dtype is refused."""
        d, _, _ = self.write_model("gpt2")
        r = run_text("decode", "--model", d, "--tokens", "1,2,3", "--generate", "2", "--dtype", "float32")
        self.assert_error(r, "--dtype", "belongs to a bundle's decode")


if __name__ == "__main__":
    common.main("test_lm_float32", against="lm_reference.py and torch float32")
