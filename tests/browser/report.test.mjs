// The HTML report and the model view in a real browser: Debian's Chromium, driven by
// puppeteer-core. Each test hovers, clicks, pins and zooms as a user does and asserts
// what is drawn: canvas pixels at a cell against viridis as matplotlib publishes it, the
// head view's line opacities against the weights of attnscope's own --json (whose
// numbers the Python tests check against numpy), tooltip text. Screenshots go to
// $ATTNSCOPE_SHOTS (default /tmp/attnscope-shots) for a person to look at.
//
//   node tests/browser/report.test.mjs --list      the test names
//   node tests/browser/report.test.mjs NAME        run one (env ATTNSCOPE_BIN, ATTNSCOPE_ROOT)
//
// Chromium: $ATTNSCOPE_CHROMIUM or /usr/bin/chromium (scripts/setup installs it, and
// puppeteer-core into tests/browser/node_modules).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = process.env.ATTNSCOPE_ROOT || path.resolve(HERE, "..", "..");
const BIN = process.env.ATTNSCOPE_BIN || path.join(ROOT, "build", "attnscope");
const CHROMIUM = process.env.ATTNSCOPE_CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.ATTNSCOPE_SHOTS || "/tmp/attnscope-shots";

// viridis as matplotlib publishes it, 16 evenly spaced stops: an oracle independent of attnscope.
const VIRIDIS = ["#440154", "#481a6c", "#472f7d", "#414487", "#39568c", "#31688e", "#2a788e", "#23888e",
  "#1f988b", "#22a884", "#35b779", "#54c568", "#7ad151", "#a5db36", "#d2e21b", "#fde725"];
const rgb = hex => [1, 3, 5].map(k => parseInt(hex.substr(k, 2), 16));
function viridis(t) {
  const x = Math.min(Math.max(t, 0), 1) * 15, k = Math.min(Math.floor(x), 14), f = x - k;
  const a = rgb(VIRIDIS[k]), b = rgb(VIRIDIS[k + 1]);
  return a.map((v, c) => v + (b[c] - v) * f);
}
const HATCH = [rgb("#ababab"), rgb("#ebebeb")];
function near(got, want, tol, what) {
  const d = Math.max(...want.map((v, c) => Math.abs(v - got[c])));
  assert.ok(d <= tol, `${what}: drawn rgb(${got.slice(0, 3)}), expected about rgb(${want.map(Math.round)}) (off by ${d.toFixed(1)})`);
}

// ---- inputs and runs ----
// Every folder a test makes (inputs, Chromium's profile) lives under one scratch root,
// removed when the process exits, whether the test passed or not.
const SCRATCH = fs.mkdtempSync(path.join(os.tmpdir(), "attnscope-browser-"));
process.on("exit", () => fs.rmSync(SCRATCH, { recursive: true, force: true }));
function tmpdir() { return fs.mkdtempSync(path.join(SCRATCH, "t-")); }
function rng(seed) {  // mulberry32, then Box-Muller
  let a = seed >>> 0;
  const u = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return () => Math.sqrt(-2 * Math.log(u() + 1e-12)) * Math.cos(2 * Math.PI * u());
}
function matrix(r, n, m, scale = 1) {
  return Array.from({ length: n }, () => Array.from({ length: m }, () => +(r() * scale).toFixed(4)));
}
// A self-attention bundle of T tokens of width D, as JSON.
function bundle(dir, name, { T, D = 8, seed = 1, tokens = null, scale = 1 }) {
  const r = rng(seed);
  const b = { x: matrix(r, T, D), W_Q: matrix(r, D, D, scale), W_K: matrix(r, D, D, scale), W_V: matrix(r, D, D) };
  if (tokens) b.query_tokens = b.key_tokens = tokens;
  const file = path.join(dir, name);
  fs.writeFileSync(file, JSON.stringify(b));
  return file;
}
function attnscope(...args) {
  const p = spawnSync(BIN, args.map(String), { encoding: "utf-8", maxBuffer: 1 << 30 });
  assert.equal(p.status, 0, `attnscope ${args.join(" ")}: exit ${p.status}\n${p.stderr}`);
  return p.stdout;
}
function weightsOf(file, ...options) {  // (B?, H, Tq, Tk) nested lists, from --json
  return JSON.parse(attnscope("run", file, ...options, "--json", "--stages", "scores,masked_scores,weights")).stages;
}

