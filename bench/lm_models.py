"""Synthetic Hugging Face model folders for the bench's model cases (scripts/bench
--model-case, --model-memory): config.json and model.safetensors with random weights, written
by numpy and scripts/checkpoint_reference.py's safetensors header (nothing of attnscope's).

The tensors are streamed to the file one at a time (a 7B-wide layer never sits in memory
whole as float64). With `repeat_layers`, one layer's random tensors are drawn once and
written for every layer (the memory case only needs the shapes; it saves minutes of
random numbers).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from checkpoint_reference import safetensors_header  # noqa: E402  (the format's writer)

# name: architecture, layers L, width D, heads H, K/V heads G, MLP F, vocabulary V, positions P
SHAPES = {
    # GPT-2 small (Radford et al. 2019; the gpt2 checkpoint's config.json)
    "gpt2-small": dict(arch="gpt2", L=12, D=768, H=12, G=12, F=3072, V=50257, P=1024),
    # Qwen2-0.5B (its config.json: hidden_size 896, intermediate_size 4864, 14 heads, 2 K/V
    # heads, 24 layers, vocab_size 151936, rope_theta 1e6, rms_norm_eps 1e-6, tied, q/k/v biases)
    "qwen2-0.5b": dict(arch="qwen2", L=24, D=896, H=14, G=2, F=4864, V=151936, P=32768),
    # Llama-2-7B's widths (4096 wide, 32 heads, MLP 11008) with a small vocabulary
    "llama7b-2": dict(arch="llama", L=2, D=4096, H=32, G=32, F=11008, V=1024, P=4096),
    "llama7b-8": dict(arch="llama", L=8, D=4096, H=32, G=32, F=11008, V=1024, P=4096),
}

NUMPY_OF = {"F32": "<f4", "F16": "<f2"}
ITEM = {"F32": 4, "F16": 2}


def config_of(s):
    if s["arch"] == "gpt2":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": s["L"],
                "n_embd": s["D"], "n_head": s["H"], "n_inner": s["F"], "n_positions": s["P"],
                "n_ctx": s["P"], "vocab_size": s["V"], "activation_function": "gelu_new",
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    c = {"model_type": s["arch"], "hidden_size": s["D"], "intermediate_size": s["F"],
         "num_attention_heads": s["H"], "num_key_value_heads": s["G"],
         "num_hidden_layers": s["L"], "vocab_size": s["V"], "max_position_embeddings": s["P"],
         "hidden_act": "silu", "tie_word_embeddings": True}
    if s["arch"] == "qwen2":
        c.update(rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False,
                 sliding_window=s["P"], max_window_layers=s["L"])
    else:
        c.update(rms_norm_eps=1e-5, rope_theta=10000.0)
    return c


def layer_tensors(s, l):
    """[(name, shape, kind)] of layer l; kind: 'w' (N(0, 0.02)), 'one' (norm scale), 'b' (bias)."""
    D, F, dk = s["D"], s["F"], s["D"] // s["H"]
    if s["arch"] == "gpt2":
        p = f"h.{l}."
        return [(p + "ln_1.weight", (D,), "one"), (p + "ln_1.bias", (D,), "b"),
                (p + "attn.c_attn.weight", (D, 3 * D), "w"), (p + "attn.c_attn.bias", (3 * D,), "b"),
                (p + "attn.c_proj.weight", (D, D), "w"), (p + "attn.c_proj.bias", (D,), "b"),
                (p + "ln_2.weight", (D,), "one"), (p + "ln_2.bias", (D,), "b"),
                (p + "mlp.c_fc.weight", (D, F), "w"), (p + "mlp.c_fc.bias", (F,), "b"),
                (p + "mlp.c_proj.weight", (F, D), "w"), (p + "mlp.c_proj.bias", (D,), "b")]
    p, kv = f"model.layers.{l}.", s["G"] * dk
    t = [(p + "input_layernorm.weight", (D,), "one"),
         (p + "self_attn.q_proj.weight", (D, D), "w"), (p + "self_attn.k_proj.weight", (kv, D), "w"),
         (p + "self_attn.v_proj.weight", (kv, D), "w"), (p + "self_attn.o_proj.weight", (D, D), "w"),
         (p + "post_attention_layernorm.weight", (D,), "one"),
         (p + "mlp.gate_proj.weight", (F, D), "w"), (p + "mlp.up_proj.weight", (F, D), "w"),
         (p + "mlp.down_proj.weight", (D, F), "w")]
    if s["arch"] == "qwen2":
        t += [(p + "self_attn.q_proj.bias", (D,), "b"), (p + "self_attn.k_proj.bias", (kv,), "b"),
              (p + "self_attn.v_proj.bias", (kv,), "b")]
    return t


def model_tensors(s):
    D = s["D"]
    if s["arch"] == "gpt2":
        first = [("wte.weight", (s["V"], D), "w"), ("wpe.weight", (s["P"], D), "w")]
        last = [("ln_f.weight", (D,), "one"), ("ln_f.bias", (D,), "b")]
    else:
        first = [("model.embed_tokens.weight", (s["V"], D), "w")]
        last = [("model.norm.weight", (D,), "one")]
    return first + [t for l in range(s["L"]) for t in layer_tensors(s, l)] + last


def draw(rng, shape, kind, dtype):
    if kind == "one":
        a = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    else:
        a = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02 if kind == "w" else 0.01)
    return a.astype(NUMPY_OF[dtype]).tobytes()


def write_model(directory, name, dtype="F32", seed=0, repeat_layers=False):
    """DIRECTORY/config.json and DIRECTORY/model.safetensors of SHAPES[name]; returns bytes written."""
    s = SHAPES[name]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config_of(s), f, indent=1)
    tensors = model_tensors(s)
    head, _ = safetensors_header([(n, dtype, shape) for n, shape, _ in tensors], {"format": "pt"})
    rng = np.random.default_rng(seed)
    cache = {}  # a layer's tensors by their name without the layer number (repeat_layers)
    path = os.path.join(directory, "model.safetensors")
    with open(path, "wb") as f:
        f.write(head)
        for n, shape, kind in tensors:
            key = ".".join(p for p in n.split(".") if not p.isdigit())
            if repeat_layers and key in cache:
                f.write(cache[key])
                continue
            data = draw(rng, shape, kind, dtype)
            if repeat_layers:
                cache[key] = data
            f.write(data)
    return os.path.getsize(path)


def layer_weight_bytes(name, itemsize):
    """One layer's weights at `itemsize` bytes a number."""
    s = SHAPES[name]
    return itemsize * sum(int(np.prod(shape)) for _, shape, _ in layer_tensors(s, 0))


if __name__ == "__main__":  # write_model DIR NAME [F32|F16] [--seed N] [--repeat-layers]
    import argparse
    p = argparse.ArgumentParser(description="write a synthetic model folder")
    p.add_argument("directory")
    p.add_argument("name", choices=sorted(SHAPES))
    p.add_argument("dtype", nargs="?", default="F32", choices=sorted(NUMPY_OF))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat-layers", action="store_true")
    a = p.parse_args()
    print(write_model(a.directory, a.name, a.dtype, seed=a.seed, repeat_layers=a.repeat_layers))
