"""The explorer's page: one HTML file, styles, script and data inline (no
network), that opens from disk. ``render`` writes it; ``explore.py`` builds the data.

The data is one JSON object (``explore.page_data``) in a
``<script type="application/json">``; maps stay encoded until a sentence is shown.
"""

import json

STYLE = r"""
body{font:13px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{padding:8px 14px;background:#243b55;color:#fff}
header h1{font-size:17px;margin:0 0 2px 0}
header small{opacity:.85}
#controls{display:flex;flex-wrap:wrap;gap:12px;align-items:center;padding:8px 14px;
  border-bottom:1px solid #ddd;background:#fff;position:sticky;top:0;z-index:2}
#controls input[type=text]{width:220px}
#list{max-height:38vh;overflow:auto;border-bottom:1px solid #ccc;background:#fff}
table#sentences{border-collapse:collapse;width:100%}
#sentences th,#sentences td{padding:2px 6px;border-bottom:1px solid #eee;text-align:left;
  vertical-align:top}
#sentences th{position:sticky;top:0;background:#eef1f5;font-weight:600}
#sentences td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
#sentences td.text div{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:60vw}
#sentences td.text .src{font-weight:600}
#sentences td.text .ref{color:#555}
#sentences tr{cursor:pointer}
#sentences tr:hover{background:#f3f6fb}
#sentences tr.selected{background:#dde8f7}
#detail{padding:10px 14px}
#detail .lines div{margin:2px 0}
#detail .lines b{display:inline-block;min-width:90px}
#detail .score{color:#555;margin-left:6px;font-size:12px}
#matrices{display:flex;flex-wrap:wrap;gap:18px;margin-top:8px;align-items:flex-start}
.panel{background:#fff;border:1px solid #ddd;padding:6px}
.panel h3{margin:0 0 4px 0;font-size:13px}
.panel .note{color:#666;font-size:11px}
svg text{font-size:11px;fill:#222;cursor:default}
svg text.best{fill:#c1121f;font-weight:700}
rect.cell{fill:#1d3c78;stroke:none}
rect.cell.unknown{fill:url(#hatch);fill-opacity:1}
rect.cell.best{stroke:#c1121f;stroke-width:2}
rect.lab{fill:#f4a261;fill-opacity:0}
rect.link{fill:none;stroke:#f4a261;stroke-width:1.5}
rect.gold-sure{fill:none;stroke:#2a9d8f;stroke-width:2}
rect.gold-possible{fill:none;stroke:#2a9d8f;stroke-width:1.5;stroke-dasharray:2 2}
rect.win{fill:#e76f51;fill-opacity:.07;stroke:#e76f51;stroke-width:.8}
circle.pt{fill:#e63946}
.legend span{margin-right:12px;font-size:11px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:middle}
"""

SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const M = DATA.models, S = DATA.sentences, LEVELS = DATA.levels;
const CODE = new Float32Array(128).fill(NaN);
for (let k = 0; k < DATA.alphabet.length; k++) CODE[DATA.alphabet.charCodeAt(k)] = k / LEVELS;
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const fmt = (x) => (x === undefined || x === null ? "" : x.toFixed(1));
const hasScores = S.some((s) => s.out.some((o) => o && o.bleu !== undefined));
let order = S.map((_, k) => k), selected = null;

function decode(text, ncols) {  // "OFFSET:CHARS" rows -> arrays of weights (NaN: unknown)
  return text.split(" ").map((row) => {
    const colon = row.indexOf(":"), off = +row.slice(0, colon), w = new Float32Array(ncols);
    for (let k = colon + 1; k < row.length; k++) w[off + k - colon - 1] = CODE[row.charCodeAt(k)];
    return w;
  });
}

// ---- the sentence list: sort keys, filter, table ----
const keys = {"id": (s) => s.id, "length": (s) => s.srcW.length};
if (hasScores) {
  M.forEach((m, a) => {
    keys["BLEU " + m.name] = (s) => s.out[a] && s.out[a].bleu;
    keys["chrF " + m.name] = (s) => s.out[a] && s.out[a].chrf;
  });
  M.forEach((ma, a) => M.forEach((mb, b) => {
    if (a >= b) return;
    keys["BLEU " + ma.name + " − " + mb.name] = (s) => s.out[a] && s.out[b] ? s.out[a].bleu - s.out[b].bleu : undefined;
    keys["chrF " + ma.name + " − " + mb.name] = (s) => s.out[a] && s.out[b] ? s.out[a].chrf - s.out[b].chrf : undefined;
  }));
}
const haystack = S.map((s) => [s.srcW.join(" "), s.ref].concat(s.out.map((o) => (o ? o.text : ""))).join("\n").toLowerCase());

