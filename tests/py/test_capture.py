#!/usr/bin/python3
"""scripts/capture_bundle.py round-trips: for every call it records, the command it
writes (callN.cmd, shell-quoted, run exactly as printed; the options travel in the
bundle's config record) makes attnscope compute the
module's own output (callN.expected.npz): PyTorch's nn.MultiheadAttention inside
nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (self-attention with padding,
decoder self-attention with a causal mask and padding, cross-attention with memory
padding; batch_first True and False), a module of one's own through a name mapping, and
the command-line form that runs a script. float64 modules to 1e-12, float32 to 2e-5.
What attnscope cannot express is refused by the capture with CaptureError.

    /usr/bin/python3 tests/py/test_capture.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import math
import shlex
import subprocess
import sys
import unittest

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, ROOT, CliTestCase, run_text  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

import capture_bundle as cb  # noqa: E402  (scripts/, on the path through common)

F64_TOL = 1e-12
F32_TOL = 2e-5


def arrays_of(bundle):
    """The array names of a written bundle (its `config` record is not an array)."""
    return [f for f in np.load(bundle).files if f != "config"]


def padding(lengths, T):
    """(B, T) bool, true = PAD, for sequences of the given lengths (right-padded)."""
    return torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]


class RoundTrip(CliTestCase):
    """Helpers: run a call's command as written and compare with the module's output."""


    def run_cmd(self, call, *extra):
        """callN.cmd as a user pastes it (attnscope -> the binary under test), plus extra."""
        argv = shlex.split(call.cmd_path.read_text(encoding="utf-8"))
        self.assertEqual(argv[0], "attnscope")
        self.assertEqual(argv[1:3], ["run", str(call.bundle)])
        self.assertEqual(argv, [str(a) for a in call.argv])
        return run_text(*argv[1:], *extra)

    def check_call(self, call, tol, stages=("output",), expected_names=None):
        dump = self.path(f"{call.bundle.parent.name}.{call.bundle.stem}.dump.npz")
        r = self.run_cmd(call, "--stages", ",".join(stages), "--dump", dump, "-q")
        self.assert_ok(r)
        got = np.load(dump)
        exp = np.load(call.expected_path)
        self.assertEqual(sorted(exp.files), sorted(expected_names or ["output"]))
        common.assert_close(got["output"], exp["output"], tol, f"{call.command}: output",
                            category=f"output {exp['output'].dtype}")
        if "weights" in exp.files:
            common.assert_close(got["weights"], exp["weights"], tol, f"{call.command}: weights",
                                category=f"weights {exp['weights'].dtype}")
        # The bundle holds only names attnscope knows; its JSON sidecar says how to run it.
        info = json.loads(call.json_path.read_text(encoding="utf-8"))
        self.assertEqual(info["command"], call.command)
        self.assertEqual(sorted(info["arrays"]), sorted(arrays_of(call.bundle)))
        # The options travel in the bundle: its config record, as the options say.
        self.assertEqual(json.loads(str(np.load(call.bundle)["config"])), info["config"])
        self.assertEqual(info["config"], cb.config_of(call.options))
        return got, exp

    def check_json(self, call, tol):
        """The same output through --json --stages output."""
        r = self.run_cmd(call, "--json", "--stages", "output")
        self.assert_ok(r)
        doc = json.loads(r.out)
        out = np.array(doc["stages"]["output"]["data"], dtype=float)
        common.assert_close(out, np.load(call.expected_path)["output"], tol, f"{call.command} --json")


class Encoder(RoundTrip):
    """nn.MultiheadAttention inside nn.TransformerEncoderLayer: self-attention with padding."""

    def encoder(self, batch_first, dtype=torch.float64, seed=0, nhead=4, d=16):
        torch.manual_seed(seed)
        layer = nn.TransformerEncoderLayer(d, nhead, dim_feedforward=32, dropout=0.0, batch_first=batch_first,
                                           dtype=dtype).eval()
        B, T = 3, 6
        src = torch.randn(B, T, d, dtype=dtype)
        pad = padding([6, 4, 2], T)
        if not batch_first:
            src = src.transpose(0, 1)
        return layer, src, pad

    def test_padding_batch_first(self):
        layer, src, pad = self.encoder(True)
        with torch.no_grad(), cb.capture(layer, self.tmp / "cap") as cap:  # the fast path would skip self_attn
            layer(src, src_key_padding_mask=pad)
        self.assertEqual(len(cap.calls), 1)
        call = cap.calls[0]
        self.assertEqual(call.bundle, self.tmp / "cap" / "self_attn" / "call0.npz")
        self.assertEqual(call.options, ["--heads", 4, "--layout", "torch"])
        b = np.load(call.bundle)
        self.assertEqual(sorted(arrays_of(call.bundle)), ["in_proj_bias", "in_proj_weight", "key_padding_mask", "out_proj.bias",
                                           "out_proj.weight", "x"])
        np.testing.assert_array_equal(b["x"], src.numpy())
        np.testing.assert_array_equal(b["key_padding_mask"], pad.numpy())
        self.check_call(call, F64_TOL)
        self.check_json(call, F64_TOL)
        # Afterwards the layer is as it was: its own forward and its fast path back.
        self.assertNotIn("forward", layer.self_attn.__dict__)
        self.assertEqual(layer.activation_relu_or_gelu, 1)

    def test_padding_seq_first(self):
        layer, src, pad = self.encoder(False, seed=1)
        with cb.capture(layer, self.tmp / "cap") as cap:
            y = layer(src, src_key_padding_mask=pad)
        call = cap.calls[0]
        self.assertEqual(np.load(call.bundle)["x"].shape, (3, 6, 16))  # (T, B, D) read as (B, T, D)
        self.assertEqual(call.info["kind"], "self-attention")
        self.assertFalse(call.info["batch_first"])
        self.check_call(call, F64_TOL)
        self.assertEqual(y.shape, (6, 3, 16))

    def test_float32(self):
        layer, src, pad = self.encoder(True, dtype=torch.float32, seed=2)
        with cb.capture(layer, self.tmp / "cap") as cap:
            layer(src, src_key_padding_mask=pad)
        call = cap.calls[0]
        self.assertEqual(np.load(call.bundle)["x"].dtype, np.float32)
        self.assertEqual(np.load(call.expected_path)["output"].dtype, np.float32)
        self.check_call(call, F32_TOL)

    def test_stack_of_layers_and_calls(self):
        """nn.TransformerEncoder: each layer's self_attn its own directory, each call its own file."""
        torch.manual_seed(3)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64)
        enc = nn.TransformerEncoder(layer, num_layers=2).eval()
        src = torch.randn(2, 5, 8, dtype=torch.float64)
        pad = padding([5, 3], 5)
        with torch.no_grad(), cb.capture(enc, self.tmp / "cap") as cap:
            enc(src, src_key_padding_mask=pad)
            enc(src[:1, :4])
        names = [(c.name, c.index) for c in cap.calls]
        self.assertEqual(names, [("layers.0.self_attn", 0), ("layers.1.self_attn", 0),
                                 ("layers.0.self_attn", 1), ("layers.1.self_attn", 1)])
        for c in cap.calls:
            self.check_call(c, F64_TOL)
        self.assertEqual(cap.calls[1].bundle, self.tmp / "cap" / "layers.1.self_attn" / "call0.npz")

    def test_float_masks(self):
        """An additive src_mask (Tq, Tk) with bool padding; a float key padding mask of
        0 / -inf (read as bool) and of other numbers (additive), each alone."""
        layer, src, pad = self.encoder(True, seed=4)
        torch.manual_seed(4)
        bias = torch.randn(6, 6, dtype=torch.float64)
        fpad = torch.zeros(3, 6, dtype=torch.float64).masked_fill(pad, -math.inf)
        soft = torch.randn(3, 6, dtype=torch.float64)
        with cb.capture(layer, self.tmp / "cap") as cap:
            layer(src, src_mask=bias, src_key_padding_mask=pad)
            layer(src, src_key_padding_mask=fpad)
            layer(src, src_key_padding_mask=soft)
        with_bias, minus_inf, additive = (np.load(c.bundle) for c in cap.calls)
        self.assertEqual((with_bias["attn_mask"].dtype, with_bias["attn_mask"].shape), (np.float64, (6, 6)))
        self.assertEqual(minus_inf["key_padding_mask"].dtype, bool)
        self.assertNotIn("attn_mask", minus_inf.files)
        self.assertEqual(additive["attn_mask"].shape, (3, 1, 6, 6))  # (B, 1, Tq, Tk): added to each row
        self.assertNotIn("key_padding_mask", additive.files)
        for call in cap.calls:
            self.check_call(call, F64_TOL)

    @unittest.skipIf(cb.TORCH_2, "PyTorch 1.x only")
    def test_float_padding_beside_float_mask_refused(self):
        """PyTorch 1.13 drops a float key_padding_mask beside a float attn_mask: refused."""
        layer, src, pad = self.encoder(True, seed=5)
        fpad = torch.zeros(3, 6, dtype=torch.float64).masked_fill(pad, -math.inf)
        with cb.capture(layer, self.tmp / "cap") as cap:
            with self.assertRaisesRegex(cb.CaptureError, "ignores a float key_padding_mask beside a float attn_mask"):
                layer(src, src_mask=torch.zeros(6, 6, dtype=torch.float64), src_key_padding_mask=fpad)
        self.assertEqual(cap.calls, [])


