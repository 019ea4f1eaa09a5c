#!/usr/bin/python3
"""Write the seed corpora of the libFuzzer targets (tests/fuzz/fuzz_*.cpp).

    /usr/bin/python3 tests/fuzz/make_seeds.py OUTDIR

creates OUTDIR/fuzz_npy, OUTDIR/fuzz_npz, OUTDIR/fuzz_json, OUTDIR/fuzz_load,
OUTDIR/fuzz_stream, OUTDIR/fuzz_safetensors and OUTDIR/fuzz_torch from the project's own
files, good and bad alike:

    * data/*.json, data/*.npz          the example bundles
    * tests/golden/*.npz, cases.json   the golden cases (their spec drives fuzz_load)
    * tests/fixtures/{good,bad}/*      the io-layer fixtures
    * tests/fixtures/checkpoints/safetensors/*/*.safetensors   the .safetensors fixtures
    * tests/fixtures/checkpoints/torch_*.pt   PyTorch zip state dicts (fuzz_torch)

plus every .npy member of every .npz (as fuzz_npy seeds) and a few small hand-made
files that reach corners the project's files do not (dtypes, header versions, zip64,
deflate, non-finite strings, archives whose records disagree). fuzz_load seeds are a
spec byte (see fuzz_load.cpp) followed by a bundle; fuzz_stream seeds a limit byte and
a source byte (see fuzz_stream.cpp) followed by what arrives on standard input or a pipe. Standard library only; the output is deterministic.
"""

import glob
import io
import json
import os
import struct
import sys
import zipfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXED_DATE = (1980, 1, 1, 0, 0, 0)

# Array names make_problem() knows; golden archives also hold expected/* results.
INPUT_NAMES = {
    "x", "memory", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "key_padding_mask",
    "query_tokens", "key_tokens", "in_proj_weight", "in_proj_bias", "q_proj_weight",
    "k_proj_weight", "v_proj_weight", "out_proj.weight", "out_proj.bias",
}


def files(pattern):
    return sorted(glob.glob(os.path.join(ROOT, pattern)))


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Corpus:
    """One target's seed directory; files are named after what they came from."""

    def __init__(self, outdir, target):
        self.dir = os.path.join(outdir, target)
        os.makedirs(self.dir, exist_ok=True)
        self.names = set()

    def add(self, name, data):
        name = name.replace("/", "_")
        assert name not in self.names, name
        self.names.add(name)
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)


def npy(descr, shape, data, fortran=False, version=1):
    """A .npy file from its parts, padded like numpy (data on a 64-byte boundary)."""
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}"
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode("latin-1") + data


def f8(*values):
    return struct.pack(f"<{len(values)}d", *values)


def npz(members, compress=False):
    """An .npz archive of {name: npy bytes}, as np.savez / np.savez_compressed write it."""
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name + ".npy", FIXED_DATE)
            info.compress_type = method
            z.writestr(info, data)
    return buf.getvalue()


def npz_members(path):
    """{member name: bytes} of an archive, or {} when zipfile cannot read it."""
    try:
        with zipfile.ZipFile(path) as z:
            return {i.filename: z.read(i) for i in z.infolist()}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError):
        return {}


def spec_byte(heads=1, causal=False, bottom_right=False, torch=False, scale=False, variant=0):
    """The first byte of a fuzz_load input (bit layout in fuzz_load.cpp)."""
    return bytes([(heads - 1) & 3 | causal << 2 | bottom_right << 3 | torch << 4 | scale << 5 | variant << 6])


# ---- hand-made inputs -----------------------------------------------------------------

