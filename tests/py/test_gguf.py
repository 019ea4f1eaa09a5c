#!/usr/bin/env python3
"""GGUF files (llama.cpp's container): the metadata and tensor listing, ggml's types
dequantized bit for bit, and hostile files refused in one line.

The files are written here from the GGUF specification (ggml's docs/gguf.md), and the
quantized blocks dequantized by numpy from ggml's block layouts (ggml-common.h) and
dequantize_row_* formulas, in float32 as ggml computes them: neither shares code with
attnscope's reader. attnscope's dequantized values are seen through a run: with x = I and
one head of a `--prefix` layer, the Q, K and V stages are W_Q, W_K and W_V themselves.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import CliTestCase, run_text  # noqa: E402

# ---- a GGUF writer, from the specification --------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
          U64: "<Q", I64: "<q", F64: "<d"}

# ggml type: (number, elements per block, bytes per block)
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
         "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
         "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2),
         "IQ2_XXS": (16, 256, 66)}


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == STRING:
        return gguf_string(value)
    if vtype == ARRAY:
        item, items = value
        return struct.pack("<IQ", item, len(items)) + b"".join(gguf_value(item, v) for v in items)
    return struct.pack(SCALAR[vtype], value)


def gguf_bytes(metadata, tensors, version=3, alignment=32, offsets=None, counts=None):
    """A GGUF file. metadata: (key, value type, value) triples (an array's value is
    (item type, items)); tensors: (name, ggml type number, dims innermost first, data).
    Data are placed one after another at multiples of `alignment` unless `offsets` says
    where; `counts` overrides the header's (tensor count, key count)."""
    out = b"GGUF" + struct.pack("<I", version)
    n_tensors, n_kv = counts or (len(tensors), len(metadata))
    out += struct.pack("<QQ", n_tensors, n_kv)
    for key, vtype, value in metadata:
        out += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    placed, at = [], 0
    for k, (name, tid, dims, data) in enumerate(tensors):
        off = offsets[k] if offsets else at
        placed.append(off)
        at = -(-(off + len(data)) // alignment) * alignment
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", tid, off)
    out += b"\0" * (-len(out) % alignment)
    data_start = len(out)
    body = bytearray(max([o + len(t[3]) for o, t in zip(placed, tensors)], default=0))
    for off, t in zip(placed, tensors):
        body[off:off + len(t[3])] = t[3]
    return out + bytes(body), data_start


# ---- ggml's blocks, dequantized by numpy ------------------------------------------------------

# Where each type's float16 scales are in its block.
HALVES = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82], "Q3_K": [108],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def random_blocks(name, n_blocks, rng):
    """Random block bytes whose float16 scales are finite (any finite half: zero,
    subnormal, up to 65504)."""
    _, _, size = TYPES[name]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for at in HALVES[name]:
        h = rng.integers(0, 1 << 16, size=n_blocks).astype(np.uint16)
        h = np.where((h >> 10 & 31) == 31, h & ~np.uint16(1 << 10), h).astype(np.uint16)
        b[:, at:at + 2] = h.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return b


def half(b, at):
    return b[:, at:at + 2].copy().view("<f2").astype(np.float32)[:, 0]


def f32(a):
    return np.asarray(a).astype(np.float32)


def deq_simple(name, b):
    """Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 32 elements a block."""
    d = half(b, 0)[:, None]
    if name == "Q8_0":
        return f32(b[:, 2:34].view(np.int8)) * d
    has_m = name in ("Q4_1", "Q5_1")
    m = half(b, 2)[:, None] if has_m else None
    at = 4 if has_m else 2
    qs = b[:, at + 4:at + 20] if name[1] == "5" else b[:, at:at + 16]
    lo, hi = (qs & 15).astype(np.int64), (qs >> 4).astype(np.int64)
    if name[1] == "5":
        qh = b[:, at:at + 4].copy().view("<u4").astype(np.int64)  # (nb, 1)
        j = np.arange(16)
        lo |= ((qh >> j) & 1) << 4
        hi |= ((qh >> (j + 16)) & 1) << 4
    q = np.concatenate([lo, hi], axis=1)
    if has_m:
        return f32(q) * d + m
    return f32(q - (16 if name[1] == "5" else 8)) * d


