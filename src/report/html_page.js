// The script of the HTML report, put inline in the page at build time (cmake/embed_text.cmake:
// the page needs no other file). It draws:
//   * canvas heatmaps (figure.canvas-fig, data in <script type="application/json">):
//     every cell, zoom (buttons, ctrl + wheel) and scroll, token labels in frozen gutters,
//     a tooltip with the batch item, head, query and key tokens, and the cell's value in
//     every (query, key) stage on the page;
//   * the head view: query and key tokens in two columns, a line per (query, key) and
//     head, as opaque as the weight; hover a token to isolate its lines, click to pin,
//     a head selector with a colour per head;
//   * the query text coloured by the weights a chosen query gives each token;
//   * the model view's thumbnails, and the figure a click on one opens.
// Levels of a canvas cell: 0..251 the palette, 252 a gap (cells left out), 253 a visible
// key of the mask, 254 masked, 255 NaN.
"use strict";
(function () {
const LUT = JSON.parse(document.getElementById("palettes").textContent);
const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf"];
function headColour(h) {
  return h < HEAD_COLOURS.length ? HEAD_COLOURS[h] : "hsl(" + ((h * 137.5) % 360).toFixed(0) + ",65%,45%)";
}
function rgbOf(hex) { return [1, 3, 5].map(k => parseInt(hex.substr(k, 2), 16)); }
function bytes(b64) {
  const s = atob(b64), n = s.length, out = new Uint8Array(n);
  for (let k = 0; k < n; ++k) out[k] = s.charCodeAt(k);
  return out;
}
function num(x, exact) {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "∞";
  if (x === -Infinity) return "−∞";
  const t = exact ? String(x) : String(Number(x.toPrecision(7)));
  return t.replace(/^-/, "−");
}
const tip = document.createElement("div");
tip.id = "tip";
document.body.appendChild(tip);
function showTip(lines, ev) {
  tip.textContent = "";
  lines.forEach((l, k) => {
    const d = document.createElement("div");
    d.textContent = l;
    if (k === 0) d.className = "tip-title";
    tip.appendChild(d);
  });
  tip.style.display = "block";
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
  const y = ev.clientY + 16 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 8 : ev.clientY + 16;
  tip.style.left = Math.max(0, x) + "px";
  tip.style.top = Math.max(0, y) + "px";
}
function hideTip() { tip.style.display = "none"; }

// ---- figures: every heatmap of the page, by "stage|batch|head", for the tooltips ----
const FIGS = {};
const STAGE_ORDER = ["scores", "bias", "masked_scores", "weights"];
function register(stage, batch, head, get) {
  FIGS[stage + "|" + batch + "|" + head] = get;
}
function otherStages(batch, head, i, j) {
  const parts = [];
  for (const s of STAGE_ORDER) {
    const get = FIGS[s + "|" + batch + "|" + head];
    if (!get) continue;
    const v = get(i, j);
    if (v !== undefined) parts.push(s + " " + v);
  }
  return parts;
}
// Small matrices are tables: their cells carry data-value.
document.querySelectorAll("table.heat").forEach(t => {
  const body = t.tBodies[0];
  register(t.dataset.stage, t.dataset.batch, t.dataset.head, (i, j) => {
    const row = body.querySelector('tr[data-index="' + i + '"]');
    if (!row) return undefined;
    const cell = row.cells[j + 1];
    if (!cell || cell.dataset.value === undefined) return undefined;
    const x = Number(cell.dataset.value);
    return cell.classList.contains("masked") && t.dataset.stage === "weights" ? "0 (masked)" : num(x, true);
  });
});

const ZOOMS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];
class Heatmap {
  constructor(fig, data, opts) {
    this.fig = fig;
    this.d = data;
    this.opts = opts || {};
    this.levels = bytes(data.levels);
    if (data.values) {
      const raw = bytes(data.values);
      this.values = data.dtype === "f8" ? new Float64Array(raw.buffer) : new Float32Array(raw.buffer);
    }
    this.R = data.ri ? data.ri.length : data.rows;
    this.C = data.ci ? data.ci.length : data.cols;
    this.pos = new Map();  // matrix index -> drawn position, when some are left out
    if (data.ri) data.ri.forEach((i, p) => { if (i >= 0) this.pos.set("r" + i, p); });
    if (data.ci) data.ci.forEach((j, q) => { if (j >= 0) this.pos.set("c" + j, q); });
    this.wrap = fig.querySelector(".heatwrap");
    this.canvas = this.wrap.querySelector("canvas");
    this.spacer = this.wrap.querySelector(".spacer");
    this.ctx = this.canvas.getContext("2d");
    this.ctx.font = "12px DejaVu Sans, sans-serif";
    const widest = labels => Math.min(130, Math.max(24, ...labels.slice(0, 4096).map(l => this.ctx.measureText(l).width)));
    this.GL = Math.ceil(widest(data.rl)) + 10;
    this.GT = Math.ceil(widest(data.cl)) + 10;
    const fit = Math.floor(Math.min(760 / this.C, 560 / this.R));
    this.z = ZOOMS.filter(z => z <= Math.max(1, fit)).pop() || 1;
    this.lut = LUT[data.pal];
    this.build();
    register(data.stage, data.batch, data.head, (i, j) => this.valueText(i, j));
  }
  row(p) { return this.d.ri ? this.d.ri[p] : p; }
  col(q) { return this.d.ci ? this.d.ci[q] : q; }
  level(p, q) { return this.levels[p * this.C + q]; }
  valueText(i, j) {
    const p = this.d.ri ? this.pos.get("r" + i) : i, q = this.d.ci ? this.pos.get("c" + j) : j;
    if (p === undefined || q === undefined || p >= this.R || q >= this.C) return undefined;
    const lv = this.level(p, q);
    if (!this.values) return lv === 254 ? "0 (masked)" : "1 (may attend)";
    const t = num(this.values[p * this.C + q], this.d.dtype === "f8");
    return lv === 254 ? t + " (masked)" : t;
  }
  build() {
    this.wrap.addEventListener("scroll", () => this.draw());
    this.wrap.addEventListener("wheel", ev => {
      if (!ev.ctrlKey) return;
      ev.preventDefault();
      this.zoomBy(ev.deltaY < 0 ? 1 : -1, ev);
    }, { passive: false });
    this.canvas.addEventListener("mousemove", ev => this.hover(ev));
    this.canvas.addEventListener("mouseleave", hideTip);
    this.fig.querySelectorAll("button[data-zoom]").forEach(b => b.addEventListener("click", () => {
      const step = Number(b.dataset.zoom);
      if (step === 0) this.setZoom(1, null); else this.zoomBy(step, null);
    }));
    this.layout();
  }
  zoomBy(step, ev) {
    const k = ZOOMS.indexOf(this.z);
    this.setZoom(ZOOMS[Math.max(0, Math.min(ZOOMS.length - 1, k + step))], ev);
  }
  setZoom(z, ev) {
    // Keep the cell under the pointer (or the centre) where it is.
    const r = this.wrap.getBoundingClientRect();
    const ax = ev ? ev.clientX - r.left : this.wrap.clientWidth / 2, ay = ev ? ev.clientY - r.top : this.wrap.clientHeight / 2;
    const cx = (this.wrap.scrollLeft + ax - this.GL) / this.z, cy = (this.wrap.scrollTop + ay - this.GT) / this.z;
    this.z = z;
    this.layout();
    this.wrap.scrollLeft = Math.max(0, cx * z + this.GL - ax);
    this.wrap.scrollTop = Math.max(0, cy * z + this.GT - ay);
    this.draw();
  }
  layout() {
    const w = this.GL + this.C * this.z, h = this.GT + this.R * this.z;
    this.spacer.style.width = w + "px";
    this.spacer.style.height = h + "px";
    this.wrap.style.width = Math.min(w + 16, 820) + "px";
    this.wrap.style.height = Math.min(h + 16, 640) + "px";
    const zl = this.fig.querySelector(".zoom-level");
    if (zl) zl.textContent = this.z + " px per cell";
    this.fig.dataset.zoom = this.z;
    this.draw();
  }
  // Where cell (p, q) is drawn on the canvas, its top-left corner.
  cellX(q) { return this.GL + q * this.z - this.wrap.scrollLeft; }
  cellY(p) { return this.GT + p * this.z - this.wrap.scrollTop; }
  draw() {
    const W = this.wrap.clientWidth, H = this.wrap.clientHeight;
    const sl = this.wrap.scrollLeft, st = this.wrap.scrollTop, z = this.z;
    if (this.canvas.width !== W) this.canvas.width = W;
    if (this.canvas.height !== H) this.canvas.height = H;
    this.canvas.style.left = sl + "px";
    this.canvas.style.top = st + "px";
    const ctx = this.ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H);
    // 1) The cells in view, pixel by pixel.
    const cw = Math.max(0, W - this.GL), ch = Math.max(0, H - this.GT);
    if (cw > 0 && ch > 0) {
      const img = ctx.createImageData(cw, ch), px = img.data;
      const lut = this.lut;
      for (let y = 0; y < ch; ++y) {
        const p = Math.floor((y + st) / z);
        for (let x = 0; x < cw; ++x) {
          const q = Math.floor((x + sl) / z), o = (y * cw + x) * 4;
          let c;
          if (p >= this.R || q >= this.C) c = [255, 255, 255];
          else {
            const lv = this.levels[p * this.C + q];
            if (lv < 252) c = lut[lv];
            else if (lv === 252) c = [240, 240, 240];
            else if (lv === 253) c = LUT.allowed;
            else if (lv === 254) c = ((x + sl + y + st) % 7) < 2 ? LUT.hatchDark : LUT.hatchLight;
            else c = [255, 255, 255];
          }
          px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
        }
      }
      ctx.putImageData(img, this.GL, this.GT);
    }
    // 2) Labels in the frozen gutters: every step-th, so that they do not overlap.
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, this.GT);
    ctx.fillRect(0, 0, this.GL, H);
    ctx.fillStyle = "#222";
    ctx.font = "12px DejaVu Sans, sans-serif";
    const step = Math.max(1, Math.ceil(14 / z));
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let p = Math.floor(st / z); p < this.R && this.cellY(p) < H; ++p) {
      if (p % step || this.cellY(p) + z / 2 < this.GT) continue;
      ctx.fillText(this.d.rl[p], this.GL - 5, this.cellY(p) + z / 2, this.GL - 8);
    }
    ctx.save();
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    for (let q = Math.floor(sl / z); q < this.C && this.cellX(q) < W; ++q) {
      if (q % step || this.cellX(q) + z / 2 < this.GL) continue;
      ctx.fillText(this.d.cl[q], -(this.GT - 5), this.cellX(q) + z / 2, this.GT - 8);
    }
    ctx.restore();
  }
  // The cell under a mouse event, as drawn positions (p, q), or null.
  cellAt(ev) {
    const r = this.canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (x < this.GL || y < this.GT) return null;
    const q = Math.floor((x - this.GL + this.wrap.scrollLeft) / this.z), p = Math.floor((y - this.GT + this.wrap.scrollTop) / this.z);
    return p < this.R && q < this.C ? [p, q] : null;
  }
  hover(ev) {
    const at = this.cellAt(ev);
    if (!at || this.level(at[0], at[1]) === 252) return hideTip();
    const i = this.row(at[0]), j = this.col(at[1]), d = this.d;
    const lines = [d.title || d.stage];
    lines.push(d.rowAxis + " " + i + " ‘" + d.rl[at[0]] + "’ → " + d.colAxis + " " + j + " ‘" + d.cl[at[1]] + "’");
    lines.push(d.stage + " " + this.valueText(i, j));
    if (d.overKeys) {
      const rest = otherStages(d.batch, d.head, i, j).filter(s => !s.startsWith(d.stage + " "));
      if (rest.length) lines.push(rest.join(" · "));
    }
    showTip(lines, ev);
  }
}
window.attnscopeFigures = [];
function openFigure(fig) {
  const data = JSON.parse(document.getElementById(fig.dataset.data).textContent);
  const h = new Heatmap(fig, data);
  window.attnscopeFigures.push(h);
  return h;
}
document.querySelectorAll("figure.canvas-fig[data-data]").forEach(openFigure);

