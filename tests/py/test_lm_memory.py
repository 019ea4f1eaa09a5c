#!/usr/bin/python3
"""`attnscope run --model DIR --layer all` holds one layer's weights at a time, whatever
the number of layers (issue "Fast and lean": weights are read per layer from the mapped
file and the file's pages given back once read).

Two Llama-shaped models that differ only in their number of layers (2 and 10; 1024 wide,
MLP 2816, F16 stored: 25 MB of file a layer), written by scripts/checkpoint_reference.py's
safetensors writer; the same 16 tokens through both. Expected: the 10-layer run's peak RSS
(from wait4) within 64 MiB of the 2-layer run's; holding every layer's pages would add
8 × 25 MB. No timing is measured.

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


def write_llama(directory, layers):
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
    cref.write_safetensors(os.path.join(directory, "model.safetensors"), tensors, dtype="F16")


class PerLayer(CliTestCase):
    def peak_mib(self, model):
        dump = str(self.tmp / (os.path.basename(model) + "-dump"))
        cmd = [str(common.BIN), "run", "--model", model, "--tokens", IDS, "--layer", "all", "--dtype", "float32",
               "--stages", "weights", "--dump", dump, "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode()
        proc.stderr.close()
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, err)
        return usage.ru_maxrss / 1024.0

    def test_peak_does_not_grow_with_layers(self):
        small, large = (str(self.tmp / f"llama-{n}") for n in (2, 10))
        write_llama(small, 2)
        write_llama(large, 10)
        a, b = self.peak_mib(small), self.peak_mib(large)
        print(f"peak RSS: 2 layers {a:.0f} MiB, 10 layers {b:.0f} MiB", file=sys.stderr)
        self.assertLess(b - a, SLACK_MIB, f"2 layers {a:.0f} MiB, 10 layers {b:.0f} MiB")


if __name__ == "__main__":
    common.main("test_lm_memory", against="the 2-layer run's peak RSS")
