#!/usr/bin/python3
"""Write the classroom example bundles under data/.

Each example is written twice with identical content, as data/NAME.json (easy
to read and edit by hand) and data/NAME.npz (what numpy users save).  Numbers
are short decimals so a student can follow the computation by hand:
embeddings x and memory with 1 decimal, weights with 2 decimals.  A word that
appears twice gets the same embedding both times (look at "the" in sentence).

    sentence  self-attention over "the cat sat on the mat", 2 heads, W_O
    causal    decoder self-attention, run with --causal, 1 head
    padded    a batch of two sentences padded to one length, key_padding_mask
    cross     cross-attention, 4 target tokens over 6 source tokens, Dkv != Dm

The script then reloads both files, checks that they hold the same arrays,
runs the reference (scripts/attn_reference.py) and compares it with
torch.nn.MultiheadAttention.  data/README.md documents the files.

    /usr/bin/python3 scripts/make_data.py
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_reference as ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "data")
SEED = 2024


# --------------------------------------------------------------------------
# Readable numbers
# --------------------------------------------------------------------------

def decimals(a, n):
    """Round to n decimals so that every float prints as that short decimal.

    float(f"{v:.{n}f}") is the float nearest the decimal itself, so its repr
    (and therefore the JSON text) is exactly "0.12", never "0.12000000000000001".
    """
    a = np.asarray(a, dtype=np.float64)
    flat = [float(f"{v:.{n}f}") + 0.0 for v in a.ravel()]   # + 0.0 turns -0.0 into 0.0
    return np.array(flat, dtype=np.float64).reshape(a.shape)


def embed(rng, tokens, vocab, width):
    """Embeddings (…, T, width) with 1 decimal; one fixed vector per word.

    "<pad>" gets the zero vector, like nn.Embedding(padding_idx=...).
    """
    for tok in np.asarray(tokens).ravel():
        if tok not in vocab:
            vocab[tok] = (np.zeros(width) if tok == "<pad>"
                          else decimals(rng.standard_normal(width), 1))
    return np.array([[vocab[t] for t in row] for row in tokens]) \
        if np.ndim(tokens) == 2 else np.array([vocab[t] for t in tokens])


def weight(rng, n_in, n_out, gain=1.0):
    """(n_in, n_out) weight in math layout, 2 decimals, std gain/sqrt(n_in)."""
    return decimals(gain * rng.standard_normal((n_in, n_out)) / np.sqrt(n_in), 2)


# --------------------------------------------------------------------------
# The examples
# --------------------------------------------------------------------------

def build_examples():
    rng = np.random.default_rng(SEED)
    ex = {}

    # sentence: 6 tokens, Dm = 8, 2 heads of width 4, output projection.
    vocab = {}
    toks = ["the", "cat", "sat", "on", "the", "mat"]
    ex["sentence"] = {
        "query_tokens": toks, "key_tokens": toks,
        "x": embed(rng, toks, vocab, 8),                 # (Tq, Dm) = (6, 8)
        "W_Q": weight(rng, 8, 8, 1.5),                   # (Dm, H*Dk) = (8, 8)
        "W_K": weight(rng, 8, 8, 1.5),                   # (Dm, H*Dk)
        "W_V": weight(rng, 8, 8),                        # (Dm, H*Dv)
        "W_O": weight(rng, 8, 8),                        # (H*Dv, Dout)
    }

    # causal: decoder self-attention over 5 tokens, Dm = 4, one head of width 4.
    vocab = {}
    toks = ["<s>", "I", "like", "green", "tea"]
    ex["causal"] = {
        "query_tokens": toks, "key_tokens": toks,
        "x": embed(rng, toks, vocab, 4),                 # (Tq, Dm) = (5, 4)
        "W_Q": weight(rng, 4, 4, 1.5),
        "W_K": weight(rng, 4, 4, 1.5),
        "W_V": weight(rng, 4, 4),
    }

    # padded: two sentences (6 and 3 tokens) padded to Tk = 6, Dm = 8, 2 heads.
    vocab = {}
    toks = [["the", "dog", "chased", "the", "red", "ball"],
            ["birds", "sing", "loudly", "<pad>", "<pad>", "<pad>"]]
    ex["padded"] = {
        "query_tokens": toks, "key_tokens": toks,
        "x": embed(rng, toks, vocab, 8),                 # (B, Tq, Dm) = (2, 6, 8)
        "key_padding_mask": np.array([[0, 0, 0, 0, 0, 0],
                                      [0, 0, 0, 1, 1, 1]]),   # (B, Tk), 1 = PAD
        "W_Q": weight(rng, 8, 8),
        "W_K": weight(rng, 8, 8),
        "W_V": weight(rng, 8, 8),
    }

    # cross: 4 French target tokens attend 6 English source tokens.
    # Decoder width Dm = 8, encoder memory width Dkv = 6, 2 heads of width 4.
    src = ["the", "black", "cat", "is", "sleeping", "."]
    tgt = ["<s>", "le", "chat", "noir"]
    ex["cross"] = {
        "query_tokens": tgt, "key_tokens": src,
        "x": embed(rng, tgt, {}, 8),                     # (Tq, Dm) = (4, 8)
        "memory": embed(rng, src, {}, 6),                # (Tk, Dkv) = (6, 6)
        "W_Q": weight(rng, 8, 8, 1.5),                   # (Dm, H*Dk)
        "W_K": weight(rng, 6, 8, 1.5),                   # (Dkv, H*Dk)
        "W_V": weight(rng, 6, 8),                        # (Dkv, H*Dv)
        "W_O": weight(rng, 8, 8),                        # (H*Dv, Dout)
    }
    return ex


# How each example is meant to be run (also in data/README.md).
RUN_OPTIONS = {
    "sentence": dict(heads=2),
    "causal": dict(heads=1, causal=True),
    "padded": dict(heads=2),
    "cross": dict(heads=2),
}


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def json_value(value, indent):
    """Nested lists with one innermost row per line."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        pad = " " * (indent + 2)
        inner = ",\n".join(pad + json_value(v, indent + 2) for v in value)
        return "[\n" + inner + "\n" + " " * indent + "]"
    return json.dumps(value)


