"""The bench's model cases (scripts/bench --model-case, --model-memory; bench/README.md).

--model-case: `attnscope run --model DIR --tokens <1024 ids> --layer all --dtype float32
--stages weights --dump DUMP` against bench/ref_lm_torch.py (PyTorch float32 eager, the
same work: every layer's hidden state kept, every layer's attention probabilities written
as DUMP/layer_NN/weights.npy) on synthetic GPT-2-small- and Qwen2-0.5B-shaped models
(bench/lm_models.py), alternating, DUMP on tmpfs (/dev/shm) when there is one. Per
program: wall, CPU (user + sys), kernel (sys), peak RSS, the share of the same-run sgemm
peak, and attnscope ÷ torch; the first repetition's weights are compared.

--model-memory: the same attnscope command on 128 tokens of models of Llama-2-7B's widths
(4096 wide, 32 heads, MLP 11008, vocabulary 1024) stored as F16, with 2 and with 8
layers: both peaks, their ratio (within 10% passes), and the bound one layer's float32
weights + the kept stages + 100 MiB.
"""

import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

import lm_models

ROOT = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"
CASE_MODELS = ("gpt2-small", "qwen2-0.5b")
CASE_TOKENS = 1024
MEMORY_MODELS = ("llama7b-2", "llama7b-8")
MEMORY_TOKENS = 128


def token_ids(vocab, n, seed=0):
    return ",".join(str(int(i)) for i in np.random.default_rng(seed).integers(0, vocab, n))


def dump_root(workdir):
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(workdir)


def attnscope_cmd(binary, model, ids, threads, dump):
    return [str(binary), "run", "--model", str(model), "--tokens", ids, "--layer", "all", "--dtype", "float32",
            "--stages", "weights", "--dump", str(dump), "-q", "--timings", "--threads", str(threads)]


def torch_cmd(model, ids, threads, dump):
    return [PYTHON, str(ROOT / "bench" / "ref_lm_torch.py"), str(model), "--tokens", ids, "--dump", str(dump),
            "--threads", str(threads)]


def flop_of(name, T):
    """Dense FLOP of the layers' matrix products: Q, K, V, O projections, scores and context
    (every score, the causal half included), the MLP (3 products gated, 2 for GPT-2)."""
    s = lm_models.SHAPES[name]
    D, H, G, F, L = s["D"], s["H"], s["G"], s["F"], s["L"]
    dk = D // H
    per_layer = 2 * T * D * (2 * D + 2 * G * dk) + 4 * H * T * T * dk + 2 * T * D * F * (2 if s["arch"] == "gpt2" else 3)
    return L * per_layer


def weights_diff(a_dump, t_dump, layers):
    worst = 0.0
    for l in range(layers):
        a = np.load(Path(a_dump) / f"layer_{l:02d}" / "weights.npy")
        t = np.load(Path(t_dump) / f"layer_{l:02d}" / "weights.npy")
        if a.shape != t.shape:
            return None
        worst = max(worst, float(np.abs(a.astype(np.float64) - t).max()))
    return worst


def run_model(name, workdir, binary, reps, threads, env, run_once, log):
    """Both programs `reps` times each on model `name`, alternating; their runs and the check."""
    model = Path(workdir) / name
    log(f"bench: {name}: writing the model")
    lm_models.write_model(model, name, "F32", seed=1)
    ids = token_ids(lm_models.SHAPES[name]["V"], CASE_TOKENS)
    runs, check = {"attnscope": [], "torch": []}, None
    try:
        for rep in range(reps):
            order = ["attnscope", "torch"] if rep % 2 == 0 else ["torch", "attnscope"]
            dumps = {}
            for prog in order:
                dump = Path(tempfile.mkdtemp(prefix=f"lm-{prog}-", dir=dump_root(workdir)))
                dumps[prog] = dump
                cmd = attnscope_cmd(binary, model, ids, threads, dump) if prog == "attnscope" else \
                    torch_cmd(model, ids, threads, dump)
                r = run_once(cmd, env)
                runs[prog].append(r)
                log(f"bench: {name} rep {rep + 1}/{reps} {prog}: wall {r['wall']:.2f} s, CPU "
                    f"{r['user'] + r['sys']:.2f} s (kernel {r['sys']:.2f}), peak RSS {r['maxrss_kib'] / 1024:.0f} MiB"
                    + (f", {r['error']}" if "error" in r else ""))
            if rep == 0 and all("error" not in runs[p][0] for p in runs):
                check = weights_diff(dumps["attnscope"], dumps["torch"], lm_models.SHAPES[name]["L"])
            for d in dumps.values():
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(model, ignore_errors=True)
    return {"runs": runs, "check": check}


def summary(runs):
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return None
    med = lambda f: statistics.median(f(r) for r in ok)  # noqa: E731
    return {"wall": med(lambda r: r["wall"]), "cpu": med(lambda r: r["user"] + r["sys"]),
            "sys": med(lambda r: r["sys"]), "rss": max(r["maxrss_kib"] for r in ok) / 1024.0,
            "ok": len(ok), "n": len(runs)}


