#!/usr/bin/python3
"""Write the io-layer test fixtures under tests/fixtures/.

tests/test_io.cpp reads these files and checks them against values written in the
test itself; numpy (this script) is the independent oracle for the file formats.

    * good/   .npy files in every dtype and layout attnscope accepts, .npz archives
              (stored, deflated, hand-written zip64), numpy header references, JSON
    * bad/    files every reader must refuse with an InputError naming the file

Reproducible: the arrays are fixed (the one random array uses a fixed seed), zip
members carry the fixed 1980-01-01 timestamp, so two runs give identical bytes.
Every good file is read back with numpy (or zipfile) before the script ends.

    /usr/bin/python3 scripts/make_fixtures.py
"""

import io
import json
import os
import shutil
import struct
import warnings
import zipfile
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures")
GOOD = os.path.join(OUT, "good")
BAD = os.path.join(OUT, "bad")

FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the timestamp np.savez gives its members

# ---- the known arrays (tests/test_io.cpp spells out the same values) ----------------

# (2, 3): -1, -0.5, 0, 0.5, 1, 1.5 — exact in float16, float32 and float64.
A2 = np.arange(6).reshape(2, 3) * 0.5 - 1
# (2, 3, 4): -3, -2.75, ..., 2.75 — exact in every float type.
A3 = np.arange(24).reshape(2, 3, 4) * 0.25 - 3
# Integer arrays reach each type's limits (values exact as doubles).
INTS = {
    "int8": [[-128, -1, 0], [1, 2, 127]],
    "int16": [[-32768, -1, 0], [1, 256, 32767]],
    "int32": [[-2147483648, -1, 0], [1, 65536, 2147483647]],
    "int64": [[-(2**63), -1, 0], [1, 2**32, 2**53]],
    "uint8": [[0, 1, 2], [3, 128, 255]],
    "uint16": [[0, 1, 2], [3, 256, 65535]],
    "uint32": [[0, 1, 2], [3, 65536, 4294967295]],
    "uint64": [[0, 1, 2], [3, 2**32, 2**63]],
}
BOOLS = np.array([[True, False, True], [False, False, True]])
# '<U5' tokens: ASCII, 2-, 3- and 4-byte UTF-8, a full 5-character entry, an empty one.
TOKENS = np.array(["<s>", "the", "héllo", "日本", "😀", ""], dtype="<U5")


def path(kind, name):
    return os.path.join(GOOD if kind == "good" else BAD, name)


def save(kind, name, arr, **kw):
    np.save(path(kind, name), arr, **kw)


