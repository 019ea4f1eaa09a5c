#!/usr/bin/python3
"""Reading inputs as a user hands them over, each a regression test of a defect once
found: crafted .npz archives (members sharing bytes, names that disagree, counts that
lie), standard input and devices without end, the memory limit while reading pipes and
JSON, procfs files, and what io error messages echo of the input.

Memory is measured, never time: the peak resident size of each run, from os.wait4's
resource usage of that one child. Sizes stay at tens of MB.

    /usr/bin/python3 tests/py/test_reading.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import os
import resource
import struct
import subprocess
import sys
import threading
import unittest
import zlib

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, DATA, CliTestCase, run, sanitized  # noqa: E402

MIB = 1 << 20
# What a run may hold beyond --max-memory: the program, its libraries and its small
# buffers. A small run of data/sentence.npz peaks at about 8 MiB here.
SLACK = 24 * MIB


class Measured:
    """A finished run: exit code, stdout, stderr (bytes) and peak resident size (bytes)."""

    def __init__(self, code, out, err, peak):
        self.code, self.out, self.err, self.peak = code, out, err, peak

    def __repr__(self):
        return (f"exit {self.code}, peak {self.peak / MIB:.1f} MiB\n  stdout: {self.out[:300]!r}\n"
                f"  stderr: {self.err[:600]!r}")


TIME = "/usr/bin/time"  # GNU time: its child's peak, measured apart from this Python process


def run_measured(*args, stdin=subprocess.DEVNULL, feed=None, address_space=None):
    """Runs attnscope ARGS under GNU time; `feed` (bytes, or a callable writing to a pipe)
    goes to its standard input from a thread. Returns a Measured with the run's peak
    resident size. (Not os.wait4 on a child of this process: a child forked from Python
    starts out holding Python's pages, and ru_maxrss keeps them past exec.)"""
    import tempfile
    if not os.access(TIME, os.X_OK):
        raise unittest.SkipTest(f"{TIME} (GNU time) is needed to measure memory")

    if sanitized():
        address_space = None

    def limit():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    with tempfile.NamedTemporaryFile(prefix="attnscope-rss-") as report:
        proc = subprocess.Popen([TIME, "-f", "%M", "-o", report.name, str(BIN)] + [str(a) for a in args],
                                stdin=subprocess.PIPE if feed else stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=limit if address_space else None)
        out, err = [], []
        threads = [threading.Thread(target=lambda: out.append(proc.stdout.read())),
                   threading.Thread(target=lambda: err.append(proc.stderr.read()))]
        if feed:
            def write():
                try:
                    feed(proc.stdin) if callable(feed) else proc.stdin.write(feed)
                    proc.stdin.close()
                except (BrokenPipeError, ValueError, OSError):
                    pass  # the reader stopped reading: what is being tested
            threads.append(threading.Thread(target=write))
        for t in threads:
            t.start()
        proc.wait()
        for t in threads:
            t.join()
        lines = open(report.name).read().split()
        peak = int(lines[-1]) * 1024 if lines and lines[-1].isdigit() else -1
    if os.environ.get("VERBOSE_PEAK"):
        print(f"\n  peak {peak / MIB:.1f} MiB: attnscope {' '.join(map(str, args))}", file=sys.stderr)
    if peak <= 0:
        raise AssertionError(f"{TIME} reported no peak resident size: {lines!r}")
    return Measured(proc.returncode, out[0], err[0], peak)


# ---- crafted zip archives ----------------------------------------------------------------

def local_header(name, data, method=0, size=None, crc=None):
    name = name if isinstance(name, bytes) else name.encode()
    size = len(data) if size is None else size
    crc = zlib.crc32(data) if crc is None else crc
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size,
                       len(name), 0) + name + data


def central_entry(name, offset, comp_size, size, crc, method=0):
    name = name if isinstance(name, bytes) else name.encode()
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, comp_size, size,
                       len(name), 0, 0, 0, 0, 0, offset) + name


def end_record(count, dir_size, dir_offset):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, dir_size, dir_offset, 0)


def stored_zip(members, count=None, local_names=None):
    """An archive of {name: bytes} stored, as np.savez writes it; `local_names` gives the
    local headers other names, `count` the end record another member count."""
    out, central = b"", b""
    for i, (name, data) in enumerate(members.items()):
        local = (local_names or {}).get(name, name)
        central += central_entry(name, len(out), len(data), len(data), zlib.crc32(data))
        out += local_header(local, data)
    return out + central + end_record(len(members) if count is None else count, len(central), len(out))


def npy_bytes(array):
    import io
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def deflate(data):
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    return z.compress(data) + z.flush()


