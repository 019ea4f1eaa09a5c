// The reference for `attnscope tokens`: Hugging Face's own JavaScript port of its
// tokenizers (@huggingface/tokenizers, installed by scripts/setup into
// tests/tokenizers/node_modules), run on a model's tokenizer.json.
//
//   node reference.mjs MODEL --jsonl-input CORPUS [--no-special-tokens | --both]
//       CORPUS holds one JSON string per line; prints one JSON line per input line:
//       {"ids":[...],"tokens":[...],"decoded":"..."}, or with --both
//       {"special":{that, with special tokens},"plain":{that, --no-special-tokens}}
//   node reference.mjs MODEL --text-file F [--no-special-tokens] [--ids]
//       encodes the whole file (UTF-8) once; prints {"bytes","tokens","load_seconds",
//       "encode_seconds"} (scripts/bench), and the ids too with --ids.
//
// MODEL: a folder with tokenizer.json (and tokenizer_config.json, optional), or the
// tokenizer.json file. Encoding adds the post-processor's special tokens unless
// --no-special-tokens (Tokenizer.encode's add_special_tokens). Decoding keeps the
// special tokens and applies transformers' clean_up_tokenization_spaces only where the
// folder's tokenizer_config.json sets it true (GPT-2, Llama 3), as transformers' decode
// does; without the file or the key, none (the Rust library's Tokenizer::decode).
import { readFileSync, statSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";

const here = dirname(fileURLToPath(import.meta.url));
const { Tokenizer } = await import(
  join(here, "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs"));

function fail(message) {
  process.stderr.write(`reference.mjs: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const a = { model: null, jsonl: null, textFile: null, special: true, both: false, ids: false };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    if (arg === "--jsonl-input") a.jsonl = argv[++i];
    else if (arg === "--text-file") a.textFile = argv[++i];
    else if (arg === "--no-special-tokens") a.special = false;
    else if (arg === "--both") a.both = true;
    else if (arg === "--ids") a.ids = true;
    else if (!arg.startsWith("--") && a.model === null) a.model = arg;
    else fail(`unexpected argument ${JSON.stringify(arg)}`);
  }
  if (a.model === null || (a.jsonl === null) === (a.textFile === null))
    fail("usage: reference.mjs MODEL (--jsonl-input F [--both] | --text-file F [--ids]) [--no-special-tokens]");
  return a;
}

function loadTokenizer(model) {
  const isDir = statSync(model).isDirectory();
  const jsonPath = isDir ? join(model, "tokenizer.json") : model;
  const configPath = join(isDir ? model : dirname(model), "tokenizer_config.json");
  let config = {};
  try {
    config = JSON.parse(readFileSync(configPath, "utf8"));
  } catch (e) {
    if (e.code !== "ENOENT") fail(`${configPath}: ${e.message}`);
  }
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(jsonPath, "utf8")), config);
  // transformers' clean-up of spaces before punctuation, as the folder's
  // tokenizer_config.json sets it; none without the file or the key.
  tokenizer.attnscopeCleanUp = config.clean_up_tokenization_spaces === true;
  return tokenizer;
}

function decode(tokenizer, ids) {
  // The port refuses an empty list; the Rust library decodes it to "".
  if (ids.length === 0) return "";
  return tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: tokenizer.attnscopeCleanUp });
}

function encodeDecode(tokenizer, text, special) {
  const enc = tokenizer.encode(text, { add_special_tokens: special });
  return { ids: enc.ids, tokens: enc.tokens, decoded: decode(tokenizer, enc.ids) };
}

function runCorpus(tokenizer, a) {
  const lines = readFileSync(a.jsonl, "utf8").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const out = [];
  for (const line of lines) {
    const text = JSON.parse(line);
    const result = a.both
      ? { special: encodeDecode(tokenizer, text, true), plain: encodeDecode(tokenizer, text, false) }
      : encodeDecode(tokenizer, text, a.special);
    out.push(JSON.stringify(result));
  }
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}

function runTextFile(tokenizer, a, loadSeconds) {
  const bytes = readFileSync(a.textFile);
  const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  const t0 = performance.now();
  const enc = tokenizer.encode(text, { add_special_tokens: a.special });
  const encodeSeconds = (performance.now() - t0) / 1000;
  const result = { bytes: bytes.length, tokens: enc.ids.length, load_seconds: loadSeconds,
                   encode_seconds: encodeSeconds };
  if (a.ids) result.ids = enc.ids;
  process.stdout.write(JSON.stringify(result) + "\n");
}

const a = parseArgs(process.argv.slice(2));
const t0 = performance.now();
const tokenizer = loadTokenizer(a.model);
const loadSeconds = (performance.now() - t0) / 1000;
if (a.jsonl !== null) runCorpus(tokenizer, a);
else runTextFile(tokenizer, a, loadSeconds);