def write_json(path, arrays):
    lines = []
    for name, a in arrays.items():
        lines.append(f'  "{name}": ' + json_value(np.asarray(a).tolist(), 2))
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


def write_npz(path, arrays):
    out = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        if name == "key_padding_mask":
            a = a.astype(bool)               # numpy's natural mask dtype, True = PAD
        out[name] = a                        # tokens: unicode '<U…'; numbers: float64
    np.savez(path, **out)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    np.set_printoptions(precision=2, suppress=True, linewidth=120)
    for name, arrays in build_examples().items():
        jpath = os.path.join(OUT_DIR, name + ".json")
        npath = os.path.join(OUT_DIR, name + ".npz")
        write_json(jpath, arrays)
        write_npz(npath, arrays)

        # Both files must hold the same arrays.
        bj, bn = ref.load_bundle(jpath), ref.load_bundle(npath)
        assert sorted(bj) == sorted(bn), name
        for k in bj:
            assert bj[k].shape == bn[k].shape, (name, k)
            assert np.array_equal(bj[k], bn[k]), (name, k)

        opts = RUN_OPTIONS[name]
        stages = ref.attention(bj, **opts)
        dw, do, _ = ref.compare_with_torch(bj, ref=stages, **opts)
        assert dw <= 1e-10 and do <= 1e-10, f"{name}: reference disagrees with torch"
        print(f"{name}: x {bj['x'].shape}, heads {opts['heads']}, "
              f"output {stages['output'].shape}; "
              f"torch max|dweights|={dw:.3g} max|doutput|={do:.3g}")
        print("  weights, head 0:")
        w0 = stages["weights"][..., 0, :, :] if bj["x"].ndim == 3 \
            else stages["weights"][0]
        print("  " + str(w0).replace("\n", "\n  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