// ---- the head view and the coloured text ----
const hvData = document.getElementById("headview-data");
if (hvData) headView(JSON.parse(hvData.textContent));
function headView(hv) {
  const w = new Float32Array(bytes(hv.w).buffer);
  const nh = hv.heads.length, Tq = hv.Tq, Tk = hv.Tk;
  const weight = (bi, hi, i, j) => w[((bi * nh + hi) * Tq + i) * Tk + j];
  const root = document.getElementById("headview");
  const svg = root.querySelector("svg.hv");
  const NS = "http://www.w3.org/2000/svg";
  const selected = new Set(nh * Tq * Tk <= 20000 ? hv.heads.map((_, k) => k) : [0]);
  let batch = 0, pinned = null;  // pinned: ["q" | "k", index]
  const rowH = 22, leftX = 170, rightX = 470;
  const batchSel = root.querySelector("select.hv-batch");
  if (batchSel) batchSel.addEventListener("change", () => { batch = Number(batchSel.value); pinned = null; draw(); text(); });
  const swatches = root.querySelector(".hv-heads");
  hv.heads.forEach((h, k) => {
    const b = document.createElement("button");
    b.className = "hv-head";
    b.dataset.head = h;
    b.style.setProperty("--c", headColour(h));
    b.textContent = "head " + h;
    b.addEventListener("click", () => {
      if (selected.has(k)) selected.delete(k); else selected.add(k);
      draw();
    });
    b.addEventListener("dblclick", () => { selected.clear(); selected.add(k); draw(); });
    swatches.appendChild(b);
  });
  function tokenAt(side, i) {
    const list = side === "q" ? hv.qt[batch] : hv.kt[batch];
    return list[i];
  }
  function draw() {
    swatches.querySelectorAll("button").forEach((b, k) => b.classList.toggle("on", selected.has(k)));
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("height", Math.max(Tq, Tk) * rowH + 30);
    svg.setAttribute("width", rightX + 170);
    const g = document.createElementNS(NS, "g");
    g.setAttribute("class", "lines");
    svg.appendChild(g);
    for (const k of [...selected].sort((a, b) => a - b)) {
      const colour = headColour(hv.heads[k]);
      for (let i = 0; i < Tq; ++i)
        for (let j = 0; j < Tk; ++j) {
          const x = weight(batch, k, i, j);
          if (!(x > 0)) continue;
          const l = document.createElementNS(NS, "line");
          l.setAttribute("x1", leftX + 6);
          l.setAttribute("y1", 20 + i * rowH);
          l.setAttribute("x2", rightX - 6);
          l.setAttribute("y2", 20 + j * rowH);
          l.setAttribute("stroke", colour);
          l.setAttribute("stroke-width", 2);
          l.setAttribute("stroke-opacity", x);
          l.dataset.q = i;
          l.dataset.k = j;
          l.dataset.head = hv.heads[k];
          l.dataset.weight = x;
          g.appendChild(l);
        }
    }
    const side = (s, n, x, anchor) => {
      for (let i = 0; i < n; ++i) {
        const t = document.createElementNS(NS, "text");
        t.setAttribute("x", x);
        t.setAttribute("y", 20 + i * rowH);
        t.setAttribute("dy", "0.35em");
        t.setAttribute("text-anchor", anchor);
        t.setAttribute("class", "tok");
        t.dataset.side = s;
        t.dataset.index = i;
        t.textContent = tokenAt(s, i);
        t.addEventListener("mouseenter", () => { if (!pinned) isolate(s, i); });
        t.addEventListener("mouseleave", () => { if (!pinned) isolate(null, 0); });
        t.addEventListener("click", () => {
          pinned = pinned && pinned[0] === s && pinned[1] === i ? null : [s, i];
          isolate(pinned ? s : null, i);
        });
        svg.appendChild(t);
      }
    };
    side("q", Tq, leftX, "end");
    side("k", Tk, rightX, "start");
    if (pinned) isolate(pinned[0], pinned[1]); else isolate(null, 0);
  }
  function isolate(s, i) {
    svg.querySelectorAll("line").forEach(l => {
      const mine = s === null || Number(s === "q" ? l.dataset.q : l.dataset.k) === i;
      l.style.display = mine ? "" : "none";
    });
    svg.querySelectorAll("text.tok").forEach(t => {
      t.classList.toggle("hot", s !== null && t.dataset.side === s && Number(t.dataset.index) === i);
      t.classList.toggle("pinned", !!pinned && t.dataset.side === pinned[0] && Number(t.dataset.index) === pinned[1]);
    });
    root.dataset.isolated = s === null ? "" : s + i;
  }
  draw();

  // The coloured text: each key token shaded by the weight the chosen query gives it,
  // relative to the largest weight of that row (the darkest token).
  const ct = document.getElementById("coloured-text");
  const headSel = ct.querySelector("select.ct-head");
  hv.heads.forEach((h, k) => {
    const o = document.createElement("option");
    o.value = k;
    o.textContent = "head " + h;
    headSel.appendChild(o);
  });
  let query = 0, queryPinned = false;
  headSel.addEventListener("change", () => shade());
  const qline = ct.querySelector(".ct-queries"), kline = ct.querySelector(".ct-keys");
  function text() {
    for (const [line, s, n] of [[qline, "q", Tq], [kline, "k", Tk]]) {
      if (!line) continue;
      line.textContent = "";
      for (let i = 0; i < n; ++i) {
        const span = document.createElement("span");
        span.className = "ct-tok";
        span.dataset.index = i;
        span.textContent = tokenAt(s, i);
        if (line === qline || hv.self) {
          span.addEventListener("mouseenter", () => { if (!queryPinned) { query = i; shade(); } });
          span.addEventListener("click", () => {
            queryPinned = !(queryPinned && query === i);
            query = i;
            shade();
          });
        }
        line.appendChild(span);
        line.appendChild(document.createTextNode(" "));
      }
    }
    shade();
  }
  function shade() {
    const k = Number(headSel.value || 0), rgb = rgbOf(headColour(hv.heads[k]));
    let big = 0;
    for (let j = 0; j < Tk; ++j) big = Math.max(big, weight(batch, k, query, j));
    kline.querySelectorAll(".ct-tok").forEach(span => {
      const j = Number(span.dataset.index), x = weight(batch, k, query, j), a = big > 0 ? x / big : 0;
      span.style.backgroundColor = "rgba(" + rgb.join(",") + "," + a.toFixed(4) + ")";
      span.style.color = a > 0.55 ? "#fff" : "#111";
      span.dataset.weight = x;
      span.title = "weight " + num(x, false) + " from query " + query + " ‘" + tokenAt("q", query) + "’";
      span.classList.toggle("query", hv.self && j === query);
    });
    if (qline) qline.querySelectorAll(".ct-tok").forEach(s => s.classList.toggle("query", Number(s.dataset.index) === query));
    ct.dataset.query = query;
    ct.dataset.pinned = queryPinned ? "1" : "";
    ct.querySelector(".ct-which").textContent = "query " + query + " ‘" + tokenAt("q", query) + "’" +
      (queryPinned ? " (pinned: click it again to free)" : "");
  }
  text();
}

