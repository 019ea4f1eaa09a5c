#!/usr/bin/python3
"""Write the .safetensors test fixtures under tests/fixtures/checkpoints/safetensors/.

The files are written here with plain Python (struct + json) from the format's
description, not by attnscope and not by the safetensors package:

    8 bytes    N, the header's length, an unsigned 64-bit little-endian integer
    N bytes    the header: UTF-8 JSON, an object of
                 "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
               (offsets into the data buffer) and an optional "__metadata__" object of
               strings; it may be padded with spaces (writers pad N to a multiple of 8)
    the rest   the data buffer: each tensor's bytes, little-endian, C order

Values come from numpy (float16 and the integer types) and torch (bfloat16: torch's own
rounding of float32). Beside each good file, every tensor's expected values are saved as
a float64 .npy (DIR/STEM/NAME.npy), numpy's (or torch's) widening of the stored values,
so tests/test_safetensors.cpp compares every value exactly against an independent
reference. The .npy reader that reads them back is tested on its own.

    good/           every dtype; several tensors listed out of data order, with metadata
                    and a zero-sized tensor; data at an odd address; no tensors at all
    sharded/        a checkpoint of 2 shards, model.safetensors.index.json, config.json
    bad/            hostile files: each must be refused with one line (the test asserts it)
    bad_sharded/    indexes that escape their directory or disagree with their shards

Deterministic (fixed values, one fixed seed): two runs give the same bytes.

    /usr/bin/python3 scripts/make_safetensors_fixtures.py
"""

import json
import os
import shutil
import struct

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "checkpoints", "safetensors")

NUMPY_OF = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
            "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
            "U8": np.uint8, "BOOL": np.bool_}


# ---- the writer -----------------------------------------------------------------------

class Tensor:
    """One tensor: its header dtype, shape, raw little-endian bytes and expected float64 values."""

    def __init__(self, dtype, values):
        if dtype == "BF16":
            t = torch.tensor(np.asarray(values, dtype=np.float32)).to(torch.bfloat16)
            self.raw = t.view(torch.int16).numpy().astype("<i2").tobytes()
            self.expected = t.to(torch.float64).numpy()
        else:
            a = np.asarray(values).astype(np.dtype(NUMPY_OF[dtype]).newbyteorder("<"))
            self.raw = a.tobytes()
            self.expected = a.astype(np.float64)
        self.dtype = dtype
        self.shape = list(np.shape(values))


