#!/usr/bin/python3
"""A Hugging Face model folder (config.json, model.safetensors, tokenizer.json) written as
a GGUF file laid out as llama.cpp's own converter lays it out, for tests/py/test_llamacpp.py
(llama.cpp is the reference there; it reads GGUF only).

Written from the GGUF specification (ggml's docs/gguf.md) and llama.cpp's conventions
(gguf-py's key and tensor names, convert_hf_to_gguf.py's choices):
- header: "GGUF", version 3, tensor count, key/value count (little-endian, 64-bit counts);
- metadata: general.architecture, general.file_type (0: all F32), the architecture's
  hyper-parameters under "<arch>." (FAMILIES below), the tokenizer under tokenizer.ggml.*;
- tensor infos: name, dimensions in ggml order (fastest first: numpy's shape reversed),
  type (F32), offset into the data section; the data section and every tensor in it
  aligned to 32 bytes (general.alignment's default).

A family is one entry of FAMILIES: the GGUF architecture name, its hyper-parameters
(GGUF key -> how it is found in config.json), its tensors (HF name -> GGUF name, `{l}` the
layer), which HF tensors are stored (in, out) (GPT-2's Conv1D), whether Q and K rows are
permuted for llama.cpp's RoPE, and the config.json keys it refuses (what llama.cpp's
architecture would not run as the folder says: RoPE scaling, a sliding window).
The tokenizer: a byte-level BPE tokenizer.json as llama.cpp's "gpt2" model, a BPE one with
byte fallback (Llama 2's kind) as its "llama" model (tokenizer_metadata below).

    /usr/bin/python3 tests/py/gguf_model.py MODEL_DIR OUT.gguf
"""

import json
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ALIGNMENT = 32  # general.alignment's default
GGML_F32 = 0  # ggml_type
FILE_TYPE_ALL_F32 = 0  # llama_ftype

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)

# tokenizer.ggml.token_type values (SentencePiece's piece types, as llama.cpp uses them)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class ConversionError(ValueError):
    """The folder holds something this writer cannot lay out as llama.cpp would."""


# ---- the families ---------------------------------------------------------------------------

def need(config, *names, default=None):
    """The first of `names` config.json holds, else `default` (None: the key is required)."""
    for n in names:
        if config.get(n) is not None:
            return config[n]
    if default is None:
        raise ConversionError(f"config.json: none of {', '.join(names)}")
    return default