class Decoder(RoundTrip):
    """nn.TransformerDecoderLayer: causal self-attention with padding; cross-attention
    with memory padding."""

    def decoder(self, batch_first, seed, bool_mask=False, d=12, nhead=3):
        torch.manual_seed(seed)
        layer = nn.TransformerDecoderLayer(d, nhead, 24, dropout=0.0, batch_first=batch_first,
                                           dtype=torch.float64).eval()
        B, T, S = 2, 5, 7
        tgt = torch.randn(B, T, d, dtype=torch.float64)
        memory = torch.randn(B, S, d, dtype=torch.float64)
        if not batch_first:
            tgt, memory = tgt.transpose(0, 1), memory.transpose(0, 1)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        tgt_mask = causal if bool_mask else torch.zeros(T, T, dtype=torch.float64).masked_fill(causal, -math.inf)
        kwargs = dict(tgt_mask=tgt_mask, tgt_key_padding_mask=padding([5, 3], T),
                      memory_key_padding_mask=padding([7, 4], S))
        with cb.capture(layer, self.tmp / "cap") as cap:
            layer(tgt, memory, **kwargs)
        self.assertEqual([c.name for c in cap.calls], ["self_attn", "multihead_attn"])
        return cap.calls

    def check_decoder(self, calls):
        own, cross = calls
        # Decoder self-attention: the causal tgt_mask is recognised as --causal.
        self.assertEqual(own.options, ["--heads", 3, "--layout", "torch", "--causal"])
        self.assertEqual(sorted(arrays_of(own.bundle)),
                         ["in_proj_bias", "in_proj_weight", "key_padding_mask", "out_proj.bias", "out_proj.weight",
                          "x"])
        self.assertEqual(own.info["kind"], "self-attention")
        self.check_call(own, F64_TOL)
        # Cross-attention: memory, with its padding mask (B, S).
        self.assertEqual(cross.options, ["--heads", 3, "--layout", "torch"])
        b = np.load(cross.bundle)
        self.assertEqual(b["memory"].shape, (2, 7, 12))
        self.assertEqual(b["key_padding_mask"].shape, (2, 7))
        self.assertEqual(cross.info["kind"], "cross-attention")
        self.check_call(cross, F64_TOL)

    def test_batch_first(self):
        self.check_decoder(self.decoder(True, 10))

    def test_seq_first(self):
        self.check_decoder(self.decoder(False, 11))

    def test_bool_causal_mask(self):
        self.check_decoder(self.decoder(True, 12, bool_mask=True))


