// The llama.cpp reference for `attnscope run --model`: llama.cpp's own forward pass (the
// prebuilt CPU build node-llama-cpp ships, installed by scripts/setup into
// tests/llamacpp/node_modules), run on a GGUF file.
//
//   node reference.mjs MODEL.gguf [--tokens ID,ID,...] [--text TEXT] [--threads N]
//       prints one JSON object. With --tokens: the ids evaluated as one sequence (no BOS
//       added), {"n_vocab": V, "ids": [...], "logprobs": [[V numbers] per position]}: at
//       position t, the natural log of llama.cpp's probability of every vocabulary token
//       being next (the softmax of its raw logits); null where that probability is 0.
//       With --text: "text_ids", llama.cpp's tokens of TEXT (its tokenizer from the file's
//       tokenizer.ggml.* metadata; special-token text not parsed, no BOS or EOS added).
//
// Precision: the weights as the file stores them, a float32 KV cache (llama.cpp's default
// is float16) and flash attention off. Only the CPU build is used (gpu: false), and
// nothing is compiled or downloaded (build: "never").
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const { getLlama, LlamaLogLevel } = await import(
  join(here, "node_modules", "node-llama-cpp", "dist", "index.js"));

function fail(message) {
  process.stderr.write(`reference.mjs: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const a = { model: null, tokens: null, text: null, threads: 1 };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    if (arg === "--tokens") a.tokens = argv[++i];
    else if (arg === "--text") a.text = argv[++i];
    else if (arg === "--threads") a.threads = Number(argv[++i]);
    else if (!arg.startsWith("--") && a.model === null) a.model = arg;
    else fail(`unexpected argument ${JSON.stringify(arg)}`);
  }
  if (a.model === null || (a.tokens == null && a.text == null))
    fail("usage: reference.mjs MODEL.gguf [--tokens ID,ID,...] [--text TEXT] [--threads N]");
  if (!Number.isInteger(a.threads) || a.threads < 1) fail("--threads: expected a positive integer");
  return a;
}

function parseIds(words) {
  const ids = words.split(",").map(Number);
  if (ids.length === 0 || ids.some((t) => !Number.isInteger(t) || t < 0))
    fail(`--tokens ${JSON.stringify(words)}: expected ids separated by commas`);
  return ids;
}

// [V log-probabilities] of one position from node-llama-cpp's Map token -> probability.
function logprobs(probabilities, nVocab) {
  const row = new Array(nVocab).fill(null);
  for (const [token, p] of probabilities) if (p > 0) row[token] = Math.log(p);
  return row;
}

async function evaluate(model, ids, threads) {
  const nVocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
  if (!Number.isInteger(nVocab)) fail(`${model.filename}: no tokenizer.ggml.tokens`);
  for (const t of ids) if (t >= nVocab) fail(`--tokens: id ${t} is outside the vocabulary (${nVocab})`);
  // Room past the last token: a context the sequence fills exactly gets shifted before
  // the last position is evaluated (its probabilities then are not the sequence's).
  const context = await model.createContext({
    contextSize: ids.length + 16, batchSize: ids.length + 16, sequences: 1, threads,
    flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const sequence = context.getSequence();
  const out = await sequence.controlledEvaluate(ids.map((t) => [t, { generateNext: { probabilities: true } }]));
  const rows = out.map((r, i) => {
    if (r?.next?.probabilities == null) fail(`no probabilities at position ${i}`);
    return logprobs(r.next.probabilities, nVocab);
  });
  await context.dispose();
  return { n_vocab: nVocab, ids, logprobs: rows };
}

const args = parseArgs(process.argv.slice(2));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
let result = {};
if (args.text != null) result.text_ids = Array.from(model.tokenize(args.text, false));
if (args.tokens != null) Object.assign(result, await evaluate(model, parseIds(args.tokens), args.threads));
process.stdout.write(JSON.stringify(result) + "\n");
await model.dispose();
await llama.dispose();