// ---- the browser ----
let browser = null;
async function open(file, { width = 1200, height = 900 } = {}) {
  const { default: puppeteer } = await import("puppeteer-core");
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} not found: install Debian's chromium (scripts/setup)`);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true, userDataDir: tmpdir(),
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--hide-scrollbars"],
  });
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", e => errors.push(e.message));
  page.on("console", m => { if (m.type() === "error") errors.push(m.text()); });
  await page.setViewport({ width, height, deviceScaleFactor: 1 });
  await page.goto("file://" + file, { timeout: 120000 });
  await page.waitForFunction("window.attnscopeReady === true", { timeout: 120000 });
  page.errors = errors;
  return page;
}
async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, name);
  await page.screenshot({ path: file });
  return file;
}
// Figure k's cell (p, q): scrolled into view, its canvas pixel and where it is on the page.
async function cellPixel(page, k, p, q) {
  return page.evaluate((k, p, q) => {
    const f = window.attnscopeFigures[k];
    f.fig.scrollIntoView({ block: "center" });
    const w = f.wrap, z = f.z;
    w.scrollLeft = Math.max(0, f.GL + q * z - w.clientWidth / 2);
    w.scrollTop = Math.max(0, f.GT + p * z - w.clientHeight / 2);
    f.draw();
    const x = Math.floor(f.cellX(q) + z / 2), y = Math.floor(f.cellY(p) + z / 2);
    const px = Array.from(f.ctx.getImageData(x, y, 1, 1).data);
    const r = f.canvas.getBoundingClientRect();
    const value = f.values ? f.values[p * f.C + q] : null;
    return { px, value, level: f.levels[p * f.C + q], x: r.left + x, y: r.top + y, z };
  }, k, p, q);
}
async function figureIndex(page, stage, head) {
  return page.evaluate((s, h) => window.attnscopeFigures.findIndex(f => f.d.stage === s && f.d.head === String(h)), stage, head);
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------
const TESTS = {};

// Item 3: every cell of a 2048 x 2048 matrix is drawn (one pixel each at 1:1), coloured
// by viridis at its weight; masked cells hatched; no cell is left out.
TESTS.canvas_shows_every_cell_at_T2048 = async () => {
  const dir = tmpdir();
  const file = bundle(dir, "long.json", { T: 2048, D: 8, seed: 7, scale: 0.3 });
  const html = path.join(dir, "long.html");
  attnscope("run", file, "--causal", "--stages", "weights", "--html", html, "-q");
  const page = await open(html);
  const meta = await page.evaluate(() => {
    const f = window.attnscopeFigures[0];
    return { n: window.attnscopeFigures.length, R: f.R, C: f.C, ri: f.d.ri, note: document.body.innerText.includes("Not drawn") };
  });
  assert.equal(meta.n, 1);
  assert.deepEqual([meta.R, meta.C, meta.ri, meta.note], [2048, 2048, null, false]);
  await page.evaluate(() => window.attnscopeFigures[0].setZoom(1, null));
  const cells = [[0, 0], [5, 3], [700, 12], [1023, 1023], [2047, 0], [2047, 1500], [2047, 2047], [1500, 1499]];
  for (const [i, j] of cells) {
    const c = await cellPixel(page, 0, i, j);
    assert.equal(c.z, 1);
    near(c.px, viridis(c.value), 3, `weights[${i}, ${j}] = ${c.value}`);
  }
  for (const [i, j] of [[0, 2047], [3, 4], [1000, 1001]]) {
    const c = await cellPixel(page, 0, i, j);
    assert.equal(c.level, 254, `[${i}, ${j}] is masked`);
    assert.ok(HATCH.some(h => Math.max(...h.map((v, k) => Math.abs(v - c.px[k]))) <= 1), `[${i}, ${j}] hatched: ${c.px}`);
  }
  // The far corner is reachable by scrolling: the last row and column are drawn.
  const corner = await page.evaluate(() => {
    const f = window.attnscopeFigures[0];
    f.wrap.scrollLeft = f.wrap.scrollWidth;
    f.wrap.scrollTop = f.wrap.scrollHeight;
    f.draw();
    return [f.cellX(2047) + 1 <= f.wrap.clientWidth, f.cellY(2047) + 1 <= f.wrap.clientHeight];
  });
  assert.deepEqual(corner, [true, true]);
  await page.evaluate(() => { const f = window.attnscopeFigures[0]; f.wrap.scrollLeft = 0; f.wrap.scrollTop = 0; f.draw(); });
  await shot(page, "t2048-weights.png");
  assert.deepEqual(page.errors, []);
};

// Item 4: --log-scale for long rows, where weights near 1/T leave 0..1 dark: each cell at
// viridis of log10(w) between the smallest positive weight and 1; the legend says so.
TESTS.log_scale_lights_up_long_rows = async () => {
  const dir = tmpdir();
  const file = bundle(dir, "long.json", { T: 2048, D: 8, seed: 7, scale: 0.3 });
  const html = path.join(dir, "log.html");
  attnscope("run", file, "--causal", "--stages", "weights", "--log-scale", "--html", html, "-q");
  const page = await open(html);
  const small = await page.evaluate(() => {
    const v = window.attnscopeFigures[0].values;
    let m = 1;
    for (const x of v) if (x > 0 && x < m) m = x;
    return m;
  });
  assert.ok(small > 0 && small < 1e-3, `smallest weight ${small}`);
  const rule = await page.$eval(".legend .rule", e => e.textContent);
  assert.match(rule, /log10, the smallest positive value to 1/);
  let bright = 0;
  for (const [i, j] of [[2047, 10], [1500, 700], [900, 899], [64, 3], [2047, 2047]]) {
    const c = await cellPixel(page, 0, i, j);
    const t = (Math.log10(c.value) - Math.log10(small)) / -Math.log10(small);
    near(c.px, viridis(t), 4, `log weights[${i}, ${j}] = ${c.value}`);
    if (t > 0.3) bright++;
  }
  assert.ok(bright >= 3, "on a log scale the long rows are no longer dark");
  await page.evaluate(() => { const f = window.attnscopeFigures[0]; f.setZoom(1, null); f.wrap.scrollLeft = 0; f.wrap.scrollTop = 0; f.draw(); f.fig.scrollIntoView(); });
  await shot(page, "t2048-log-scale.png");
  assert.deepEqual(page.errors, []);
};

// Item 3: zoom with the buttons and with ctrl + wheel (the cell under the pointer stays
// under it); after zooming and scrolling, a cell is still drawn in its colour.
TESTS.zoom_and_scroll_keep_cells_right = async () => {
  const dir = tmpdir();
  const file = bundle(dir, "t256.json", { T: 256, seed: 3 });
  const html = path.join(dir, "t256.html");
  attnscope("run", file, "--causal", "--heads", "2", "--stages", "weights", "--html", html, "-q");
  const page = await open(html);
  const k = await figureIndex(page, "weights", 1);
  const z0 = await page.evaluate(k => window.attnscopeFigures[k].z, k);
  const plus = await page.evaluateHandle(k => window.attnscopeFigures[k].fig.querySelector('button[data-zoom="1"]'), k);
  await plus.click();
  await plus.click();
  const z1 = await page.evaluate(k => window.attnscopeFigures[k].z, k);
  assert.ok(z1 > z0, `zoom ${z0} -> ${z1}`);
  const label = await page.evaluate(k => window.attnscopeFigures[k].fig.querySelector(".zoom-level").textContent, k);
  assert.equal(label, `${z1} px per cell`);
  for (const [i, j] of [[200, 100], [255, 0], [40, 40]]) {
    const c = await cellPixel(page, k, i, j);
    near(c.px, viridis(c.value), 3, `zoomed weights[${i}, ${j}]`);
  }
  // ctrl + wheel over cell (120, 60): bigger cells, the same cell under the pointer.
  const c = await cellPixel(page, k, 120, 60);
  await page.mouse.move(c.x, c.y);
  await page.keyboard.down("Control");
  await page.mouse.wheel({ deltaY: -100 });
  await page.keyboard.up("Control");
  await new Promise(r => setTimeout(r, 200));
  const after = await page.evaluate((k, x, y) => {
    const f = window.attnscopeFigures[k];
    return { z: f.z, at: f.cellAt({ clientX: x, clientY: y }) };
  }, k, c.x, c.y);
  assert.ok(after.z > z1, `ctrl + wheel zoomed in: ${z1} -> ${after.z}`);
  assert.deepEqual(after.at, [120, 60]);
  const px = await page.evaluate((k, x, y) => {
    const f = window.attnscopeFigures[k], r = f.canvas.getBoundingClientRect();
    return Array.from(f.ctx.getImageData(Math.floor(x - r.left), Math.floor(y - r.top), 1, 1).data);
  }, k, c.x, c.y);
  near(px, viridis(c.value), 3, "the cell under the pointer after ctrl + wheel");
  await page.mouse.move(c.x, c.y);
  await shot(page, "t256-zoomed.png");
  assert.deepEqual(page.errors, []);
};

// Item 9: the tooltip of a canvas cell names the stage, batch item, head, query and key
// (their tokens) and gives the cell's value in every (query, key) stage of the page.
TESTS.tooltip_names_head_tokens_and_every_stage = async () => {
  const dir = tmpdir();
  const tokens = Array.from({ length: 24 }, (_, i) => ["日本", "😀", "naïve", "cat"][i % 4] + i);
  const file = bundle(dir, "tok.json", { T: 24, seed: 11, tokens });
  const html = path.join(dir, "tok.html");
  attnscope("run", file, "--causal", "--heads", "2", "--stages", "scores,masked_scores,weights", "--html", html, "-q");
  const want = weightsOf(file, "--causal", "--heads", "2");
  const page = await open(html);
  const k = await figureIndex(page, "weights", 1);
  assert.ok(k >= 0);
  for (const [i, j, masked] of [[10, 3, false], [2, 20, true]]) {
    const c = await cellPixel(page, k, i, j);
    await page.mouse.move(c.x, c.y);
    const tip = await page.$eval("#tip", t => (t.style.display === "block" ? t.innerText : ""));
    assert.match(tip, /weights · head 1/);
    assert.ok(tip.includes(`query ${i} ‘${tokens[i]}’ → key ${j} ‘${tokens[j]}’`), tip);
    const num = s => Number(s.replace("−∞", "-Infinity").replace("−", "-"));
    const value = name => {
      const m = tip.match(new RegExp(`(?:^|\\n| · )${name} ([−0-9][^\\s]*)`));
      assert.ok(m, `${name} in ${tip}`);
      assert.ok(!Number.isNaN(num(m[1])), `${name}: ${m[1]} in ${tip}`);
      return num(m[1]);
    };
    assert.equal(value("scores"), want.scores.data[1][i][j]);
    assert.equal(value("weights"), masked ? 0 : want.weights.data[1][i][j]);
    assert.equal(value("masked_scores"), masked ? -Infinity : want.masked_scores.data[1][i][j]);
    if (masked) assert.match(tip, /\(masked\)/);
    if (!masked) await shot(page, "tooltip.png");
  }
  assert.deepEqual(page.errors, []);
};

// The head view: a line per (query, key, head) as opaque as the weight; hover isolates a
// token's lines, a click pins them, the head buttons add and remove a head's lines.
TESTS.head_view_lines_hover_pin_and_heads = async () => {
  const file = path.join(ROOT, "data", "sentence.json");
  const dir = tmpdir();
  const html = path.join(dir, "sentence.html");
  attnscope("run", file, "--heads", "2", "--html", html, "-q");
  const w = weightsOf(file, "--heads", "2").weights.data;  // (H, Tq, Tk): 2-D x
  const page = await open(html);
  await page.$eval("#headview", e => e.scrollIntoView());
  const lines = () => page.$$eval("svg.hv line", ls => ls.map(l => ({
    q: +l.dataset.q, k: +l.dataset.k, head: +l.dataset.head, opacity: +l.getAttribute("stroke-opacity"),
    stroke: l.getAttribute("stroke"), shown: l.style.display !== "none" })));
  let all = await lines();
  const T = w[0].length;
  assert.equal(all.length, 2 * T * T, "a line for every (query, key) and head (no weight is 0 here)");
  for (const l of all) assert.ok(Math.abs(l.opacity - w[l.head][l.q][l.k]) < 1e-6, `line ${JSON.stringify(l)}`);
  const colours = new Set(all.map(l => l.head + l.stroke));
  assert.equal(colours.size, 2);
  assert.notEqual(all.find(l => l.head === 0).stroke, all.find(l => l.head === 1).stroke);
  // Hover query 2: only its lines.
  const token = async (side, i) => page.$(`svg.hv text.tok[data-side="${side}"][data-index="${i}"]`);
  await (await token("q", 2)).hover();
  all = await lines();
  assert.ok(all.filter(l => l.shown).every(l => l.q === 2));
  assert.equal(all.filter(l => l.shown).length, 2 * T);
  // Hover key 4: only the lines into it.
  await (await token("k", 4)).hover();
  all = await lines();
  assert.ok(all.filter(l => l.shown).every(l => l.k === 4));
  // Away: every line again.
  await page.mouse.move(5, 5);
  assert.equal((await lines()).filter(l => l.shown).length, 2 * T * T);
  // Click query 1: pinned, stays isolated when the pointer leaves and hovers another token.
  await (await token("q", 1)).click();
  await page.mouse.move(5, 5);
  await (await token("q", 3)).hover();
  all = await lines();
  assert.ok(all.filter(l => l.shown).every(l => l.q === 1), "pinned to query 1");
  assert.equal(await page.$eval("#headview", e => e.dataset.isolated), "q1");
  await shot(page, "headview-pinned.png");
  // Head 1 off: only head 0's lines, still pinned.
  await page.click('.hv-heads button[data-head="1"]');
  all = await lines();
  assert.ok(all.every(l => l.head === 0));
  assert.ok(all.filter(l => l.shown).every(l => l.q === 1));
  // Click query 1 again: free.
  await (await token("q", 1)).click();
  await page.mouse.move(5, 5);
  assert.equal((await lines()).filter(l => l.shown).length, T * T);
  assert.deepEqual(page.errors, []);
};

// CircuitsVis-style text: the tokens shaded by the weight the chosen query gives them,
// relative to the row's largest; hover picks the query, click pins it, the head select
// changes the head.
TESTS.coloured_text_shades_tokens_by_weight = async () => {
  const file = path.join(ROOT, "data", "sentence.json");
  const dir = tmpdir();
  const html = path.join(dir, "sentence.html");
  attnscope("run", file, "--heads", "2", "--html", html, "-q");
  const w = weightsOf(file, "--heads", "2").weights.data;
  const page = await open(html);
  await page.$eval("#coloured-text", e => e.scrollIntoView());
  const shades = () => page.$$eval("#coloured-text .ct-keys .ct-tok", s => s.map(e => {
    const m = e.style.backgroundColor.match(/rgba?\(([^)]*)\)/)[1].split(",").map(Number);
    return m.length === 4 ? m[3] : 1;
  }));
  const check = async (head, q) => {
    const got = await shades(), row = w[head][q], big = Math.max(...row);
    const weights = await page.$$eval("#coloured-text .ct-keys .ct-tok", s => s.map(e => +e.dataset.weight));
    row.forEach((x, j) => assert.ok(Math.abs(weights[j] - x) < 1e-6, `token ${j} carries weight ${weights[j]}, not ${x}`));
    row.forEach((x, j) => assert.ok(Math.abs(got[j] - x / big) <= 1 / 255 + 1e-3, `head ${head} query ${q} token ${j}: ${got[j]} vs ${x / big}`));
  };
  const tok = i => page.$(`#coloured-text .ct-keys .ct-tok[data-index="${i}"]`);
  await (await tok(3)).hover();
  await check(0, 3);
  await (await tok(1)).click();  // pin query 1
  await (await tok(5)).hover();
  await check(0, 1);
  assert.equal(await page.$eval("#coloured-text", e => e.dataset.pinned), "1");
  await page.select("#coloured-text select.ct-head", "1");
  await check(1, 1);
  await shot(page, "coloured-text.png");
  assert.deepEqual(page.errors, []);
};