class WholeTransformer(RoundTrip):
    """nn.Transformer, captured as docs/usage.md shows: every attention of the encoder and
    the decoder, each call round-tripped."""


    def test_readme_use(self):
        torch.manual_seed(40)
        model = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
                               batch_first=True, dtype=torch.float64).eval()
        src, tgt = torch.randn(2, 6, 8, dtype=torch.float64), torch.randn(2, 4, 8, dtype=torch.float64)
        causal = model.generate_square_subsequent_mask(4).double()
        src_pad, tgt_pad = padding([6, 3], 6), padding([4, 2], 4)
        with torch.no_grad(), cb.capture(model, self.tmp / "captured") as cap:
            model(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                  memory_key_padding_mask=src_pad)
        self.assertEqual([c.name for c in cap.calls],
                         ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn",
                          "decoder.layers.0.self_attn", "decoder.layers.0.multihead_attn",
                          "decoder.layers.1.self_attn", "decoder.layers.1.multihead_attn"])
        self.assertEqual(cap.calls[2].command,
                         f"attnscope run {self.tmp}/captured/decoder.layers.0.self_attn/call0.npz")
        self.assertEqual(cap.calls[2].config, {"heads": 2, "layout": "torch", "causal": True})
        for call in cap.calls:
            self.check_call(call, F64_TOL)
        # The model runs as before once the capture is closed.
        self.assertEqual([m for m in model.modules() if "forward" in m.__dict__], [])


