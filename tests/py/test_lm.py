#!/usr/bin/python3
"""The forward pass of `attnscope run --model DIR` (src/lm/), run as a user runs it, against
scripts/lm_reference.py: a float64 numpy reference written from the GPT-2, BERT/RoBERTa and
Llama/Mistral/Qwen2 definitions, independent of attnscope's code.

Small random models of each architecture are written in Hugging Face layout here
(config.json; model.safetensors by scripts/checkpoint_reference.py's writer, written from
the format's description; a tokenizer.json from tests/fixtures/tokenizers). For every layer,
its attention input (--save-forward's x), its attention weights (--dump) and the final
logits are compared with the reference: ≤ 1e-10 relative. Also: --text equals --tokens,
--predict's table, and the refusals (one line, exit 2).

    /usr/bin/python3 tests/py/test_lm.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import re
import shutil
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)
import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)

TOL = 1e-10  # relative: |a - e| <= TOL (1 + |e|)
ARCHS = ("gpt2", "bert", "roberta", "llama", "mistral", "qwen2")
TOKENIZER = {"gpt2": "bytelevel_bpe", "bert": "wordpiece_bert", "llama": "sentencepiece_bpe",
             "mistral": "sentencepiece_bpe", "qwen2": "sentencepiece_bpe"}
TEXT = {"gpt2": "Hello world!", "bert": "hello [MASK] world!", "llama": "Hi there",
        "mistral": "Hi there the", "qwen2": "Hi there"}
FIXTURES = common.ROOT / "tests" / "fixtures" / "tokenizers"


class LmCase(CliTestCase):

    def write_model(self, arch, seed=0, config_over=None, drop=(), tokenizer=True, **kw):
        config, state = lref.make_model(arch, seed, **kw)
        config.update(config_over or {})
        d = self.path(f"{arch}-model")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", {k: v for k, v in state.items() if k not in drop}, "F64")
        if tokenizer and arch in TOKENIZER:
            for f in (FIXTURES / TOKENIZER[arch]).iterdir():
                shutil.copy(f, d / f.name)
        return d, config, state

    def run_layer(self, model, layer, source):
        """attnscope's (x, logits, weights) of one layer; `source` the --tokens/--text words."""
        fwd, dump = self.path(f"fwd{layer}.npz"), self.path(f"dump{layer}.npz")
        r = run_text("run", "--model", model, *source, "--layer", str(layer), "--save-forward", fwd,
                     "--dump", dump, "--stages", "weights", "-q", "--force")
        self.assert_ok(r, stdout_empty=True)
        with np.load(fwd) as f, np.load(dump) as d:
            return f["ids"], f["x"], f["logits"], d["weights"]

    def check_model(self, arch, ids, seed=0):
        model, config, state = self.write_model(arch, seed)
        want = lref.forward(config, state, ids)
        for layer in range(config.get("n_layer", config.get("num_hidden_layers"))):
            got_ids, x, logits, weights = self.run_layer(model, layer, ["--tokens", ",".join(map(str, ids))])
            np.testing.assert_array_equal(got_ids, ids)
            what = f"{arch} layer {layer}"
            common.assert_close(x, want["inputs"][layer], TOL, f"{what}: attention input", "lm (float64)", rtol=1)
            common.assert_close(weights, want["weights"][layer], TOL, f"{what}: weights", "lm (float64)", rtol=1)
            common.assert_close(logits, want["logits"], TOL, f"{what}: logits", "lm (float64)", rtol=1)