// The model view: layers x heads as thumbnails; a click opens one large, drawn in its colours.
TESTS.model_view_thumbnails_open_on_click = async () => {
  const dir = tmpdir();
  const files = [1, 2, 3].map(s => bundle(dir, `layer${s}.json`, { T: 40, seed: 20 + s }));
  const html = path.join(dir, "model.html");
  attnscope("report", "--html", html, ...files, "--heads", "2", "--causal");
  const page = await open(html);
  const thumbs = await page.$$eval("canvas.thumb", t => t.map(c => [+c.dataset.layer, +c.dataset.head]));
  assert.deepEqual(thumbs, [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]);
  // A thumbnail is drawn: its top-left pixel is query 0's weight 1 on key 0 (yellow).
  const tl = await page.$eval("canvas.thumb", c => Array.from(c.getContext("2d").getImageData(0, 0, 1, 1).data));
  near(tl, viridis(1), 3, "thumbnail (0, 0)");
  await page.click('canvas.thumb[data-layer="2"][data-head="1"]');
  const caption = await page.$eval("#opened figcaption", e => e.textContent);
  assert.match(caption, /layer3 · weights/);  // the row of files[2], labelled by its name
  assert.match(caption, /head 1/);
  const w = weightsOf(files[2], "--heads", "2", "--causal").weights.data[1];
  const k = await page.evaluate(() => window.attnscopeFigures.indexOf(window.attnscopeOpened));
  for (const [i, j] of [[10, 4], [39, 39], [25, 0]]) {
    const c = await cellPixel(page, k, i, j);
    assert.ok(Math.abs(c.value - w[i][j]) < 1e-12, `value ${c.value} vs ${w[i][j]}`);
    near(c.px, viridis(w[i][j]), 3, `opened layer 2 head 1 [${i}, ${j}]`);
  }
  await page.$eval("canvas.thumb", c => c.scrollIntoView());
  await shot(page, "model-view.png");
  assert.deepEqual(page.errors, []);
};

