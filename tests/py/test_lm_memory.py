#!/usr/bin/python3
"""`attnscope run --model DIR --layer all` holds one layer's weights at a time, whatever
the number of layers (issue "Fast and lean": weights are read per layer from the mapped
file and the file's pages given back once read).

Two Llama-shaped models that differ only in their number of layers (2 and 10; 1024 wide,
MLP 2816, F16 stored: 25 MB of file a layer), written by scripts/checkpoint_reference.py's
safetensors writer (and, as pytorch_model.bin, by PyTorch's torch.save); the same 16 tokens
through both. Expected: the 10-layer run's peak RSS (from wait4) within 64 MiB of the
2-layer run's; holding every layer's pages would add 8 × 25 MB. And the 2-layer run's peak
within one layer's float32 weights (+ the kept stages) of a 16-times-narrower model's. No
timing is measured.

    /usr/bin/python3 tests/py/test_lm_memory.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import CliTestCase  # noqa: E402

import checkpoint_reference as cref  # noqa: E402  (scripts/: the safetensors writer)

D, F, H, V = 1024, 2816, 8, 64
IDS = "1,5,9,3,60,2,7,7,11,40,0,33,21,8,6,50"
SLACK_MIB = 64
# Runs argv[1:] and prints its exit code and peak RSS in KiB (wait4).
MEASURE = ("import os, subprocess, sys\n"
           "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
           "_, status, usage = os.wait4(p.pid, 0)\n"
           "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)")


def write_llama(directory, layers, D=D, F=F, torch_zip=False):
    os.makedirs(directory)
    config = {"model_type": "llama", "hidden_size": D, "intermediate_size": F, "num_attention_heads": H,
              "num_key_value_heads": H, "num_hidden_layers": layers, "vocab_size": V,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "tie_word_embeddings": True}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    rng = np.random.default_rng(0)
    shapes = {"self_attn.q_proj": (D, D), "self_attn.k_proj": (D, D), "self_attn.v_proj": (D, D),
              "self_attn.o_proj": (D, D), "mlp.gate_proj": (F, D), "mlp.up_proj": (F, D), "mlp.down_proj": (D, F)}
    layer = {k: (0.02 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    ones = np.ones(D, dtype=np.float32)
    tensors = {"model.embed_tokens.weight": (0.02 * rng.standard_normal((V, D))).astype(np.float32)}
    for l in range(layers):  # every layer the same numbers: only the count matters here
        p = f"model.layers.{l}."
        tensors[p + "input_layernorm.weight"] = ones
        tensors[p + "post_attention_layernorm.weight"] = ones
        tensors.update({p + k + ".weight": v for k, v in layer.items()})
    tensors["model.norm.weight"] = ones
    if torch_zip:  # pytorch_model.bin, written by PyTorch itself
        import torch
        state = {k: torch.from_numpy(v).half() for k, v in tensors.items()}
        torch.save(state, os.path.join(directory, "pytorch_model.bin"))
    else:
        cref.write_safetensors(os.path.join(directory, "model.safetensors"), tensors, dtype="F16")


class PerLayer(CliTestCase):
    def peak_mib(self, model):
        dump = str(self.tmp / (os.path.basename(model) + "-dump"))
        cmd = [str(common.BIN), "run", "--model", model, "--tokens", IDS, "--layer", "all", "--dtype", "float32",
               "--stages", "weights", "--dump", dump, "-q"]
        # A child's ru_maxrss counts its parent's peak at the fork (Linux keeps the larger
        # across exec), and this process has held the models' numbers: the command is run
        # by a fresh Python without numpy, whose own small peak is the same for every command.
        proc = subprocess.run([sys.executable, "-c", MEASURE] + cmd, capture_output=True, text=True, check=False)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        code, maxrss_kib = proc.stdout.split()
        self.assertEqual(code, "0", proc.stderr)
        return int(maxrss_kib) / 1024.0

    def peaks_by_layers(self, torch_zip):
        small, large = (str(self.tmp / f"llama-{n}{'-bin' if torch_zip else ''}") for n in (2, 10))
        write_llama(small, 2, torch_zip=torch_zip)
        write_llama(large, 10, torch_zip=torch_zip)
        a, b = self.peak_mib(small), self.peak_mib(large)
        print(f"peak RSS ({'pytorch_model.bin' if torch_zip else 'model.safetensors'}): 2 layers {a:.0f} MiB, "
              f"10 layers {b:.0f} MiB", file=sys.stderr)
        self.assertLess(b - a, SLACK_MIB, f"2 layers {a:.0f} MiB, 10 layers {b:.0f} MiB")

    def test_peak_does_not_grow_with_layers(self):
        self.peaks_by_layers(torch_zip=False)

    def test_peak_does_not_grow_with_layers_torch_zip(self):
        # The PyTorch zip reader gives a tensor's mapped pages back as the safetensors one does.
        self.peaks_by_layers(torch_zip=True)

    def test_peak_within_one_layer_of_weights(self):
        # The bound, peak RSS <= one layer's weights in the run's dtype + the kept
        # stages + a fixed allowance, with the allowance measured: the peak of the same run
        # on a model 16 times narrower (what the program holds whatever the model). Before,
        # an F16 matrix was widened to float64, and the attention's matrices were read (as
        # float64) while the MLP's were held: about 1.6 layers of float32 weights here.
        tiny, model = str(self.tmp / "llama-tiny"), str(self.tmp / "llama-2")
        write_llama(tiny, 2, D // 16, F // 16)
        write_llama(model, 2)
        base, peak = self.peak_mib(tiny), self.peak_mib(model)
        layer = 4 * (4 * D * D + 3 * D * F) / 2**20  # float32: q, k, v, o; gate, up, down
        T = len(IDS.split(","))
        kept = (2 * T * D * 4 + H * T * T * 4) / 2**20  # every layer's input; one layer's weights stage
        print(f"peak RSS {peak:.0f} MiB, {peak - base:.0f} MiB above the narrow model's {base:.0f} MiB; "
              f"one layer's float32 weights {layer:.0f} MiB + kept stages {kept:.1f} MiB", file=sys.stderr)
        self.assertLessEqual(peak - base, layer + kept, f"{peak - base:.0f} MiB above {base:.0f} MiB")


if __name__ == "__main__":
    common.main("test_lm_memory", against="the 2-layer run's peak RSS")
