#!/usr/bin/python3
"""Train two tiny transformers on the CPU and export their attention layers.

The examples made by make_data.py use random weights: their attention patterns
show how the computation works, not what a model learns.  This script trains
two very small models whose attention has a pattern worth looking at, exports
each attention layer (weights and the real inputs of two sample sequences) to
data/ as a bundle, and checks that attnscope computes the same attention
weights as the trained PyTorch model.

    induction  a 1-layer causal decoder trained on repeated sequences
               "c a f e c a f e": in the second half the next token is the one
               that followed the current token last time.  Its head attends
               the key 3 positions back, the token to be copied.
               Run: build/attnscope run data/induction.json --causal --heads 1
    reverse    a tiny encoder-decoder trained to reverse 8 letters.  Output
               position i must read source position 7 - i, so its
               cross-attention weights are an anti-diagonal.
               Run: build/attnscope run data/reverse.json --heads 1

Each bundle is written as NAME.json (full float32 precision written as Python
floats) and NAME.npz (the same float32 numbers); the script checks that they
hold the same arrays.  Training is seeded, deterministic and single-threaded,
so running the script twice writes identical files.  It needs build/attnscope
(scripts/build) for the final check; it takes well under a minute on 2 cores.

    /usr/bin/python3 scripts/train_demo.py

data/README.md documents the files and what to look for.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_reference as ref  # noqa: E402
from make_data import json_value  # noqa: E402  (the same JSON layout as the hand-made examples)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "data")
ATTNSCOPE = os.path.join(ROOT, "build", "attnscope")

LETTERS = "abcdefghij"               # the vocabulary of both models: 10 letters
TOL = 1e-5                           # attnscope weights vs PyTorch weights


def letters(seq):
    return [LETTERS[i] for i in seq]


def encode(word):
    return [LETTERS.index(c) for c in word]


def seed_everything(seed):
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


# --------------------------------------------------------------------------
# 1. A 1-layer causal decoder on repeated sequences (copy / induction task)
# --------------------------------------------------------------------------
#
# Training sequences are a random word of PERIOD distinct letters, repeated:
# "c a f e c a f e c".  The model reads the first 8 tokens and predicts the
# next token at each position (targets "a f e c a f e c").  From position
# PERIOD-1 on, the next token is a copy of the token PERIOD-1 positions back
# (the one that followed the current token's earlier occurrence); the first
# PERIOD-1 targets are new random letters and cannot be predicted.

PERIOD = 4
T_LM = 2 * PERIOD                    # positions the model reads
D_LM = 16                            # model width Dm
H_LM = 1                             # heads (Dk = Dv = D_LM / H_LM)


class CausalLM(nn.Module):
    """Token + learned position embedding -> one causal attention layer with
    residual -> unembedding.  The projections are nn.Linear layers (with
    biases), which store their weights (out, in): export transposes them."""

    def __init__(self, vocab, t, d, heads):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.unembed = nn.Linear(d, vocab)

    def embed(self, tokens):                               # (B, T) -> (B, T, Dm)
        return self.tok(tokens) + self.pos.weight[: tokens.shape[1]]

    def attend(self, x):
        """Causal self-attention; returns output (B, T, Dm), weights (B, H, T, T)."""
        B, T, D = x.shape
        H, Dk = self.heads, D // self.heads
        # Feature h*Dk + j belongs to head h, as in attnscope.
        split = lambda t: t.view(B, T, H, Dk).transpose(1, 2)     # (B, H, T, Dk)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(Dk)          # (B, H, Tq, Tk)
        causal = torch.ones(T, T, dtype=torch.bool).tril()        # key j <= query i
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(B, T, D)  # heads concatenated
        return self.o(context), weights

    def forward(self, tokens):
        x = self.embed(tokens)
        out, weights = self.attend(x)
        return self.unembed(x + out), weights


def fit(model, make_batch, gen, steps, batch, lr, log_every):
    """Adam with a cosine schedule on next-letter cross-entropy; leaves the model in eval mode."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for step in range(1, steps + 1):
        inp, tgt = make_batch(gen, batch)
        logits, _ = model(inp)
        loss = F.cross_entropy(logits.reshape(-1, len(LETTERS)), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % log_every == 0 or step == 1:
            print(f"  step {step:5d}  loss {loss.item():.4f}")
    model.eval()


def lm_batch(gen, n):
    """n repeated words: inputs (n, T_LM) and next-token targets (n, T_LM)."""
    words = torch.rand(n, len(LETTERS), generator=gen).argsort(dim=1)[:, :PERIOD]
    seq = words.repeat(1, 3)[:, : T_LM + 1]
    return seq[:, :-1], seq[:, 1:]


def train_induction(steps=1500, batch=128, lr=1e-2):
    seed_everything(1)
    model = CausalLM(len(LETTERS), T_LM, D_LM, H_LM)
    # The loss is averaged over all T_LM positions; the first PERIOD-1 targets
    # are random new letters (9, 8, 7 ... choices), so it cannot go below this:
    floor = sum(math.log(len(LETTERS) - 1 - i) for i in range(PERIOD - 1)) / T_LM
    print(f"  (loss floor {floor:.4f}: the first {PERIOD - 1} targets are unpredictable)")
    fit(model, lm_batch, torch.Generator().manual_seed(11), steps, batch, lr, log_every=150)

    # Accuracy on held-out sequences, at the predictable positions only.
    inp, tgt = lm_batch(torch.Generator().manual_seed(12), 2000)
    with torch.no_grad():
        logits, weights = model(inp)
    pred = logits.argmax(-1)
    acc = (pred[:, PERIOD - 1:] == tgt[:, PERIOD - 1:]).float().mean().item()
    early = (pred[:, : PERIOD - 1] == tgt[:, : PERIOD - 1]).float().mean().item()
    # Mass on the copy stripe: query i -> key i - (PERIOD - 1), predictable rows.
    rows = torch.arange(PERIOD - 1, T_LM)
    stripe = weights[:, :, rows, rows - (PERIOD - 1)].mean().item()
    print(f"  accuracy on the predictable positions {PERIOD - 1}..{T_LM - 1}: "
          f"{acc:.4f} (unpredictable positions 0..{PERIOD - 2}: {early:.3f}, "
          f"chance about {1 / (len(LETTERS) - 1):.2f})")
    print(f"  mean weight on the copy stripe (key = query - {PERIOD - 1}): {stripe:.4f}")
    assert acc > 0.95, f"induction model did not learn: accuracy {acc:.3f}"
    assert stripe > 0.8, f"induction model: stripe weight {stripe:.3f} <= 0.8"
    return model, acc


def export_induction(model, words):
    tokens = torch.tensor([encode(w * 2) for w in words])      # (B, T_LM)
    with torch.no_grad():
        x = model.embed(tokens)                                 # the layer's input
        _, weights = model.attend(x)
    f32 = lambda t: t.detach().numpy().astype(np.float32)
    labels = [letters(row) for row in tokens.tolist()]
    bundle = {
        "query_tokens": labels, "key_tokens": labels,
        "x": f32(x),                                            # (B, Tq, Dm)
        # nn.Linear stores (out, in); the bundle uses the math layout (in, out).
        "W_Q": f32(model.q.weight.T), "b_Q": f32(model.q.bias),
        "W_K": f32(model.k.weight.T), "b_K": f32(model.k.bias),
        "W_V": f32(model.v.weight.T), "b_V": f32(model.v.bias),
        "W_O": f32(model.o.weight.T), "b_O": f32(model.o.bias),
    }
    return bundle, weights.numpy()


# --------------------------------------------------------------------------
# 2. A tiny encoder-decoder that reverses a sequence (cross-attention)
# --------------------------------------------------------------------------
#
# The encoder has no layers: its output (the memory) is token + position
# embedding of the source.  The decoder's queries come from a learned
# position embedding only, so the only way to produce letter i of the
# reversed word is to look up source position T_REV-1-i through one
# nn.MultiheadAttention cross-attention layer; the unembedding reads its
# output.

T_REV = 8
D_REV = 16
H_REV = 1


class Reverser(nn.Module):
    def __init__(self, vocab, t, d, heads):
        super().__init__()
        self.src_tok = nn.Embedding(vocab, d)
        self.src_pos = nn.Embedding(t, d)
        self.tgt_pos = nn.Embedding(t, d)
        self.cross = nn.MultiheadAttention(d, heads, batch_first=True)
        self.unembed = nn.Linear(d, vocab)

    def inputs(self, src):
        """Decoder input x (B, Tq, Dm) and encoder memory (B, Tk, Dkv)."""
        memory = self.src_tok(src) + self.src_pos.weight[: src.shape[1]]
        x = self.tgt_pos.weight[: src.shape[1]].expand(src.shape[0], -1, -1)
        return x, memory

    def forward(self, src):
        x, memory = self.inputs(src)
        out, weights = self.cross(x, memory, memory, need_weights=True,
                                  average_attn_weights=False)   # (B, H, Tq, Tk)
        return self.unembed(out), weights


def rev_batch(gen, n):
    src = torch.randint(len(LETTERS), (n, T_REV), generator=gen)
    return src, src.flip(1)


def train_reverse(steps=600, batch=128, lr=1e-2):
    seed_everything(2)
    model = Reverser(len(LETTERS), T_REV, D_REV, H_REV)
    fit(model, rev_batch, torch.Generator().manual_seed(21), steps, batch, lr, log_every=100)

    src, tgt = rev_batch(torch.Generator().manual_seed(22), 2000)
    with torch.no_grad():
        logits, weights = model(src)
    acc = (logits.argmax(-1) == tgt).float().mean().item()
    seq_acc = (logits.argmax(-1) == tgt).all(dim=1).float().mean().item()
    i = torch.arange(T_REV)
    anti = weights[:, :, i, T_REV - 1 - i].mean().item()
    print(f"  accuracy per letter {acc:.4f}, whole words reversed {seq_acc:.4f}")
    print(f"  mean cross-attention weight on the anti-diagonal: {anti:.4f}")
    assert acc > 0.95, f"reverse model did not learn: accuracy {acc:.3f}"
    assert anti > 0.8, f"reverse model: anti-diagonal weight {anti:.3f} <= 0.8"
    return model, acc


def export_reverse(model, words):
    src = torch.tensor([encode(w) for w in words])             # (B, Tk)
    with torch.no_grad():
        x, memory = model.inputs(src)
        _, weights = model(src)
    f32 = lambda t: t.detach().numpy().astype(np.float32)
    mha = model.cross
    E = mha.embed_dim
    # nn.MultiheadAttention packs W_Q, W_K, W_V as in_proj_weight (3E, E), each
    # block stored (out, in): slice, then transpose to the math layout (in, out).
    w, b = mha.in_proj_weight, mha.in_proj_bias
    bundle = {
        # Row i is the decoder position that writes letter i of the reversed
        # word; it is labelled with that letter (its query is position only).
        "query_tokens": [letters(row) for row in src.flip(1).tolist()],
        "key_tokens": [letters(row) for row in src.tolist()],
        "x": f32(x),                                            # (B, Tq, Dm)
        "memory": f32(memory),                                  # (B, Tk, Dkv)
        "W_Q": f32(w[:E].T), "b_Q": f32(b[:E]),
        "W_K": f32(w[E:2 * E].T), "b_K": f32(b[E:2 * E]),
        "W_V": f32(w[2 * E:].T), "b_V": f32(b[2 * E:]),
        "W_O": f32(mha.out_proj.weight.T), "b_O": f32(mha.out_proj.bias),
    }
    return bundle, weights.numpy()


# --------------------------------------------------------------------------
# Writing and checking
# --------------------------------------------------------------------------

def write_bundle(name, arrays):
    """data/NAME.json and data/NAME.npz with the same arrays.

    float32 -> .tolist() gives Python floats holding the exact float32 values,
    written with repr (full precision); the .npz keeps them as float32.
    """
    jpath = os.path.join(OUT_DIR, name + ".json")
    npath = os.path.join(OUT_DIR, name + ".npz")
    lines = [f'  "{k}": ' + json_value(np.asarray(a).tolist(), 2)
             for k, a in arrays.items()]
    with open(jpath, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    np.savez(npath, **{k: np.asarray(a) for k, a in arrays.items()})

    bj, bn = ref.load_bundle(jpath), ref.load_bundle(npath)
    assert sorted(bj) == sorted(bn) == sorted(arrays), name
    for k in bj:
        assert bj[k].shape == bn[k].shape, (name, k)
        assert np.array_equal(bj[k], bn[k]), (name, k)
        assert np.array_equal(bj[k], np.asarray(arrays[k])), (name, k)
    return jpath, npath


def run_attnscope(path, heads, causal):
    cmd = [ATTNSCOPE, "run", path, "--heads", str(heads), "--json"]
    if causal:
        cmd.insert(5, "--causal")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): "
                         f"{done.stderr.strip()}")
    doc = json.loads(done.stdout)
    return np.array(doc["stages"]["weights"]["data"], dtype=np.float64)