def model_table(name, result, peak_gflops):
    s = lm_models.SHAPES[name]
    flop = flop_of(name, CASE_TOKENS)
    lines = [f"## model case: {name} ({s['arch']}, {s['L']} layers, {s['D']} wide, {s['H']} heads, {s['G']} K/V "
             f"heads, MLP {s['F']}, vocabulary {s['V']}), {CASE_TOKENS} tokens, float32, every layer's weights kept\n",
             f"FLOP of the layers' products: {flop / 1e9:.1f} GFLOP (projections, scores and context counted dense, "
             "MLP); % of peak = FLOP ÷ wall ÷ sgemm peak.\n",
             "| program | wall median s | CPU s (user+sys) | kernel s | peak RSS MiB | % of peak | "
             "attnscope ÷ this: wall | CPU | RSS |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    sums = {p: summary(r) for p, r in result["runs"].items()}
    base = sums["attnscope"]
    for prog, v in sums.items():
        if v is None:
            lines.append(f"| {prog} | failed: {result['runs'][prog][-1].get('error', '?')} | | | | | | | |")
            continue
        share = 100 * flop / v["wall"] / 1e9 / peak_gflops
        if prog == "attnscope" or base is None:
            rw = rc = rr = "—"
        else:
            rw, rc, rr = (f"{base[k] / v[k]:.2f}" for k in ("wall", "cpu", "rss"))
        lines.append(f"| {prog} ({v['ok']}/{v['n']} ok) | {v['wall']:.2f} | {v['cpu']:.2f} | {v['sys']:.2f} | "
                     f"{v['rss']:.0f} | {share:.1f} | {rw} | {rc} | {rr} |")
    check = result["check"]
    lines.append("\nCheck (first repetition, every layer's weights): " +
                 ("not compared" if check is None else f"max |attnscope − torch| {check:.2g}") + ".\n")
    return "\n".join(lines) + "\n"


def run_case(binary, peak_gflops, reps, threads, env, workdir, run_once, log):
    """--model-case: a Markdown section per model, and the raw numbers."""
    text, raw = [], {}
    for name in CASE_MODELS:
        raw[name] = run_model(name, workdir, binary, reps, threads, env, run_once, log)
        section = model_table(name, raw[name], peak_gflops)
        print(section, flush=True)
        text.append(section)
    return "\n".join(text), raw


def run_memory(binary, reps, threads, env, workdir, run_once, log):
    """--model-memory: the peaks of the 2- and 8-layer models; returns (text, raw, passed)."""
    peaks, raw = {}, {}
    for name in MEMORY_MODELS:
        s = lm_models.SHAPES[name]
        model = Path(workdir) / name
        log(f"bench: {name}: writing the model (F16)")
        # In a child: a child's peak RSS (wait4) counts its parent's at the fork, and writing
        # the model here would leave this process's at hundreds of MB.
        subprocess.run([PYTHON, str(ROOT / "bench" / "lm_models.py"), str(model), name, "F16", "--seed", "2",
                        "--repeat-layers"], check=True, stdout=subprocess.DEVNULL)
        ids = token_ids(s["V"], MEMORY_TOKENS)
        try:
            raw[name] = []
            for rep in range(reps):
                dump = Path(tempfile.mkdtemp(prefix="lm-mem-", dir=dump_root(workdir)))
                r = run_once(attnscope_cmd(binary, model, ids, threads, dump), env)
                shutil.rmtree(dump, ignore_errors=True)
                raw[name].append(r)
                log(f"bench: {name} rep {rep + 1}/{reps}: wall {r['wall']:.2f} s, CPU {r['user'] + r['sys']:.2f} s, "
                    f"peak RSS {r['maxrss_kib'] / 1024:.0f} MiB" + (f", {r['error']}" if "error" in r else ""))
                if "error" in r:
                    return f"{name} failed: {r['error']}\n", raw, False
        finally:
            shutil.rmtree(model, ignore_errors=True)
        peaks[name] = max(r["maxrss_kib"] for r in raw[name]) / 1024.0
    s = lm_models.SHAPES[MEMORY_MODELS[0]]
    layer = lm_models.layer_weight_bytes(MEMORY_MODELS[0], 4) / 2**20
    # kept: the largest model's attention inputs (every layer, in the run's float32) and one layer's weights stage
    kept = (lm_models.SHAPES[MEMORY_MODELS[-1]]["L"] * MEMORY_TOKENS * s["D"] * 4
            + s["H"] * MEMORY_TOKENS ** 2 * 4) / 2**20
    bound = layer + kept + 100
    small, large = (peaks[n] for n in MEMORY_MODELS)
    ratio = large / small
    passed = ratio <= 1.10 and large <= bound
    text = (f"## model memory: Llama-2-7B widths (4096 wide, 32 heads, MLP 11008, vocabulary 1024, F16 stored), "
            f"{MEMORY_TOKENS} tokens, float32, `--layer all --stages weights --dump`\n\n"
            "| layers | peak RSS MiB |\n|---:|---:|\n"
            + "".join(f"| {lm_models.SHAPES[n]['L']} | {peaks[n]:.0f} |\n" for n in MEMORY_MODELS)
            + f"\n8 layers ÷ 2 layers: {ratio:.3f} ({'within' if ratio <= 1.10 else 'over'} 10%). Bound: one layer's "
            f"float32 weights {layer:.0f} MiB + kept stages {kept:.0f} MiB + 100 MiB = {bound:.0f} MiB; the 8-layer "
            f"peak is {'within' if large <= bound else 'over'} it ({large / bound:.2f}×).\n")
    print(text, flush=True)
    return text, raw, passed