function buildControls() {
  $("sort").innerHTML = Object.keys(keys).map((k) => `<option>${esc(k)}</option>`).join("");
  $("sort").onchange = $("dir").onchange = $("filter").oninput = updateList;
  for (const r of document.querySelectorAll("input[name=unit]")) r.onchange = showDetail;
  $("shown").innerHTML = M.map((m, a) => `<label><input type="checkbox" value="${a}" ${a < 2 ? "checked" : ""}> ${esc(m.name)}</label>`).join(" ");
  for (const c of $("shown").querySelectorAll("input")) c.onchange = showDetail;
  const head = ["#", "length"];
  if (hasScores) M.forEach((m) => head.push("BLEU " + m.name, "chrF " + m.name));
  if (DATA.gold) M.forEach((m) => head.push("AER " + m.name));
  head.push("source / reference / " + M.map((m) => m.name).join(" / "));
  $("sentences").tHead.innerHTML = "<tr>" + head.map((h) => `<th>${esc(h)}</th>`).join("") + "</tr>";
}

function updateList() {
  const key = keys[$("sort").value], sign = $("dir").value === "asc" ? 1 : -1;
  const needle = $("filter").value.trim().toLowerCase();
  order = S.map((_, k) => k).filter((k) => !needle || haystack[k].includes(needle));
  order.sort((x, y) => {
    const a = key(S[x]), b = key(S[y]);
    if (a === undefined || a === null || Number.isNaN(a)) return 1;
    if (b === undefined || b === null || Number.isNaN(b)) return -1;
    return sign * (a - b) || S[x].id - S[y].id;
  });
  const rows = order.map((k) => {
    const s = S[k], cells = [`<td class="num">${s.id}</td>`, `<td class="num">${s.srcW.length}</td>`];
    if (hasScores) s.out.forEach((o) => cells.push(`<td class="num">${fmt(o && o.bleu)}</td><td class="num">${fmt(o && o.chrf)}</td>`));
    if (DATA.gold) s.out.forEach((o) => cells.push(`<td class="num">${o && o.aer !== undefined ? o.aer.toFixed(3) : ""}</td>`));
    const texts = [`<div class="src">${esc(s.srcW.join(" "))}</div>`, `<div class="ref">${esc(s.ref)}</div>`];
    if (hasScores) s.out.forEach((o) => texts.push(`<div>${esc(o ? o.text : "")}</div>`));
    cells.push(`<td class="text">${texts.join("")}</td>`);
    return `<tr data-k="${k}" class="${k === selected ? "selected" : ""}">${cells.join("")}</tr>`;
  });
  $("sentences").tBodies[0].innerHTML = rows.join("");
  $("count").textContent = `${order.length} of ${S.length} sentences`;
  if (order.length && !order.includes(selected)) select(order[0]);
}

function select(k) {
  selected = k;
  for (const tr of $("sentences").tBodies[0].rows) tr.classList.toggle("selected", +tr.dataset.k === k);
  showDetail();
}

// ---- one sentence: lines, scores, matrices ----
function showDetail() {
  if (selected === null) { $("detail").innerHTML = ""; return; }
  const s = S[selected], unit = document.querySelector("input[name=unit]:checked").value;
  const lines = [`<div><b>source</b>${esc(s.srcW.join(" "))}</div>`, `<div><b>reference</b>${esc(s.ref)}</div>`];
  s.out.forEach((o, a) => {
    if (!o) return;
    const sc = [];
    if (o.bleu !== undefined) sc.push(`BLEU ${fmt(o.bleu)}`, `chrF ${fmt(o.chrf)}`);
    if (o.aer !== undefined) sc.push(`AER ${o.aer.toFixed(3)}`);
    sc.push(`${o.tgtW.length} words`);
    if (M[a].kind === "generate") lines.push(`<div><b>${esc(M[a].name)}</b>${esc(o.text)}<span class="score">${sc.join(" · ")}</span></div>`);
    else lines.push(`<div><b>${esc(M[a].name)}</b><span class="score">${sc.join(" · ")}</span></div>`);
  });
  $("lines").innerHTML = `<div><b>sentence</b>${s.id}</div>` + lines.join("");
  const shown = [...$("shown").querySelectorAll("input:checked")].map((c) => +c.value);
  $("matrices").innerHTML = "";
  for (const a of shown) if (s.out[a]) $("matrices").appendChild(panel(s, a, unit));
}

