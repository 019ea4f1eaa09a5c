#!/usr/bin/python3
"""docs/json.md against real output: real commands run (run --json with every optional
member (run --model --predict's predictions too), --compare --json, --jsonl, check --json, decode --json,
decode --generate --json, tokens --json, inspect --json (a GGUF file's too), run --sweep --json, run --why --json,
the data of run --html and report, run --model --layer all's
--json and --jsonl), and

* every key they print is documented in docs/json.md, under its document's section;
* every key documented is printed by some of them;
* every document and every JSONL line starts with its "schema" (a name and a version).

A key is a path: `config.rope.base`, `[]` for the elements of a list, and a `{name}` of
the documentation stands for any one name (a stage, an option).

    /usr/bin/python3 tests/py/test_json_schema.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import re
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import DATA, ROOT, run_text  # noqa: E402
import test_gguf  # noqa: E402  (its GGUF writer)

DOC = ROOT / "docs" / "json.md"
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"
SCHEMA = re.compile(r"^attnscope\.[a-z]+/[0-9]+$")


def documented():
    """{section: [key, ...]} of docs/json.md: a section per `## attnscope.NAME/V`, per
    `### kind "K"` under attnscope.jsonl/1 ("attnscope.jsonl/1 K"), per `### ... (id="ID")`
    of the HTML data ("html ID"); its keys, the first cells of its table."""
    sections, schema, current = {}, None, None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"## (attnscope\.[a-z]+/\d+)", line):
            schema = current = m.group(1)
        elif line.startswith("## "):
            schema = current = "html" if "HTML" in line else None
        elif m := re.match(r'### kind "(\w+)"', line):
            current = f"{schema} {m.group(1)}"
        elif m := re.match(r'### .*\(`id="([\w-]+)"`\)', line):
            current = f"html {m.group(1)}"
        elif (m := re.match(r"\| `([^`]+)` \|", line)) and current:
            sections.setdefault(current, []).append(m.group(1))
    return sections


def keys_of(obj, prefix=""):
    """Every key path of a parsed document: objects' members, and the members of objects
    inside lists (as `[]`); lists of numbers, strings or lists are leaves."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else k
            out.add(path)
            out |= keys_of(v, path)
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, dict):
                out |= keys_of(v, prefix + "[]")
    return out


def pattern(key):
    """A documented key as a regular expression: `{name}` stands for any one name."""
    return re.compile("".join("[^.]+" if re.fullmatch(r"\{\w+\}", p) else re.escape(p)
                              for p in re.split(r"(\{\w+\})", key)) + r"\Z")


