#!/usr/bin/python3
"""How much memory and time choosing one layer of a large checkpoint costs.

Writes a multi-layer float32 Llama-style .safetensors file (default: 16 layers, each with
q/k/v/o_proj 2048×2048 and an MLP-sized filler 8192×2048: 2 GiB) with the independent
writer of scripts/checkpoint_reference.py, then runs

    attnscope run --checkpoint FILE --layer 7 BUNDLE --dtype float32 --stages output -q

(and the same in float64) under /usr/bin/time -v, and prints the peak RSS and the wall
time against the bytes of that layer's attention weights. Target (README "Real
checkpoints"): RSS < 2 × those bytes + 50 MiB, well under a second. Nothing is asserted:
the figures depend on the machine (and on the file being in the page cache, as it is
right after writing it).

    /usr/bin/python3 scripts/measure_checkpoint.py [--bin build/attnscope] [--dir /tmp/…]
                                                   [--layers 16] [--width 2048] [--keep]
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint_reference as cref  # noqa: E402

MiB = 1 << 20


def write_model(path, layers, width, mlp, seed=0):
    """Streams the file tensor by tensor (never more than one tensor in memory)."""
    rng = np.random.default_rng(seed)
    entries = []
    for n in range(layers):
        p = f"model.layers.{n}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            entries.append((p + f"self_attn.{proj}.weight", "F32", (width, width)))
        entries.append((p + "mlp.up_proj.weight", "F32", (mlp, width)))
    head, spans = cref.safetensors_header(entries, {"format": "pt"})
    with open(path, "wb") as f:
        f.write(head)
        for (name, _, shape), (begin, end) in zip(entries, spans):
            if ".self_attn." in name:
                a = (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(width)))
            else:
                a = np.full(shape, 0.001, dtype=np.float32)  # filler: its bytes are never read
            data = a.astype("<f4").tobytes()
            assert len(data) == end - begin
            f.write(data)
    return head, entries


def measure(argv):
    """(peak RSS bytes, wall seconds, exit code, stderr) of one run under /usr/bin/time -v."""
    p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    seconds = float(wall.group(1) or 0) * 3600 + float(wall.group(2)) * 60 + float(wall.group(3))
    return rss, seconds, p.returncode, p.stderr


def main():
    root = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(root / "build" / "attnscope"))
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a new /tmp directory)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--mlp", type=int, default=8192)
    ap.add_argument("--layer", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint")
    a = ap.parse_args()
    d = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="attnscope-measure-"))
    made = not a.dir or not d.exists()
    d.mkdir(parents=True, exist_ok=True)
    try:
        ckpt = d / "model.safetensors"
        heads = a.width // 128
        (d / "config.json").write_text(json.dumps({
            "model_type": "llama", "num_attention_heads": heads, "num_key_value_heads": heads,
            "hidden_size": a.width, "num_hidden_layers": a.layers, "rope_theta": 10000.0}))
        write_model(ckpt, a.layers, a.width, a.mlp)
        x = d / "x.npz"
        np.savez(x, x=np.random.default_rng(1).standard_normal((1, a.tokens, a.width)).astype(np.float32))
        file_bytes = ckpt.stat().st_size
        attn_bytes = 4 * a.width * a.width * 4
        target = 2 * attn_bytes + 50 * MiB
        print(f"checkpoint: {ckpt}, {file_bytes / MiB:.0f} MiB, {a.layers} layers; "
              f"layer {a.layer}'s attention weights {attn_bytes / MiB:.0f} MiB (4 × {a.width}×{a.width} float32)")
        print(f"target: peak RSS < 2 × {attn_bytes / MiB:.0f} MiB + 50 MiB = {target / MiB:.0f} MiB, "
              f"well under a second")
        # Baseline: the same binary listing the file (header only) — the process's own floor.
        rss, wall, code, err = measure([a.bin, "inspect", str(ckpt)])
        print(f"  inspect (header only):        exit {code}, peak RSS {rss / MiB:7.1f} MiB, wall {wall:.2f} s")
        for dtype in ("float32", "float64"):
            argv = [a.bin, "run", "--checkpoint", str(ckpt), "--layer", str(a.layer), str(x), "--dtype", dtype,
                    "--stages", "output", "-q", "--threads", "1"]
            for attempt in range(3):  # the first run may still find pages outside the cache
                rss, wall, code, err = measure(argv)
            verdict = "within" if rss < target else "OVER"
            print(f"  run --layer {a.layer} --dtype {dtype}: exit {code}, peak RSS {rss / MiB:7.1f} MiB "
                  f"({rss / attn_bytes:.2f} × the layer's attention bytes; {verdict} target), wall {wall:.2f} s")
            if code != 0:
                print("    " + "\n    ".join(line for line in err.splitlines() if "attnscope" in line))
            else:  # where the time goes: reading the layer (load) against the attention (compute)
                t = subprocess.run(argv + ["--timings"], capture_output=True, text=True).stderr.strip()
                print(f"    {t}")
    finally:
        if a.keep:
            print(f"kept {d}")
        elif made:
            shutil.rmtree(d, ignore_errors=True)
        else:  # a directory the user named: remove only what this script wrote
            for name in ("model.safetensors", "config.json", "x.npz"):
                (d / name).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