def header_bytes(header, pad_to=8):
    """The JSON header, compact, its length padded with spaces to a multiple of pad_to."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if pad_to > 1:
        text += b" " * (-len(text) % pad_to)
    return text


def safetensors(tensors, metadata=None, data_order=None, pad_to=8, extra_header=b""):
    """A .safetensors file of {name: Tensor}; the header lists them in dict order, the data
    buffer holds them in data_order (default: the same)."""
    data_order = data_order or list(tensors)
    offsets, data = {}, b""
    for name in data_order:
        offsets[name] = [len(data), len(data) + len(tensors[name].raw)]
        data += tensors[name].raw
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": offsets[name]}
    text = header_bytes(header, pad_to) + extra_header
    return struct.pack("<Q", len(text)) + text + data


def raw_file(header_text, data=b"", n=None):
    """A file from a header given as text or bytes, as it is (hostile files)."""
    if isinstance(header_text, str):
        header_text = header_text.encode("utf-8")
    return struct.pack("<Q", len(header_text) if n is None else n) + header_text + data


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def write_good(directory, stem, tensors, **kw):
    """DIR/STEM.safetensors and DIR/STEM/NAME.npy, the expected values of each tensor."""
    write(os.path.join(directory, stem + ".safetensors"), safetensors(tensors, **kw))
    for name, t in tensors.items():
        path = os.path.join(directory, stem, name + ".npy")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, np.asarray(t.expected, dtype=np.float64))


def read_back(path):
    """Parses a good file again from the description (not the writer's state) and checks
    the data buffer is covered exactly."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    at = 0
    for begin, end in spans:
        assert begin == at, (path, spans)
        at = end
    assert at == len(b) - 8 - n, path
    return header


# ---- the known values -----------------------------------------------------------------

INF, NAN = float("inf"), float("nan")
rng = np.random.default_rng(20240611)


def every_dtype():
    return {
        "f64": Tensor("F64", [[-1.0, -0.5, 0.0, 0.1], [1e300, -0.0, INF, NAN]]),
        "f32": Tensor("F32", rng.standard_normal((3, 4)).astype(np.float32)),
        # float16: 0, -0, the largest (65504), the smallest normal and subnormal, inf, nan
        "f16": Tensor("F16", np.array([[0.0, -0.0, 1.0, 65504.0], [2.0 ** -14, 2.0 ** -24, INF, -INF],
                                       [NAN, 0.1, -2.5, 1 / 3]])),
        # bfloat16 (torch's rounding): a subnormal, the largest finite, values that round
        "bf16": Tensor("BF16", [[0.1, -1 / 3, 3.14159, 1e38], [3.3e38, 1e-40, INF, -INF],
                                [NAN, -0.0, 65504.0, 1.0000001]]),
        "i64": Tensor("I64", np.array([-2 ** 63, 2 ** 63 - 1, -1, 0, 2 ** 53 + 1, 12345], dtype=np.int64)),
        "i32": Tensor("I32", np.array([[-2 ** 31, 2 ** 31 - 1, -1], [0, 7, -7]], dtype=np.int32)),
        "i16": Tensor("I16", np.array([-32768, 32767, -1, 0], dtype=np.int16)),
        "i8": Tensor("I8", np.array([-128, 127, -1, 0, 5], dtype=np.int8)),
        "u64": Tensor("U64", np.array([0, 2 ** 64 - 1, 2 ** 53 + 1, 1], dtype=np.uint64)),
        "u32": Tensor("U32", np.array([0, 2 ** 32 - 1, 65536], dtype=np.uint32)),
        "u16": Tensor("U16", np.array([[0, 65535], [1, 256]], dtype=np.uint16)),
        "u8": Tensor("U8", np.array([0, 255, 128], dtype=np.uint8)),
        "bool": Tensor("BOOL", np.array([[True, False, True], [False, False, True]])),
        "scalar": Tensor("F32", np.float32(3.5)),
        "empty": Tensor("F16", np.zeros((0, 3))),
    }


def multi():
    """Four projections of a layer in four dtypes, the header in name order, the data in
    another order, with __metadata__ and a zero-sized tensor between two others."""
    d = 4
    t = {
        "model.layers.0.self_attn.k_proj.weight": Tensor("BF16", rng.standard_normal((d, d))),
        "model.layers.0.self_attn.o_proj.weight": Tensor("F64", rng.standard_normal((d, d))),
        "model.layers.0.self_attn.q_proj.weight": Tensor("F32", rng.standard_normal((d, d)).astype(np.float32)),
        "model.layers.0.self_attn.v_proj.weight": Tensor("F16", rng.standard_normal((d, d))),
        "zero_sized": Tensor("F32", np.zeros((0, 4), dtype=np.float32)),
    }
    order = ["model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.q_proj.weight", "zero_sized",
             "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"]
    return t, order


def unaligned():
    """float32 and float64 data at odd addresses: the header's length is odd."""
    return {"a": Tensor("F32", np.array([1.5, -2.25, 1e-45], dtype=np.float32)),
            "b": Tensor("F64", np.array([[0.1, 0.2], [0.3, -1e-310]]))}


# ---- hostile files --------------------------------------------------------------------

def entry(dtype="F32", shape=(4,), offsets=(0, 16)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def js(obj):
    return json.dumps(obj, separators=(",", ":"))


def hostile():
    f4 = b"\x00\x00\x80\x3f" * 4  # four float32 ones
    return {
        "too_short": b"\x05\x00\x00\x00\x00",
        "header_too_large": struct.pack("<Q", 1 << 40) + b"{}",
        "header_past_end": raw_file("{}", n=1000),
        "not_utf8": raw_file(b'{"a\xff":' + js(entry()).encode() + b"}", f4),
        "not_json": raw_file('{"a":{"dtype":"F32",', f4),
        "not_object": raw_file("[1, 2]"),
        "metadata_not_strings": raw_file(js({"__metadata__": {"format": "pt", "n": 3}, "a": entry()}), f4),
        "metadata_not_object": raw_file(js({"__metadata__": ["pt"], "a": entry()}), f4),
        "entry_not_object": raw_file(js({"a": [0, 16]}), f4),
        "extra_key": raw_file(js({"a": {**entry(), "crc": 1}}), f4),
        "missing_offsets": raw_file(js({"a": {"dtype": "F32", "shape": [4]}}), f4),
        "bad_dtype": raw_file(js({"a": entry(dtype="F12")}), f4),
        "dtype_not_string": raw_file(js({"a": entry(dtype=32)}), f4),
        "f8": raw_file(js({"a": entry(dtype="F8_E4M3", shape=(4,), offsets=(0, 4))}), b"\x38\x40\x44\x48"),
        "f4_half_byte": raw_file(js({"a": entry(dtype="F4", shape=(3,), offsets=(0, 2))}), b"\x11\x22"),
        "dtype_bytes_disagree": raw_file(js({"a": entry(shape=(3,), offsets=(0, 16))}), f4),
        "overlap": raw_file(js({"a": entry(offsets=(0, 16)), "b": entry(offsets=(8, 24))}), f4 + f4[:8]),
        "gap": raw_file(js({"a": entry(shape=(2,), offsets=(0, 8)), "b": entry(shape=(2,), offsets=(12, 20))}),
                        f4 + f4[:4]),
        "trailing_bytes": raw_file(js({"a": entry(shape=(2,), offsets=(0, 8))}), f4),
        "offsets_out_of_bounds": raw_file(js({"a": entry(offsets=(0, 16))}), f4[:8]),
        "huge_shape_10gb": raw_file(js({"a": entry(shape=(50000, 50000), offsets=(0, 10_000_000_000))}), f4),
        "shape_overflow": raw_file(js({"a": entry(shape=(1 << 32, 1 << 32), offsets=(0, 0))})),
        "negative_shape": raw_file(js({"a": entry(shape=(-1,), offsets=(0, 0))})),
        "fractional_shape": raw_file('{"a":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}}', f4),
        "offsets_reversed": raw_file(js({"a": entry(shape=(0,), offsets=(16, 0))}), f4),
        "offsets_three": raw_file(js({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8, 16]}}), f4),
        # JSON keeps the last of two equal keys; the reader must not.
        "duplicate_tensor": raw_file('{"a":' + js(entry()) + ',"a":' + js(entry(offsets=(16, 32))) + "}", f4 + f4),
        "duplicate_field": raw_file('{"a":{"dtype":"F32","dtype":"I32","shape":[4],"data_offsets":[0,16]}}', f4),
        # A name with a terminal escape, a newline and invalid-UTF-8-free control bytes.
        "control_name": raw_file(js({"a\u001b[31m\nb": entry(dtype="F12")}), f4),
    }