class MultiheadAttention(RoundTrip):
    """nn.MultiheadAttention on its own: mask forms, weights returned, parity options."""

    def mha(self, seed, **kwargs):
        torch.manual_seed(seed)
        return nn.MultiheadAttention(8, 2, dtype=torch.float64, **kwargs).eval()

    def test_bool_block_mask_not_causal(self):
        m = self.mha(20)
        x = torch.randn(4, 2, 8, dtype=torch.float64)  # (T, B, D)
        block = torch.rand(4, 4) > 0.6
        block.fill_diagonal_(False)
        with cb.capture(m, self.tmp / "cap") as cap:
            m(x, x, x, attn_mask=block, need_weights=True, average_attn_weights=False)
        call = cap.calls[0]
        self.assertEqual(call.bundle, self.tmp / "cap" / "call0.npz")  # the root itself: no subdirectory
        self.assertEqual(call.options, ["--heads", 2, "--layout", "torch", "--attn-mask-means", "block"])
        self.check_call(call, F64_TOL, stages=("weights", "output"), expected_names=["output", "weights"])

    def test_per_head_masks(self):
        """(B*H, Tq, Tk) masks: float, and bool that differs by head (written as 0 / -inf)."""
        m = self.mha(21, batch_first=True)
        x = torch.randn(2, 5, 8, dtype=torch.float64)
        per_head = torch.randn(4, 5, 5, dtype=torch.float64)
        block = torch.rand(4, 5, 5) > 0.5
        block[:, :, 0] = False
        with cb.capture(m, self.tmp / "cap") as cap:
            m(x, x, x, attn_mask=per_head)
            m(x, x, x, attn_mask=block, key_padding_mask=padding([5, 4], 5))
        for call in cap.calls:
            self.assertEqual(np.load(call.bundle)["attn_mask"].shape, (2, 2, 5, 5))
            self.check_call(call, F64_TOL, expected_names=["output", "weights_mean"])

    def test_bias_kv_zero_attn_kdim_cross(self):
        """add_bias_kv, add_zero_attn, memory of another width (q/k/v_proj_weight)."""
        m = self.mha(22, batch_first=True, add_bias_kv=True, add_zero_attn=True, kdim=6, vdim=6)
        x = torch.randn(2, 3, 8, dtype=torch.float64)
        mem = torch.randn(2, 4, 6, dtype=torch.float64)
        with cb.capture(m, self.tmp / "cap") as cap:
            m(x, mem, mem, key_padding_mask=padding([4, 2], 4), need_weights=False)
        call = cap.calls[0]
        self.assertIn("--add-zero-attn", call.options)
        self.assertEqual(sorted(arrays_of(call.bundle)),
                         ["bias_k", "bias_v", "in_proj_bias", "k_proj_weight", "key_padding_mask", "memory",
                          "out_proj.bias", "out_proj.weight", "q_proj_weight", "v_proj_weight", "x"])
        self.check_call(call, F64_TOL)

    def test_unbatched(self):
        m = self.mha(23)
        x = torch.randn(5, 8, dtype=torch.float64)
        with cb.capture(m, self.tmp / "cap") as cap:
            m(x, x, x, key_padding_mask=torch.tensor([False, False, False, True, True]), need_weights=False)
        call = cap.calls[0]
        self.assertEqual(np.load(call.bundle)["key_padding_mask"].shape, (5,))
        self.check_call(call, F64_TOL)

    def test_refusals(self):
        """Keys and values from different tensors; dropout in training mode."""
        m = self.mha(24)
        x, y = torch.randn(3, 1, 8, dtype=torch.float64), torch.randn(3, 1, 8, dtype=torch.float64)
        with cb.capture(m, self.tmp / "cap"):
            with self.assertRaisesRegex(cb.CaptureError,
                                        r"^MultiheadAttention call 0: key and value are different tensors"):
                m(x, y, x)
        drop = nn.MultiheadAttention(8, 2, dropout=0.5, dtype=torch.float64).train()
        with cb.capture(drop, self.tmp / "cap2") as cap:
            with self.assertRaisesRegex(cb.CaptureError, r"training mode with dropout 0.5.*model.eval\(\)"):
                drop(x, x, x)
        self.assertEqual(cap.calls, [])
        # strict=False: skipped with a warning, listed, nothing written.
        with cb.capture(m, self.tmp / "cap3", strict=False) as cap:
            with self.assertWarnsRegex(UserWarning, "not written: key and value"):
                m(x, y, x)
            m(x, x, x)
        self.assertEqual([(c.index) for c in cap.calls], [1])
        self.assertEqual(cap.skipped[0][:2], ("", 0))
        self.assertFalse((self.tmp / "cap3" / "call0.npz").exists())
        self.check_call(cap.calls[0], F64_TOL, expected_names=["output", "weights_mean"])

    def test_fully_masked_row_noted(self):
        """A query with every key hidden: PyTorch gives NaN, attnscope zeros; the sidecar says so."""
        m = self.mha(25, batch_first=True)
        x = torch.randn(1, 3, 8, dtype=torch.float64)
        block = torch.zeros(3, 3, dtype=torch.bool)
        block[1] = True
        with cb.capture(m, self.tmp / "cap") as cap:
            m(x, x, x, attn_mask=block, need_weights=False)
        info = json.loads(cap.calls[0].json_path.read_text())
        self.assertTrue(any("NaN" in n for n in info["notes"]), info)