const SVGNS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function panel(s, a, unit) {
  const o = s.out[a], m = M[a], words = unit === "words";
  const src = (words ? s.srcW : s.src).concat(["</s>"]), tgt = (words ? o.tgtW : o.tgt).concat(["</s>"]);
  const w = decode(words ? o.W : o.P, src.length), links = words ? o.linkW : o.linkP;
  let pt = null, win = null;
  if (o.pt) {
    pt = words ? o.ptW : o.pt;
    win = words ? o.winW : o.pt.map((p) => [p - m.window, p + m.window]);
  }
  const c = Math.max(9, Math.min(16, Math.floor(640 / src.length)));
  const charW = 6.2, left = Math.max(...tgt.map((t) => t.length)) * charW + 10, top = Math.max(...src.map((t) => t.length)) * charW + 10;
  const width = left + c * src.length + 4, height = top + c * tgt.length + 4;
  const svg = el("svg", {width, height, class: "matrix", "data-model": m.name});
  svg.innerHTML = '<defs><pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse"><path d="M0 4L4 0" stroke="#999" stroke-width="1"/></pattern></defs>';
  const X = (i) => left + i * c, Y = (j) => top + j * c;
  const srcLab = [], tgtLab = [], srcBg = [], tgtBg = [], cells = [];
  src.forEach((t, i) => {
    srcBg.push(svg.appendChild(el("rect", {class: "lab", x: X(i), y: 0, width: c, height: top - 2})));
    srcLab.push(svg.appendChild(el("text", {class: "sl", "data-c": i, transform: `translate(${X(i) + c * 0.7},${top - 4}) rotate(-90)`}, t)));
  });
  tgt.forEach((t, j) => {
    tgtBg.push(svg.appendChild(el("rect", {class: "lab", x: 0, y: Y(j), width: left - 2, height: c})));
    tgtLab.push(svg.appendChild(el("text", {class: "tl", "data-r": j, x: left - 4, y: Y(j) + c * 0.75, "text-anchor": "end"}, t)));
  });
  svg.appendChild(el("rect", {x: left, y: top, width: c * src.length, height: c * tgt.length, fill: "#fff", stroke: "#bbb"}));
  let top1 = 1e-9;  // shades are relative to the map's largest weight
  for (const row of w) for (const v of row) if (v > top1) top1 = v;
  w.forEach((row, j) => {
    const r = [];
    row.forEach((v, i) => {
      const cls = Number.isNaN(v) ? "cell unknown" : "cell";
      r.push(svg.appendChild(el("rect", {class: cls, "data-r": j, "data-c": i, x: X(i), y: Y(j), width: c, height: c, "fill-opacity": Number.isNaN(v) ? 1 : v / top1})));
    });
    cells.push(r);
  });
  if (win) win.forEach(([lo, hi], j) => {
    const a0 = Math.max(-0.5, lo), a1 = Math.min(src.length - 0.5, hi);
    if (a1 > a0) svg.appendChild(el("rect", {class: "win", x: X(a0 + 0.5), y: Y(j) + 1, width: (a1 - a0) * c, height: c - 2}));
  });
  if (pt) pt.forEach((p, j) => svg.appendChild(el("circle", {class: "pt", cx: X(p + 0.5), cy: Y(j) + c / 2, r: Math.max(2, c / 6)})));
  links.forEach((i, j) => { if (i >= 0) svg.appendChild(el("rect", {class: "link", x: X(i) + 2, y: Y(j) + 2, width: c - 4, height: c - 4})); });
  if (s.gold && m.kind === "forced") {
    for (const [kind, pairs] of [["gold-sure", s.gold.sure], ["gold-possible", s.gold.possible]]) {
      for (const [gi, gj] of pairs) {
        const cols = words ? [gi] : s.srcI.map((x, k) => (x === gi ? k : -1)).filter((k) => k >= 0);
        const rows = words ? [gj] : o.tgtI.map((x, k) => (x === gj ? k : -1)).filter((k) => k >= 0);
        for (const i of cols) for (const j of rows) if (i < src.length && j < tgt.length)
          svg.appendChild(el("rect", {class: kind, x: X(i) + 0.5, y: Y(j) + 0.5, width: c - 1, height: c - 1}));
      }
    }
  }
  // hover: a target row lights up its source words by weight and marks its argmax; a column likewise
  const clear = () => {
    for (const e of svg.querySelectorAll(".best")) e.classList.remove("best");
    for (const b of srcBg.concat(tgtBg)) b.setAttribute("fill-opacity", 0);
  };
  const hoverRow = (j) => {
    clear();
    const row = w[j], most = Math.max(1e-9, ...row.filter((v) => !Number.isNaN(v)));
    row.forEach((v, i) => srcBg[i].setAttribute("fill-opacity", Number.isNaN(v) ? 0 : (0.8 * v) / most));
    tgtLab[j].classList.add("best");
    const i = links[j];
    if (i !== undefined && i >= 0) { cells[j][i].classList.add("best"); srcLab[i].classList.add("best"); }
  };
  const hoverColumn = (i) => {
    clear();
    const col = w.map((row) => row[i]), most = Math.max(1e-9, ...col.filter((v) => !Number.isNaN(v)));
    col.forEach((v, j) => tgtBg[j].setAttribute("fill-opacity", Number.isNaN(v) ? 0 : (0.8 * v) / most));
    srcLab[i].classList.add("best");
    links.forEach((li, j) => { if (li === i) { cells[j][i].classList.add("best"); tgtLab[j].classList.add("best"); } });
  };
  tgtLab.forEach((t, j) => t.addEventListener("mouseenter", () => hoverRow(j)));
  srcLab.forEach((t, i) => t.addEventListener("mouseenter", () => hoverColumn(i)));
  cells.forEach((r, j) => r.forEach((e) => e.addEventListener("mouseenter", () => hoverRow(j))));
  svg.addEventListener("mouseleave", clear);

  const div = document.createElement("div");
  div.className = "panel";
  const extra = [];
  if (m.window) extra.push(`window D = ${m.window} pieces`);
  if (m.note) extra.push(m.note);
  div.innerHTML = `<h3>${esc(m.name)}</h3><div class="note">${esc(extra.join("; "))}</div>`;
  const legend = [`<span><i style="background:#1d3c78"></i>weight ${top1.toFixed(2)}</span>`, '<span><i style="border:1.5px solid #f4a261"></i>hard link</span>'];
  if (pt) legend.push('<span><i style="background:#e63946;border-radius:5px"></i>p_t</span>', '<span><i style="border:1px solid #e76f51"></i>[p_t − D, p_t + D]</span>');
  if (s.gold && m.kind === "forced") legend.push('<span><i style="border:2px solid #2a9d8f"></i>gold sure</span>', '<span><i style="border:1.5px dashed #2a9d8f"></i>gold possible</span>');
  if (svg.querySelector(".unknown")) legend.push('<span><i style="background:#ccc"></i>not printed</span>');
  div.appendChild(svg);
  div.insertAdjacentHTML("beforeend", `<div class="legend">${legend.join("")}</div>`);
  return div;
}

