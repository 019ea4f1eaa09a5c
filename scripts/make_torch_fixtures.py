#!/usr/bin/python3
"""Write the PyTorch checkpoint fixtures under tests/fixtures/checkpoints/ (torch_*).

tests/test_torch_zip.cpp reads these files with attnscope's own reader and compares
every tensor with what PyTorch itself says (this script is the independent oracle):

    * torch_NAME.pt               written by torch.save (Debian's PyTorch 1.13), or for
                                  forms torch 1.13 cannot write (torch.UntypedStorage with
                                  _rebuild_tensor_v3, a deflated archive, a hostile pickle)
                                  by the small pickle writer below, built from the pickle
                                  opcode descriptions (pickletools), and Python's zipfile
    * torch_NAME.expected/        beside each good file: manifest.json (every tensor's name,
                                  dtype and shape, in the file's order) and NAME.npy, each
                                  tensor's values as float64 (np.save), read back by torch
    * torch_bad_NAME.pt           files the reader must refuse; the hand-made ones are also
                                  copied to tests/fuzz/regressions/fuzz_torch/

    /usr/bin/python3 scripts/make_torch_fixtures.py

Reproducible: fixed seeds, fixed zip timestamps; two runs give identical bytes. Every
good file is loaded back with torch.load and compared with the expected values; every
hand-made bad file that torch can be asked about is checked to be refused by torch's
own weights_only loader or to fail as intended.
"""

import collections
import io
import json
import os
import shutil
import struct
import zipfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "checkpoints")
REGRESSIONS = os.path.join(ROOT, "tests", "fuzz", "regressions", "fuzz_torch")
FIXED_DATE = (1980, 1, 1, 0, 0, 0)
# The file the hostile pickles would create if anything ran them; the test checks it never appears.
MARKER = "/tmp/attnscope-torch-fixture-marker-must-not-exist"

torch.manual_seed(1234)


# ---- good files written by torch.save ---------------------------------------------------

class TinyGPT2(torch.nn.Module):
    """GPT-2's names (transformer.h.N.attn.c_attn ...), two layers, lm_head tied to wte."""

    def __init__(self, vocab=11, ctx=6, d=8, layers=2):
        super().__init__()
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(vocab, d)
        self.transformer.wpe = torch.nn.Embedding(ctx, d)
        self.transformer.h = torch.nn.ModuleList()
        for _ in range(layers):
            block = torch.nn.Module()
            block.ln_1 = torch.nn.LayerNorm(d)
            block.attn = torch.nn.Module()
            block.attn.c_attn = torch.nn.Linear(d, 3 * d)
            block.attn.c_proj = torch.nn.Linear(d, d)
            block.ln_2 = torch.nn.LayerNorm(d)
            block.mlp = torch.nn.Module()
            block.mlp.c_fc = torch.nn.Linear(d, 4 * d)
            block.mlp.c_proj = torch.nn.Linear(4 * d, d)
            self.transformer.h.append(block)
        self.transformer.ln_f = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied


class TinyLlama(torch.nn.Module):
    """Llama's names (model.layers.N.self_attn.q_proj ...), grouped K/V heads, no biases."""

    def __init__(self, vocab=13, d=8, kv=4, ff=12, layers=2):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(vocab, d)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(layers):
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            layer.self_attn.q_proj = torch.nn.Linear(d, d, bias=False)
            layer.self_attn.k_proj = torch.nn.Linear(d, kv, bias=False)
            layer.self_attn.v_proj = torch.nn.Linear(d, kv, bias=False)
            layer.self_attn.o_proj = torch.nn.Linear(d, d, bias=False)
            layer.mlp = torch.nn.Module()
            layer.mlp.gate_proj = torch.nn.Linear(d, ff, bias=False)
            layer.mlp.up_proj = torch.nn.Linear(d, ff, bias=False)
            layer.mlp.down_proj = torch.nn.Linear(ff, d, bias=False)
            layer.input_layernorm = torch.nn.LayerNorm(d, elementwise_affine=True)
            layer.post_attention_layernorm = torch.nn.LayerNorm(d, elementwise_affine=True)
            self.model.layers.append(layer)
        self.model.norm = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)


