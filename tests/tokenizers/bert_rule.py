"""BERT's normalizer and pre-tokenizer as the Rust library (Hugging Face `tokenizers`,
normalizers/bert.rs, tokenizer/normalizer.rs, pre_tokenizers/bert.rs) writes them, for the
few strings where its JavaScript port does otherwise (tests/py/test_tokenizers.py) and
for the vocabulary of the BERT fixture (make_bert_wordpiece.py).

The Rust rule, step by step (BertNormalizer with clean_text, handle_chinese_chars,
strip_accents = None -> lowercase, lowercase):
  1. clean_text: drop U+0000, U+FFFD and every "control" (general category C*: Cc, Cf,
     Cn, Co, Cs, except \\t \\n \\r); every whitespace (char::is_whitespace, plus \\t \\n \\r)
     becomes one space.
  2. handle_chinese_chars: a space on each side of every code point in the CJK blocks
     listed in is_chinese_char, supplementary planes included.
  3. strip accents: NFD, then drop the nonspacing marks (Mn: is_mark_nonspacing; Mc and
     Me stay. The separate StripAccents normalizer, strip.rs, drops all three).
  4. lowercase: char by char (NormalizedString::lowercase, char::to_lowercase), so no
     final-sigma rule.
Where the port differs: it walks UTF-16 code units in step 2 (no spaces around CJK
outside the BMP), lowercases with String.toLowerCase (final sigma: ΟΔΥΣΣΕΥΣ ->
οδυσσευς), and keeps unassigned code points (Cn) in step 1.

BertPreTokenizer: split on whitespace, and each punctuation character (ASCII
punctuation or general category P*) is a word of its own.
"""

import unicodedata

CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_chinese_char(c):
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def is_whitespace(c):
    return c in "\t\n\r" or c.isspace() and unicodedata.category(c) in ("Zs", "Zl", "Zp")


def rust_bert_normalize(text):
    cleaned = "".join(" " if is_whitespace(c) else c for c in text
                      if c not in "\0\ufffd" and not is_control(c))
    spaced = "".join(f" {c} " if is_chinese_char(c) else c for c in cleaned)
    stripped = "".join(c for c in unicodedata.normalize("NFD", spaced)
                       if unicodedata.category(c) != "Mn")
    return "".join(c.lower() for c in stripped)


def is_punctuation(c):
    return (c.isascii() and not c.isalnum() and c.isprintable() and c != " ") or \
        unicodedata.category(c).startswith("P")


def bert_pre_tokenize(normalized):
    """Words of a normalized text (BertPreTokenizer)."""
    words = []
    for chunk in normalized.split(" "):
        word = ""
        for c in chunk:
            if is_punctuation(c):
                if word:
                    words.append(word)
                words.append(c)
                word = ""
            else:
                word += c
        if word:
            words.append(word)
    return words


def port_differs(text):
    """True when the JavaScript port's BertNormalizer is known to give another text
    than the Rust rule: CJK outside the BMP, a capital sigma (final-sigma lowercasing)."""
    return any(ord(c) > 0xFFFF and is_chinese_char(c) for c in text) or "Σ" in text