class Forward(LmCase):
    """Every layer's attention input and weights, and the logits, of each architecture."""

    def test_gpt2(self):
        self.check_model("gpt2", [3, 17, 5, 0, 39, 12, 12, 8])

    def test_bert(self):
        self.check_model("bert", [2, 5, 4, 6, 7, 30, 3])

    def test_roberta_positions_after_padding_idx(self):
        self.check_model("roberta", [0, 5, 9, 33, 7, 2])

    def test_roberta_with_a_padding_token(self):
        self.check_model("roberta", [0, 5, 1, 33, 2], seed=3)

    def test_llama(self):
        self.check_model("llama", [1, 10, 19, 3, 39, 0, 22])

    def test_mistral_window(self):
        self.check_model("mistral", [1, 10, 19, 3, 39, 0, 22, 5])

    def test_qwen2_biases_window_and_tied_head(self):
        self.check_model("qwen2", [1, 10, 19, 3, 39, 0, 22, 5])

    def test_gpt2_erf_gelu_untied_head(self):
        config, state = lref.make_model("gpt2", 4)
        config.update(activation_function="gelu", tie_word_embeddings=False, n_layer=2)
        state["lm_head.weight"] = np.random.default_rng(9).standard_normal(state["transformer.wte.weight"].shape)
        d = self.path("m")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F64")
        ids = [4, 8, 15, 16, 23, 3]
        want = lref.forward(config, state, ids)
        _, x, logits, w = self.run_layer(d, 1, ["--tokens", ",".join(map(str, ids))])
        common.assert_close(x, want["inputs"][1], TOL, "gpt2 gelu layer 1 input", "lm (float64)", rtol=1)
        common.assert_close(logits, want["logits"], TOL, "gpt2 gelu untied logits", "lm (float64)", rtol=1)