class JsonSchema(common.CliTestCase):
    """Runs every command once (setUpClass), then compares with docs/json.md."""

    run_together = True
    produced = None  # {section: set of key paths}
    documents = None  # [(section, parsed document)]

    @classmethod
    def setUpClass(cls):
        cls.scratch = Path(tempfile.mkdtemp(prefix="attnscope-json-"))
        cls.produced, cls.documents = {}, []
        try:
            cls.run_all()
        except BaseException:
            shutil.rmtree(cls.scratch, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    # ---- the commands --------------------------------------------------------------

    @classmethod
    def out(cls, *args, codes=(0,)):
        r = run_text(*args)
        if r.code not in codes:
            raise AssertionError(f"{r}")
        return r.out

    @classmethod
    def add(cls, section, doc):
        cls.documents.append((section, doc))
        cls.produced.setdefault(section, set()).update(keys_of(doc))

    @classmethod
    def bundles(cls):
        """A bundle with sinks, a padded batch item and a config record; one with G < H."""
        z = np.load(GOLDEN / "modern_sinks_fully_masked.npz")
        sinks = cls.scratch / "sinks.npz"
        np.savez(sinks, config=np.array(json.dumps({"heads": 2, "causal": True})),
                 **{k: z[k] for k in z.files if not k.startswith("expected/")})
        z = np.load(GOLDEN / "modern_gqa_rope_window_padding_float64.npz")
        gqa = cls.scratch / "gqa.npz"
        np.savez(gqa, **{k: z[k] for k in z.files if not k.startswith("expected/")})
        return sinks, gqa

    @classmethod
    def run_all(cls):
        sinks, gqa = cls.bundles()
        runs = [
            [sinks, "--diagnose", "--summary"],
            [gqa, "--heads", "4", "--kv-heads", "2", "--rope", "--window", "3", "--causal", "--alibi",
             "--softcap", "30", "--stages", "all"],
            [DATA / "sentence.json", "--heads", "2", "--batch", "0", "--head", "1"],
        ]
        for args in runs:
            cls.add("attnscope.run/1", json.loads(cls.out("run", *args, "--json")))
        cls.add("attnscope.compare/1",
                json.loads(cls.out("run", DATA / "sentence.json", "--heads", "2", "--compare", "--scale none",
                                   "--json")))
        for args in ([sinks, "--summary"], [gqa, "--heads", "4", "--kv-heads", "2", "--causal"]):
            for line in cls.out("run", *args, "--jsonl", "-").splitlines():
                doc = json.loads(line)
                cls.add(f"attnscope.jsonl/1 {doc.get('kind')}", doc)
        for sweep in ("dk=4,16", "temperature=0.5,2"):
            cls.add("attnscope.sweep/1",
                    json.loads(cls.out("run", DATA / "sentence.json", "--heads", "2", "--sweep", sweep, "--json")))
        cls.add("attnscope.why/1",
                json.loads(cls.out("run", DATA / "sentence.json", "--heads", "2", "--why", "1,2", "--json")))
        cls.run_check()
        for args in ([sinks, "--prefill", "2"], [gqa, "--heads", "4", "--kv-heads", "2", "--rope", "--window", "3",
                                                   "--prefill", "3"]):
            cls.add("attnscope.decode/1", json.loads(cls.out("decode", *args, "--json")))
        cls.run_generate()
        cls.run_tokens()
        for ckpt in (FIXTURES / "checkpoints" / "torch_gpt2.pt", cls.llama(), cls.gguf()):
            cls.add("attnscope.inspect/1", json.loads(cls.out("inspect", ckpt, "--json")))
        cls.run_html(sinks)
        cls.add("attnscope.lesson/1", json.loads(cls.out("lesson", "keys", "--json", "--data", DATA)))
        cls.run_layers()

    @classmethod
    def run_layers(cls):
        """run --model DIR --layer all: --json (each layer's members are attnscope.run/1's, but
        `layer`) and --jsonl (a `layer` on every line), on a small random GPT-2."""
        import checkpoint_reference as cref
        import lm_reference as lref
        config, state = lref.make_model("gpt2", 0)
        d = cls.scratch / "gpt2_layers"  # run_generate has its own gpt2
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F64")
        source = ("--model", d, "--tokens", "3,17,5", "--layer", "all", "--summary", "--predict", "2")
        doc = json.loads(cls.out("run", *source, "--diagnose", "--json"))
        cls.documents.append(("attnscope.layers/1", doc))
        members = {**doc, "layers": [{k: None for k in e} for e in doc["layers"]],
                   "predictions": {k: None for k in doc["predictions"]}}
        cls.produced.setdefault("attnscope.layers/1", set()).update(keys_of(members))
        cls.produced["attnscope.run/1"].update(keys_of({"predictions": doc["predictions"]}))
        for e in doc["layers"]:
            cls.produced["attnscope.run/1"].update(keys_of({k: v for k, v in e.items() if k != "layer"}))
        for line in cls.out("run", *source, "--stages", "weights", "--jsonl", "-").splitlines():
            doc = json.loads(line)
            if doc.get("kind") == "predictions":  # its members are attnscope.run/1's predictions
                cls.produced["attnscope.run/1"].update(keys_of({"predictions": doc["predictions"]}))
                doc = {**doc, "predictions": {k: None for k in doc["predictions"]}}
            cls.add(f"attnscope.jsonl/1 {doc.get('kind')}", doc)
        # a single layer's run: its predictions, and an option they do not follow
        cls.add("attnscope.run/1", json.loads(cls.out("run", "--model", d, "--tokens", "3,17,5", "--predict", "2",
                                                      "--zero-key", "1", "--json")))

    @classmethod
    def gguf(cls):
        """A GGUF file with a scalar, a string, an array and an array of arrays, and a tensor
        (test_gguf.py's writer)."""
        g = test_gguf
        data, _ = g.gguf_bytes([("general.architecture", g.STRING, "llama"), ("n", g.U32, 4),
                                ("tokens", g.ARRAY, (g.STRING, ["a", "b"])),
                                ("nested", g.ARRAY, (g.ARRAY, [(g.I32, [1, 2])]))],
                               [("blk.0.attn_q.weight", 0, [4, 4], bytes(64))])
        p = cls.scratch / "model.gguf"
        p.write_bytes(data)
        return p

    @classmethod
    def llama(cls):
        """A one-layer Llama checkpoint (.safetensors, float32) with its config.json."""
        d = cls.scratch / "llama"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({
            "model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 16,
            "num_hidden_layers": 1, "rope_theta": 10000.0}), encoding="utf-8")
        rng = np.random.default_rng(0)
        shapes = {"q_proj": (16, 16), "k_proj": (8, 16), "v_proj": (8, 16), "o_proj": (16, 16)}
        header, data = {}, b""
        for name, shape in shapes.items():
            raw = rng.standard_normal(shape).astype("<f4").tobytes()
            header[f"model.layers.0.self_attn.{name}.weight"] = {
                "dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        path = d / "model.safetensors"
        path.write_bytes(len(text).to_bytes(8, "little") + text + data)
        return d

    @classmethod
    def run_check(cls):
        """A catalogued mistake (a diagnosis), and noise in one head (where it is)."""
        mistakes = DATA / "mistakes"
        for theirs in (mistakes / "no-scale.npz", mistakes / "correct.npz"):
            cls.add("attnscope.check/1", json.loads(cls.out("check", theirs, "--against", mistakes / "bundle.npz",
                                                            "--heads", "2", "--json", codes=(0, 1))))
        z = np.load(mistakes / "correct.npz")
        attn = z["attn"].copy()
        attn[0, 1] *= 1.01
        noisy = cls.scratch / "noisy.npz"
        np.savez(noisy, attn=attn)
        cls.add("attnscope.check/1", json.loads(cls.out("check", noisy, "--against", mistakes / "bundle.npz",
                                                        "--heads", "2", "--json", codes=(1,))))

    @classmethod
    def run_generate(cls):
        """decode --model --generate on a small random GPT-2 (lm_reference.make_model)."""
        import checkpoint_reference as cref  # scripts/: the safetensors writer
        import lm_reference as lref
        config, state = lref.make_model("gpt2")
        d = cls.scratch / "gpt2"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
        cref.write_safetensors(d / "model.safetensors", state, "F64")
        for f in (FIXTURES / "tokenizers" / "bytelevel_bpe").iterdir():
            shutil.copy(f, d / f.name)
        for layer in ([], ["--layer", "1"]):
            cls.add("attnscope.generate/1", json.loads(cls.out("decode", "--model", d, "--text", "Hi", "--generate",
                                                               "2", *layer, "--json")))

    @classmethod
    def run_tokens(cls):
        model = FIXTURES / "tokenizers" / "bytelevel_bpe"
        cls.add("attnscope.tokens/1", json.loads(cls.out("tokens", "--model", model, "--text", "Hi there",
                                                         "--json")))
        cls.add("attnscope.tokens/1", json.loads(cls.out("tokens", "--model", model, "--decode", "1,2",
                                                         "--json")))
        lines = cls.scratch / "lines.jsonl"
        lines.write_text('"hello"\n42\n', encoding="utf-8")
        for line in cls.out("tokens", "--model", model, "--jsonl-input", lines, "--json", codes=(2,)).splitlines():
            cls.add("attnscope.tokens/1", json.loads(line))

    @classmethod
    def run_html(cls, sinks):
        page = cls.scratch / "page.html"
        cls.out("run", DATA / "sentence.json", "--heads", "2", "--html", page, "--quiet")
        grid = cls.scratch / "grid.html"
        cls.out("report", sinks, DATA / "sentence.npz", "--html", grid)
        for f in (page, grid):
            html = f.read_text(encoding="utf-8")
            for m in re.finditer(r'<script type="application/json" id="([\w-]+)">(.*?)</script>', html, re.S):
                cls.add("html " + re.sub(r"^fig\d+$", "figN", m.group(1)), json.loads(m.group(2)))

    # ---- the checks ----------------------------------------------------------------

    def test_every_key_is_documented(self):
        docs = documented()
        for section, keys in sorted(self.produced.items()):
            with self.subTest(section=section):
                self.assertIn(section, docs, f"docs/json.md has no section for {section}")
                patterns = [pattern(k) for k in docs[section]]
                missing = sorted(k for k in keys if not any(p.match(k) for p in patterns))
                self.assertEqual(missing, [], f"{section}: keys printed but not in docs/json.md")

    def test_every_documented_key_is_printed(self):
        for section, keys in sorted(documented().items()):
            with self.subTest(section=section):
                got = self.produced.get(section, set())
                unseen = [k for k in keys if not any(pattern(k).match(p) for p in got)]
                self.assertEqual(unseen, [], f"{section}: documented in docs/json.md but printed by no run")

    def test_every_document_names_its_schema(self):
        for section, doc in self.documents:
            if section.startswith("html "):
                continue  # the page's data blocks are not documents of their own
            with self.subTest(section=section):
                self.assertEqual(next(iter(doc)), "schema", f"{section}: schema is not the first member")
                self.assertRegex(doc["schema"], SCHEMA)
                self.assertEqual(doc["schema"], section.split()[0])

    def test_every_section_was_exercised(self):
        self.assertEqual(sorted(set(documented()) - set(self.produced)), [])


if __name__ == "__main__":
    common.main("test_json_schema")