// report --model: a row per layer of a small random GPT-2 (scripts/lm_reference.py's, in
// Hugging Face layout), and below the grid the head view and coloured text of --layer 1
// on the model's tokens, drawn without a script error.
TESTS.model_report_of_every_layer = async () => {
  const dir = tmpdir(), model = path.join(dir, "gpt2");
  const make = `import sys, json, pathlib; sys.path.insert(0, ${JSON.stringify(path.join(ROOT, "scripts"))})
import lm_reference as lref, checkpoint_reference as cref
config, state = lref.make_model("gpt2", 0); d = pathlib.Path(sys.argv[1]); d.mkdir()
(d / "config.json").write_text(json.dumps(config)); cref.write_safetensors(d / "model.safetensors", state, "F64")`;
  const p = spawnSync("/usr/bin/python3", ["-c", make, model], { encoding: "utf-8" });
  assert.equal(p.status, 0, p.stderr);
  const html = path.join(dir, "model.html");
  attnscope("report", "--model", model, "--tokens", "3,17,5,0,39,12", "--layer", "1", "--html", html);
  const page = await open(html);
  const rows = await page.$$eval("tbody th", t => t.map(e => e.firstChild.textContent));
  assert.deepEqual(rows, ["layer 0", "layer 1", "layer 2"]);
  assert.equal(await page.$$eval("canvas.thumb", t => t.length), 6);
  assert.match(await page.$eval("#views h2", e => e.textContent), /layer 1$/);
  assert.ok(await page.$$eval("svg.hv line", ls => ls.length) > 0, "the head view has lines");
  await (await page.$('svg.hv text.tok[data-side="q"][data-index="2"]')).hover();
  await page.$eval("#views", e => e.scrollIntoView());
  await shot(page, "model-report-head-view.png");
  assert.deepEqual(page.errors, []);
};

