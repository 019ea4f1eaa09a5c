#!/usr/bin/python3
"""The README's examples, run as a reader would run them, in a scratch directory beside
the repository's data/:

* every ```python block that is a whole program, in order (they write files later examples
  read, e.g. mine.npz; the capture snippet is test_capture.py's);
* every ``` block that starts with `$ COMMAND`: the command runs and its output must show
  the block's lines in order (a line `...` stands for lines left out);
* every indented command line `build/attnscope ...`: it runs, and is not refused (exit 0,
  or 1 where `check` reports a difference, as it is meant to).

    /usr/bin/python3 tests/py/test_readme.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import BIN, ROOT  # noqa: E402

README = ROOT / "README.md"


def blocks(text):
    """(language, lines) of every fenced block."""
    out, lang, body = [], None, None
    for line in text.splitlines():
        if line.startswith("```"):
            if body is None:
                lang, body = line[3:].strip(), []
            else:
                out.append((lang, body))
                body = None
        elif body is not None:
            body.append(line)
    return out


def indented_commands(text):
    """The concrete command lines of indented blocks (synopses with [OPTIONS] are not)."""
    return [line.strip() for line in text.splitlines()
            if line.startswith("    build/attnscope ") and "[" not in line and "BUNDLE" not in line]


# Inputs a shown example names but no block of the README writes: made here, as described.
def make_long(path):
    """A 65,536-token causal example for the --summary block: 8 heads of one feature."""
    rng = np.random.default_rng(0)
    T, D = 65536, 8
    np.savez(path, x=rng.standard_normal((1, T, D)).astype(np.float32),
             W_Q=rng.standard_normal((D, D)).astype(np.float32),
             W_K=rng.standard_normal((D, D)).astype(np.float32),
             W_V=rng.standard_normal((D, D)).astype(np.float32))


MAKERS = {"long.npz": make_long}


class Readme(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="attnscope-readme-")
        cls.cwd = Path(cls.dir.name)
        (cls.cwd / "data").symlink_to(ROOT / "data")
        (cls.cwd / "build").mkdir()
        (cls.cwd / "build" / "attnscope").symlink_to(BIN)
        cls.text = README.read_text(encoding="utf-8")
        for lang, body in blocks(cls.text):
            if lang == "python" and body and body[0].startswith("import "):  # whole programs, not snippets
                subprocess.run([sys.executable, "-c", "\n".join(body)], cwd=cls.cwd, check=True)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def run_line(self, command):
        argv = shlex.split(command)
        if argv[0] in ("attnscope", "build/attnscope"):
            argv[0] = str(BIN)
        for a in argv[1:]:
            if a in MAKERS and not (self.cwd / a).exists():
                MAKERS[a](self.cwd / a)
        env = dict(os.environ, NO_COLOR="1", COLUMNS="80")
        return subprocess.run(argv, cwd=self.cwd, capture_output=True, text=True, env=env)

    def test_shown_commands_print_what_the_readme_shows(self):
        shown = [(body[0][2:], body[1:]) for lang, body in blocks(self.text)
                 if lang == "" and body and body[0].startswith("$ ")]
        self.assertGreaterEqual(len(shown), 4)
        for command, expected in shown:
            with self.subTest(command=command):
                r = self.run_line(command)
                self.assertIn(r.returncode, (0, 1), r.stderr)
                actual = r.stdout.splitlines()
                # Each run of lines between `...` lines appears, in order.
                chunks, chunk = [], []
                for line in expected:
                    if line.strip() == "...":
                        chunks.append(chunk)
                        chunk = []
                    else:
                        chunk.append(line.rstrip())
                chunks.append(chunk)
                at = 0
                for chunk in (c for c in chunks if c):
                    found = next((k for k in range(at, len(actual) - len(chunk) + 1)
                                  if [a.rstrip() for a in actual[k:k + len(chunk)]] == chunk), None)
                    self.assertIsNotNone(found, f"not in the output of `{command}`:\n" + "\n".join(chunk) +
                                         "\n--- output ---\n" + r.stdout)
                    at = found + len(chunk)

    def test_indented_commands_run(self):
        commands = indented_commands(self.text)
        self.assertGreaterEqual(len(commands), 1)
        for command in commands:
            with self.subTest(command=command):
                r = self.run_line(command)
                self.assertIn(r.returncode, (0, 1), r.stderr)
                self.assertTrue(r.stdout, command)


if __name__ == "__main__":
    common.main("README examples")
