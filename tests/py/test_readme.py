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
* every relative link of every Markdown file of the repository: the file exists, and its
  #anchor is a heading of the page it names (GitHub's rules; class Links).

    /usr/bin/python3 tests/py/test_readme.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

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


# Inputs a shown example names but no block of the pages writes: made here, as described.
MAKERS = {  # docs/classroom.md: the mask its text writes with echo
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

    def test_names_of_files_are_files_of_the_repository(self):
        for page, text in self.texts.items():
            base = (ROOT / page).parent
            for name in re.findall(r"\b([A-Z][A-Z_]+\.md)\b", text):  # CONTRIBUTING.md, named in the text
                with self.subTest(page=str(page), name=name):
                    self.assertTrue((base / name).exists() or (ROOT / name).exists(),
                                    f"{page} names {name}, which does not exist")


class Install(unittest.TestCase):
    """The README's first screen says how to put `attnscope` on PATH, and the install it
    names gives the binary, the man page and the completions."""

    def test_first_screen_says_how_to_install(self):
        first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:24])
        for words in ("scripts/demo", "scripts/test", "cmake --install build --prefix ~/.local", "man attnscope",
                      "PATH"):
            self.assertIn(words, first, f"the README's first screen does not say {words}")

    def test_install_gives_the_binary_the_man_page_and_the_completions(self):
        build = BIN.parent
        if not (build / "cmake_install.cmake").exists():
            self.skipTest(f"{build} is not a CMake build folder")
        with tempfile.TemporaryDirectory(prefix="attnscope-install-") as prefix:
            r = subprocess.run(["cmake", "--install", str(build), "--prefix", prefix], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            root = Path(prefix)
            v = subprocess.run([str(root / "bin" / "attnscope"), "--version"], capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stderr)
            self.assertTrue(v.stdout.startswith("attnscope "), v.stdout)
            page = root / "share" / "man" / "man1" / "attnscope.1"
            self.assertTrue(page.read_text(encoding="utf-8").startswith(".TH ATTNSCOPE 1 "))
            for completion in ("bash-completion/completions/attnscope", "zsh/site-functions/_attnscope"):
                self.assertTrue((root / "share" / completion).is_file(), completion)
            self.assertTrue((root / "share" / "attnscope" / "data" / "causal.json").is_file())
            # `man attnscope` finds it through MANPATH and renders its sections.
            if not shutil.which("man"):
                self.skipTest("man is not installed here")
            env = dict(os.environ, MANPATH=str(root / "share" / "man"), MANPAGER="cat", PAGER="cat",
                       MANWIDTH="80", LC_ALL="C.UTF-8")
            m = subprocess.run(["man", "attnscope"], capture_output=True, text=True, env=env)
            self.assertEqual(m.returncode, 0, m.stderr)
            for section in ("NAME", "SYNOPSIS", "EXAMPLES", "EXIT STATUS"):
                self.assertIn(section, m.stdout)


def markdown_files():
    """Every Markdown file of the repository (tracked by git; without git, those outside
    build folders and node_modules)."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.md"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return [ROOT / line for line in r.stdout.splitlines() if (ROOT / line).is_file()]
    skip = ("node_modules", ".git")
    return [p for p in sorted(ROOT.rglob("*.md"))
            if not any(part in skip or part.startswith("build") for part in p.relative_to(ROOT).parts)]


def outside_code(text):
    """The lines of a Markdown text outside fenced blocks, with inline code spans blanked
    (a link shown as code is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def slug(heading):
    """GitHub's anchor of a heading: its text (links and code spans as their text),
    lower-cased, every character but letters, digits, `_`, `-` and spaces dropped, each
    space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(text):
    """The anchors a Markdown text defines: one per heading (a repeated slug gets -1, -2,
    ... as GitHub numbers them), and HTML `id`/`name` attributes."""
    seen, out = {}, set()
    for line in outside_code(text):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    out.update(re.findall(r"""<[^>]*\b(?:id|name)=["']([^"']+)["']""", text))
    return out


def links(text):
    """(target, fragment) of every inline link and link reference definition outside code."""
    found = []
    for line in outside_code(text):
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            found.append(target)
        m = re.match(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)", line)
        if m:
            found.append(m.group(1))
    out = []
    for target in found:
        path, _, fragment = target.partition("#")
        out.append((path, fragment))
    return out


class Links(unittest.TestCase):
    """Every relative link of every Markdown file of the repository resolves: the file or
    folder exists, and a #fragment is an anchor of the page it names (its headings, by
    GitHub's rules)."""

    def test_slugs_follow_githubs_rules(self):
        # Written from the headings GitHub renders on this repository's pages.
        self.assertEqual(slug("A 2-minute tour"), "a-2-minute-tour")
        self.assertEqual(slug("Using `--model` (any `DIR`)"), "using---model-any-dir")
        self.assertEqual(slug("Conventions: masks, scale & layout"), "conventions-masks-scale--layout")
        self.assertEqual(slug("[Limits](outputs.md) and outputs"), "limits-and-outputs")
        self.assertEqual(slug("The KV_cache, step 2"), "the-kv_cache-step-2")
        self.assertEqual(anchors("# A\n## A\n```\n# not a heading\n```\n### A\n"), {"a", "a-1", "a-2"})

    def test_broken_links_are_found(self):
        broken = links("see [here](../README.md#using-it), [x](#top) and `[code](nowhere.md)`\n[r]: other.md#a\n")
        self.assertEqual(broken, [("../README.md", "using-it"), ("", "top"), ("other.md", "a")])

    def test_every_relative_link_and_anchor_resolves(self):
        files = markdown_files()
        self.assertGreaterEqual(len(files), 10)
        cache = {}
        for page in files:
            text = page.read_text(encoding="utf-8")
            for path, fragment in links(text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", path):  # https:, mailto:: not a file of the repository
                    continue
                where = str(page.relative_to(ROOT))
                with self.subTest(page=where, link=path + ("#" + fragment if fragment else "")):
                    target = (page.parent / path).resolve() if path else page
                    self.assertTrue(target.exists(), f"{where} links {path}, which does not exist")
                    if fragment and target.suffix == ".md":
                        if target not in cache:
                            cache[target] = anchors(target.read_text(encoding="utf-8"))
                        self.assertIn(fragment, cache[target],
                                      f"{where} links {path or where}#{fragment}: no such heading there")


if __name__ == "__main__":
    common.main("README examples")