class Mapped(RoundTrip):
    """A module of one's own (q_proj/k_proj/v_proj/o_proj Linear layers), read through a
    name mapping; its reference is written here from the formula, in float64."""

    class Attention(nn.Module):
        def __init__(self, d, heads, kv_width=None):
            super().__init__()
            self.num_heads, self.head_dim = heads, d // heads
            self.q_proj = nn.Linear(d, d, dtype=torch.float64)
            self.k_proj = nn.Linear(kv_width or d, d, dtype=torch.float64)
            self.v_proj = nn.Linear(kv_width or d, d, bias=False, dtype=torch.float64)
            self.o_proj = nn.Linear(d, d, dtype=torch.float64)

        def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None, causal=False):
            # hidden_states (B, Tq, D); attention_mask (B, Tk), 1 = a real token
            src = hidden_states if encoder_hidden_states is None else encoder_hidden_states
            B, Tq, _ = hidden_states.shape
            Tk = src.shape[1]
            split = lambda t, n: t.view(B, n, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.q_proj(hidden_states), Tq), split(self.k_proj(src), Tk), split(self.v_proj(src), Tk)
            s = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, Tq, Tk)
            hide = torch.zeros(B, 1, Tq, Tk, dtype=torch.bool)
            if attention_mask is not None:
                hide = hide | (attention_mask == 0)[:, None, None, :]
            if causal:
                hide = hide | torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), 1)
            w = torch.softmax(s.masked_fill(hide, -math.inf), dim=-1)
            ctx = (w @ v).transpose(1, 2).reshape(B, Tq, -1)
            return self.o_proj(ctx), w

    MAPPING = {"x": "hidden_states", "memory": "encoder_hidden_states",
               "key_padding_mask": ("attention_mask", "keep"), "is_causal": "causal",
               "Q": "q_proj", "K": "k_proj", "V": "v_proj", "O": "o_proj", "heads": "num_heads"}

    def test_self_and_cross(self):
        torch.manual_seed(30)
        model = nn.ModuleDict({"own": self.Attention(12, 3), "cross": self.Attention(12, 3, kv_width=10)})
        x = torch.randn(2, 4, 12, dtype=torch.float64)
        mem = torch.randn(2, 6, 10, dtype=torch.float64)
        with cb.capture(model, self.tmp / "cap", modules=["own", "cross"], mapping=self.MAPPING) as cap:
            model["own"](x, attention_mask=(~padding([4, 3], 4)).long(), causal=True)  # self, causal, padded
            model["cross"](x, mem, attention_mask=(~padding([6, 2], 6)).double())  # cross; a float 1/0 mask
        att = model["own"]
        own, cross = cap.calls
        self.assertEqual(own.options, ["--heads", 3, "--causal"])
        self.assertEqual(sorted(arrays_of(own.bundle)),
                         ["W_K", "W_O", "W_Q", "W_V", "b_K", "b_O", "b_Q", "key_padding_mask", "x"])
        np.testing.assert_array_equal(np.load(own.bundle)["W_Q"], att.q_proj.weight.detach().numpy().T)
        self.assertEqual(cross.info["kind"], "cross-attention")
        self.assertNotIn("b_V", np.load(cross.bundle).files)
        for call in cap.calls:
            self.check_call(call, F64_TOL)

    def test_seq_first_and_math_layout_tensors(self):
        """batch_first False and weights given as (in, out) tensors by attribute path."""

        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                g = torch.Generator().manual_seed(31)
                self.wq, self.wk, self.wv = (torch.randn(8, 8, generator=g, dtype=torch.float64) for _ in range(3))
                self.heads = 2

            def forward(self, x, mask):  # x (T, B, D); mask (T, T) additive
                T, B, D = x.shape
                xb = x.transpose(0, 1)
                split = lambda t: t.view(B, T, 2, 4).transpose(1, 2)  # noqa: E731
                q, k, v = split(xb @ self.wq), split(xb @ self.wk), split(xb @ self.wv)
                w = torch.softmax(q @ k.transpose(-1, -2) * 0.3 + mask, dim=-1)
                return (w @ v).transpose(1, 2).reshape(B, T, D).transpose(0, 1)

        mod = Plain()
        x = torch.randn(5, 2, 8, dtype=torch.float64)
        mask = torch.randn(5, 5, dtype=torch.float64)
        mapping = {"x": 0, "attn_mask": "mask", "W_Q": "wq", "W_K": "wk", "W_V": "wv", "heads": "heads",
                   "scale": 0.3, "batch_first": False}
        with cb.capture(mod, self.tmp / "cap", mapping=mapping) as cap:
            mod(x, mask)
        call = cap.calls[0]
        self.assertEqual(call.options, ["--heads", 2, "--scale", "0.3"])
        self.assertEqual(np.load(call.bundle)["x"].shape, (2, 5, 8))
        self.check_call(call, F64_TOL)

    def test_grouped_kv_heads_and_additive_mask(self):
        """A Llama-style module: 4 query heads share 2 K/V heads (repeat_kv), no biases,
        a Hugging Face 4-D additive attention mask (B, 1, Tq, Tk): --kv-heads 2."""

        class Grouped(nn.Module):
            def __init__(self):
                super().__init__()
                self.num_heads, self.num_key_value_heads, self.head_dim = 4, 2, 3
                self.q_proj = nn.Linear(10, 12, bias=False, dtype=torch.float64)
                self.k_proj = nn.Linear(10, 6, bias=False, dtype=torch.float64)
                self.v_proj = nn.Linear(10, 6, bias=False, dtype=torch.float64)
                self.o_proj = nn.Linear(12, 10, bias=False, dtype=torch.float64)

            def forward(self, hidden_states, attention_mask):
                B, T, _ = hidden_states.shape
                q = self.q_proj(hidden_states).view(B, T, 4, 3).transpose(1, 2)
                k = self.k_proj(hidden_states).view(B, T, 2, 3).transpose(1, 2).repeat_interleave(2, dim=1)
                v = self.v_proj(hidden_states).view(B, T, 2, 3).transpose(1, 2).repeat_interleave(2, dim=1)
                w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(3) + attention_mask, dim=-1)
                return self.o_proj((w @ v).transpose(1, 2).reshape(B, T, 12)), None

        torch.manual_seed(32)
        mod = Grouped()
        x = torch.randn(2, 5, 10, dtype=torch.float64)
        hide = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1) | padding([5, 4], 5)[:, None, None, :]
        mask = torch.zeros(2, 1, 5, 5, dtype=torch.float64).masked_fill(hide, torch.finfo(torch.float64).min)
        mapping = {"x": "hidden_states", "attn_mask": "attention_mask", "Q": "q_proj", "K": "k_proj",
                   "V": "v_proj", "O": "o_proj", "heads": "num_heads", "kv_heads": "num_key_value_heads"}
        with cb.capture(mod, self.tmp / "cap", mapping=mapping) as cap:
            mod(x, mask)
        call = cap.calls[0]
        self.assertEqual(call.options, ["--heads", 4, "--kv-heads", 2])
        self.assertEqual(np.load(call.bundle)["attn_mask"].shape, (2, 1, 5, 5))
        self.check_call(call, F64_TOL)

    def test_mapping_errors(self):
        att = self.Attention(12, 3)
        x = torch.randn(1, 2, 12, dtype=torch.float64)
        for mapping, pattern in [({"x": "hidden_states"}, "'x'.*'heads' are required"),
                                 (dict(self.MAPPING, x="inputs"), "forward has no argument 'inputs'"),
                                 (dict(self.MAPPING, Wq="q_proj"), "unknown key.*Wq"),
                                 (dict(self.MAPPING, attn_mask="attention_mask"), "boolean mask needs its meaning")]:
            with cb.capture(att, self.tmp / "cap", mapping=mapping):
                with self.assertRaisesRegex(cb.CaptureError, pattern):
                    att(x, attention_mask=torch.ones(1, 2, dtype=torch.bool))
        with self.assertRaisesRegex(cb.CaptureError, "needs a mapping"):
            cb.capture(att, self.tmp / "cap", modules=[nn.Linear])


