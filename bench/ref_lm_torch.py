#!/usr/bin/python3
"""PyTorch float32 eager reference for the bench's model case (scripts/bench --model-case):
the forward pass of a GPT-2 or Llama/Qwen2 model folder on token ids, keeping every
layer's hidden state (its attention input, as output_hidden_states does) and writing every
layer's attention probabilities (H, T, T) as DUMP/layer_NN/weights.npy, as
`attnscope run --model DIR --tokens … --layer all --stages weights --dump DUMP` does.

Written from the published definitions (GPT-2: Radford et al. 2019, Hugging Face
modeling_gpt2; Llama: Touvron et al. 2023, modeling_llama; Qwen2: modeling_qwen2):

  gpt2   h = wte[ids] + wpe[0..T); per block a = LN_1(h); q, k, v = split(a·c_attn + b);
         h += softmax(q·kᵀ/√dk, causal)·v ·c_proj + b; h += c_proj(gelu_tanh(c_fc(LN_2(h))))
  llama, qwen2   h = embed[ids]; a = RMS(h); q, k, v = a·Wᵀ (+ b for qwen2); RoPE
         (rotate_half, rope_theta) on q, k; K/V heads repeated H/G times; causal softmax;
         h += ctx·o_projᵀ; m = RMS(h); h += down(silu(gate(m)) ⊙ up(m))

The weights are read with numpy from the safetensors layout (8-byte header length, JSON
header, data buffer), F32 or F16 stored, converted to float32.

    ref_lm_torch.py DIR --tokens 1,2,3 [--dump DUMP] [--threads N]
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

NP = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path):
    """{name: float32 torch tensor} of an F32/F16 .safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(mm[b:end], dtype=NP[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(a.astype(np.float32))
    return out


def causal_softmax(s):
    T = s.shape[-1]
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1)


def gpt2_layers(c, w, ids):
    D, H, T = c["n_embd"], c["n_head"], len(ids)
    eps = c.get("layer_norm_epsilon", 1e-5)
    h = w["wte.weight"][ids] + w["wpe.weight"][:T]
    for l in range(c["n_layer"]):
        p = f"h.{l}."
        a = torch.nn.functional.layer_norm(h, (D,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(T, H, D // H).transpose(0, 1) for t in qkv.split(D, dim=1))
        probs = causal_softmax(q @ k.transpose(1, 2) / math.sqrt(D // H))  # (H, T, T)
        ctx = (probs @ v).transpose(0, 1).reshape(T, D)
        yield a, probs
        h = h + ctx @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = torch.nn.functional.layer_norm(h, (D,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        u = torch.nn.functional.gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + u @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(t, theta):
    """t (n, T, d): rotate_half RoPE at positions 0..T-1."""
    T, d = t.shape[1], t.shape[2]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    half = torch.cat([-t[..., d // 2:], t[..., :d // 2]], -1)
    return t * cos + half * sin


def llama_layers(c, w, ids):
    D, H, G, T = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], len(ids)
    dk, eps, theta = D // H, c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    h = w["model.embed_tokens.weight"][ids]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."

        def proj(name, x):
            y = x @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

        a = rms(h, w[p + "input_layernorm.weight"], eps)
        q = rope(proj("self_attn.q_proj", a).reshape(T, H, dk).transpose(0, 1), theta)
        k = rope(proj("self_attn.k_proj", a).reshape(T, G, dk).transpose(0, 1), theta)
        v = proj("self_attn.v_proj", a).reshape(T, G, dk).transpose(0, 1)
        k, v = k.repeat_interleave(H // G, 0), v.repeat_interleave(H // G, 0)
        probs = causal_softmax(q @ k.transpose(1, 2) / math.sqrt(dk))  # (H, T, T)
        ctx = (probs @ v).transpose(0, 1).reshape(T, D)
        yield a, probs
        h = h + proj("self_attn.o_proj", ctx)
        m = rms(h, w[p + "post_attention_layernorm.weight"], eps)
        h = h + proj("mlp.down_proj", torch.nn.functional.silu(proj("mlp.gate_proj", m)) * proj("mlp.up_proj", m))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--dump")
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    with open(os.path.join(a.model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    w = read_safetensors(os.path.join(a.model, "model.safetensors"))
    ids = torch.tensor([int(t) for t in a.tokens.split(",")])
    t1 = time.perf_counter()
    layers = gpt2_layers if c["model_type"] == "gpt2" else llama_layers
    hidden = []  # every layer's attention input, kept (output_hidden_states)
    with torch.no_grad():
        for l, (x, probs) in enumerate(layers(c, w, ids)):
            hidden.append(x)
            if a.dump:
                d = os.path.join(a.dump, f"layer_{l:02d}")
                os.makedirs(d, exist_ok=True)
                np.save(os.path.join(d, "weights.npy"), probs.numpy())  # (H, T, T), as attnscope dumps one batch item
    t2 = time.perf_counter()
    print(f"timings: load={t1 - t0:.6f} compute={t2 - t1:.6f} output=0", file=sys.stderr)


if __name__ == "__main__":
    main()
