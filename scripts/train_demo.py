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
    rope       a 1-layer causal decoder with rotary positions (RoPE) and
               grouped-query attention, 4 query heads sharing 1 K/V head,
               trained to repeat the letter 2 positions back.  It has no
               position embedding: RoPE is its only sense of position, so the
               "2 back" stripe holds at every absolute position.
               Run: build/attnscope run data/rope.json --heads 4 --kv-heads 1 --rope --causal

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
# 3. A decoder with RoPE and grouped-query attention (Llama-style attention)
# --------------------------------------------------------------------------
#
# Random letters in, the letter LAG positions back out.  Token embedding only:
# the projections (no biases, like Llama's) see no position at all, and RoPE
# rotates each head's query and key by its position, so a score depends on
# content and on the distance between query and key.  4 query heads read 1
# shared K/V head (multi-query attention, the G = 1 case of --kv-heads).

LAG = 2
T_ROPE = 12
D_ROPE = 32
H_ROPE, G_ROPE = 4, 1                 # query heads, K/V heads
DK_ROPE = D_ROPE // H_ROPE            # 8: even, RoPE rotates pairs
ROPE_BASE = 10000.0


def rotate_half(t):
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


class RopeLM(nn.Module):
    """Token embedding -> causal attention with RoPE (rotate_half form, as Hugging
    Face Llama) and grouped K/V heads -> unembedding."""

    def __init__(self, vocab, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dk = heads, kv_heads, d // heads
        self.tok = nn.Embedding(vocab, d)
        self.q = nn.Linear(d, heads * self.dk, bias=False)
        self.k = nn.Linear(d, kv_heads * self.dk, bias=False)
        self.v = nn.Linear(d, kv_heads * self.dk, bias=False)
        self.o = nn.Linear(heads * self.dk, d, bias=False)
        self.unembed = nn.Linear(d, vocab)

    def attend(self, x, positions=None):
        """Returns output (B, T, Dm), weights (B, H, T, T), scores (B, H, T, T)."""
        B, T, _ = x.shape
        H, G, Dk = self.heads, self.kv_heads, self.dk
        pos = torch.arange(T, dtype=torch.float32) if positions is None else positions.float()
        inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, Dk, 2, dtype=torch.float32) / Dk))
        freqs = torch.outer(pos, inv_freq)                          # (T, Dk/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = self.q(x).view(B, T, H, Dk).transpose(1, 2)             # (B, H, T, Dk)
        k = self.k(x).view(B, T, G, Dk).transpose(1, 2)             # (B, G, T, Dk)
        v = self.v(x).view(B, T, G, Dk).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // G, dim=1)                      # repeat_kv
        v = v.repeat_interleave(H // G, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(Dk)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(B, T, H * Dk)
        return self.o(context), weights, scores

    def forward(self, tokens):
        # No residual: the prediction is read from the attention output alone, so the
        # head must put its weight on the one key whose value is the answer.
        out, weights, _ = self.attend(self.tok(tokens))
        return self.unembed(out), weights


def lag_batch(gen, n):
    """n random letter sequences; target i is the letter LAG positions back."""
    seq = torch.randint(len(LETTERS), (n, T_ROPE + LAG), generator=gen)
    return seq[:, LAG:], seq[:, :-LAG]


def train_rope(steps=800, batch=128, lr=1e-2):
    seed_everything(3)
    model = RopeLM(len(LETTERS), D_ROPE, H_ROPE, G_ROPE)
    gen = torch.Generator().manual_seed(31)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for step in range(1, steps + 1):
        inp, tgt = lag_batch(gen, batch)
        logits, _ = model(inp)
        # The first LAG targets lie before the sequence: unpredictable, not trained.
        loss = F.cross_entropy(logits[:, LAG:].reshape(-1, len(LETTERS)), tgt[:, LAG:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == 1:
            print(f"  step {step:5d}  loss {loss.item():.4f}")
    model.eval()
    inp, tgt = lag_batch(torch.Generator().manual_seed(32), 2000)
    with torch.no_grad():
        logits, weights = model(inp)
    acc = (logits[:, LAG:].argmax(-1) == tgt[:, LAG:]).float().mean().item()
    rows = torch.arange(LAG, T_ROPE)
    stripe = weights[:, :, rows, rows - LAG].mean().item()
    print(f"  accuracy on positions {LAG}..{T_ROPE - 1}: {acc:.4f}")
    print(f"  mean weight on the stripe (key = query - {LAG}), every head: {stripe:.4f}")
    assert acc > 0.95, f"rope model did not learn: accuracy {acc:.3f}"
    assert stripe > 0.8, f"rope model: stripe weight {stripe:.3f} <= 0.8"
    return model, acc


def export_rope(model, words):
    tokens = torch.tensor([encode(w) for w in words])               # (B, T_ROPE)
    with torch.no_grad():
        x = model.tok(tokens)
        _, weights, _ = model.attend(x)
    f32 = lambda t: t.detach().numpy().astype(np.float32)
    labels = [letters(row) for row in tokens.tolist()]
    bundle = {
        "query_tokens": labels, "key_tokens": labels,
        "x": f32(x),                                                # (B, T, Dm)
        "W_Q": f32(model.q.weight.T),                               # (Dm, H*Dk)
        "W_K": f32(model.k.weight.T),                               # (Dm, G*Dk)
        "W_V": f32(model.v.weight.T),                               # (Dm, G*Dv)
        "W_O": f32(model.o.weight.T),                               # (H*Dv, Dm)
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


def run_attnscope(path, heads, causal, extra=()):
    cmd = [ATTNSCOPE, "run", path, "--heads", str(heads), "--json", *extra]
    if causal:
        cmd.insert(5, "--causal")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): "
                         f"{done.stderr.strip()}")
    doc = json.loads(done.stdout)
    return np.array(doc["stages"]["weights"]["data"], dtype=np.float64)


def check_with_attnscope(name, jpath, npath, bundle, model_weights, heads, causal,
                         show_head, extra=()):
    """attnscope's weights == the model's weights (and the numpy reference)."""
    opts = f"--heads {heads}" + (" --causal" if causal else "") + "".join(" " + e for e in extra)
    expected = model_weights.astype(np.float64)                # (B, H, Tq, Tk)
    for path in (jpath, npath):
        got = run_attnscope(path, heads, causal, extra)
        assert got.shape == expected.shape, (path, got.shape, expected.shape)
        diff = float(np.abs(got - expected).max())
        rel = os.path.relpath(path, ROOT)
        print(f"  attnscope run {rel} {opts}: max |weights - PyTorch| = {diff:.2g}")
        assert diff <= TOL, f"{rel}: attnscope differs from PyTorch by {diff:.3g}"
    if not extra:
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

    print(f"\nrope: causal decoder with RoPE, {H_ROPE} query heads sharing {G_ROPE} K/V head, "
          f"vocab {len(LETTERS)}, Dm {D_ROPE}, Dk {DK_ROPE}, {T_ROPE} letters, target {LAG} back")
    t = time.perf_counter()
    rope, _ = train_rope()
    print(f"  trained in {time.perf_counter() - t:.1f} s")
    bundle, weights = export_rope(rope, ["badgefacebad", "fadedcabbage"])
    jpath, npath = write_bundle("rope", bundle)
    check_with_attnscope("rope", jpath, npath, bundle, weights, H_ROPE, causal=True, show_head=0,
                         extra=("--kv-heads", str(G_ROPE), "--rope"))
    # The model computes RoPE's angles in float32 (as Hugging Face does); attnscope in the
    # run's precision. How far that moves the scores, for docs/modern-attention.md:
    with torch.no_grad():
        _, _, scores32 = rope.attend(torch.from_numpy(bundle["x"]))
    for dtype in ("float64", "float32"):
        doc = subprocess.run([ATTNSCOPE, "run", jpath, "--heads", str(H_ROPE), "--kv-heads", str(G_ROPE),
                              "--rope", "--causal", "--dtype", dtype, "--json", "--stages", "scores"],
                             capture_output=True, text=True, check=True)
        got = np.array(json.loads(doc.stdout)["stages"]["scores"]["data"], dtype=np.float64)
        print(f"  --dtype {dtype}: max |scores - PyTorch float32 scores| = "
              f"{float(np.abs(got - scores32.numpy()).max()):.2g}")

    print(f"\ntotal {time.perf_counter() - t0:.1f} s; wrote "
          + ", ".join(f"data/{n} ({os.path.getsize(os.path.join(OUT_DIR, n))} bytes)"
                      for n in ("induction.json", "induction.npz",
                                "reverse.json", "reverse.npz", "rope.json", "rope.npz")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
