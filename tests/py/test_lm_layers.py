#!/usr/bin/python3
"""Every layer of a model from text (issue #24): `run --model DIR --layer all` with --json,
--dump, --jsonl and --summary, and `report --model DIR`'s page, run as a user runs them,
against scripts/lm_reference.py (a float64 numpy forward pass written from the GPT-2,
BERT and Llama definitions, independent of attnscope's code). The small random models in
Hugging Face layout are test_lm.py's. Also the refusals (one line, exit 2) and --help's
placeholders of the model options.

    /usr/bin/python3 tests/py/test_lm_layers.py     (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
"""

import base64
import json
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import common  # noqa: E402
from common import run_text  # noqa: E402
from test_lm import LmCase, TOL  # noqa: E402  (the models in Hugging Face layout)
from test_bundle_config import thumbnails  # noqa: E402  (the model view's data, read back)

import lm_reference as lref  # noqa: E402  (scripts/: the numpy forward pass)

IDS = {"gpt2": [3, 17, 5, 0, 39, 12], "bert": [2, 5, 4, 6, 7, 3], "llama": [1, 10, 19, 3, 39, 0, 22]}


def layer_count(config):
    return config.get("n_layer", config.get("num_hidden_layers"))


class LayersCase(LmCase):

    def model_and_reference(self, arch):
        """(model folder, reference forward pass, the --tokens words) of `arch` on IDS[arch]."""
        model, config, state = self.write_model(arch)
        return model, lref.forward(config, state, IDS[arch]), ["--tokens", ",".join(map(str, IDS[arch]))]

    def close(self, got, want, what):
        common.assert_close(np.asarray(got, dtype=np.float64), want, TOL, what, "lm (float64)", rtol=1)


class EveryLayer(LayersCase):
    """--layer all: one forward pass, every layer's weights equal the reference's."""

    def test_json_has_every_layer(self):
        for arch in IDS:
            with self.subTest(arch=arch):
                model, want, source = self.model_and_reference(arch)
                r = run_text("run", "--model", model, *source, "--layer", "all", "--json", "--stages", "weights")
                self.assert_ok(r)
                doc = json.loads(r.out)
                self.assertEqual(list(doc)[:2], ["schema", "layers"])
                self.assertEqual(doc["schema"], "attnscope.layers/1")
                self.assertEqual([e["layer"] for e in doc["layers"]], list(range(len(want["weights"]))))
                for e in doc["layers"]:
                    self.assertNotIn("schema", e)
                    self.assertEqual(len(e["tokens"]["query"]), len(IDS[arch]))
                    self.close(e["stages"]["weights"]["data"], want["weights"][e["layer"]],
                               f"{arch} layer {e['layer']}: --json weights")

    def test_dump_has_a_folder_per_layer(self):
        for arch in IDS:
            with self.subTest(arch=arch):
                model, want, source = self.model_and_reference(arch)
                out = self.path(f"{arch}-dump")
                r = run_text("run", "--model", model, *source, "--layer", "all", "--dump", out, "--stages",
                             "weights", "-q")
                self.assert_ok(r, stdout_empty=True)
                n = len(want["weights"])
                self.assertEqual(sorted(p.name for p in out.iterdir()), [f"layer_{k:02d}" for k in range(n)])
                for k in range(n):
                    self.assertEqual([p.name for p in (out / f"layer_{k:02d}").iterdir()], ["weights.npy"])
                    self.close(np.load(out / f"layer_{k:02d}" / "weights.npy"), want["weights"][k],
                               f"{arch} layer {k}: --dump weights")

    def test_jsonl_lines_name_their_layer(self):
        model, want, source = self.model_and_reference("llama")
        r = run_text("run", "--model", model, *source, "--layer", "all", "--summary", "--stages", "weights",
                     "--jsonl", "-")
        self.assert_ok(r)
        lines = [json.loads(line) for line in r.out.splitlines()]
        self.assertTrue(all("layer" in d for d in lines), [d for d in lines if "layer" not in d][:1])
        n = len(want["weights"])
        self.assertEqual(sorted({d["layer"] for d in lines}), list(range(n)))
        self.assertEqual([d["layer"] for d in lines if d["kind"] == "run"], list(range(n)))
        self.assertEqual([d["layer"] for d in lines], sorted(d["layer"] for d in lines))  # layer after layer
        stage = [d for d in lines if d["kind"] == "stage" and d["stage"] == "weights"]
        for d in stage:
            self.close(d["data"], want["weights"][d["layer"]][d["head"]], f"layer {d['layer']} head {d['head']}")
        self.assertEqual(len(stage), n * want["weights"][0].shape[0])
        self.assertEqual(sum(d["kind"] == "row" for d in lines), n * 4 * len(IDS["llama"]))  # 4 heads

    def test_jsonl_file(self):
        model, want, source = self.model_and_reference("gpt2")
        out = self.path("all.jsonl")
        r = run_text("run", "--model", model, *source, "--layer", "all", "--jsonl", out, "-q")
        self.assert_ok(r, stdout_empty=True)
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        self.assertEqual(sorted({d["layer"] for d in lines}), list(range(len(want["weights"]))))

    def test_summary_has_a_section_per_layer(self):
        model, want, source = self.model_and_reference("bert")
        n = len(want["weights"])
        r = run_text("run", "--model", model, *source, "--layer", "all", "--summary", "--explain", "--color",
                     "never")
        self.assert_ok(r)
        headings = re.findall(r"^== layer (\d+) of (\d+) ==$", r.out, re.M)
        self.assertEqual(headings, [(str(k), str(n)) for k in range(n)])
        sections = re.split(r"^== layer \d+ of \d+ ==$", r.out, flags=re.M)[1:]
        for k, text in enumerate(sections):
            self.assertIn(f"How x was made (bert, {n} layers", text)
            self.assertIn("== summary: (H, Tq) = (2, 6), Tk = 6", text)
            self.assertIn("attnscope: self-attention, 2 heads", text)