buildControls();
$("sentences").tBodies[0].addEventListener("click", (e) => {
  const tr = e.target.closest("tr");
  if (tr) select(+tr.dataset.k);
});
updateList();
document.body.dataset.ready = Math.round(performance.now());
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header><h1>{title}</h1><small>{summary}</small></header>
<div id="controls">
  <label>filter <input type="text" id="filter" placeholder="words in any line"></label>
  <label>sort by <select id="sort"></select></label>
  <select id="dir"><option value="asc">ascending</option><option value="desc">descending</option></select>
  <span>show <label><input type="radio" name="unit" value="words" checked> words</label>
  <label><input type="radio" name="unit" value="pieces"> pieces</label></span>
  <span id="shown"></span>
  <span id="count"></span>
</div>
<div id="list"><table id="sentences"><thead></thead><tbody></tbody></table></div>
<div id="detail"><div class="lines" id="lines"></div><div id="matrices"></div></div>
<script type="application/json" id="data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def render(data: dict, path: str, title: str = "Attention explorer") -> int:
    """Write the page; returns its size in bytes."""
    import html

    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # never close the script element early
    models = ", ".join(m["name"] for m in data["models"])
    summary = f"{len(data['sentences'])} sentences · models: {models} · pieces: {data['scheme']}"
    page = PAGE.format(
        title=html.escape(title),
        summary=html.escape(summary),
        style=STYLE,
        script=SCRIPT,
        data=payload,
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return len(page.encode("utf-8"))