class ReadingTestCase(CliTestCase):
    def assert_peak_below(self, r, limit):
        """The run's peak resident size stayed below `limit` (not checked in the sanitizer build)."""
        if not sanitized():
            self.assertLess(r.peak, limit, r)

    def error_line(self, r, *fragments, code=2):
        """Exactly one stderr line `attnscope: error: ...` (bytes) holding every fragment,
        nothing on stdout, exit `code`; nothing in it a terminal would act on."""
        self.assertEqual(r.code, code, r)
        self.assertEqual(len(r.out), 0, r)
        self.assertTrue(r.err.endswith(b"\n"), r)
        lines = r.err.split(b"\n")[:-1]
        self.assertEqual(len(lines), 1, r)
        self.assertTrue(lines[0].startswith(b"attnscope: error: "), r)
        for f in fragments:
            self.assertIn(f if isinstance(f, bytes) else f.encode(), lines[0], r)
        for byte in (b"\x1b", b"\x07", b"\x00", b"\r"):
            self.assertNotIn(byte, lines[0], r)
        lines[0].decode("utf-8")  # well-formed
        return lines[0]


NAMES = ["x", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "memory", "key_padding_mask",
         "in_proj_weight"]


class CraftedArchives(ReadingTestCase):
    """What numpy's zipfile refuses, and what must be refused before anything is inflated."""

    def test_entries_sharing_one_deflated_member_are_refused_before_inflating(self):
        # Twelve directory entries, all pointing at one deflated member of 32 MiB of zeros
        # (32 KB compressed). Refused from the directory alone: both members named, and
        # nothing inflated (before: each entry inflated in turn, 384 MiB).
        member = npy_bytes(np.zeros(4 * MIB))
        comp = deflate(member)
        out = local_header("x.npy", comp, method=8, size=len(member), crc=zlib.crc32(member))
        central = b"".join(central_entry(n + ".npy", 0, len(comp), len(member), zlib.crc32(member), method=8)
                           for n in NAMES)
        path = self.path("shared.npz")
        path.write_bytes(out + central + end_record(len(NAMES), len(central), len(out)))
        r = run_measured("run", path, "--max-memory", "2G")
        self.error_line(r, f"{path}: members 'x.npy' and 'W_Q.npy' share or overlap bytes of the archive")
        self.assert_peak_below(r, SLACK)

    def test_a_member_not_npy_with_a_huge_declared_size_is_refused_by_name(self):
        # 1 GiB declared from 10 bytes that are not deflate data: the name is refused first.
        junk = b"\x55" * 10
        x = npy_bytes(np.eye(2))
        out = local_header("x.npy", x) + b""
        notes_at = len(out)
        out += local_header("notes.txt", junk, method=8, size=1 << 30)
        central = (central_entry("x.npy", 0, len(x), len(x), zlib.crc32(x))
                   + central_entry("notes.txt", notes_at, len(junk), 1 << 30, zlib.crc32(junk), method=8))
        path = self.path("notes.npz")
        path.write_bytes(out + central + end_record(2, len(central), len(out)))
        r = run("run", path)
        self.error_line(r, f"{path}: member 'notes.txt' is not a .npy array".encode())

    def test_local_header_naming_another_member_is_refused(self):
        g = {k + ".npy": npy_bytes(v) for k, v in bundle_g().items()}
        path = self.path("two_names.npz")
        path.write_bytes(stored_zip(g, local_names={"W_Q.npy": "W_K.npy"}))
        r = run("run", path)
        self.error_line(r, b"member 'W_Q.npy' is named 'W_K.npy' in its local header")

    def test_end_record_counting_no_members_is_refused_not_read_as_empty(self):
        # Before: "no array 'x'", though the directory lists every member.
        g = {k + ".npy": npy_bytes(v) for k, v in bundle_g().items()}
        path = self.path("count0.npz")
        path.write_bytes(stored_zip(g, count=0))
        r = run("run", path)
        self.error_line(r, f"{path}: not a valid .npz (zip) archive: its end record lists 0 members, but "
                             "the central directory has".encode(), b"records that disagree")