def bad_sharded(directory):
    """Shards a (x, y) and b (z, plus y again in b_dup), and indexes that go wrong."""
    ones = np.ones(2, dtype=np.float32)
    write(os.path.join(directory, "a.safetensors"),
          safetensors({"x": Tensor("F32", ones), "y": Tensor("F32", ones)}))
    write(os.path.join(directory, "b.safetensors"), safetensors({"z": Tensor("F32", ones)}))
    write(os.path.join(directory, "b_dup.safetensors"),
          safetensors({"z": Tensor("F32", ones), "y": Tensor("F32", ones)}))
    good = {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}
    indexes = {
        "escape": {"weight_map": {"x": "../a.safetensors"}},
        "subdir": {"weight_map": {"x": "sub/a.safetensors"}},
        "dotdot": {"weight_map": {"x": ".."}},
        "absolute": {"weight_map": {"x": "/etc/passwd"}},
        "missing_in_shard": {"weight_map": {**good, "w": "b.safetensors"}},
        "not_in_map": {"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}},
        "two_shards": {"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b_dup.safetensors"}},
        "no_shard_file": {"weight_map": {**good, "q": "c.safetensors"}},
        "no_weight_map": {"metadata": {"total_size": 24}},
        "shard_not_string": {"weight_map": {"x": 1}},
    }
    for name, index in indexes.items():
        write(os.path.join(directory, name + ".index.json"), json.dumps(index, indent=2).encode())
    write(os.path.join(directory, "duplicate.index.json"),
          b'{"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "x": "b.safetensors"}}')
    write(os.path.join(directory, "not_json.index.json"), b'{"weight_map": ')


def main():
    for d in ("good", "sharded", "bad", "bad_sharded"):  # README.md stays
        shutil.rmtree(os.path.join(OUT, d), ignore_errors=True)
    good = os.path.join(OUT, "good")
    write_good(good, "dtypes", every_dtype())
    t, order = multi()
    write_good(good, "multi", t, metadata={"format": "pt", "note": "written by make_safetensors_fixtures.py"},
               data_order=order)
    # The header's length odd: 8 + N is odd, so no tensor's data is aligned.
    odd = unaligned()
    pad = b"" if len(safetensors(odd, pad_to=1)) % 2 == 1 else b" "
    write_good(good, "unaligned", odd, pad_to=1, extra_header=pad)
    write(os.path.join(good, "no_tensors.safetensors"), raw_file('{"__metadata__":{"format":"pt"}}   '))

    # A sharded checkpoint: the layer's tensors over two shards, listed by name in the
    # index (as transformers writes it), with config.json beside them.
    sharded = os.path.join(OUT, "sharded")
    shard_of = {}
    shards = {"model-00001-of-00002.safetensors": {k: v for k, v in t.items() if "k_proj" in k or "o_proj" in k},
              "model-00002-of-00002.safetensors": {k: v for k, v in t.items() if "q_proj" in k or "v_proj" in k}}
    total = 0
    for shard, tensors in shards.items():
        write_good(sharded, shard[:-len(".safetensors")], tensors, metadata={"format": "pt"})
        for name, tensor in tensors.items():
            shard_of[name] = shard
            total += len(tensor.raw)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(shard_of.items()))}
    write(os.path.join(sharded, "model.safetensors.index.json"), json.dumps(index, indent=2).encode() + b"\n")
    write(os.path.join(sharded, "config.json"),
          json.dumps({"model_type": "llama", "hidden_size": 4, "num_attention_heads": 2}, indent=2).encode() + b"\n")

    for name, data in hostile().items():
        write(os.path.join(OUT, "bad", name + ".safetensors"), data)
    bad_sharded(os.path.join(OUT, "bad_sharded"))

    # Every good file parses again from the description and covers its data exactly.
    for directory in (good, sharded):
        for f in sorted(os.listdir(directory)):
            if f.endswith(".safetensors"):
                read_back(os.path.join(directory, f))
    b = open(os.path.join(good, "unaligned.safetensors"), "rb").read()
    assert (8 + struct.unpack("<Q", b[:8])[0]) % 2 == 1, "unaligned.safetensors: data should start at an odd offset"
    print("wrote", OUT)


if __name__ == "__main__":
    main()