def crafted_npy():
    return {
        "f8_scalar.npy": npy("<f8", (), f8(1.5)),
        "f8_empty.npy": npy("<f8", (0,), b""),
        "f8_2x2.npy": npy("<f8", (2, 2), f8(1, -2, float("inf"), float("nan"))),
        "f8_fortran.npy": npy("<f8", (2, 3), f8(1, 2, 3, 4, 5, 6), fortran=True),
        "f4_be.npy": npy(">f4", (3,), struct.pack(">3f", 1, 2, 3)),
        "f2.npy": npy("<f2", (2,), struct.pack("<2H", 0x3C00, 0xFC00)),
        "i8_3d.npy": npy("<i8", (1, 2, 1), struct.pack("<2q", -1, 2**62)),
        "u2_fortran_3d.npy": npy("<u2", (2, 1, 2), struct.pack("<4H", 1, 2, 3, 4), fortran=True),
        "b1.npy": npy("|b1", (3,), b"\x00\x01\x02"),
        "U3.npy": npy("<U3", (2,), "ab\0".encode("utf-32-le") + "\U0001F600xy".encode("utf-32-le")),
        "U2_be_fortran.npy": npy(">U2", (2, 2), "abcdefgh".encode("utf-32-be"), fortran=True),
        "v2.npy": npy("<f8", (1,), f8(7), version=2),
        "v3.npy": npy("<f8", (1,), f8(7), version=3),
        "long_suffix.npy": npy("<f8", ("1L", "2L"), f8(1, 2)),
    }


def crafted_npz():
    x = npy("<f8", (2, 2), f8(1, 2, 3, 4))
    stored = npz({"x": x, "W_Q": x})
    comment = bytearray(stored)
    comment[-2:] = struct.pack("<H", 5)  # end record announces a 5-byte comment
    return {
        "stored.npz": stored,
        "deflated.npz": npz({"x": x, "tokens": npy("<U1", (2,), "ab".encode("utf-32-le"))}, compress=True),
        "empty.npz": npz({}),
        "comment.npz": bytes(comment) + b"hello",
        "nested_name.npz": npz({"expected/x": x}),
    }


def zip_lies():
    """Archives whose records disagree (the reader must refuse each): twelve directory
    entries sharing one deflated member, an entry whose local header lies inside another
    member's bytes, a local header naming its member otherwise, end records counting 0 or
    too many entries."""
    def local(name, data, method=0, size=None):
        crc = zlib.crc32(data if method == 0 else zlib.decompress(data, -15))
        return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data),
                           len(data) if size is None else size, len(name), 0) + name.encode() + data

    def entry(name, offset, data, method=0, size=None):
        crc = zlib.crc32(data if method == 0 else zlib.decompress(data, -15))
        return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data),
                           len(data) if size is None else size, len(name), 0, 0, 0, 0, 0, offset) + name.encode()

    def end(count, central, offset):
        return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), offset, 0)

    x = npy("<f8", (2, 2), f8(1, 2, 3, 4))
    big = npy("<f8", (4096,), bytes(8 * 4096))
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = z.compress(big) + z.flush()
    out = local("x.npy", comp, 8, len(big))
    names = ["x", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "memory", "key_padding_mask", "in_proj_weight"]
    central = b"".join(entry(n + ".npy", 0, comp, 8, len(big)) for n in names)
    shared = out + central + end(len(names), central, len(out))

    inner = local("W_Q.npy", x)
    outer = local("x.npy", x + inner)
    central = entry("x.npy", 0, x + inner) + entry("W_Q.npy", 30 + 5 + len(x), x)
    overlap = outer + central + end(2, central, len(outer))

    out = local("x.npy", x) + local("W_K.npy", x)
    central = entry("x.npy", 0, x) + entry("W_Q.npy", 30 + 5 + len(x), x)
    renamed = out + central + end(2, central, len(out))
    count0 = out + central + end(0, central, len(out))
    count3 = out + central + end(3, central, len(out))
    return {"lie_shared_12.npz": shared, "lie_overlap.npz": overlap, "lie_local_name.npz": renamed,
            "lie_count_0.npz": count0, "lie_count_3.npz": count3}


def stream_seeds(json_seeds, npz_seeds):
    """fuzz_stream inputs: a limit byte, a source byte (bit 0: pipe), then the bytes."""
    out = {}
    for i, (name, data) in enumerate(sorted(json_seeds.items()) + sorted(npz_seeds.items())):
        if len(data) > 30000:
            continue
        limit = 7 if len(data) > 4096 else 6  # 1 MiB, or 4 KiB (tight for most)
        out[f"{name}.stream"] = bytes([limit, (i * 2) & 0xFE]) + data
        out[f"{name}.pipe"] = bytes([limit, 1]) + data
    blanks = b" " * 2000
    out["over_limit_blanks"] = bytes([5, 6]) + blanks                      # 2000 > 1000: refused
    out["at_limit"] = bytes([5, 8]) + b"{" + b" " * 998 + b"}"              # exactly 1000
    out["over_limit_by_one"] = bytes([5, 9]) + b"{" + b" " * 999 + b"}"     # 1001 through the pipe
    out["empty_limit_0"] = bytes([0, 0])
    return out