def write_bytes(kind, name, data):
    with open(path(kind, name), "wb") as f:
        f.write(data)


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def raw_npy(header_dict_text, data, header_len=None, version=1):
    """A .npy file from a header dict text and data bytes, padded to header_len
    (the length stored after the preamble) or to the next 64-byte boundary."""
    pre = 10 if version == 1 else 12
    text = header_dict_text.encode("latin1")
    if header_len is None:
        header_len = -(-(pre + len(text) + 1) // 64) * 64 - pre
    assert header_len >= len(text) + 1
    text = text + b" " * (header_len - len(text) - 1) + b"\n"
    if version == 1:
        preamble = b"\x93NUMPY\x01\x00" + struct.pack("<H", header_len)
    else:
        preamble = b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", header_len)
    return preamble + text + data


def zip_bytes(members, compression=zipfile.ZIP_STORED):
    """A zip archive written with Python's zipfile: members is a list of (name, bytes),
    duplicates allowed (zipfile warns), each with the fixed timestamp."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name"
        with zipfile.ZipFile(buf, "w", compression) as z:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
                info.compress_type = compression
                z.writestr(info, data)
    return buf.getvalue()


def zip64_bytes(members):
    """A stored zip archive written by hand with zip64 records throughout: member i
    puts into its central zip64 extra field the 8-byte values for `members[i][2]`
    (a subset of 'size', 'comp', 'offset', in that order as the zip spec requires),
    and the end-of-directory record defers to the zip64 end record."""
    out, central = b"", b""
    for name, data, wide in members:
        n = name.encode()
        crc = zlib.crc32(data)
        offset = len(out)
        # Local header: both sizes in a zip64 extra field, as np.savez writes them.
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc,
                           0xFFFFFFFF, 0xFFFFFFFF, len(n), len(local_extra)) + n + local_extra + data
        values = {"size": len(data), "comp": len(data), "offset": offset}
        extra = struct.pack("<HH", 1, 8 * len(wide)) + b"".join(
            struct.pack("<Q", values[k]) for k in ("size", "comp", "offset") if k in wide)
        field = {k: (0xFFFFFFFF if k in wide else values[k]) for k in values}
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, crc,
                               field["comp"], field["size"], len(n), len(extra), 0, 0, 0,
                               0o100644 << 16, field["offset"]) + n + extra
    dir_offset = len(out)
    out += central
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(members), len(members),
                       len(central), dir_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return out


def member_data_span(archive, name):
    """(start, length) of a member's stored or compressed bytes inside an archive."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        info = z.getinfo(name)
    at = info.header_offset
    name_len, extra_len = struct.unpack("<HH", archive[at + 26:at + 30])
    return at + 30 + name_len + extra_len, info.compress_size


def patch_central_size(archive, name, size):
    """The archive with the central directory's uncompressed size of `name` replaced."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        start_dir = z.start_dir
    at = start_dir
    while True:
        assert archive[at:at + 4] == b"PK\x01\x02"
        name_len, extra_len, comment_len = struct.unpack("<HHH", archive[at + 28:at + 34])
        if archive[at + 46:at + 46 + name_len] == name.encode():
            return archive[:at + 24] + struct.pack("<I", size) + archive[at + 28:]
        at += 46 + name_len + extra_len + comment_len


def local_has_zip64_extra(archive, name):
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        at = z.getinfo(name).header_offset
    name_len, extra_len = struct.unpack("<HH", archive[at + 26:at + 30])
    extra = archive[at + 30 + name_len:at + 30 + name_len + extra_len]
    return struct.unpack("<H", extra[:2])[0] == 1 if extra else False


# ---- good .npy ----------------------------------------------------------------------

def make_good_npy():
    for dt in ("float16", "float32", "float64"):
        save("good", f"{dt}.npy", A2.astype(dt))
    for dt, values in INTS.items():
        save("good", f"{dt}.npy", np.array(values, dtype=dt))
    save("good", "bool.npy", BOOLS)
    save("good", "float32_3d.npy", A3.astype("float32"))
    # float16 beyond the normal range: a subnormal, the largest finite, ±inf, nan.
    save("good", "float16_special.npy",
         np.array([2.0**-24, 2.0**-14, 65504, -np.inf, np.inf, np.nan, -0.0], dtype="float16"))

    # Big-endian.
    save("good", "be_f8.npy", A2.astype(">f8"))
    save("good", "be_i4.npy", np.array(INTS["int32"], dtype=">i4"))
    save("good", "be_f2.npy", A2.astype(">f2"))
    save("good", "be_u2.npy", np.array(INTS["uint16"], dtype=">u2"))

    # Fortran order: the stored element order is column-major; readers must give C order.
    save("good", "fortran_f8_2d.npy", np.asfortranarray(A2))
    save("good", "fortran_f4_3d.npy", np.asfortranarray(A3.astype("float32")))
    save("good", "fortran_i2_3d.npy", np.asfortranarray((np.arange(24) - 12).reshape(2, 3, 4).astype("int16")))
    save("good", "fortran_tokens_2d.npy", np.asfortranarray(TOKENS.reshape(2, 3)))

    # 0-d and empty arrays.
    save("good", "scalar_f8.npy", np.array(3.5))
    save("good", "scalar_i4.npy", np.array(-7, dtype="int32"))
    save("good", "empty_0x3_f4.npy", np.zeros((0, 3), dtype="float32"))
    # An empty array is both C- and Fortran-contiguous, so np.save writes it in C
    # order; the Fortran-order empty array is written by hand.
    save("good", "empty_2x0_f8.npy", np.zeros((2, 0)))
    write_bytes("good", "fortran_empty_2x0_f8.npy",
                raw_npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 0), }", b""))

    # Text.
    # 1000 int8 values: 1 KiB on disk, 8000 bytes once widened to double.
    save("good", "int8_1000.npy", (np.arange(1000) % 256 - 128).astype("int8"))

    save("good", "tokens_U5.npy", TOKENS)
    save("good", "tokens_U5_2d.npy", TOKENS.reshape(2, 3))
    save("good", "tokens_be_U5.npy", TOKENS.astype(">U5"))

    # Format versions 2.0 and 3.0 (4-byte header length; 3.0 allows UTF-8 headers).
    write_bytes("good", "v2_f8.npy", npy_bytes(A2, version=(2, 0)))
    write_bytes("good", "v3_f8.npy", npy_bytes(A2, version=(3, 0)))

    # Header lengths whose low byte is >= 0x80 (0xB6 = 182 and 0x1F6 = 502; the data
    # still starts on a 64-byte boundary). Valid files that some readers refuse.
    f4 = A2.astype("<f4")
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    write_bytes("good", "header_len_0xb6.npy", raw_npy(text, f4.tobytes(), header_len=0xB6))
    write_bytes("good", "header_len_0x1f6.npy", raw_npy(text, f4.tobytes(), header_len=0x1F6))

    # References for attnscope's writer: np.save's encoding of what write_npy writes.
    save("good", "ref_f4_2x3.npy", A2.astype("float32"))
    save("good", "ref_f8_5.npy", np.arange(5, dtype="float64"))
    save("good", "ref_b1_scalar.npy", np.array(True))
    save("good", "ref_f8_2x0x3x1.npy", np.zeros((2, 0, 3, 1)))
    save("good", "ref_f4_2x3x4x5.npy", np.arange(120, dtype="float32").reshape(2, 3, 4, 5))


# ---- good .npz ----------------------------------------------------------------------

def bundle_members():
    rng = np.random.default_rng(20240611)
    return {
        "x": A2,
        "expected/Q": A3.astype("float32"),
        "mask": BOOLS,
        "query_tokens": TOKENS,
        "ids": np.array(INTS["int64"], dtype="int64"),
        # Random float32 values: their expected values come from expected.json.
        "random": rng.standard_normal((3, 5)).astype("float32"),
    }


def make_good_npz():
    members = bundle_members()
    np.savez(path("good", "savez.npz"), **members)
    np.savez_compressed(path("good", "savez_compressed.npz"), **members)
    # np.savez forces zip64 in its members' local headers (numpy gh-10776); the
    # central directory stays 32-bit for small files. Check so the README stays true.
    with open(path("good", "savez.npz"), "rb") as f:
        archive = f.read()
    assert all(local_has_zip64_extra(archive, n + ".npy") for n in members)
    # The same stored archive with a zip comment after the end-of-directory record.
    comment = b"written by make_fixtures.py"
    assert archive[-2:] == b"\0\0"  # np.savez writes no comment
    write_bytes("good", "savez_comment.npz", archive[:-2] + struct.pack("<H", len(comment)) + comment)
    # Memory limits: 1 MB of zeros deflates to about 1 KiB; four int8 members whose
    # decompressed sizes are small but whose values widened to double are 8 times more.
    np.savez_compressed(path("good", "npz_zeros_1mb.npz"), zeros=np.zeros(125000))
    np.savez(path("good", "npz_int8_members.npz"),
             **{f"m{i}": (np.arange(1000) % 256 - 128).astype("int8") for i in range(4)})
    # zip64 in the central directory too, as write_npz writes it: member x has all
    # three values in its extra field, member y only the offset.
    write_bytes("good", "zip64.npz", zip64_bytes([
        ("x.npy", npy_bytes(A2), ("size", "comp", "offset")),
        ("expected/y.npy", npy_bytes(np.arange(4, dtype="int16")), ("offset",)),
    ]))


# ---- good JSON ----------------------------------------------------------------------

def make_good_json():
    bundle = {
        "x": [[1, 2.5, -3], [0.004, 0, 1e10]],
        "W_Q": [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]],
        "mask": [[True, False], [False, True]],
        "scores": [["-inf", 1.5], ["nan", "inf"]],
        "query_tokens": ["<s>", "héllo", "😀"],
        "batch_tokens": [["a", "b"], ["c", "d"]],
        "empty": [],
        "empty_rows": [[], []],
        "empty_tokens": [],
        "scalar": -2.25,
    }
    with open(path("good", "bundle.json"), "w", encoding="utf-8") as f:
        json.dump(bundle, f, ensure_ascii=False, indent=1)
    with open(path("good", "single_list.json"), "w") as f:
        json.dump([[1, 2], [3, 4], [5, 6]], f)
    with open(path("good", "single_object.json"), "w") as f:
        json.dump({"W_O": [[1, 0], [0, 1]]}, f)


# ---- bad files ----------------------------------------------------------------------

def make_bad():
    save("bad", "complex_c16.npy", np.array([1 + 2j, 3 - 4j]))
    save("bad", "object.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    save("bad", "structured.npy", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))
    save("bad", "datetime.npy", np.array(["2024-01-01"], dtype="datetime64[D]"))
    good = npy_bytes(A2)
    write_bytes("bad", "truncated.npy", good[:-5])
    write_bytes("bad", "trailing.npy", good + b"\0" * 8)
    write_bytes("bad", "header_past_end.npy", good[:60])
    write_bytes("bad", "short.npy", b"\x93NUMPY\x01")
    write_bytes("bad", "huge_claim.npy",
                raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }", b"\0" * 16))
    write_bytes("bad", "overflow_shape.npy",
                raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (2**40, 2**40),
                        b"\0" * 16))
    write_bytes("bad", "bad_shape_text.npy",
                raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (abc, 3), }", b"\0" * 24))
    write_bytes("bad", "negative_shape.npy",
                raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", b""))
    write_bytes("bad", "bad_magic.npy", b"\x93NUMPX" + good[6:])
    write_bytes("bad", "version9.npy", b"\x93NUMPY\x09\x00" + good[8:])
    write_bytes("bad", "not_npy.npy", b"x,y\n1,2\n")

    # .npz: a flipped byte in a stored member's data (its CRC no longer matches).
    stored = zip_bytes([("x.npy", good), ("y.npy", npy_bytes(A3))])
    start, length = member_data_span(stored, "y.npy")
    corrupt = bytearray(stored)
    corrupt[start + length - 1] ^= 0x40
    write_bytes("bad", "npz_bad_crc.npz", bytes(corrupt))
    # Deflated member whose first block header has the reserved block type 3.
    deflated = zip_bytes([("x.npy", good)], zipfile.ZIP_DEFLATED)
    start, _ = member_data_span(deflated, "x.npy")
    corrupt = bytearray(deflated)
    corrupt[start] = 0xFF
    write_bytes("bad", "npz_bad_deflate.npz", bytes(corrupt))
    # Directory sizes that do not match the data: a deflated member claiming 2 GiB from
    # about 100 bytes (more than deflate can expand), a deflated member claiming 10 bytes
    # fewer than it inflates to, a stored member whose two sizes differ.
    write_bytes("bad", "npz_bomb_claim.npz", patch_central_size(deflated, "x.npy", 0x7FFFFFFF))
    write_bytes("bad", "npz_size_understated.npz", patch_central_size(deflated, "x.npy", len(good) - 10))
    write_bytes("bad", "npz_stored_sizes.npz",
                patch_central_size(zip_bytes([("x.npy", good)]), "x.npy", len(good) + 8))
    write_bytes("bad", "npz_not_npy_member.npz", zip_bytes([("x.npy", good), ("notes.txt", b"hello\n")]))
    write_bytes("bad", "npz_duplicate.npz", zip_bytes([("x.npy", good), ("x.npy", npy_bytes(A3))]))
    write_bytes("bad", "npz_member_not_npy.npz", zip_bytes([("x.npy", b"hello, not an array\n")]))
    write_bytes("bad", "npz_truncated.npz", stored[: len(stored) // 2])
    write_bytes("bad", "npz_member_truncated.npz", zip_bytes([("x.npy", good[:-5])]))

    # JSON.
    texts = {
        "json_ragged.json": '{"x": [[1, 2, 3]], "W_Q": [[1, 2, 3], [4, 5]]}',
        "json_ragged_deeper.json": '{"x": [[1, 2], [3, [4, 5]]]}',
        "json_ragged_shallower.json": '{"x": [[[1]], [2]]}',
        "json_nonnumeric.json": '{"x": [[1, 2, 3], [4, 5, 6]], "y": [[1, 2, "a"]]}',
        "json_null.json": '{"x": [1.0, null, 3.0]}',
        "json_invalid.json": '{"x": [1, 2,',
        "json_not_object.json": "[1, 2, 3]",
        "json_huge_number.json": '{"x": [1, 1e400]}',
        "json_token_number.json": '{"query_tokens": ["a", 3]}',
        "json_bad_string.json": '{"x": ["infinity"]}',
    }
    for name, text in texts.items():
        write_bytes("bad", name, text.encode())


# ---- numpy's reading of every good array, for the tests -----------------------------

def json_value(v):
    """A float64 as JSON: its shortest repr (exact on reading back), or a string for
    the non-finite values JSON cannot spell."""
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def describe(arr):
    entry = {"shape": list(arr.shape)}
    if arr.dtype.kind == "U":
        entry["dtype"] = "text"
        entry["strings"] = [str(s) for s in arr.ravel(order="C")]
    else:
        entry["dtype"] = arr.dtype.name  # byte order is not part of the name
        flat = arr.ravel(order="C")
        if flat.size > 1024:  # large arrays: their exact sum only (integers or zeros)
            entry["sum"] = int(flat.astype(np.int64).sum())
            assert np.array_equal(flat, flat.astype(np.int64))
        elif arr.dtype.kind in "iu":  # integers as JSON integers: exact beyond 2^53
            entry["values"] = [int(v) for v in flat]
        else:
            entry["values"] = [json_value(v) for v in flat.astype("float64")]
    return entry


def write_expected():
    """good/expected.json: {"file.npy": entry, "file.npz": {"member": entry}} with
    entry = {"shape", "dtype", "values" | "strings" | "sum"}, all as numpy reads the files
    ("sum" stands in for the values of arrays over 1024 elements, all integral)."""
    expected = {}
    for name in sorted(os.listdir(GOOD)):
        p = path("good", name)
        if name.endswith(".npy"):
            expected[name] = describe(np.load(p))
        elif name.endswith(".npz"):
            with np.load(p) as z:
                expected[name] = {k: describe(z[k]) for k in z.files}
    with open(path("good", "expected.json"), "w", encoding="utf-8") as f:  # one file a line
        f.write("{\n" + ",\n".join(json.dumps(k) + ": " + json.dumps(v, ensure_ascii=False)
                                    for k, v in expected.items()) + "\n}\n")


# ---- check and report ---------------------------------------------------------------

def check_good():
    """Every good file must be readable by numpy (zip64.npz by numpy and zipfile)."""
    for name in sorted(os.listdir(GOOD)):
        p = path("good", name)
        if name.endswith(".npy"):
            np.load(p)
        elif name.endswith(".npz"):
            with np.load(p) as z:
                for k in z.files:
                    z[k]
            with zipfile.ZipFile(p) as z:
                assert z.testzip() is None
        elif name.endswith(".json"):
            with open(p, encoding="utf-8") as f:
                json.load(f)
    a = np.load(path("good", "header_len_0xb6.npy"))
    assert np.array_equal(a, A2.astype("float32"))
    with np.load(path("good", "zip64.npz")) as z:
        assert sorted(z.files) == ["expected/y", "x"]
        assert np.array_equal(z["x"], A2) and np.array_equal(z["expected/y"], np.arange(4))


def main():
    for d in (GOOD, BAD):  # tests/fixtures/README.md is kept
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    make_good_npy()
    make_good_npz()
    make_good_json()
    make_bad()
    check_good()
    write_expected()
    total = sum(os.path.getsize(os.path.join(d, f)) for d in (GOOD, BAD) for f in os.listdir(d))
    print(f"wrote {len(os.listdir(GOOD))} good and {len(os.listdir(BAD))} bad fixtures, {total} bytes")


if __name__ == "__main__":
    main()