class CommandLine(RoundTrip):
    """capture_bundle.py --out DIR SCRIPT: every nn.MultiheadAttention the script calls."""

    def test_script(self):
        script = self.path("model.py")
        script.write_text(
            "import sys, torch\n"
            "from torch import nn\n"
            "torch.manual_seed(int(sys.argv[1]))\n"
            "layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64)\n"
            "enc = nn.TransformerEncoder(layer, 2).eval()\n"
            "x = torch.randn(2, 4, 8, dtype=torch.float64)\n"
            "with torch.no_grad():\n"
            "    enc(x, src_key_padding_mask=torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1]], dtype=torch.bool))\n",
            encoding="utf-8")
        out = self.tmp / "out dir"  # a space: the printed command quotes it
        p = subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "capture_bundle.py"), "--out", str(out),
                            str(script), "7"], capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout)
        for i, line in enumerate(lines):
            bundle = out / f"mha{i}" / "call0.npz"
            self.assertEqual(line, f"attnscope run '{bundle}'")
            self.assertEqual((out / f"mha{i}" / "call0.cmd").read_text(encoding="utf-8"), line + "\n")
            argv = shlex.split(line)
            dump = self.path(f"d{i}.npz")
            r = subprocess.run([str(BIN)] + argv[1:] + ["--stages", "output", "--dump", str(dump), "-q"],
                               capture_output=True, text=True)
            self.assertEqual((r.returncode, r.stderr), (0, ""))
            common.assert_close(np.load(dump)["output"], np.load(out / f"mha{i}" / "call0.expected.npz")["output"],
                                F64_TOL, line, category="output float64")

    def capture_script(self, body, *options):
        script = self.path("model.py")
        script.write_text("import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
                          "m = nn.MultiheadAttention(4, 2, dtype=torch.float64).eval()\n"
                          "a = torch.randn(3, 1, 4, dtype=torch.float64)\n"
                          "b = torch.randn(3, 1, 4, dtype=torch.float64)\n"
                          + body, encoding="utf-8")
        return subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "capture_bundle.py"), "--out",
                               str(self.tmp / "o"), *options, str(script)], capture_output=True, text=True)

    def test_refusal_and_options(self):
        body = "m(a, b, a)\nm(a, a, a)\nm(b, b, b)\n"  # keys and values differ in the first call
        p = self.capture_script(body)
        self.assertEqual((p.returncode, p.stdout), (2, ""))
        self.assertEqual(p.stderr, "capture_bundle: mha0 call 0: key and value are different tensors: attnscope "
                                   "projects keys and values from one source (x for self-attention, memory for "
                                   "cross-attention)\n")
        p = self.capture_script(body, "--keep-going", "--max-calls", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, f"attnscope run {self.tmp}/o/mha0/call1.npz\n")
        self.assertEqual(p.stderr, "capture_bundle: mha0 call 0 not written: key and value are different tensors: "
                                   "attnscope projects keys and values from one source (x for self-attention, "
                                   "memory for cross-attention)\n")
        self.assertEqual(sorted(f.name for f in (self.tmp / "o" / "mha0").iterdir()),
                         ["call1.cmd", "call1.expected.npz", "call1.json", "call1.npz"])

    def test_no_attention(self):
        script = self.path("nothing.py")
        script.write_text("print('hello')\n", encoding="utf-8")
        p = subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "capture_bundle.py"), "--out",
                            str(self.tmp / "o"), str(script)], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "hello\n")
        self.assertEqual(p.stderr, "capture_bundle: no nn.MultiheadAttention was called\n")


if __name__ == "__main__":
    common.main("test_capture", against="the torch module's own output")