class WholeOutputs(LayersCase):
    """--layer all --dump OUT --force leaves OUT wholly old (a refusal) or wholly new; the
    predictions join the layers' document once; report --model keeps within --max-memory."""

    def dump(self, model, source, out, *more):
        return run_text("run", "--model", model, *source, "--layer", "all", "--dump", out, "--stages", "weights",
                        "-q", *more)

    def test_refusal_at_a_later_layer_keeps_the_old_dump(self):
        model, _, source = self.model_and_reference("gpt2")
        out = self.path("out")
        self.assert_ok(self.dump(model, source, out), stdout_empty=True)
        (out / "layer_01" / "notes.txt").write_text("mine")  # not a dump's file: layer 1 cannot be replaced
        before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        other = ["--tokens", "1,2"]  # a run whose weights differ from the first's
        self.assert_error(self.dump(model, other, out, "--force"), "layer_01 holds notes.txt")
        after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        self.assertEqual(before, after)
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("out")), ["out"])

    def test_force_replaces_every_layer(self):
        model, _, source = self.model_and_reference("gpt2")
        out = self.path("out")
        self.assert_ok(self.dump(model, source, out), stdout_empty=True)
        self.assert_ok(self.dump(model, ["--tokens", "1,2"], out, "--force"), stdout_empty=True)
        for k in range(3):
            self.assertEqual(np.load(out / f"layer_{k:02d}" / "weights.npy").shape, (2, 2, 2))
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("out")), ["out"])
        # without --force, a layer's folder that holds anything is refused before any work
        self.assert_error(self.dump(model, source, out), "layer_00/weights.npy: exists", "--force")

    def test_predictions_once_in_the_layers_document(self):
        model, want, source = self.model_and_reference("gpt2")
        r = run_text("run", "--model", model, *source, "--layer", "all", "--json", "--stages", "weights",
                     "--predict", "2")
        self.assert_ok(r)
        doc = json.loads(r.out)
        logits = want["logits"][-1]
        self.assertEqual([t["id"] for t in doc["predictions"]["rows"][0]["top"]],
                         [int(i) for i in np.argsort(-logits, kind="stable")[:2]])
        self.assertTrue(all("predictions" not in e for e in doc["layers"]))

    def test_report_keeps_within_the_memory_limit(self):
        # 3 layers of 2 heads on 30 tokens: each layer keeps (2, 30, 30) weights and what the
        # heatmaps need, about 40 KB; the page keeps every layer's, with the forward pass's
        # inputs. 100K: one layer's run fits, the page does not.
        model, _, _ = self.write_model("gpt2")
        ids = ",".join(str(i % 40) for i in range(30))
        args = ("report", "--model", model, "--tokens", ids, "--html", self.path("r.html"))
        self.assert_ok(run_text(*args, "--max-memory", "2M"))
        self.assert_error(run_text(*args, "--force", "--max-memory", "100K"), "the page keeps every layer's weights",
                          "--max-memory")


