#!/usr/bin/python3
"""Regenerate the text-view snapshots tests/golden_text/NAME.txt.

Each snapshot is the standard output of one attnscope command listed in
tests/golden_text/commands.json (the list tests/py/test_views.py reads too). The
commands run as a user types them: from the repository root, with paths relative to
it, no colour (--color never, and NO_COLOR/COLORTERM removed from the environment)
and a fixed --width, so a snapshot holds no absolute path, timing or terminal size.

    /usr/bin/python3 scripts/make_golden_text.py [--bin build/attnscope] [--check]

--check compares instead of writing, and exits 1 when a snapshot differs.

A snapshot is only worth keeping if it is right: read every changed file before
committing it (git diff tests/golden_text) and check a few of its numbers against the
numpy reference, e.g.
    /usr/bin/python3 scripts/attn_reference.py data/causal.json --causal --heads 1
"""

import argparse
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden_text"
COMMANDS = GOLDEN / "commands.json"

# Environment variables that would change what a view looks like.
VIEW_VARIABLES = ("NO_COLOR", "COLORTERM", "COLUMNS", "TERM")


def load_commands():
    """The snapshot commands: [{"name": ..., "args": [...]}, ...]."""
    return json.loads(COMMANDS.read_text(encoding="utf-8"))["commands"]


def environment():
    env = {k: v for k, v in os.environ.items() if k not in VIEW_VARIABLES}
    env["TERM"] = "dumb"
    return env


def run_command(binary, args, root=ROOT):
    """Run `attnscope ARGS...` from `root`; returns the CompletedProcess (text)."""
    return subprocess.run([str(binary)] + list(args), cwd=root, env=environment(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, encoding="utf-8", timeout=120)


def problems(output, root=ROOT):
    """What makes an output unfit for a snapshot: absolute paths, timings."""
    found = []
    if str(root) in output:
        found.append(f"contains the absolute path {root}")
    if "timings" in output or "seconds" in output:
        found.append("contains timings")
    return found


def snapshot(binary, command):
    """The snapshot text of one command; raises RuntimeError when the run is not clean."""
    proc = run_command(binary, command["args"])
    if proc.returncode != 0 or proc.stderr:
        raise RuntimeError(f"{command['name']}: exit {proc.returncode}, stderr {proc.stderr!r}")
    bad = problems(proc.stdout)
    if bad:
        raise RuntimeError(f"{command['name']}: {', '.join(bad)}")
    return proc.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.environ.get("ATTNSCOPE_BIN") or str(ROOT / "build" / "attnscope"),
                        help="the attnscope binary (default: $ATTNSCOPE_BIN or build/attnscope)")
    parser.add_argument("--check", action="store_true", help="compare with the snapshots instead of writing them")
    opts = parser.parse_args()
    binary = Path(opts.bin).resolve()
    if not binary.exists():
        sys.exit(f"make_golden_text: binary not found: {binary} (build it, or pass --bin)")

    commands = load_commands()
    names = [c["name"] for c in commands]
    if len(set(names)) != len(names):
        sys.exit("make_golden_text: duplicate names in commands.json")
    differ = 0
    for command in commands:
        text = snapshot(binary, command)
        path = GOLDEN / f"{command['name']}.txt"
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if opts.check:
            if old != text:
                differ += 1
                print(f"{path.relative_to(ROOT)}: differs")
                sys.stdout.writelines(difflib.unified_diff((old or "").splitlines(True), text.splitlines(True),
                                                           "snapshot", "now", n=1))
            continue
        if old != text:
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: {'written' if old is None else 'CHANGED, read it before committing'}")
    stale = sorted(p.name for p in GOLDEN.glob("*.txt") if p.stem not in names)
    for name in stale:
        print(f"tests/golden_text/{name}: not in commands.json (remove it)")
    if opts.check:
        print(f"make_golden_text: {len(commands) - differ} of {len(commands)} snapshots match")
        sys.exit(1 if differ or stale else 0)


if __name__ == "__main__":
    main()