// ---- the model view: thumbnails, and the figure a click opens ----
document.querySelectorAll("canvas.thumb").forEach(c => {
  const data = JSON.parse(document.getElementById(c.dataset.data).textContent);
  const levels = bytes(data.levels), R = data.ri ? data.ri.length : data.rows, C = data.ci ? data.ci.length : data.cols;
  const S = c.width, ctx = c.getContext("2d"), img = ctx.createImageData(S, S), lut = LUT[data.pal];
  for (let y = 0; y < S; ++y)
    for (let x = 0; x < S; ++x) {
      const p = Math.floor(y * R / S), q = Math.floor(x * C / S), lv = levels[p * C + q], o = (y * S + x) * 4;
      const col = lv < 252 ? lut[lv] : lv === 254 ? LUT.hatchLight : [255, 255, 255];
      img.data[o] = col[0]; img.data[o + 1] = col[1]; img.data[o + 2] = col[2]; img.data[o + 3] = 255;
    }
  ctx.putImageData(img, 0, 0);
  c.addEventListener("click", () => {
    const open = document.getElementById("opened");
    open.innerHTML = document.getElementById("opened-template").innerHTML;
    const fig = open.querySelector("figure");
    fig.dataset.data = c.dataset.data;
    fig.querySelector("figcaption").textContent = c.dataset.title;
    document.querySelectorAll("canvas.thumb.open").forEach(t => t.classList.remove("open"));
    c.classList.add("open");
    window.attnscopeOpened = openFigure(fig);
    open.scrollIntoView();
  });
});
window.attnscopeReady = true;
})();