class ModelReport(LayersCase):
    """report --model: a row per layer, its thumbnails the reference's weights; the head
    view and coloured text of a chosen layer on the model's tokens."""

    def test_thumbnails_equal_the_reference(self):
        for arch in IDS:
            with self.subTest(arch=arch):
                model, want, source = self.model_and_reference(arch)
                html = self.path(f"{arch}.html")
                self.assert_ok(run_text("report", "--model", model, *source, "--html", html), stdout_empty=True)
                text = html.read_text(encoding="utf-8")
                n, heads = len(want["weights"]), want["weights"][0].shape[0]
                rows = re.findall(r'<tr data-layer="\d+"><th>([^<]*)<br>', text)
                self.assertEqual(rows, [f"layer {k}" for k in range(n)])
                thumbs = thumbnails(text)
                self.assertEqual(len(thumbs), n * heads)
                for k in range(n):
                    for h in range(heads):
                        self.close(thumbs[f"layer {k} · weights · head {h}"], want["weights"][k][h],
                                   f"{arch} report layer {k} head {h}")

    def test_head_view_of_the_chosen_layer_on_the_tokens(self):
        model, config, state = self.write_model("gpt2")
        ids = json.loads(run_text("tokens", "--model", model, "--text", "Hello world!", "--json").out)["ids"]
        want = lref.forward(config, state, ids)
        html = self.path("hv.html")
        self.assert_ok(run_text("report", "--model", model, "--text", "Hello world!", "--layer", "2", "--html", html))
        text = html.read_text(encoding="utf-8")
        self.assertIn("<h2>Head view and coloured text: layer 2</h2>", text)
        data = json.loads(re.search(r'<script type="application/json" id="headview-data">(.*?)</script>', text,
                                    re.S).group(1))
        self.assertEqual(len(data["qt"][0]), len(ids))
        self.assertIn("Hello", "".join(data["qt"][0]))
        w = np.frombuffer(base64.b64decode(data["w"]), "<f4").reshape(want["weights"][2].shape)
        common.assert_close(w, want["weights"][2], 1e-6, "head view layer 2 (float32)", "lm (float32 page)")


class LayerRefusals(LayersCase):
    """What --layer all and report --model cannot do: one line, exit 2, nothing written."""

    def test_layer_all_needs_an_output_for_every_layer(self):
        model, _, source = self.model_and_reference("gpt2")
        r = run_text("run", "--model", model, *source, "--layer", "all")
        self.assert_error(r, "--layer all: shows every layer through --summary, --json, --jsonl or --dump")
        for extra, words in ((["--json", "--html", self.path("p.html")], "--html: draws one layer"),
                             (["--json", "--svg", self.path("p.svg")], "--svg: draws one layer"),
                             (["--dump", self.path("d.npz")], "a folder per layer"),
                             (["--summary", "--save-forward", self.path("f.npz")],
                              "--save-forward: writes one layer's x")):
            with self.subTest(extra=extra[1]):
                r = run_text("run", "--model", model, *source, "--layer", "all", *extra)
                self.assert_error(r, words)
        for name in ("p.html", "p.svg", "d.npz", "f.npz"):
            self.assertFalse(self.path(name).exists(), name)

    def test_layer_all_needs_a_model(self):
        r = run_text("run", str(common.DATA / "sentence.npz"), "--layer", "all", "--json")
        self.assert_error(r, "--layer all: every layer of a --model DIR")

    def test_layer_beyond_the_model_names_config_json(self):
        for arch, key in (("gpt2", "n_layer"), ("llama", "num_hidden_layers")):
            with self.subTest(arch=arch):
                model, config, _ = self.write_model(arch)
                n = layer_count(config)
                r = run_text("run", "--model", model, "--tokens", "1,2", "--layer", "99")
                self.assert_error(r, f"--layer 99: the model has {n} layers, 0–{n - 1}", f"config.json {key} {n}")
                html = self.path("r.html")
                r = run_text("report", "--model", model, "--tokens", "1,2", "--layer", "99", "--html", html)
                self.assert_error(r, f"--layer 99: the model has {n} layers")
                self.assertFalse(html.exists())

    def test_layer_neither_index_nor_all(self):
        model, _, source = self.model_and_reference("gpt2")
        r = run_text("run", "--model", model, *source, "--layer", "every", "--json")
        self.assert_error(r, "--layer: expected an index counted from 0, found 'every'")

    def test_report_takes_bundles_or_a_model(self):
        model, _, source = self.model_and_reference("gpt2")
        html = self.path("r.html")
        r = run_text("report", str(common.DATA / "sentence.npz"), "--model", model, *source, "--html", html)
        self.assert_error(r, "--model: the page's rows are its layers; give it without bundles")
        r = run_text("report", "--html", html)
        self.assert_error(r, "report: expected bundles", "or --model DIR")
        r = run_text("report", str(common.DATA / "sentence.npz"), "--layer", "1", "--html", html)
        self.assert_error(r, "--layer: chooses the head view's layer of --model DIR")
        self.assertFalse(html.exists())


class Help(LayersCase):
    """--help names the model options' values as what they are."""

    def test_placeholders(self):
        for command in ("run", "report"):
            with self.subTest(command=command):
                r = run_text(command, "--help")
                self.assert_ok(r)
                for words in ("--model DIR", "--text STRING", "--text-file FILE", "--tokens IDS"):
                    self.assertIn(words, r.out)
        r = run_text("run", "--help")
        self.assertIn("--predict K", r.out)
        self.assertIn("--save-forward FILE", r.out)


if __name__ == "__main__":
    common.main("test_lm_layers", against="lm_reference.py")