// Every example of data/ (self-, causal, padded batch, cross-attention) makes a page that
// runs without a script error; in cross-attention the coloured text has a line of
// queries to choose from and shades the keys.
TESTS.every_example_page_runs = async () => {
  const dir = tmpdir();
  const examples = { sentence: ["--heads", "2"], causal: ["--causal"], padded: ["--heads", "2"],
    cross: ["--heads", "2"], induction: ["--causal"], reverse: [] };
  for (const [name, options] of Object.entries(examples)) {
    const html = path.join(dir, name + ".html");
    attnscope("run", path.join(ROOT, "data", name + ".json"), ...options, "--html", html, "-q");
    const page = await open(html);
    const lines = await page.$$eval("svg.hv line", ls => ls.length);
    assert.ok(lines > 0, `${name}: the head view has lines`);
    await (await page.$('svg.hv text.tok[data-side="q"][data-index="1"]')).hover();
    if (name === "cross") {
      const w = weightsOf(path.join(ROOT, "data", "cross.json"), "--heads", "2").weights.data;  // (H, 4, 6)
      await page.$eval("#coloured-text", e => e.scrollIntoView());
      const queries = await page.$$eval("#coloured-text .ct-queries .ct-tok", s => s.map(e => e.textContent));
      assert.deepEqual(queries, ["<s>", "le", "chat", "noir"]);
      await (await page.$('#coloured-text .ct-queries .ct-tok[data-index="2"]')).hover();
      const got = await page.$$eval("#coloured-text .ct-keys .ct-tok", s => s.map(e => +e.dataset.weight));
      got.forEach((x, j) => assert.ok(Math.abs(x - w[0][2][j]) < 1e-6, `cross: key ${j} ${x} vs ${w[0][2][j]}`));
      await shot(page, "cross-coloured-text.png");
    }
    assert.deepEqual(page.errors, [], name);
    await browser.close();
    browser = null;
  }
};

// ---------------------------------------------------------------------------
const name = process.argv[2];
if (name === "--list") {
  console.log(Object.keys(TESTS).join("\n"));
  process.exit(0);
}
const chosen = name ? [name] : Object.keys(TESTS);
let failed = 0;
for (const t of chosen) {
  if (!TESTS[t]) {
    console.error(`unknown test ${t}`);
    process.exit(2);
  }
  try {
    await TESTS[t]();
    console.log(`ok ${t}`);
  } catch (e) {
    failed++;
    console.error(`FAIL ${t}: ${e.stack || e}`);
  } finally {
    if (browser) await browser.close();
    browser = null;
  }
}
process.exit(failed ? 1 : 0);