def head_dim(c):
    return need(c, "head_dim", default=c["hidden_size"] // c["num_attention_heads"])


def only_if_head_dim(c):
    """key_length / value_length: written only where config.json names a head_dim."""
    return c.get("head_dim")


GPT2_KEYS = {
    "context_length": (U32, lambda c: need(c, "n_ctx", "n_positions")),
    "embedding_length": (U32, lambda c: c["n_embd"]),
    "block_count": (U32, lambda c: c["n_layer"]),
    "feed_forward_length": (U32, lambda c: need(c, "n_inner", default=4 * c["n_embd"])),
    "attention.head_count": (U32, lambda c: c["n_head"]),
    "attention.layer_norm_epsilon": (F32, lambda c: c["layer_norm_epsilon"]),
}

GPT2_TENSORS = {
    "transformer.wte": "token_embd",
    "transformer.wpe": "position_embd",
    "transformer.h.{l}.ln_1": "blk.{l}.attn_norm",
    "transformer.h.{l}.attn.c_attn": "blk.{l}.attn_qkv",
    "transformer.h.{l}.attn.c_proj": "blk.{l}.attn_output",
    "transformer.h.{l}.ln_2": "blk.{l}.ffn_norm",
    "transformer.h.{l}.mlp.c_fc": "blk.{l}.ffn_up",
    "transformer.h.{l}.mlp.c_proj": "blk.{l}.ffn_down",
    "transformer.ln_f": "output_norm",
    "lm_head": "output",
}

LLAMA_KEYS = {
    "vocab_size": (U32, lambda c: c["vocab_size"]),
    "context_length": (U32, lambda c: c["max_position_embeddings"]),
    "embedding_length": (U32, lambda c: c["hidden_size"]),
    "block_count": (U32, lambda c: c["num_hidden_layers"]),
    "feed_forward_length": (U32, lambda c: c["intermediate_size"]),
    "attention.head_count": (U32, lambda c: c["num_attention_heads"]),
    "attention.head_count_kv": (U32, lambda c: need(c, "num_key_value_heads", default=c["num_attention_heads"])),
    "attention.layer_norm_rms_epsilon": (F32, lambda c: c["rms_norm_eps"]),
    "attention.key_length": (U32, only_if_head_dim),
    "attention.value_length": (U32, only_if_head_dim),
    "rope.freq_base": (F32, lambda c: need(c, "rope_theta", default=10000.0)),
    "rope.dimension_count": (U32, head_dim),
}

LLAMA_TENSORS = {
    "model.embed_tokens": "token_embd",
    "model.layers.{l}.input_layernorm": "blk.{l}.attn_norm",
    "model.layers.{l}.self_attn.q_proj": "blk.{l}.attn_q",
    "model.layers.{l}.self_attn.k_proj": "blk.{l}.attn_k",
    "model.layers.{l}.self_attn.v_proj": "blk.{l}.attn_v",
    "model.layers.{l}.self_attn.o_proj": "blk.{l}.attn_output",
    "model.layers.{l}.post_attention_layernorm": "blk.{l}.ffn_norm",
    "model.layers.{l}.mlp.gate_proj": "blk.{l}.ffn_gate",
    "model.layers.{l}.mlp.up_proj": "blk.{l}.ffn_up",
    "model.layers.{l}.mlp.down_proj": "blk.{l}.ffn_down",
    "model.norm": "output_norm",
    "lm_head": "output",
}


@dataclass
class Family:
    arch: str  # general.architecture
    keys: dict  # "<arch>.KEY" -> (GGUF type, config -> value; None: not written)
    tensors: dict  # HF name without .weight/.bias -> GGUF name, {l} the layer
    transposed: tuple = ()  # HF names stored (in, out): written (out, in)
    permute_qk: bool = False  # llama.cpp's "normal" RoPE pairs (2i, 2i+1), HF's (i, i + d/2)
    ignored: tuple = ()  # HF tensor names (regular expressions) with no GGUF counterpart
    refused: tuple = ("rope_scaling",)  # config keys it cannot carry


FAMILIES = {
    "gpt2": Family("gpt2", GPT2_KEYS, GPT2_TENSORS,
                   transposed=("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"),
                   ignored=(r".*\.attn\.(masked_)?bias",)),
    "llama": Family("llama", LLAMA_KEYS, LLAMA_TENSORS, permute_qk=True),
    # llama.cpp runs Mistral as llama, and neither it nor its qwen2 has a sliding window
    "mistral": Family("llama", LLAMA_KEYS, LLAMA_TENSORS, permute_qk=True,
                      refused=("rope_scaling", "sliding_window")),
    "qwen2": Family("qwen2", LLAMA_KEYS, LLAMA_TENSORS, refused=("rope_scaling", "use_sliding_window")),
}


# ---- tensors --------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors(path):
    """{name: float32 array} of a .safetensors file (F32, F64, F16, BF16)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    base, out = 8 + n, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        blob = raw[base + begin:base + end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(blob, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] in SAFETENSORS_DTYPES:
            a = np.frombuffer(blob, SAFETENSORS_DTYPES[e["dtype"]])
        else:
            raise ConversionError(f"{path}: {name}: dtype {e['dtype']} (expected F32, F64, F16 or BF16)")
        out[name] = a.astype(np.float32).reshape(e["shape"])
    return out


def permute_rows(w, heads):
    """Q or K rows (heads · d, ...) from HF's rotate-half layout, where row j of a head pairs
    with row j + d/2, to the interleaved one llama.cpp's RoPE rotates, where row 2i pairs with
    2i + 1: new row 2i is old row i, new row 2i + 1 is old row i + d/2, head by head."""
    d = w.shape[0] // heads
    return w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(family, hf_name):
    """(GGUF name, the HF stem it came from), or (None, None) for an ignored tensor."""
    if any(re.fullmatch(p, hf_name) for p in family.ignored):
        return None, None
    stem, dot, suffix = hf_name.rpartition(".")
    for hf, gg in family.tensors.items():
        m = re.fullmatch(re.escape(hf).replace(r"\{l\}", r"(\d+)"), stem)
        if m:
            name = gg.replace("{l}", m.group(1)) if m.groups() else gg
            return f"{name}.{suffix}", hf
    raise ConversionError(f"tensor '{hf_name}': no GGUF name for it in the {family.arch} family")


def gguf_tensors(family, config, state, permute=True):
    """[(GGUF name, float32 array as llama.cpp wants it)] in the order of `state`;
    permute=False leaves Q and K as HF has them (a file llama.cpp runs wrong)."""
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    out = []
    for hf_name, a in state.items():
        name, stem = gguf_name(family, hf_name)
        if name is None:
            continue
        if any(stem.endswith(t) for t in family.transposed) and a.ndim == 2:
            a = a.T
        if family.permute_qk and permute and stem.endswith("self_attn.q_proj"):
            a = permute_rows(a, heads)
        elif family.permute_qk and permute and stem.endswith("self_attn.k_proj"):
            a = permute_rows(a, kv_heads)
        out.append((name, np.ascontiguousarray(a, dtype=np.float32)))
    return out


# ---- the tokenizer ----------------------------------------------------------------------------

def tokenizer_metadata(folder, vocab_size, config):
    """tokenizer.ggml.* of the folder's tokenizer.json, a BPE tokenizer of one of two kinds:
    byte-level (GPT-2's; llama.cpp's "gpt2" model: tokens and merges) or SentencePiece-style
    with byte fallback (Llama 2's; llama.cpp's "llama" model: tokens and scores, no merges).
    Every id below vocab_size is written, those the file lacks as "[PAD<id>]" (UNUSED);
    added tokens are CONTROL when special, else USER_DEFINED. BOS is the special token the
    post-processor puts first (add_bos_token true), else config.json's bos_token_id."""
    path = Path(folder) / "tokenizer.json"
    tok = json.loads(path.read_text(encoding="utf-8"))
    model = tok.get("model") or {}
    if model.get("type") == "BPE" and byte_level(tok.get("pre_tokenizer")):
        meta = [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "gpt-2")]
    elif model.get("type") == "BPE" and model.get("byte_fallback"):
        meta = [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.pre", STRING, "default")]
    else:
        raise ConversionError(f"{path}: neither a byte-level BPE tokenizer nor a BPE one with byte fallback")
    tokens, types = vocabulary(tok, vocab_size)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    meta += [("tokenizer.ggml.tokens", (ARRAY, STRING), tokens), ("tokenizer.ggml.token_type", (ARRAY, I32), types)]
    if meta[0][2] == "gpt2":
        meta.append(("tokenizer.ggml.merges", (ARRAY, STRING), merges))
    else:
        meta += sentencepiece_metadata(tok, tokens, types, merges)
    first = first_special(tok.get("post_processor"))
    bos = first if first is not None else config.get("bos_token_id")
    for key, value in (("bos_token_id", bos), ("eos_token_id", config.get("eos_token_id"))):
        if isinstance(value, int) and 0 <= value < vocab_size:
            meta.append((f"tokenizer.ggml.{key}", U32, value))
    meta.append(("tokenizer.ggml.add_bos_token", BOOL, first is not None))
    return meta


def vocabulary(tok, vocab_size):
    """(tokens, token types) by id, vocab_size of each."""
    tokens, types = [f"[PAD{i}]" for i in range(vocab_size)], [UNUSED] * vocab_size
    for text, i in tok["model"]["vocab"].items():
        if i < vocab_size:
            tokens[i], types[i] = text, NORMAL
    for t in tok.get("added_tokens", []):
        if t["id"] < vocab_size:
            tokens[t["id"]], types[t["id"]] = t["content"], CONTROL if t.get("special") else USER_DEFINED
    return tokens, types


def sentencepiece_metadata(tok, tokens, types, merges):
    """The "llama" model's scores, byte and unknown tokens, and space prefix. llama.cpp's
    SentencePiece tokenizer merges, among adjacent pieces whose concatenation is a token, the
    one whose token scores highest: a token made by merge number r scores -r, so merges come
    in the order tokenizer.json lists them; tokens no merge makes score 0."""
    scores = [0.0] * len(tokens)
    ids = {t: i for i, t in enumerate(tokens)}
    for rank, m in enumerate(merges):
        made = ids.get(m.replace(" ", "", 1))
        if made is not None and scores[made] == 0.0:
            scores[made] = -float(rank + 1)
    unk = tok["model"].get("unk_token")
    for i, t in enumerate(tokens):
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t):
            types[i] = BYTE
        elif t == unk:
            types[i] = UNKNOWN
    meta = [("tokenizer.ggml.scores", (ARRAY, F32), scores),
            ("tokenizer.ggml.add_space_prefix", BOOL, prepends_space(tok.get("normalizer")))]
    if unk in ids:
        meta.append(("tokenizer.ggml.unknown_token_id", U32, ids[unk]))
    return meta