def crafted_json():
    return {
        "bundle_nonfinite.json": b'{"x": [[1, "inf"], ["-inf", "nan"]], "W_Q": [[true, false]]}',
        "bundle_tokens.json": b'{"query_tokens": [["a", "b"], ["c", "d"]], "key_tokens": []}',
        "bundle_empty.json": b"{}",
        "list_3d.json": b"[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]",
        "list_empty.json": b"[[], []]",
        "scalar.json": b"3.25",
        "object_one.json": b'{"W_K": [1e300, -1e-300, 0]}',
        "deep.json": b"[" * 33 + b"1" + b"]" * 33,
    }


def crafted_load():
    def js(obj):
        return json.dumps(obj).encode()

    I2 = [[1, 0], [0, 1]]
    return {
        # self-attention, 2 heads of width 1, padding and tokens
        "self_pad.json": spec_byte(heads=2, causal=True) + js({
            "x": [[[0.5, -1], [2, 0.25], [0, 0]]], "W_Q": I2, "W_K": I2, "W_V": I2,
            "key_padding_mask": [[0, 0, 1]], "query_tokens": ["a", "b", "<pad>"]}),
        # every key PAD: fully masked rows
        "all_pad.json": spec_byte(variant=1) + js({
            "x": [[1, 2], [3, 4]], "W_Q": I2, "W_K": I2, "W_V": I2, "W_O": [[1], [2]], "b_O": [0.5],
            "key_padding_mask": [True, True]}),
        # cross-attention, Tq > Tk, bottom-right causal: the first rows see nothing
        "cross_br.json": spec_byte(causal=True, bottom_right=True, variant=2) + js({
            "x": [[1, 0], [0, 1], [1, 1]], "memory": [[2, 0, 1]], "W_Q": I2,
            "W_K": [[1, 0], [0, 1], [1, 1]], "W_V": [[1], [0], [2]], "b_V": [1]}),
        # PyTorch's in_proj layout
        "mha.json": spec_byte(heads=2, torch=True, variant=3) + js({
            "x": [[1, 2], [3, 4]], "in_proj_weight": [[1, 0], [0, 1]] * 3, "in_proj_bias": [0] * 6,
            "out_proj.weight": I2, "out_proj.bias": [0, 1]}),
        # non-finite input (warned about) and an explicit scale
        "nonfinite.json": spec_byte(scale=True) + js({
            "x": [[1, "inf"], ["nan", 0]], "W_Q": I2, "W_K": I2, "W_V": I2}),
        # the same as an npz, deflated
        "self.npz": spec_byte(heads=2) + npz({
            "x": npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4)),
            "W_Q": npy("<f8", (2, 2), f8(1, 0, 0, 1)), "W_K": npy("<i2", (2, 2), struct.pack("<4h", 1, 0, 0, 1)),
            "W_V": npy("|b1", (2, 2), b"\x01\x00\x00\x01"),
            "key_padding_mask": npy("|b1", (2,), b"\x00\x01")}, compress=True),
    }


# ---- the corpora ----------------------------------------------------------------------

