#!/usr/bin/python3
"""Writes tests/fixtures/tokenizers/bert-wordpiece/{tokenizer.json,vocab.txt}: a small
BERT WordPiece tokenizer in the format of bert-base-uncased's tokenizer.json, with a
vocabulary of a few thousand pieces taken from tests/tokenizers/corpus.jsonl.

    /usr/bin/python3 tests/tokenizers/make_bert_wordpiece.py

Deterministic (the corpus and this file are its only inputs). The vocabulary: the five
special tokens, every character the corpus's words hold (as "c" and "##c") except
emoji and a few others (so that [UNK] occurs), the most frequent whole words, and the
most frequent word beginnings and "##" endings; vocab.txt holds the same pieces in id
order, as BERT's own vocab.txt does (one per line, the line number is the id).
The tokenizer.json: BertNormalizer (clean_text, handle_chinese_chars, strip_accents
null = as lowercase, lowercase), BertPreTokenizer, WordPiece ("##", [UNK],
max_input_chars_per_word 100), TemplateProcessing [CLS] $A [SEP] (pair: [CLS] $A [SEP]
$B:1 [SEP]:1), WordPiece decoder ("##", cleanup) — what BertTokenizerFast writes.
"""

import json
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bert_rule import bert_pre_tokenize, rust_bert_normalize  # noqa: E402

OUT = HERE.parent / "fixtures" / "tokenizers" / "bert-wordpiece"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WHOLE_WORDS, BEGINNINGS, ENDINGS = 1500, 700, 700
LEFT_OUT = set("λ~ß")       # characters with no piece: their words become [UNK]


def corpus_words():
    lines = (HERE / "corpus.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    words = Counter()
    for line in lines:
        words.update(bert_pre_tokenize(rust_bert_normalize(json.loads(line))))
    return words


def vocabulary(words):
    chars = sorted({c for w in words for c in w
                    if c not in LEFT_OUT and ord(c) < 0x1F000 and c != "\u200d"})
    pieces = list(SPECIALS)
    seen = set(pieces)

    def add(piece):
        if piece not in seen and " " not in piece:
            seen.add(piece)
            pieces.append(piece)

    for c in chars:
        add(c)
    for c in chars:
        add("##" + c)
    ranked = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))
    for w, _ in [kv for kv in ranked if 1 < len(kv[0]) <= 20][:WHOLE_WORDS]:
        add(w)
    begins, ends = Counter(), Counter()
    for w, n in words.items():
        for k in range(2, min(len(w), 6)):
            begins[w[:k]] += n
            ends["##" + w[-k:]] += n
    for counter, count in ((begins, BEGINNINGS), (ends, ENDINGS)):
        for p, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:count]:
            add(p)
    return pieces


def special(token, pieces, type_id):
    return {"SpecialToken": {"id": token, "type_id": type_id}}


def tokenizer_json(pieces):
    ids = {p: i for i, p in enumerate(pieces)}
    added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for t in SPECIALS]
    seq = lambda name, type_id: {"Sequence": {"id": name, "type_id": type_id}}  # noqa: E731
    cls = {"SpecialToken": {"id": "[CLS]", "type_id": 0}}
    sep = lambda type_id: {"SpecialToken": {"id": "[SEP]", "type_id": type_id}}  # noqa: E731
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [cls, seq("A", 0), sep(0)],
            "pair": [cls, seq("A", 0), sep(0), seq("B", 1), sep(1)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]}
                               for t in ("[CLS]", "[SEP]")}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    }


def main():
    pieces = vocabulary(corpus_words())
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    text = json.dumps(tokenizer_json(pieces), ensure_ascii=False, indent=1)
    (OUT / "tokenizer.json").write_text(text + "\n", encoding="utf-8")
    print(f"{OUT}: {len(pieces)} pieces", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