def prepends_space(normalizer):
    """Whether the normalizer puts "▁" before the text (Prepend, as Llama 2's does)."""
    if not normalizer:
        return False
    parts = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    return any(n.get("type") == "Prepend" and n.get("prepend") == "\u2581" for n in parts)


def byte_level(pre):
    """Whether the pre-tokenizer is GPT-2's: ByteLevel with its own regular expression."""
    return bool(pre) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True)


def first_special(post):
    """The id a TemplateProcessing post-processor puts before the text, else None."""
    if not post or post.get("type") != "TemplateProcessing" or not post.get("single"):
        return None
    head = post["single"][0].get("SpecialToken")
    if head is None:
        return None
    return post["special_tokens"][head["id"]]["ids"][0]


# ---- GGUF -----------------------------------------------------------------------------------

def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}


def gguf_value(kind, value):
    """The bytes of one value of type `kind` (an int, or (ARRAY, element type))."""
    if isinstance(kind, tuple):
        _, elem = kind
        return struct.pack("<IQ", elem, len(value)) + b"".join(gguf_value(elem, v) for v in value)
    if kind == STRING:
        return gguf_string(value)
    return struct.pack(SCALARS[kind], value)


def gguf_kv(key, kind, value):
    tag = ARRAY if isinstance(kind, tuple) else kind
    return gguf_string(key) + struct.pack("<I", tag) + gguf_value(kind, value)


def pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write_gguf(path, metadata, tensors):
    """A GGUF v3 file: metadata [(key, type, value)], tensors [(name, float32 array)]."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    head += b"".join(gguf_kv(*kv) for kv in metadata)
    infos, data = [], bytearray()
    for name, a in tensors:
        data += b"\0" * pad(len(data))
        dims = a.shape[::-1]  # ggml order: the fastest-varying dimension first
        infos.append(gguf_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, GGML_F32, len(data)))
        data += a.astype("<f4").tobytes()
    head += b"".join(infos)
    with open(path, "wb") as f:
        f.write(head + b"\0" * pad(len(head)))
        f.write(bytes(data))


# ---- the whole conversion ---------------------------------------------------------------------

def hyper_parameters(family, config):
    meta = []
    for key, (kind, value_of) in family.keys.items():
        value = value_of(config)
        if value is not None:
            meta.append((f"{family.arch}.{key}", kind, value))
    return meta


def convert(folder, out, permute=True):
    """Writes `out` (GGUF) from the HF model folder; returns the family's GGUF arch name.
    permute=False: Q and K rows as HF has them (tests show llama.cpp then runs it wrong)."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise ConversionError(f"config.json: model_type {kind!r} (written here: {', '.join(FAMILIES)})")
    family = FAMILIES[kind]
    for key in family.refused:
        if config.get(key):
            raise ConversionError(f"config.json: {key} {config[key]!r}: llama.cpp's {family.arch} has no such "
                                  "setting here")
    state = read_safetensors(folder / "model.safetensors")
    tensors = gguf_tensors(family, config, state, permute)
    vocab = dict(tensors)["token_embd.weight"].shape[0]
    meta = [("general.architecture", STRING, family.arch), ("general.name", STRING, folder.name),
            ("general.file_type", U32, FILE_TYPE_ALL_F32)]
    meta += hyper_parameters(family, config)
    meta += tokenizer_metadata(folder, vocab, config)
    write_gguf(out, meta, tensors)
    return family.arch


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_model.py MODEL_DIR OUT.gguf")
    try:
        print(convert(sys.argv[1], sys.argv[2]))
    except (ConversionError, OSError, KeyError, json.JSONDecodeError) as e:
        sys.exit(f"gguf_model.py: {e}")
