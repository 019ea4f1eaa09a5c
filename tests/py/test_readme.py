#!/usr/bin/python3
"""The examples of the README and of every page of docs/, run as a reader would run them,
in a scratch directory beside the repository's data/:

* every ```python block that is a whole program, in order, README first, then the pages
  by name (they write files later examples read, e.g. mine.npz; the capture snippet is
  test_capture.py's);
* every ``` block that starts with `$ COMMAND`: the command runs and its output must show
  the block's lines in order (a line `...` stands for lines left out);
* every indented command line `build/attnscope ...`: it runs, and is not refused (exit 0,
  or 1 where `check` reports a difference, as it is meant to);
* every link to a file of the repository: the file exists.

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


def pages():
    """The README, then every page of docs/ by name."""
    return [README] + sorted((ROOT / "docs").glob("*.md"))


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


MAKERS = {"long.npz": make_long,
          # docs/classroom.md: the mask its text writes with echo
          "mask1.json": lambda path: path.write_text("[0, 1, 0, 0, 0, 0]\n", encoding="utf-8")}

# Folders a shown example names that the repository does not hold but the test set-up
# (scripts/setup --test) installs: linked into the scratch directory when present.
def lenml(name):
    return ROOT / "tests" / "tokenizers" / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models"


LINKED = {"models/gpt2": lenml("gpt2")}


class Readme(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="attnscope-readme-")
        cls.cwd = Path(cls.dir.name)
        (cls.cwd / "data").symlink_to(ROOT / "data")
        (cls.cwd / "build").mkdir()
        (cls.cwd / "build" / "attnscope").symlink_to(BIN)
        for name, target in LINKED.items():
            if target.is_dir():
                (cls.cwd / name).parent.mkdir(parents=True, exist_ok=True)
                (cls.cwd / name).symlink_to(target)
        cls.texts = {page.relative_to(ROOT): page.read_text(encoding="utf-8") for page in pages()}
        for text in cls.texts.values():
            for lang, body in blocks(text):
                if lang == "python" and body and body[0].startswith("import "):  # whole programs, not snippets
                    subprocess.run([sys.executable, "-c", "\n".join(body)], cwd=cls.cwd, check=True)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def run_line(self, command):
        """Runs a shown command line through bash, as a reader types it (quotes such as
        $'a\\nb' included), `attnscope` and `build/attnscope` being the binary."""
        argv = shlex.split(command)
        self.assertIn(argv[0], ("attnscope", "build/attnscope"), command)
        for a in argv[1:]:
            if a in MAKERS and not (self.cwd / a).exists():
                MAKERS[a](self.cwd / a)
            if a in LINKED and not (self.cwd / a).exists():
                self.skipTest(f"{a} is not installed here (scripts/setup --test installs it)")
        env = dict(os.environ, NO_COLOR="1", COLUMNS="80")
        line = shlex.quote(str(BIN)) + command[len(argv[0]):]
        return subprocess.run(["bash", "-c", line], cwd=self.cwd, capture_output=True, text=True, env=env)

    def shown(self):
        """(page, command, expected lines) of every shown command."""
        return [(page, body[0][2:], body[1:]) for page, text in self.texts.items()
                for lang, body in blocks(text) if lang == "" and body and body[0].startswith("$ ")]

    def test_shown_commands_print_what_the_pages_show(self):
        shown = self.shown()
        self.assertGreaterEqual(len(shown), 6)
        for page, command, expected in shown:
            with self.subTest(page=str(page), command=command):
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
        commands = [(page, c) for page, text in self.texts.items() for c in indented_commands(text)]
        self.assertGreaterEqual(len(commands), 1)
        for page, command in commands:
            with self.subTest(page=str(page), command=command):
                r = self.run_line(command)
                self.assertIn(r.returncode, (0, 1), r.stderr)
                self.assertTrue(r.stdout, command)

    def test_every_page_is_on_the_readme_map(self):
        readme = self.texts[Path("README.md")]
        for page in self.texts:
            if page != Path("README.md"):
                self.assertIn(f"]({page})", readme, f"README.md does not link {page}")

    def test_links_name_files_of_the_repository(self):
        for page, text in self.texts.items():
            base = (ROOT / page).parent
            for name in re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text):  # CONTRIBUTING.md, named in the text
                with self.subTest(page=str(page), name=name):
                    self.assertTrue((base / name).exists() or (ROOT / name).exists(),
                                    f"{page} names {name}, which does not exist")
            for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
                if target.startswith(("http://", "https://")):
                    continue
                path = (base / target).resolve()
                with self.subTest(page=str(page), link=target):
                    self.assertTrue(path.exists(), f"{page} links {target}, which does not exist")


if __name__ == "__main__":
    common.main("README examples")