def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_seeds.py OUTDIR")
    out = sys.argv[1]
    npy_c, npz_c, json_c, load_c, stream_c, torch_c = (
        Corpus(out, t) for t in ("fuzz_npy", "fuzz_npz", "fuzz_json", "fuzz_load", "fuzz_stream", "fuzz_torch"))
    rel = lambda p: os.path.relpath(p, ROOT)

    for p in files("tests/fixtures/*/*.npy"):
        npy_c.add(rel(p), read(p))
    seen = set()  # identical members (the golden archives share many) are seeded once
    for p in files("data/*.npz") + files("tests/golden/*.npz") + files("tests/fixtures/*/*.npz"):
        npz_c.add(rel(p), read(p))
        for name, data in npz_members(p).items():
            if data in seen:
                continue
            seen.add(data)
            npy_c.add(rel(p) + "." + name, data)
    for p in files("data/*.json") + files("tests/fixtures/*/*.json") + files("tests/golden/*.json"):
        json_c.add(rel(p), read(p))

    # fuzz_load: the example bundles with the spec their README gives them ...
    data_specs = {"sentence": spec_byte(heads=2), "causal": spec_byte(causal=True), "padded": spec_byte(heads=2),
                  "cross": spec_byte(heads=2), "induction": spec_byte(causal=True), "reverse": spec_byte()}
    for name, spec in data_specs.items():
        for ext in ("json", "npz"):
            p = os.path.join(ROOT, "data", f"{name}.{ext}")
            if os.path.exists(p):
                load_c.add(f"data_{name}.{ext}", spec + read(p))
    # ... and the golden cases' inputs (their expected/* members dropped) with theirs.
    cases_path = os.path.join(ROOT, "tests", "golden", "cases.json")
    cases = json.load(open(cases_path)) if os.path.exists(cases_path) else []
    for i, case in enumerate(cases):
        p = os.path.join(ROOT, "tests", "golden", case["name"] + ".npz")
        members = {n[:-4]: d for n, d in npz_members(p).items() if n[:-4] in INPUT_NAMES}
        if not members:
            continue
        spec = spec_byte(heads=case["heads"], causal=case["causal"], bottom_right=case["causal_align"] == "bottom-right",
                         torch=case["layout"] == "torch", scale=case["scale"] is not None, variant=i % 4)
        load_c.add(f"golden_{case['name']}.npz", spec + npz(members))

    for corpus, crafted in ((npy_c, crafted_npy()), (npz_c, {**crafted_npz(), **zip_lies()}), (json_c, crafted_json()),
                            (load_c, crafted_load())):
        for name, data in crafted.items():
            corpus.add("crafted_" + name, data)
    # fuzz_stream: the JSON seeds and the small archives, through a stream and a pipe.
    json_seeds = {rel(p): read(p) for p in files("data/*.json") + files("tests/fixtures/*/*.json")}
    json_seeds.update({"crafted_" + k: v for k, v in crafted_json().items()})
    npz_seeds = {"crafted_" + k: v for k, v in {**crafted_npz(), **zip_lies()}.items()}
    for name, data in stream_seeds(json_seeds, npz_seeds).items():
        stream_c.add(name, data)
    st_c = Corpus(out, "fuzz_safetensors")
    for p in files("tests/fixtures/checkpoints/safetensors/*/*.safetensors"):
        st_c.add(rel(p), read(p))
    # fuzz_torch: every PyTorch fixture small enough for the target's -max_len.
    for p in files("tests/fixtures/checkpoints/torch_*.pt"):
        if os.path.getsize(p) <= 32768:
            torch_c.add(rel(p), read(p))
    # fuzz_tokenizer_json: the hand-made tokenizer.json fixtures and the refused ones kept
    # as regressions; fuzz_tokenizer_encode: short texts, the first byte picking a tokenizer.
    # fuzz_gguf: the GGUF files kept as regressions (every type and metadata type, and
    # broken ones), written by tests/py/test_gguf.py's writer.
    gg_c = Corpus(out, "fuzz_gguf")
    for p in files("tests/fuzz/regressions/fuzz_gguf/*.gguf"):
        gg_c.add(rel(p), read(p))
    tj_c = Corpus(out, "fuzz_tokenizer_json")
    for p in files("tests/fixtures/tokenizers/*/tokenizer.json") + files("tests/fuzz/regressions/fuzz_tokenizer_json/*.json"):
        tj_c.add(rel(p), read(p))
    te_c = Corpus(out, "fuzz_tokenizer_encode")
    texts = ["Hello world! 123", "The end.\n\n  indented\tline", "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m \ufb01",
             "<|endoftext|>[MASK] <s> ab <x> 12345", "\u4e2d\u6587 \U0001F600 \u0645\u0631\u062d\u0628\u0627"]
    for i, text in enumerate(texts):
        for pick in range(6):
            te_c.add(f"text{i}_tokenizer{pick}", bytes([pick]) + text.encode("utf-8"))
    for c in (npy_c, npz_c, json_c, load_c, stream_c, st_c, torch_c, gg_c, tj_c, te_c):
        print(f"{os.path.basename(c.dir)}: {len(c.names)} seeds")


if __name__ == "__main__":
    main()