class TinyModel(torch.nn.Module):
    """Saved whole (torch.save(model)): a pickle of classes, which the reader refuses."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)


def dtypes_dict():
    a2 = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 0.5 - 1
    return {
        "f32": a2.float(),
        "f64": torch.tensor([[0.1, -1e300, 5e-324], [float("inf"), -float("inf"), -0.0]], dtype=torch.float64),
        "f16": torch.tensor([65504.0, 6.1035e-05, 5.96e-08, -2.0, float("inf"), -0.0], dtype=torch.float16),
        "bf16": torch.tensor([[1.0, -3.140625], [1e38, 9.18e-41]], dtype=torch.bfloat16),
        "i64": torch.tensor([-(2 ** 53), -1, 0, 1, 2 ** 40, 2 ** 53], dtype=torch.int64),
        "i32": torch.tensor([-(2 ** 31), 2 ** 31 - 1, 7], dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u8": torch.tensor([0, 255, 17], dtype=torch.uint8),
        "bool": torch.tensor([[True, False, True], [False, False, True]]),
    }


def views_dict():
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 2
    flat = torch.arange(10, dtype=torch.float32) - 4.5
    return {
        "weight": w,
        "transposed": w.t(),                     # (4, 3), stride (1, 4): gathered into C order
        "row": w[1],                             # offset 4, contiguous
        "column": w[:, 2],                       # offset 2, stride (4,)
        "narrow": flat[5:9],                     # offset 5 into a storage of 10
        "expanded": flat[:4].expand(3, 4),       # stride (0, 1)
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "f64_transposed": w.double().t().contiguous().t(),  # float64, stride (1, 3)
        "i64_transposed": torch.arange(6).reshape(2, 3).t(),
    }


def nested_dict():
    gpt = TinyGPT2(vocab=5, ctx=3, d=4, layers=1)
    first = torch.randn(2, 2)
    return {
        "model": gpt.state_dict(),
        "epoch": 3,
        "run": "first-run",
        "lr": 0.001,
        "done": False,
        "nothing": None,
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 2)}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}],
        },
        "extras": [first, torch.ones(3, dtype=torch.float64)],
    }


def metadata_dict():
    """An OrderedDict with _metadata set by hand, beside the one module.state_dict() sets."""
    sd = collections.OrderedDict(
        [("encoder.weight", torch.randn(3, 2)), ("encoder.bias", torch.randn(3))])
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("encoder", {"version": 2, "extra": "text"})])
    return sd


# ---- a pickle writer from the opcode descriptions, for forms torch 1.13 does not write -----

class Pickle:
    """Protocol-2 opcodes written one by one (see pickletools for each one's layout)."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")  # PROTO 2

    def op(self, code, payload=b""):
        self.out += code + payload
        return self

    def global_(self, module, name):
        return self.op(b"c", f"{module}\n{name}\n".encode())

    def text(self, s):
        b = s.encode()
        return self.op(b"X", struct.pack("<I", len(b)) + b)

    def int(self, v):
        if 0 <= v < 256:
            return self.op(b"K", bytes([v]))
        if -(2 ** 31) <= v < 2 ** 31:
            return self.op(b"J", struct.pack("<i", v))
        return self.op(b"\x8a\x08", struct.pack("<q", v))  # LONG1, 8 bytes

    def ints(self, values):
        self.op(b"(")
        for v in values:
            self.int(v)
        return self.op(b"t")

    def mark(self):
        return self.op(b"(")

    def bool(self, v):
        return self.op(b"\x88" if v else b"\x89")

    def empty_dict(self):
        return self.op(b"}")

    def ordered_dict(self):
        return self.global_("collections", "OrderedDict").op(b")").op(b"R")

    def storage(self, storage_class, key, numel, location="cpu"):
        self.mark().text("storage").global_("torch", storage_class).text(key).text(location).int(numel).op(b"t")
        return self.op(b"Q")  # BINPERSID

    def tensor_v2(self, storage_class, key, numel, offset, size, stride):
        self.global_("torch._utils", "_rebuild_tensor_v2").mark()
        self.storage(storage_class, key, numel).int(offset).ints(size).ints(stride).bool(False)
        return self.ordered_dict().op(b"t").op(b"R")

    def tensor_v3(self, key, nbytes, offset, size, stride, dtype):
        self.global_("torch._utils", "_rebuild_tensor_v3").mark()
        self.storage("UntypedStorage", key, nbytes).int(offset).ints(size).ints(stride).bool(False)
        return self.ordered_dict().global_("torch", dtype).op(b"t").op(b"R")

    def stop(self):
        return bytes(self.op(b".").out)


def write_zip(path, archive, members, byteorder="little", compression=zipfile.ZIP_STORED):
    """A torch-style archive from (name, bytes) members: ARCHIVE/data.pkl, ARCHIVE/data/KEY..."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(f"{archive}/{name}", FIXED_DATE), data, compression)
        if byteorder is not None:
            z.writestr(zipfile.ZipInfo(f"{archive}/byteorder", FIXED_DATE), byteorder, compression)
        z.writestr(zipfile.ZipInfo(f"{archive}/version", FIXED_DATE), "3\n", compression)


def rezip(src, dst, compression=zipfile.ZIP_STORED, change=None):
    """dst: src's members (renamed to dst's archive folder), each passed through change(name, bytes)."""
    archive = os.path.splitext(os.path.basename(dst))[0]
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            rest = info.filename.split("/", 1)[1]
            data = zin.read(info.filename)
            if change:
                data = change(rest, data)
            if data is None:
                continue
            zout.writestr(zipfile.ZipInfo(f"{archive}/{rest}", FIXED_DATE), data, compression)


def le(values, fmt):
    return struct.pack("<" + fmt * len(values), *values)


# ---- writing and checking ---------------------------------------------------------------

def expected_dir(path):
    return os.path.splitext(path)[0] + ".expected"


def flatten(obj, prefix=""):
    """The reader's naming: dotted keys for dicts, indices for lists and tuples; tensors only."""
    out = []
    if isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        return out
    for k, v in items:
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, torch.Tensor):
            out.append((name, v))
        else:
            out.extend(flatten(v, name))
    return out