def bundle_g(seed=0):
    """G: a valid small bundle (2x4x8 inputs, 8x8 weights)."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 4, 8)),
            **{k: rng.standard_normal((8, 8)) / 3 for k in ("W_Q", "W_K", "W_V", "W_O")}}


class BoundedReading(ReadingTestCase):
    """--max-memory holds while reading: standard input, devices and JSON never take more
    than the limit (and the program itself)."""

    def test_stdin_stops_at_the_limit(self):
        # 64 MiB of blanks piped in with an 8 MiB limit: one line naming stdin and the
        # limit; the run never holds the 64 MiB (before: all of it, read to the end).
        chunk = b" " * MIB

        def feed(pipe):
            for _ in range(64):
                pipe.write(chunk)

        r = run_measured("run", "-", "--max-memory", "8M", feed=feed)
        self.assertEqual(r.code, 2, r)
        self.assertEqual(r.err, b"attnscope: error: <stdin>: the input is larger than the memory limit of "
                                b"8.0 MiB (--max-memory); reading stopped there\n", r)
        self.assert_peak_below(r, 8 * MIB + SLACK)

    def test_endless_stdin_is_refused(self):
        # /dev/zero as standard input. Before: read until memory ran out (here the address
        # space is capped at 2 GiB so that the old behaviour fails instead of swapping).
        with open("/dev/zero", "rb") as zero:
            r = run_measured("run", "-", "--max-memory", "16M", stdin=zero, address_space=2 << 30)
        self.assertEqual(r.code, 2, r)
        self.assertIn(b"<stdin>: the input is larger than the memory limit of 16.0 MiB (--max-memory)", r.err)
        self.assert_peak_below(r, 16 * MIB + SLACK)

    def test_device_is_refused_unread(self):
        # Before: 2x the limit (a string doubled past it before the check); then read to the
        # limit; now a character device is refused by its kind, as nothing a run reads.
        r = run_measured("run", "/dev/zero", "--max-memory", "64M")
        self.assertEqual(r.code, 2, r)
        self.assertEqual(r.err, b"attnscope: error: /dev/zero: is a character device, expected a file\n", r)
        self.assert_peak_below(r, 16 * MIB + SLACK)

    def json_numbers(self, n):
        path = self.path("numbers.json")
        path.write_bytes(b'{"x": [' + b",".join([b"1"] * n) + b"]}")
        return path

    def test_json_within_the_limit(self):
        # 4.5M numbers: 9 MB of text, 36 MB as doubles. Accepted by the reader under 48M
        # (then refused for its shape) without exceeding the limit (before: ~85 MiB, the
        # values copied into twice the room while they grew).
        path = self.json_numbers(4_500_000)
        r = run_measured("run", path, "--max-memory", "48M")
        self.assertEqual(r.code, 2, r)
        self.assertIn(b"x: expected (Tq, Dm) or (B, Tq, Dm), found shape (4500000,)", r.err)
        self.assert_peak_below(r, 48 * MIB + SLACK)

    def test_json_over_the_limit_stops_reading_there(self):
        # Under 32M the text and the doubles do not fit: refused once the limit is reached.
        path = self.json_numbers(4_500_000)
        r = run_measured("run", path, "--max-memory", "32M")
        self.error_line(r, f"{path}: x: the values read so far need ",
                        "of JSON text, over the memory limit of 32.0 MiB (--max-memory)")
        self.assert_peak_below(r, 32 * MIB + SLACK)

    def test_procfs_file_is_read_to_its_end(self):
        # /proc/self/status has size 0 in stat but holds text (before: read as empty,
        # "found nothing"). It is not JSON, and the message shows where.
        r = run("run", "/proc/self/status")
        self.error_line(r, b"/proc/self/status: invalid JSON at line 1, column 1 (byte 0)")


# Texts a terminal would act on, or that cut a C string short, or are not UTF-8; and
# how a message shows them.
HOSTILE = [
    (b"\x1b[31mRED", b"\\x1b[31mRED"),
    (b"\x1b]0;title\x07", b"\\x1b]0;title\\x07"),
    (b"a\nb", b"a\\nb"),
    (b"nul\x00after", b"nul\\x00after"),
    (b"bad\xff\xfe", b"bad\\xff\\xfe"),
]


class EchoedInput(ReadingTestCase):
    """io messages show names and text from the input escaped and clipped, on one line."""

    def test_npz_member_names(self):
        for raw, shown in HOSTILE:
            with self.subTest(name=raw):
                path = self.path("names.npz")
                path.write_bytes(stored_zip({raw: npy_bytes(np.eye(2))}))
                self.error_line(run("run", path), b"member '" + shown + b"' is not a .npy array")

    def test_npy_descr(self):
        for raw, shown in HOSTILE:
            with self.subTest(descr=raw):
                header = b"{'descr': '<" + raw + b"', 'fortran_order': False, 'shape': (1,), }"
                header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
                path = self.path("x.npy")
                path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
                self.error_line(run("run", "--x", path, "--W_Q", path, "--W_K", path, "--W_V", path),
                                        b"unsupported dtype '<" + shown + b"'")

    def test_json_keys(self):
        for raw, shown in HOSTILE[:4]:  # JSON text must be UTF-8: the invalid bytes are refused as such
            with self.subTest(key=raw):
                key = "".join(f"\\u{c:04x}" if c < 0x20 else chr(c) for c in raw).encode()
                path = self.path("keys.json")
                path.write_bytes(b'{"' + key + b'": [1], "' + key + b'": [2]}')
                # An unknown name is refused before its value is read (the run's name check).
                self.error_line(run("run", path), b"unknown array '" + shown + b"'")

    def test_a_million_digit_number_is_clipped(self):
        # Before: the whole number, a 1 MB line on stderr.
        path = self.path("big.json")
        path.write_bytes(b'{"x": [1' + b"0" * 1_000_000 + b"]}")
        line = self.error_line(run("run", path), b"number 10000", b"(1000001 bytes in all) is out of range")
        self.assertLess(len(line), 400)

    def test_json_syntax_error_gives_line_and_column(self):
        path = self.path("bad.json")
        path.write_bytes(b'{"x": [[1, 2],\n       [3, 4]]\n  "W_Q": []}\n')
        self.error_line(run("run", path), f"{path}: invalid JSON at line 3, column 3 (byte 32): "
                                            "expected ',' or '}'".encode())


if __name__ == "__main__":
    common.main("test_reading")