class ReferenceOps(LmCase):
    """The reference's building blocks against PyTorch's own (Debian's torch 1.13,
    torch.nn.functional in float64): a second, independent check of lm_reference.py."""

    def test_ops_equal_torch_functional(self):
        import torch
        import torch.nn.functional as F
        rng = np.random.default_rng(5)
        x = rng.standard_normal((7, 12)) * 3
        w, b = rng.standard_normal(12), rng.standard_normal(12)
        t = torch.from_numpy(x)
        checks = {
            "gelu tanh": (lref.gelu_tanh(x), F.gelu(t, approximate="tanh")),
            "gelu erf": (lref.gelu_erf(x), F.gelu(t)),
            "silu": (lref.silu(x), F.silu(t)),
            "layer_norm": (lref.layer_norm(x, w, b, 1e-5),
                           F.layer_norm(t, (12,), torch.from_numpy(w), torch.from_numpy(b), 1e-5)),
            "softmax": (lref.softmax(x), F.softmax(t, -1)),
        }
        for name, (mine, theirs) in checks.items():
            common.assert_close(mine, theirs.numpy(), 1e-13, name, "reference ops vs torch", rtol=1)
        q = rng.standard_normal((2, 5, 4))
        # RoPE as rotation of feature pairs (j, j + d/2) by position · θ^(-2j/d), written as complex numbers.
        theta, d = 10000.0, 4
        ang = np.arange(5)[:, None] * theta ** (-np.arange(0, d, 2) / d)[None, :]
        z = (q[..., : d // 2] + 1j * q[..., d // 2:]) * np.exp(1j * ang)[None]
        common.assert_close(lref.rope(q, theta), np.concatenate([z.real, z.imag], -1), 1e-13, "rope",
                            "reference ops vs torch", rtol=1)


class Text(LmCase):
    """--text through the model's tokenizer gives what --tokens gives with the same ids."""

    def test_text_equals_tokens(self):
        for arch in ("gpt2", "bert", "llama"):
            with self.subTest(arch=arch):
                model, config, state = self.write_model(arch)
                r = run_text("tokens", "--model", model, "--text", TEXT[arch], "--json")
                self.assert_ok(r)
                ids = json.loads(r.out)["ids"]
                by_text = self.run_layer(model, 1, ["--text", TEXT[arch]])
                by_ids = self.run_layer(model, 1, ["--tokens", ",".join(map(str, ids))])
                for a, b in zip(by_text, by_ids):
                    np.testing.assert_array_equal(a, b)
                want = lref.forward(config, state, ids)
                common.assert_close(by_text[2], want["logits"], TOL, f"{arch} text logits", "lm (float64)", rtol=1)
                shutil.rmtree(model)

    def test_labels_are_the_tokens(self):
        model, _, _ = self.write_model("gpt2")
        r = run_text("run", "--model", model, "--text", "Hello world!", "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        self.assertIn("Hello", json.dumps(doc))

    def test_predict_next_token(self):
        model, config, state = self.write_model("gpt2")
        ids = json.loads(run_text("tokens", "--model", model, "--text", "Hello world", "--json").out)["ids"]
        r = run_text("run", "--model", model, "--text", "Hello world", "--predict", "3", "--layer", "2")
        self.assert_ok(r)
        logits = lref.forward(config, state, ids)["logits"][-1]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:3]
        lines = predictions_text(r.out)
        self.assertTrue(lines[0].startswith("predicted next token after token 1 ("), lines[0])
        self.assertTrue(lines[0].endswith("): top 3 of 40"), lines[0])
        for k in range(3):
            rank, prob, _, tid = lines[2 + k].split()[:4]
            self.assertEqual((int(rank), int(tid)), (k + 1, int(top[k])), lines)
            self.assertAlmostEqual(float(prob), p[top[k]], places=4)

    def test_explain_tells_how_x_was_made(self):
        for arch, words in (("gpt2", "x = LN_1(h) of layer 2"), ("roberta", "p = 1 + 1 + i (RoBERTa)"),
                            ("llama", "x = RMSNorm(h) of layer 2")):
            with self.subTest(arch=arch):
                model, _, _ = self.write_model(arch)
                r = run_text("run", "--model", model, "--tokens", "0,3,5", "--layer", "2", "--explain")
                self.assert_ok(r)
                self.assertIn(f"How x was made ({arch}, 3 layers", r.out)
                self.assertIn("2. layers 0–1, each:", r.out)
                self.assertIn(words, r.out)
                shutil.rmtree(model)

    def test_predict_at_mask(self):
        model, config, state = self.write_model("bert")
        r = run_text("run", "--model", model, "--text", "hello [MASK] world", "--predict", "2")
        self.assert_ok(r)
        ids = json.loads(run_text("tokens", "--model", model, "--text", "hello [MASK] world", "--json").out)["ids"]
        logits = lref.forward(config, state, ids)["logits"][ids.index(4)]
        table = predictions_text(r.out)
        self.assertEqual(f"predicted at the masked token {ids.index(4)} ([MASK]): top 2 of 40", table[0])
        self.assertEqual(int(table[2].split()[3]), int(np.argmax(logits)))


class Refusals(LmCase):
    """What the forward pass cannot follow, or input it cannot run: one line, exit 2."""

    def refused(self, model, *fragments, source=("--tokens", "1,2,3")):
        r = run_text("run", "--model", model, *source)
        return self.assert_error(r, *fragments)

    def test_unknown_activation_names_those_it_follows(self):
        model, _, _ = self.write_model("gpt2", config_over={"activation_function": "quick_gelu"})
        self.refused(model, "config.json: activation_function: 'quick_gelu'", "gelu_new", "silu")

    def test_unknown_model_type(self):
        model, _, _ = self.write_model("llama", config_over={"model_type": "falcon"})
        self.refused(model, "model_type", "falcon", "gpt2, bert, roberta, llama, mistral, qwen2")

    def test_id_outside_the_vocabulary(self):
        model, _, _ = self.write_model("llama")
        self.refused(model, "token 1: id 40 is outside the vocabulary", "vocab_size 40",
                     source=("--tokens", "1,40"))

    def test_more_tokens_than_positions(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "33 tokens: more than the model's 32 positions", "n_positions",
                     source=("--tokens", ",".join(["3"] * 33)))

    def test_no_tokenizer(self):
        model, _, _ = self.write_model("gpt2", tokenizer=False)
        self.refused(model, "no tokenizer here", "tokenizer.json", "--tokens ID,... needs none",
                     source=("--text", "Hello"))

    def test_missing_tensor(self):
        model, _, _ = self.write_model("llama", drop=("model.layers.1.mlp.up_proj.weight",))
        self.refused(model, "no tensor 'model.layers.1.mlp.up_proj.weight'", source=("--tokens", "1,2", "--layer", "2"))

    def test_config_contradicting_a_shape(self):
        model, _, _ = self.write_model("gpt2", config_over={"n_inner": 21})
        self.refused(model, "mlp.c_fc.weight", "expected shape (8, 21)", "n_inner", "found (8, 20)",
                     source=("--tokens", "1,2", "--layer", "1"))

    def test_hostile_width_is_refused_before_allocating(self):
        # A width of 2^30 would make h (T, 2^30) 8 GiB per token: the token embedding's
        # shape is checked against it before anything of that size is allocated.
        model, _, _ = self.write_model("gpt2", config_over={"n_embd": 1 << 30})
        self.refused(model, "transformer.wte.weight: expected shape (40, 1073741824)", "found (40, 8)",
                     source=("--tokens", ",".join(["3"] * 16), "--max-memory", "1G"))

    def test_bert_decoder_refused(self):
        model, _, _ = self.write_model("bert", config_over={"is_decoder": True})
        self.refused(model, "is_decoder: true")

    def test_model_with_a_bundle(self):
        model, _, _ = self.write_model("gpt2")
        r = run_text("run", str(common.DATA / "sentence.npz"), "--model", model, "--tokens", "1,2")
        self.assert_error(r, "--model", "a bundle")

    def test_model_needs_one_text(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--model: give one of --text, --text-file or --tokens", source=())

    def test_bad_ids(self):
        model, _, _ = self.write_model("gpt2")
        self.refused(model, "--tokens 1,x", "expected ids separated by commas", source=("--tokens", "1,x"))


def softmax_top(logits, k):
    """The k most likely ids of a logits row (ties: the lowest id), their probabilities and
    log-probabilities, in float64 from the formula."""
    z = logits - logits.max()
    logp = z - np.log(np.exp(z).sum())
    top = np.argsort(-logits, kind="stable")[:k]
    return top, np.exp(logp[top]), logp[top]


def predictions_text(out):
    """The lines of the --predict table (from its first heading to the blank line after it)."""
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("predicted "))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


class Predict(LmCase):
    """--predict: the same table with or without --save-forward, after the run's header with
    headings, in --json and --jsonl, refused for 0 and negative counts, and saying when the
    run's options are not carried into the logits."""

    def test_same_with_or_without_save_forward(self):
        model, _, _ = self.write_model("gpt2")
        plain = run_text("run", "--model", model, "--tokens", "1,5,9", "--predict", "2", "--stages", "weights")
        saved = run_text("run", "--model", model, "--tokens", "1,5,9", "--predict", "2", "--stages", "weights",
                         "--save-forward", self.path("f.npz"), "-q")
        self.assert_ok(plain)
        self.assertEqual(saved.code, 0, saved)
        saved = run_text("run", "--model", model, "--tokens", "1,5,9", "--predict", "2", "--stages", "weights",
                         "--save-forward", self.path("f.npz"), "--force")
        self.assertEqual(saved.code, 0, saved)
        self.assertEqual(predictions_text(plain.out), predictions_text(saved.out))
        self.assertEqual(sum(l.startswith("predicted ") for l in saved.out.splitlines()), 1, saved.out)
        with np.load(self.path("f.npz")) as f:
            self.assertEqual(f["logits"].shape, (3, 40))  # --save-forward keeps every position

    def test_bert_without_mask_refused_with_save_forward(self):
        model, _, _ = self.write_model("bert")
        for more in ((), ("--save-forward", self.path("b.npz"))):
            with self.subTest(more=more):
                r = run_text("run", "--model", model, "--tokens", "1,5,9", "--predict", "2", *more)
                self.assert_error(r, "--predict: BERT predicts at [MASK] tokens; the text has none")
        self.assertFalse(self.path("b.npz").exists())

    def test_zero_and_negative_refused(self):
        model, _, _ = self.write_model("gpt2")
        for k in ("0", "-1", "18446744073709551615000"):
            with self.subTest(k=k):
                self.assert_error(run_text("run", "--model", model, "--tokens", "1,5", f"--predict={k}"),
                                  "--predict", "expected a number from 1 to", f"found '{k}'")

    def test_table_has_headings_after_the_header(self):
        model, config, state = self.write_model("gpt2")
        r = run_text("run", "--model", model, "--tokens", "1,5,9", "--predict", "3", "--stages", "weights")
        self.assert_ok(r)
        lines = r.out.splitlines()
        header = next(i for i, l in enumerate(lines) if l.startswith("attnscope: self-attention"))
        table = predictions_text(r.out)
        self.assertLess(header, lines.index(table[0]))
        self.assertRegex(table[0], r"^predicted next token after token 2 \(.+\): top 3 of 40$")
        self.assertEqual(table[1].split(), ["rank", "probability", "log-prob", "id", "token"])
        top, p, logp = softmax_top(lref.forward(config, state, [1, 5, 9])["logits"][-1], 3)
        for k, line in enumerate(table[2:]):
            rank, prob, lp, tid = line.split()[:4]
            self.assertEqual((int(rank), int(tid)), (k + 1, int(top[k])))
            self.assertAlmostEqual(float(prob), p[k], places=4)
            self.assertAlmostEqual(float(lp), logp[k], places=4)

    def check_json_predictions(self, pred, config, state, ids, k):
        top, p, logp = softmax_top(lref.forward(config, state, ids)["logits"][-1], k)
        self.assertEqual(pred["at"], "next")
        self.assertEqual(pred["vocab"], 40)
        row, = pred["rows"]
        self.assertEqual(row["position"], len(ids) - 1)
        self.assertEqual([t["id"] for t in row["top"]], [int(i) for i in top])
        common.assert_close(np.array([t["probability"] for t in row["top"]]), p, TOL, "probabilities", "softmax",
                            rtol=1)
        common.assert_close(np.array([t["log_probability"] for t in row["top"]]), logp, TOL, "log-probabilities",
                            "log-softmax", rtol=1)
        return row

    def test_json_and_jsonl_hold_the_predictions(self):
        model, config, state = self.write_model("gpt2")
        ids = json.loads(run_text("tokens", "--model", model, "--text", "Hello world", "--json").out)["ids"]
        r = run_text("run", "--model", model, "--text", "Hello world", "--predict", "3", "--json")
        self.assert_ok(r)
        row = self.check_json_predictions(json.loads(r.out)["predictions"], config, state, ids, 3)
        self.assertTrue(all(t["piece"] is None or isinstance(t["piece"], str) for t in row["top"]), row)
        self.assertTrue(all(t["text"] for t in row["top"]), row)
        r = run_text("run", "--model", model, "--text", "Hello world", "--predict", "3", "--jsonl", "-")
        self.assert_ok(r)
        lines = [json.loads(l) for l in r.out.splitlines()]
        self.assertEqual(lines[-1]["kind"], "predictions")
        self.check_json_predictions(lines[-1]["predictions"], config, state, ids, 3)

    def test_options_not_carried_into_the_logits_are_named(self):
        model, _, _ = self.write_model("gpt2")
        base = ("run", "--model", model, "--tokens", "1,5,9", "--predict", "2", "--stages", "weights")
        plain, zeroed = run_text(*base), run_text(*base, "--zero-key", "1")
        self.assert_ok(zeroed)
        self.assertNotIn("unmodified", plain.out)
        self.assertIn("note: these are the unmodified model's predictions: --zero-key changes the attention shown",
                      " ".join(l.strip() for l in zeroed.out.splitlines()))
        doc = json.loads(run_text(*base[:-2], "--zero-key", "1", "--json").out)
        self.assertEqual(doc["predictions"]["not_applied"], ["--zero-key"])
        self.assertTrue(doc["predictions"]["unmodified"])
        doc = json.loads(run_text(*base[:-2], "--json").out)
        self.assertEqual(doc["predictions"]["not_applied"], [])


class KeyMasks(LmCase):
    """Key masks on a model run: --key_padding_mask hides keys of the chosen layer's
    attention, and the zero-key explanation's advice runs as printed."""

    def test_advised_command_runs(self):
        model, config, state = self.write_model("gpt2")
        ids = [1, 5, 9, 3]
        cmd = ["run", "--model", str(model), "--tokens", ",".join(map(str, ids)), "--layer", "1", "--stages",
               "weights"]
        r = run_text(*cmd, "--zero-key", "2", "--explain")
        self.assert_ok(r)
        text = " ".join(l.strip() for l in r.out.splitlines())
        m = re.search(r"To try it: echo '([^']*)' > (\S+), then the same command with (--key_padding_mask \S+) "
                      r"in place of --zero-key 2\.", text)
        self.assertIsNotNone(m, r.out)
        (self.tmp / m.group(2)).write_text(m.group(1) + "\n")
        flag, file = m.group(3).split()
        r = run_text(*cmd, flag, file, "--json", cwd=self.tmp)
        self.assert_ok(r)
        got = np.array(json.loads(r.out)["stages"]["weights"]["data"])  # (H, T, T)
        w = lref.forward(config, state, ids)["weights"][1]  # (H, T, T)
        want = w.copy()
        want[..., 2] = 0
        want /= want.sum(axis=-1, keepdims=True)  # a hidden key: the others share the row
        common.assert_close(got, want, TOL, "weights with key 2 hidden", "lm (float64)", rtol=1)

    def test_every_layer_takes_the_mask(self):
        model, _, _ = self.write_model("gpt2")
        mask = self.path("m.json")
        mask.write_text("[0, 1, 0]")
        r = run_text("run", "--model", model, "--tokens", "1,5,9", "--layer", "all", "--json", "--stages", "weights",
                     "--key_padding_mask", mask)
        self.assert_ok(r)
        for layer in json.loads(r.out)["layers"]:
            w = np.array(layer["stages"]["weights"]["data"])
            self.assertTrue(np.all(w[..., 1] == 0), layer["layer"])
            self.assertTrue(layer["config"]["key_padding_mask"])

    def test_other_arrays_still_refused(self):
        model, _, _ = self.write_model("gpt2")
        x = self.save_npy("x.npy", np.zeros((3, 8)))
        self.assert_error(run_text("run", "--model", model, "--tokens", "1,5,9", "--x", x),
                          "--model: makes x from the text with the model's weights; --x cannot be given with it")


class Messages(LmCase):
    """What a model run says: a sentence where a bundle goes, a file that is not UTF-8, the
    config's head counts, and 80 columns."""

    def test_sentence_as_bundle_suggests_text(self):
        model, _, _ = self.write_model("gpt2")
        self.assert_error(run_text("run", "--model", model, "The cat sat."),
                          "is no file", "give it as --text 'The cat sat.'")
        self.assert_error(run_text("run", "--model", model, "--tokens", "1", str(common.DATA / "sentence.npz")),
                          "a bundle cannot be given with it")

    def test_text_file_not_utf8_names_the_file(self):
        model, _, _ = self.write_model("gpt2")
        f = self.path("latin1.txt")
        f.write_bytes(b"ab\xff\xfe")
        self.assert_error(run_text("run", "--model", model, "--text-file", f),
                          f"{f}: invalid UTF-8 at byte 2")

    def test_config_head_counts_blame_config_json(self):
        # K/V heads the key projection contradicts (2 stored, 1 said), and heads of one
        # feature under RoPE (16 heads over 16 features): config.json's keys, not --kv-heads
        # or --rope, which the run was not given.
        for over, words in (({"num_key_value_heads": 1}, "config.json: num_key_value_heads 1 K/V heads of 4 "
                                                         "features need 4 key features"),
                            ({"num_attention_heads": 16, "num_key_value_heads": 8},
                             "config.json: num_attention_heads 16 gives heads of 1 features")):
            with self.subTest(over=over):
                model, _, _ = self.write_model("llama", config_over=over)
                for cmd in (("run", "--model", model, "--tokens", "1,2"),
                            ("run", "--model", model, "--tokens", "1,2", "--layer", "2"),
                            ("decode", "--model", model, "--tokens", "1,2", "--generate", "1")):
                    msg = self.assert_error(run_text(*cmd), words)
                    self.assertNotIn("--kv-heads", msg)
                    self.assertNotIn("--rope", msg)
                shutil.rmtree(model)

    def test_explain_within_80_columns(self):
        for arch in ("gpt2", "bert", "roberta", "llama"):
            with self.subTest(arch=arch):
                model, _, _ = self.write_model(arch)
                r = run_text("run", "--model", model, "--tokens", "0,3,5", "--layer", "2", "--explain",
                             "--stages", "weights")
                self.assert_ok(r)
                made = r.out[r.out.index("How x was made"):r.out.index("attnscope: ")]
                for line in made.splitlines():
                    self.assertLessEqual(len(line), 80, line)
                shutil.rmtree(model)


class Memory(LmCase):
    """The forward pass's memory plan counts a layer's MLP matrices together."""

    def test_mlp_matrices_counted_together(self):
        # A llama of width 64 and MLP 4096: each MLP matrix is 2 MiB in float64 (under the
        # limit alone), the three together 6 MiB, and the (T, Dff) intermediates with them.
        import test_lm_memory  # noqa: E402  (its llama writer, F16 on disk)
        model = str(self.path("wide-mlp"))
        test_lm_memory.write_llama(model, 2, D=64, F=4096)
        args = ("run", "--model", model, "--tokens", "1,2,3", "--layer", "1", "--stages", "weights", "-q")
        self.assert_ok(run_text(*args, "--max-memory", "12M"), stdout_empty=True)
        self.assert_error(run_text(*args, "--max-memory", "5M"), "the forward pass of 3 tokens holds about",
                          "3 matrices of 64 × 4096", "--max-memory 5.0 MiB")


if __name__ == "__main__":
    common.main("test_lm", against="lm_reference.py")