def check_with_attnscope(name, jpath, npath, bundle, model_weights, heads, causal,
                         show_head):
    """attnscope's weights == the model's weights (and the numpy reference)."""
    opts = f"--heads {heads}" + (" --causal" if causal else "")
    expected = model_weights.astype(np.float64)                # (B, H, Tq, Tk)
    for path in (jpath, npath):
        got = run_attnscope(path, heads, causal)
        assert got.shape == expected.shape, (path, got.shape, expected.shape)
        diff = float(np.abs(got - expected).max())
        rel = os.path.relpath(path, ROOT)
        print(f"  attnscope run {rel} {opts}: max |weights - PyTorch| = {diff:.2g}")
        assert diff <= TOL, f"{rel}: attnscope differs from PyTorch by {diff:.3g}"
    stages = ref.attention(ref.load_bundle(jpath), heads=heads, causal=causal)
    diff = float(np.abs(stages["weights"] - expected).max())
    print(f"  numpy reference (attn_reference.py): max |weights - PyTorch| = {diff:.2g}")
    assert diff <= TOL, f"{name}: reference differs from PyTorch by {diff:.3g}"

    q, k = bundle["query_tokens"][0], bundle["key_tokens"][0]
    print(f"  weights of head {show_head}, batch item 0 (rows: queries, "
          f"columns: keys), from attnscope:")
    print("        " + "".join(f"{t:>6}" for t in k))
    for label, row in zip(q, got[0, show_head]):
        print(f"    {label:>3} " + "".join(
            "     0" if v == 0 else f"{v:6.2f}" for v in row))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.parse_args(argv)
    if not os.access(ATTNSCOPE, os.X_OK):
        raise SystemExit(f"{ATTNSCOPE} not found: build it first with scripts/build")
    os.makedirs(OUT_DIR, exist_ok=True)
    t0 = time.perf_counter()

    print(f"induction: 1-layer causal decoder, vocab {len(LETTERS)}, Dm {D_LM}, "
          f"{H_LM} head, sequences of {T_LM} (a word of {PERIOD} repeated)")
    t = time.perf_counter()
    lm, _ = train_induction()
    print(f"  trained in {time.perf_counter() - t:.1f} s")
    bundle, weights = export_induction(lm, ["cafe", "jade"])
    jpath, npath = write_bundle("induction", bundle)
    check_with_attnscope("induction", jpath, npath, bundle, weights, H_LM,
                         causal=True, show_head=0)

    print(f"\nreverse: encoder-decoder cross-attention, vocab {len(LETTERS)}, "
          f"Dm {D_REV}, {H_REV} head, {T_REV} letters")
    t = time.perf_counter()
    rev, _ = train_reverse()
    print(f"  trained in {time.perf_counter() - t:.1f} s")
    bundle, weights = export_reverse(rev, ["headache", "jigbdfca"])
    jpath, npath = write_bundle("reverse", bundle)
    check_with_attnscope("reverse", jpath, npath, bundle, weights, H_REV,
                         causal=False, show_head=0)

    print(f"\ntotal {time.perf_counter() - t0:.1f} s; wrote "
          + ", ".join(f"data/{n} ({os.path.getsize(os.path.join(OUT_DIR, n))} bytes)"
                      for n in ("induction.json", "induction.npz",
                                "reverse.json", "reverse.npz")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