NUMPY_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
               torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}


def write_expected(path, loaded, extra=None):
    """Beside PATH: manifest.json and NAME.npy (float64) for every tensor torch.load gives."""
    d = expected_dir(path)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    manifest = []
    for name, t in flatten(loaded):
        dtype = (extra or {}).get(name, NUMPY_NAMES.get(t.dtype))
        manifest.append({"name": name, "dtype": dtype, "shape": list(t.shape)})
        np.save(os.path.join(d, name + ".npy"), t.detach().to(torch.float64).numpy(), allow_pickle=False)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"tensors": manifest}, f, indent=1)
        f.write("\n")
    return manifest


def good_torch_save(name, obj, **kw):
    path = os.path.join(OUT, name)
    torch.save(obj, path, **kw)
    loaded = torch.load(path)
    for (n1, a), (n2, b) in zip(flatten(obj), flatten(loaded)):
        assert n1 == n2 and torch.equal(a.to(torch.float64), b.to(torch.float64)), (name, n1)
    write_expected(path, loaded)
    return path


def bad(name, data=None, copy_to_regressions=True):
    path = os.path.join(OUT, name)
    if data is not None:
        with open(path, "wb") as f:
            f.write(data)
    if copy_to_regressions:
        shutil.copy(path, os.path.join(REGRESSIONS, name))
    return path