def k_scale_min(s, j):
    """Q4_K/Q5_K: the j-th six-bit scale and min from the 12 bytes s (nb, 12)."""
    s = s.astype(np.int64)
    if j < 4:
        return s[:, j] & 63, s[:, j + 4] & 63
    return (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4), (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)


def deq_k(name, b):
    nb = len(b)
    out = np.empty((nb, 256), np.float32)
    if name == "Q2_K":
        scales, qs, d, dmin = b[:, :16].astype(np.int64), b[:, 16:80].astype(np.int64), half(b, 80), half(b, 82)
        for g in range(16):
            n, shift, h = g // 8, (g % 8) // 2 * 2, g % 2
            q = (qs[:, n * 32 + h * 16:n * 32 + h * 16 + 16] >> shift) & 3
            dl, ml = d * f32(scales[:, g] & 15), dmin * f32(scales[:, g] >> 4)
            out[:, g * 16:g * 16 + 16] = dl[:, None] * f32(q) - ml[:, None]
    elif name == "Q3_K":
        hm, qs, s, d = b[:, :32].astype(np.int64), b[:, 32:96].astype(np.int64), b[:, 96:108].astype(np.int64), half(b, 108)
        for g in range(16):
            low = s[:, g] & 15 if g < 8 else s[:, g - 8] >> 4
            scale = low | ((s[:, 8 + g % 4] >> (2 * (g // 4))) & 3) << 4
            n, j, h = g // 8, (g % 8) // 2, g % 2
            k = slice(h * 16, h * 16 + 16)
            q = (qs[:, n * 32:n * 32 + 32][:, k] >> (2 * j)) & 3
            q = q - np.where(hm[:, k] & (1 << (n * 4 + j)), 0, 4)
            out[:, g * 16:g * 16 + 16] = (d * f32(scale - 32))[:, None] * f32(q)
    elif name in ("Q4_K", "Q5_K"):
        d, dmin, s = half(b, 0), half(b, 2), b[:, 4:16]
        qs = (b[:, 48:176] if name == "Q5_K" else b[:, 16:144]).astype(np.int64)
        qh = b[:, 16:48].astype(np.int64)
        for j in range(8):
            sc, m = k_scale_min(s, j)
            q = qs[:, j // 2 * 32:j // 2 * 32 + 32]
            q = q & 15 if j % 2 == 0 else q >> 4
            if name == "Q5_K":
                q = q + ((qh >> j) & 1) * 16
            out[:, j * 32:j * 32 + 32] = (d * f32(sc))[:, None] * f32(q) - (dmin * f32(m))[:, None]
    else:  # Q6_K
        ql, qh, sc, d = b[:, :128].astype(np.int64), b[:, 128:192].astype(np.int64), b[:, 192:208].view(np.int8), half(b, 208)
        for n in range(2):
            for r in range(4):
                lo = ql[:, n * 64 + (32 if r % 2 else 0):][:, :32]
                lo = lo & 15 if r < 2 else lo >> 4
                q = (lo | ((qh[:, n * 32:n * 32 + 32] >> (2 * r)) & 3) << 4) - 32
                for half_ in range(2):
                    scale = sc[:, n * 8 + half_ + 2 * r]
                    cols = slice(n * 128 + 32 * r + 16 * half_, n * 128 + 32 * r + 16 * half_ + 16)
                    out[:, cols] = (d * f32(scale))[:, None] * f32(q[:, 16 * half_:16 * half_ + 16])
    return out


def dequantize(name, b):
    return deq_simple(name, b) if TYPES[name][1] == 32 else deq_k(name, b)


# ---- tests ----------------------------------------------------------------------------------------

N = 256  # rows and row length of every weight here (whole blocks of every type)


class GgufCase(CliTestCase):

    def write(self, name, metadata, tensors, **kw):
        data, _ = gguf_bytes(metadata, tensors, **kw)
        p = self.path(name)
        p.write_bytes(data)
        return p

    def stages(self, path, names="Q,K,V"):
        """Q, K and V of one head over x = I: W_Q, W_K and W_V as attnscope reads them."""
        src = self.save_npz("in.npz", x=np.eye(N))
        out = self.path("out.npz")
        r = run_text("run", "--checkpoint", path, src, "--prefix", "m.", "--heads", "1", "--stages", names,
                     "--dump", out, "-q", "--force")
        self.assert_ok(r, stdout_empty=True)
        with np.load(out) as z:
            return {n: z[n][0] for n in z.files}


class Dequantize(GgufCase):
    """Every readable ggml type, random blocks, equal to numpy's dequantization bit for bit."""

    def test_quantized_types(self):
        rng = np.random.default_rng(33)
        names = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
        for k in range(0, len(names), 3):
            group = (names[k:k + 3] + ["Q8_0", "Q8_0"])[:3]
            tensors, want = [], {}
            for w, name in zip(("W_Q", "W_K", "W_V"), group):
                tid, block, _ = TYPES[name]
                b = random_blocks(name, N * N // block, rng)
                want[w[-1]] = dequantize(name, b).reshape(N, N)
                tensors.append((f"m.{w}", tid, [N, N], b.tobytes()))
            with self.subTest(types=group):
                f = self.write(f"q{k}.gguf", [("general.architecture", STRING, "test")], tensors)
                got = self.stages(f)
                for s in "QKV":
                    self.assertTrue(np.isfinite(want[s]).all())
                    np.testing.assert_array_equal(got[s], want[s].astype(np.float64), err_msg=f"{group} {s}")
                    # -0.0 is 0.0 here, but the sign of everything else must match too
                    self.assertEqual(np.signbit(got[s][got[s] != 0]).tolist(),
                                     np.signbit(want[s][want[s] != 0]).tolist())

    def test_float_types_and_version_2(self):
        rng = np.random.default_rng(34)
        w32 = rng.standard_normal((N, N)).astype(np.float32)
        w16 = rng.standard_normal((N, N)).astype(np.float16)
        wbf = (rng.standard_normal((N, N)).astype(np.float32).view(np.uint32) & 0xffff0000).view(np.float32)
        wbf[0, :4] = [3.3895313892515355e+38, -1.1754943508222875e-38, 9.183549615799121e-41, -0.0]
        w16[0, :4] = [65504.0, -6.103515625e-05, 5.960464477539063e-08, -0.0]
        tensors = [("m.W_Q", 0, [N, N], w32.tobytes()), ("m.W_K", 1, [N, N], w16.astype("<f2").tobytes()),
                   ("m.W_V", 30, [N, N], (wbf.view(np.uint32) >> 16).astype("<u2").tobytes())]
        for version in (2, 3):
            with self.subTest(version=version):
                got = self.stages(self.write(f"f{version}.gguf", [], tensors, version=version, alignment=32))
                np.testing.assert_array_equal(got["Q"], w32.astype(np.float64))
                np.testing.assert_array_equal(got["K"], w16.astype(np.float64))
                np.testing.assert_array_equal(got["V"], wbf.astype(np.float64))

    def test_shapes_are_outermost_first_and_alignment_is_read(self):
        # A non-square W_V (256 inputs, 64 outputs) is stored with ne = [64, 256]: numpy's
        # (256, 64). general.alignment 64 moves the data section and the offsets.
        rng = np.random.default_rng(35)
        wq = rng.standard_normal((N, 64)).astype(np.float32)
        tensors = [(f"m.W_{s}", 0, [64, N], (wq * (k + 1)).astype(np.float32).tobytes()) for k, s in enumerate("QKV")]
        f = self.write("a.gguf", [("general.alignment", U32, 64)], tensors, alignment=64)
        got = self.stages(f)
        for k, s in enumerate("QKV"):
            np.testing.assert_array_equal(got[s], (wq * (k + 1)).astype(np.float32).astype(np.float64))


class Inspect(GgufCase):
    """`inspect FILE.gguf`: the metadata of every type and the tensors, escaped."""

    def test_listing(self):
        meta = [("general.architecture", STRING, "llama"), ("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000),
                ("i16", I16, -30000), ("u32", U32, 4000000000), ("i32", I32, -2000000000),
                ("f32", F32, 0.5), ("flag", BOOL, True), ("u64", U64, 2 ** 63), ("i64", I64, -2 ** 62),
                ("f64", F64, 0.1), ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "a\x1bb", "c"] * 1000)),
                ("scores", ARRAY, (F32, [0.25, -1.5] * 10)),
                ("nested", ARRAY, (ARRAY, [(I32, [1, 2]), (STRING, ["x"])])),
                ("long", STRING, "w" * 500), ("bad\nkey", STRING, "\x07bell")]
        blocks = random_blocks("Q4_K", 2, np.random.default_rng(1))
        tensors = [("blk.0.attn_q.weight", 12, [256, 2], blocks.tobytes()),
                   ("token_embd.weight", 0, [8, 3], np.zeros(24, np.float32).tobytes()),
                   ("odd.weight", 16, [256], bytes(66))]
        r = run_text("inspect", self.write("m.gguf", meta, tensors))
        self.assert_ok(r)
        out = r.out
        listing = out.split("gguf: ", 1)[1].split("\nconfig: ", 1)[0]
        for line in listing.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertIn("gguf: version 3, alignment 32", out)
        self.assertIn("17 metadata keys", out)
        for want in ("'llama'", "200", "-5", "60000", "-30000", "4000000000", "-2000000000", "0.5", "true",
                     str(2 ** 63), str(-2 ** 62), "0.10000000000000001", "bad\\nkey", "bell'", "'wwww"):
            self.assertIn(want, out)
        for want in (r"array\[string x 3000\] +'<s>', 'a\\x1bb', 'c', '<s>', \.\.\.",
                     r"array\[float32 x 20\] +0.25, -1.5, 0.25", r"array\[array x 2\] +\[2 int32\], \[1 string\]"):
            self.assertRegex(out, want)
        self.assertNotIn("w" * 100, out)
        self.assertNotIn("\x1b", out)
        self.assertNotIn("\x07", out)
        lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and "weight" in line}
        self.assertRegex(lines["blk.0.attn_q.weight"], r"Q4_K \(2, 256\) +288 bytes +at \d+")
        self.assertRegex(lines["token_embd.weight"], r"float32 \(3, 8\) +96 bytes +at \d+")
        self.assertRegex(lines["odd.weight"], r"IQ2_XXS \(256,\) +66 bytes")

    def test_json(self):
        data, start = gguf_bytes([("general.alignment", U32, 64), ("t", ARRAY, (STRING, [str(k) for k in range(20)])),
                                  ("x", F64, 0.1)], [("w", 12, [256, 2], bytes(288)), ("e", 1, [3], bytes(6))],
                                 alignment=64)
        p = self.path("j.gguf")
        p.write_bytes(data)
        r = run_text("inspect", p, "--json")
        self.assert_ok(r)
        doc = json.loads(r.out)
        g = doc["gguf"]
        self.assertEqual((doc["format"], g["version"], g["alignment"], g["data_offset"]), ("gguf", 3, 64, start))
        self.assertEqual(g["metadata"][1], {"key": "t", "type": "array", "value": {
            "count": 20, "first": [str(k) for k in range(8)], "item_type": "string"}})
        self.assertEqual(g["metadata"][2], {"key": "x", "type": "float64", "value": 0.1})
        self.assertEqual([(t["name"], t["dtype"], t["shape"], t["bytes"], t["offset"]) for t in doc["tensors"]],
                         [("w", "Q4_K", [2, 256], 288, start), ("e", "float16", [3], 6, start + 320)])

    def test_unsupported_type_refused_by_name_when_read(self):
        f = self.write("iq.gguf", [], [("m.W_Q", 16, [N, N], bytes(66 * N)), ("m.W_K", 0, [N, N], bytes(4 * N * N)),
                                        ("m.W_V", 0, [N, N], bytes(4 * N * N))])
        self.assert_ok(run_text("inspect", f))
        r = run_text("run", "--checkpoint", f, self.save_npz("in.npz", x=np.eye(N)), "--prefix", "m.",
                     "--heads", "1")
        self.assert_error(r, str(f), "'m.W_Q'", "IQ2_XXS", "not supported")


class Hostile(GgufCase):
    """Broken and hostile files: one line naming the file and what is wrong, exit 2."""

    def refused(self, data, *fragments, name="bad.gguf"):
        p = self.path(name)
        p.write_bytes(data)
        self.assert_error(run_text("inspect", p), str(p), *fragments)

    def good(self):
        return gguf_bytes([("general.architecture", STRING, "llama")],
                          [("a", 0, [4], bytes(16)), ("b", 0, [4], bytes(16))])

    def test_header(self):
        self.refused(b"GGUF", "the version", "ends at byte 4")
        self.refused(b"GGML" + bytes(20), "not a GGUF file", name="x.gguf")
        self.refused(b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1", "expected 2 or 3")
        self.refused(b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "a big-endian file")

    def test_truncated_anywhere(self):
        data, start = self.good()
        for cut in range(0, start + 1, 7):
            with self.subTest(cut=cut):
                self.refused(data[:cut])
        self.refused(data[:-1], "'b'", "runs past the end")

    def test_huge_counts_and_lengths(self):
        self.refused(gguf_bytes([], [], counts=(0, 2 ** 63))[0], "metadata key/values cannot fit")
        self.refused(gguf_bytes([], [], counts=(2 ** 40, 0))[0], "tensor infos cannot fit")
        key = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2 ** 62)
        self.refused(key + bytes(40), "metadata key 0", "bytes long")
        arr = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("big") + struct.pack("<IIQ", ARRAY, U64, 2 ** 61)
        self.refused(arr + bytes(64), "key 'big'", "cannot fit")
        strs = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("s") + struct.pack("<IIQ", ARRAY, STRING, 3)
        self.refused(strs + gguf_string("ok") + struct.pack("<Q", 10 ** 12) + bytes(24), "key 's'[1]", "bytes long")
        deep = (I32, [1])
        for _ in range(10):
            deep = (ARRAY, [deep])
        self.refused(gguf_bytes([("deep", ARRAY, deep)], [])[0], "key 'deep'", "nested")
        bad_type = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("t") + struct.pack("<I", 13)
        self.refused(bad_type + bytes(16), "key 't'", "value type 13")

    def test_alignment(self):
        for value, vtype, want in ((48, U32, "power of two"), (0, U32, "power of two"), (32, U64, "uint32")):
            with self.subTest(value=value, vtype=vtype):
                self.refused(gguf_bytes([("general.alignment", vtype, value)], [])[0], "general.alignment", want)

    def test_tensor_placement(self):
        t = [("a", 0, [16], bytes(64)), ("b", 0, [16], bytes(64))]
        self.refused(gguf_bytes([], t, offsets=[0, 32])[0], "'a'", "'b'", "overlap")
        self.refused(gguf_bytes([], t, offsets=[0, 40])[0], "'b'", "multiple of the alignment")
        data, _ = gguf_bytes([], t)
        self.refused(data.replace(struct.pack("<IQ", 0, 64), struct.pack("<IQ", 0, 2 ** 63)), "'b'",
                     "runs past the end")
        self.refused(gguf_bytes([], [("a", 0, [2 ** 32, 2 ** 32], b"")])[0], "'a'", "overflow")
        self.refused(gguf_bytes([], [("a", 12, [100], bytes(144))])[0], "'a'", "whole blocks of 256")
        self.refused(gguf_bytes([], [("a", 4, [32], bytes(32))])[0], "'a'", "type 4 is not a ggml tensor type")
        self.refused(gguf_bytes([], [("a", 0, [1] * 5, bytes(4))])[0], "'a'", "at most 4")
        self.refused(gguf_bytes([], [t[0], t[0]])[0], "'a'", "appears twice")
        self.refused(gguf_bytes([("k", U8, 1), ("k", U8, 2)], [])[0], "'k'", "appears twice")

    def test_memory_limit(self):
        f = self.path("big.gguf")
        f.write_bytes(gguf_bytes([], [(f"m.W_{s}", 0, [N, N], bytes(4 * N * N)) for s in "QKV"])[0])
        r = run_text("run", "--checkpoint", f, self.save_npz("in.npz", x=np.eye(N)), "--prefix", "m.",
                     "--heads", "1", "--max-memory", "300K")
        err = self.assert_error(r, "memory", code=r.code)
        self.assertIn(r.code, (2, 3), err)


if __name__ == "__main__":
    common.main("test_gguf")
