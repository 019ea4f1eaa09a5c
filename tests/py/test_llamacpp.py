#!/usr/bin/python3
"""`attnscope run --model DIR --text ... --dtype float32` against llama.cpp itself.

Small random gpt2, llama, mistral and qwen2 models are written in Hugging Face layout (F32
model.safetensors, a byte-level BPE tokenizer.json, or for one llama model a Llama-2-style
one with byte fallback), and data/tiny-gpt2 is used as it is.
attnscope runs each from text in float32 (--save-forward: the ids, the logits). The folder
is turned into GGUF by tests/py/gguf_model.py (llama.cpp's layout, Q/K rows permuted for
llama), and llama.cpp (node-llama-cpp's prebuilt CPU build, tests/llamacpp/reference.mjs:
float32 KV cache, no flash attention) tokenizes the same text from the file's
tokenizer.ggml.* metadata, then evaluates the ids. Compared: the ids (equal) and the
log-probability of every vocabulary token at every position, as |ours - llama.cpp| /
(1 + |llama.cpp|):
- llama, mistral, qwen2: within TOL (measured up to 1.4e-6);
- gpt2: within GPT2_TOL. llama.cpp's CPU GELU reads a float16 table, which puts its
  log-probabilities about 1e-4..1e-3 from the exact ones: each run also prints both
  programs' distance from the float64 reference (scripts/lm_reference.py), where ours is
  float32's rounding and llama.cpp's is the table's.
The largest difference and where (position, token) is printed for each model.

Without node or tests/llamacpp/node_modules (scripts/setup --test installs it) every test
skips and says so.

    /usr/bin/python3 tests/py/test_llamacpp.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import shutil
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)
import gguf_model  # noqa: E402  (tests/py/: HF folder -> GGUF)
import lm_reference as lref  # noqa: E402  (scripts/: the float64 forward pass)

TOL = 1e-4  # llama, qwen2: relative, |a - e| <= TOL (1 + |e|)
GPT2_TOL = 2e-3  # gpt2: llama.cpp's float16 GELU table (measured up to about 4e-4)
FLOAT32_TOL = 1e-5  # ours against the float64 reference
LLAMACPP = common.ROOT / "tests" / "llamacpp"
NODE = shutil.which("node")
TOKENIZER = common.ROOT / "tests" / "fixtures" / "tokenizers" / "bytelevel_bpe"
TEXT = "Hello world! the cat sat on the mat, hello"


def skip_reason():
    """Why llama.cpp cannot run here, or None."""
    if NODE is None or not (LLAMACPP / "node_modules" / "node-llama-cpp").is_dir():
        return "needs node and tests/llamacpp/node_modules (scripts/setup --test installs node-llama-cpp)"
    return None


def log_softmax(logits):
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def llamacpp(gguf, ids, text):
    """llama.cpp's {"text_ids", "ids", "logprobs"} of the GGUF file."""
    proc = subprocess.run([NODE, str(LLAMACPP / "reference.mjs"), str(gguf), "--tokens", ",".join(map(str, ids)),
                           "--text", text, "--threads", "1"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"reference.mjs failed ({proc.returncode}): {proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    doc["logprobs"] = np.array([[-np.inf if p is None else p for p in row] for row in doc["logprobs"]])
    return doc


class LlamaCppCase(CliTestCase):

    def setUp(self):
        reason = skip_reason()
        if reason:
            self.skipTest(reason)
        super().setUp()

    def write_model(self, arch, config_over=None, state_over=None, seed=0, tokenizer=None):
        """A random model in HF layout (F32); its folder, config and state (float64).
        `tokenizer`: a tokenizer.json document (default: the byte-level BPE fixture)."""
        vocab = 40 if tokenizer is None else len(tokenizer["model"]["vocab"])
        config, state = lref.make_model(arch, seed, vocab=vocab)
        config.update(config_over or {})
        state.update(state_over or {})
        if config.get("tie_word_embeddings"):
            state.pop("lm_head.weight", None)
        state = cref.widened(state, "F32")
        d = self.path(f"{arch}-model")
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F32")
        if tokenizer is None:
            for f in TOKENIZER.iterdir():
                shutil.copy(f, d / f.name)
        else:
            (d / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
        return d, config, state

    def ours(self, model, text):
        """attnscope's (ids, log-probabilities (T, V)) of `text`, run in float32."""
        fwd = self.path("forward.npz")
        r = run_text("run", "--model", model, "--text", text, "--dtype", "float32", "--save-forward", fwd, "-q",
                     "--force")
        self.assert_ok(r, stdout_empty=True)
        with np.load(fwd) as f:
            return [int(i) for i in f["ids"]], log_softmax(f["logits"])

    def compare(self, name, model, tol, text=TEXT, permute=True, reference=None):
        """ours against llama.cpp on `model`; the largest difference (and the float64
        reference's view of both, `reference` = (config, state)) printed. Returns it."""
        ids, mine = self.ours(model, text)
        gguf = self.path(f"{name}.gguf")
        gguf_model.convert(model, gguf, permute)
        theirs = llamacpp(gguf, ids, text)
        tokenizer = json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))
        bos = gguf_model.first_special(tokenizer.get("post_processor"))  # add_bos_token: llama.cpp's BOS first
        self.assertEqual(([] if bos is None else [bos]) + theirs["text_ids"], ids,
                         f"{name}: llama.cpp's tokens of {text!r}")
        d, (t, v) = common.max_difference(mine, theirs["logprobs"], rtol=1)
        print(f"  {name}: {len(ids)} tokens, largest |Δ log p| / (1 + |log p|) = {d:.2e} at position {t}, "
              f"token {v} (ours {mine[t, v]:.7f}, llama.cpp {theirs['logprobs'][t, v]:.7f})", file=sys.stderr)
        if reference is not None:
            exact = log_softmax(lref.forward(*reference, ids)["logits"])
            ours64, theirs64 = (common.max_difference(x, exact, rtol=1)[0] for x in (mine, theirs["logprobs"]))
            print(f"  {name}: against float64: ours {ours64:.2e}, llama.cpp {theirs64:.2e}", file=sys.stderr)
            self.assertLessEqual(ours64, FLOAT32_TOL, f"{name}: ours against the float64 reference")
        self.assertLessEqual(d, tol, f"{name}: log-probabilities at position {t}, token {v}: "
                                     f"ours {mine[t, v]!r}, llama.cpp {theirs['logprobs'][t, v]!r}")
        common.note_maxdiff(name.split()[0], d)
        return d


class Families(LlamaCppCase):
    """Every family attnscope runs that llama.cpp runs, from text, in float32."""

    def test_gpt2(self):
        model, config, state = self.write_model("gpt2")
        self.compare("gpt2", model, GPT2_TOL, reference=(config, state))

    def test_gpt2_untied_head(self):
        rng = np.random.default_rng(3)
        model, config, state = self.write_model("gpt2", {"tie_word_embeddings": False},
                                                {"lm_head.weight": rng.standard_normal((40, 8)) * 0.3}, seed=2)
        self.compare("gpt2 untied", model, GPT2_TOL, reference=(config, state))

    def test_tiny_gpt2(self):
        """data/tiny-gpt2: a real GPT-2 folder (1024 tokens, its own tokenizer)."""
        self.compare("tiny-gpt2", common.DATA / "tiny-gpt2", GPT2_TOL, text="The cat sat on the mat. It was happy.")

    def test_llama_gqa_untied(self):
        model, config, state = self.write_model("llama")
        self.compare("llama", model, TOL, reference=(config, state))

    def test_llama_tied_head(self):
        model, config, state = self.write_model("llama", {"tie_word_embeddings": True}, seed=5)
        self.compare("llama tied", model, TOL, reference=(config, state))

    def test_llama_head_dim_not_hidden_over_heads(self):
        # head_dim 8 with hidden 16 and 4 heads: q (32, 16), k and v (16, 16), o (16, 32)
        rng = np.random.default_rng(7)
        D, H, G, dk = 16, 4, 2, 8
        over = {}
        for l in range(3):
            p = f"model.layers.{l}.self_attn."
            for n, rows in (("q", H * dk), ("k", G * dk), ("v", G * dk)):
                over[p + f"{n}_proj.weight"] = rng.standard_normal((rows, D)) * 0.3
            over[p + "o_proj.weight"] = rng.standard_normal((D, H * dk)) * 0.3
        model, _, _ = self.write_model("llama", {"head_dim": dk}, over)
        self.compare("llama head_dim", model, TOL)

    def test_llama_sentencepiece_tokenizer(self):
        """A Llama-2-style tokenizer (BPE with byte fallback, "▁" for spaces, BOS first) as
        llama.cpp's "llama" model: the fixture's, with all 256 byte tokens (llama.cpp looks
        some up when it loads)."""
        tok = json.loads((TOKENIZER.parent / "sentencepiece_bpe" / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = tok["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
        model, config, state = self.write_model("llama", tokenizer=tok, seed=1)
        self.compare("llama sentencepiece", model, TOL, text="Hi there the\ntherethe é  Hix 日本",
                     reference=(config, state))

    def test_mistral_as_llama(self):
        # without a window (Mistral 7B v0.2 and later): llama.cpp runs it as llama
        model, config, state = self.write_model("mistral", {"sliding_window": None})
        self.compare("mistral", model, TOL, reference=(config, state))

    def test_qwen2_biases_tied_head(self):
        # llama.cpp's qwen2 has no sliding window (released Qwen2 configs turn it off)
        model, config, state = self.write_model("qwen2", {"use_sliding_window": False})
        self.compare("qwen2", model, TOL, reference=(config, state))


class Converter(LlamaCppCase):
    """The comparison can fail: a llama file without llama.cpp's Q/K permutation is far off.
    What llama.cpp cannot run as the folder says is not written."""

    def test_a_sliding_window_is_not_written(self):
        for arch, key in (("mistral", "sliding_window"), ("qwen2", "use_sliding_window")):
            with self.subTest(arch=arch):
                model, _, _ = self.write_model(arch)
                with self.assertRaisesRegex(gguf_model.ConversionError, f"config.json: {key} "):
                    gguf_model.convert(model, self.path(f"{arch}.gguf"))
                shutil.rmtree(model)

    def test_llama_without_the_permutation_disagrees(self):
        model, _, _ = self.write_model("llama")
        with self.assertRaises(AssertionError) as caught:
            self.compare("llama unpermuted", model, TOL, permute=False)
        self.assertIn("log-probabilities at position", str(caught.exception))


if __name__ == "__main__":
    common.main("test_llamacpp", against="llama.cpp")