def refused_by_torch(path):
    """torch.load with weights_only where torch has it, else a plain failure check."""
    try:
        torch.load(path, weights_only=True)
    except Exception:
        return True
    return False


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(REGRESSIONS, exist_ok=True)
    for f in os.listdir(OUT):
        if f.startswith("torch_") and not f.endswith(".md") and f != "torch_bad_legacy.pt":
            p = os.path.join(OUT, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    # 1. torch.save, as people write checkpoints.
    mha = torch.nn.MultiheadAttention(8, 2)
    good_torch_save("torch_mha.pt", mha.state_dict())
    gpt = TinyGPT2()
    sd = gpt.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["transformer.wte.weight"].data_ptr()  # tied: one storage
    good_torch_save("torch_gpt2.pt", sd)
    good_torch_save("torch_llama.pt", TinyLlama().to(torch.bfloat16).state_dict())
    good_torch_save("torch_dtypes.pt", dtypes_dict())
    good_torch_save("torch_views.pt", views_dict())
    good_torch_save("torch_nested.pt", nested_dict())
    good_torch_save("torch_metadata.pt", metadata_dict())
    good_torch_save("torch_protocol4.pt", mha.state_dict(), pickle_protocol=4)
    good_torch_save("torch_parameters.pt", dict(mha.named_parameters()))  # _rebuild_parameter

    # 2. The same archive deflated (zipfile), which torch.load also reads.
    deflated = os.path.join(OUT, "torch_deflated.pt")
    rezip(os.path.join(OUT, "torch_views.pt"), deflated, zipfile.ZIP_DEFLATED)
    write_expected(deflated, torch.load(deflated))

    # 3. Newer torch's form for dtypes without a storage class: torch.UntypedStorage (numel
    #    in bytes) with _rebuild_tensor_v3 and the dtype; a byteorder member. Hand-written.
    p = Pickle().ordered_dict().mark()
    p.text("u16").tensor_v3("0", 8, 0, [2, 2], [2, 1], "uint16")
    p.text("u32_column").tensor_v3("1", 24, 1, [3], [2], "uint32")
    p.text("f32_by_v3").tensor_v3("2", 16, 0, [4], [1], "float32")
    p.op(b"u")
    v3 = os.path.join(OUT, "torch_v3.pt")
    write_zip(v3, "torch_v3", [("data.pkl", p.stop()), ("data/0", le([0, 1, 65535, 40000], "H")),
                               ("data/1", le([9, 7, 0, 4294967295, 1, 2 ** 31], "I")),
                               ("data/2", le([1.5, -2.0, 0.25, 3e38], "f"))])
    d = expected_dir(v3)
    os.makedirs(d, exist_ok=True)
    exp = {"u16": (np.array([[0, 1], [65535, 40000]]), "uint16"),
           "u32_column": (np.array([7, 4294967295, 2 ** 31]), "uint32"),  # elements 1, 3, 5
           "f32_by_v3": (np.array([1.5, -2.0, 0.25, np.float32(3e38)]), "float32")}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({"tensors": [{"name": k, "dtype": t, "shape": list(v.shape)} for k, (v, t) in exp.items()]}, f,
                  indent=1)
        f.write("\n")
    for k, (v, _) in exp.items():
        np.save(os.path.join(d, k + ".npy"), v.astype(np.float64))

    # 4. Hostile files: each must be refused with one line, nothing run.
    for f in os.listdir(REGRESSIONS):
        os.remove(os.path.join(REGRESSIONS, f))
    sd = {"w": torch.ones(2)}
    torch.save({**sd, "x": Evil(os.system, f"touch {MARKER}")}, os.path.join(OUT, "torch_bad_os_system.pt"))
    bad("torch_bad_os_system.pt")
    torch.save({**sd, "x": Evil(eval, f"__import__('os').system('touch {MARKER}')")},
               os.path.join(OUT, "torch_bad_eval.pt"))
    bad("torch_bad_eval.pt")
    torch.save(TinyModel(), os.path.join(OUT, "torch_bad_module.pt"))
    bad("torch_bad_module.pt")
    # The legacy format names storages by memory address: written once, then kept, so
    # that runs of this script give identical files.
    legacy = os.path.join(OUT, "torch_bad_legacy.pt")
    if not os.path.exists(legacy):
        torch.save(sd, legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(torch.load(legacy)["w"], sd["w"])
    bad("torch_bad_legacy.pt", copy_to_regressions=False)  # not a zip: open_checkpoint.cpp refuses it
    assert not os.path.exists(MARKER)

    def one_tensor(offset, size, stride, numel=12, storage="FloatStorage"):
        p = Pickle().ordered_dict().text("x").tensor_v2(storage, "0", numel, offset, size, stride).op(b"s")
        return p.stop()

    w12 = le([float(i) for i in range(12)], "f")
    # storage offset past the end: (3, 4) from element 11 of 12
    write_zip(os.path.join(OUT, "torch_bad_offset.pt"), "torch_bad_offset",
              [("data.pkl", one_tensor(11, [3, 4], [4, 1])), ("data/0", w12)])
    bad("torch_bad_offset.pt")
    # a stride reaching past the end: (3, 4) with stride (5, 1) needs element 13
    write_zip(os.path.join(OUT, "torch_bad_stride.pt"), "torch_bad_stride",
              [("data.pkl", one_tensor(0, [3, 4], [5, 1])), ("data/0", w12)])
    bad("torch_bad_stride.pt")
    # the storage member shorter than the pickle says (12 floats declared, 10 present)
    write_zip(os.path.join(OUT, "torch_bad_truncated.pt"), "torch_bad_truncated",
              [("data.pkl", one_tensor(0, [3, 4], [4, 1])), ("data/0", w12[:40])])
    bad("torch_bad_truncated.pt")
    # the storage member missing
    write_zip(os.path.join(OUT, "torch_bad_missing_storage.pt"), "torch_bad_missing_storage",
              [("data.pkl", one_tensor(0, [3, 4], [4, 1]))])
    bad("torch_bad_missing_storage.pt")
    # a huge claimed shape: 2^40 x 2^40 elements over a storage of 12 (and one claiming 2^62 elements)
    write_zip(os.path.join(OUT, "torch_bad_huge_shape.pt"), "torch_bad_huge_shape",
              [("data.pkl", one_tensor(0, [2 ** 40, 2 ** 40], [2 ** 40, 1])), ("data/0", w12)])
    bad("torch_bad_huge_shape.pt")
    write_zip(os.path.join(OUT, "torch_bad_huge_storage.pt"), "torch_bad_huge_storage",
              [("data.pkl", one_tensor(0, [2 ** 31, 2 ** 31], [2 ** 31, 1], numel=2 ** 62)), ("data/0", w12)])
    bad("torch_bad_huge_storage.pt")
    # dicts nested 1000 deep around one tensor
    depth = 1000
    p = Pickle().empty_dict()
    for _ in range(depth):
        p.text("a").empty_dict()
    p.text("x").tensor_v2("FloatStorage", "0", 12, 0, [12], [1]).op(b"s")
    p.op(b"s" * depth)
    write_zip(os.path.join(OUT, "torch_bad_deep.pt"), "torch_bad_deep", [("data.pkl", p.stop()), ("data/0", w12)])
    bad("torch_bad_deep.pt")
    # one tensor listed 20000 times (a list of memo references): cheap to pickle, costly to list
    p = Pickle().empty_dict().text("x").op(b"]").op(b"(").tensor_v2("FloatStorage", "0", 12, 0, [12], [1])
    p.op(b"q\x01").op(b"h\x01" * 19999).op(b"e").op(b"s")
    write_zip(os.path.join(OUT, "torch_bad_many_names.pt"), "torch_bad_many_names",
              [("data.pkl", p.stop()), ("data/0", w12)])
    bad("torch_bad_many_names.pt")
    # a list that contains itself: {"x": L} with L = [L]
    p = Pickle().empty_dict().text("x").op(b"]").op(b"q\x00").op(b"h\x00").op(b"a").op(b"s")
    write_zip(os.path.join(OUT, "torch_bad_cycle.pt"), "torch_bad_cycle", [("data.pkl", p.stop())])
    bad("torch_bad_cycle.pt")
    # written on a big-endian machine
    write_zip(os.path.join(OUT, "torch_bad_big_endian.pt"), "torch_bad_big_endian",
              [("data.pkl", one_tensor(0, [3, 4], [4, 1])), ("data/0", w12)], byteorder="big")
    bad("torch_bad_big_endian.pt")
    # a zip that is not a torch file (no data.pkl)
    write_zip(os.path.join(OUT, "torch_bad_no_pickle.pt"), "torch_bad_no_pickle", [("data/0", w12)])
    bad("torch_bad_no_pickle.pt")

    # Corners of the unpickler, for the fuzz replay only (each must be refused, not crash).
    def regression(name, pickle_bytes, members=()):
        path = os.path.join(REGRESSIONS, name)
        write_zip(path, name.split(".")[0], [("data.pkl", pickle_bytes), *members])

    tensor = Pickle().ordered_dict().text("x").tensor_v2("FloatStorage", "0", 12, 0, [3, 4], [4, 1]).op(b"s")
    good = tensor.stop()
    regression("torch_pickle_truncated.pt", good[:-7], [("data/0", w12)])
    regression("torch_pickle_memo_unset.pt", b"\x80\x02}h\x05.")
    regression("torch_pickle_stack_underflow.pt", b"\x80\x02(s.")
    regression("torch_pickle_no_mark.pt", b"\x80\x02}u.")
    regression("torch_pickle_inst.pt", b"\x80\x02(iposix\nsystem\n.")
    regression("torch_pickle_newobj.pt", b"\x80\x02ccollections\nOrderedDict\n)\x81.")
    regression("torch_pickle_long1_9.pt", b"\x80\x02}X\x01\x00\x00\x00a\x8a\x09" + b"\xff" * 9 + b"s.")
    regression("torch_pickle_stack_global_int.pt", b"\x80\x04K\x01K\x02\x93.")
    regression("torch_pickle_build_on_list.pt", b"\x80\x02]}b.")
    regression("torch_pickle_reduce_int.pt", b"\x80\x02K\x01)R.")
    regression("torch_pickle_storage_call.pt", b"\x80\x02ctorch\nFloatStorage\n)R.")
    regression("torch_pickle_protocol_0.pt", b"\x80\x00}.")
    regression("torch_pickle_bad_utf8.pt", b"\x80\x02}X\x02\x00\x00\x00\xc3\x28K\x01s.")
    regression("torch_pickle_root_tensor.pt",
               bytes(Pickle().tensor_v2("FloatStorage", "0", 12, 0, [12], [1]).op(b".").out), [("data/0", w12)])
    p = Pickle().ordered_dict().text("x")
    p.global_("torch._utils", "_rebuild_tensor_v3").mark().storage("FloatStorage", "0", 12).int(0).ints([12]).ints([1])
    p.bool(False).ordered_dict().global_("torch", "float32").op(b"t").op(b"R").op(b"s")
    regression("torch_pickle_v3_typed_storage.pt", p.stop(), [("data/0", w12)])
    # one tensor named twice (a shared dict holding a tensor, reached under two keys)
    p = Pickle().empty_dict().text("a").empty_dict().op(b"q\x01").text("w")
    p.tensor_v2("FloatStorage", "0", 12, 0, [12], [1]).op(b"s").op(b"s").text("b").op(b"h\x01").op(b"s")
    regression("torch_pickle_shared_dict.pt", p.stop(), [("data/0", w12)])
    # a tensor under "a.b" and under {"a": {"b": ...}}: one name twice
    p = Pickle().empty_dict().text("a.b").tensor_v2("FloatStorage", "0", 12, 0, [12], [1]).op(b"s")
    p.text("a").empty_dict().text("b").tensor_v2("FloatStorage", "0", 12, 0, [12], [1]).op(b"s").op(b"s")
    regression("torch_pickle_name_twice.pt", p.stop(), [("data/0", w12)])

    # torch's own weights_only loader refuses what names code, too.
    for f in ["torch_bad_os_system.pt", "torch_bad_eval.pt", "torch_bad_module.pt"]:
        assert refused_by_torch(os.path.join(OUT, f)), f
    assert not os.path.exists(MARKER)
    for f in sorted(os.listdir(OUT)):
        if f.startswith("torch_") and not f.endswith(".md"):
            print(f)


if __name__ == "__main__":
    main()
