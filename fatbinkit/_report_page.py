"""The HTML page of :class:`fatbinkit.report.Report`: one file, Plotly's JavaScript inside.

The document goes in as JSON (``<script id="fatbinkit-report" type="application/json">``) and
the page's script draws every view from it with Plotly (the copy of plotly.js that Plotly's
Python package ships: the ``report`` extra), so that what a reader sees and what a script reads
are one thing. Each figure a view shows is also in a table cell with its exact value in
``data-value`` (tests/test_report_browser.py reads them from the page's DOM).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from .errors import UnsupportedError


def page(doc: Mapping[str, Any]) -> str:
    """The whole page for the report document ``doc``."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise UnsupportedError("fatbinkit report writes its page with Plotly: pip install "
                               "'fatbinkit[report]' (the JSON document needs nothing more: "
                               "--json)") from None
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    # inside <script>: no "</script>", no "<!--" (a kernel name may hold "<")
    data = data.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029",
                                                                           "\\u2029")
    title = f"fatbinkit report: {doc['source']}"
    return (_HEAD.replace("$TITLE", html.escape(title))
            + f'<script>{get_plotlyjs()}</script>\n'
            + f'<script id="fatbinkit-report" type="application/json">{data}</script>\n'
            + f"<script>{_SCRIPT}</script>\n</body>\n</html>\n")


_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$TITLE</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #1d2430; background: #fafbfc; }
header { padding: 14px 24px; background: #1d2430; color: #fff; }
header h1 { font-size: 18px; margin: 0 0 4px; word-break: break-all; }
header p { margin: 0; color: #c9d1dc; }
nav { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid #dde2e8;
      padding: 6px 24px; }
nav a { margin-right: 18px; color: #1f5fbf; text-decoration: none; font-weight: 600; }
section { padding: 10px 24px 24px; border-bottom: 1px solid #e4e8ee; }
h2 { font-size: 17px; margin: 14px 0 4px; }
p.help { margin: 2px 0 10px; color: #4a5566; max-width: 70em; }
.chart { width: 100%; min-height: 200px; }
.bar { margin: 6px 0; }
.bar button { font: inherit; padding: 3px 10px; border: 1px solid #aab4c3; background: #fff;
              border-radius: 4px; cursor: pointer; }
.bar button.on { background: #1f5fbf; color: #fff; border-color: #1f5fbf; }
#bytes-detail { margin: 6px 0; padding: 6px 10px; background: #eef3fb; border-radius: 4px;
                word-break: break-all; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #dde2e8; padding: 3px 8px; text-align: right; }
th { background: #f0f3f7; }
td.name, th.name { text-align: left; min-width: 14em; max-width: 48em; overflow-wrap: anywhere; }
div.scroll { overflow-x: auto; max-width: 100%; }
td.native { background: #cfead3; } td.jit { background: #f3e7b3; }
td.mixed { background: #dcebc0; } td.none { background: #eceef1; color: #7b8594; }
td.fails { background: #f5c6c6; }
details { margin: 8px 0; } summary { cursor: pointer; color: #1f5fbf; }
.empty { color: #7b8594; font-style: italic; }
</style>
</head>
<body>
"""

_SCRIPT = r"""
(function () {
"use strict";
const doc = JSON.parse(document.getElementById("fatbinkit-report").textContent);
const body = document.body;
const STATUS = ["none", "jit", "mixed", "native", "fails"];
const COLORS = {none: "#eceef1", jit: "#e9cf5f", mixed: "#a9d18e", native: "#3c9a50",
                fails: "#d9534f"};
const WORDS = {none: "no image", jit: "PTX JIT", mixed: "SASS + PTX JIT",
               native: "native SASS", fails: "fails"};

function size(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "kB", "MB", "GB", "TB"];  // decimal, as the charts' axes and labels
  let v = n, u = 0;
  while (Math.abs(v) >= 1000 && u < units.length - 1) { v /= 1000; u += 1; }
  return (u ? v.toFixed(v >= 100 ? 0 : 1) : String(v)) + " " + units[u];
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function cell(key, value, shown) {
  return el("td", {"data-key": key, "data-value": value === null ? "" : String(value)},
            shown === undefined ? size(value) : shown);
}
function section(id, title, help) {
  const s = el("section", {id: id});
  s.appendChild(el("h2", {}, title));
  s.appendChild(el("p", {class: "help"}, help));
  body.appendChild(s);
  return s;
}
function scroll(t) {  // a wide table scrolls inside its section
  const d = el("div", {class: "scroll"});
  d.appendChild(t);
  return d;
}
function table(id, heads) {
  const t = el("table", {id: id});
  const tr = el("tr");
  heads.forEach((h, i) => tr.appendChild(el("th", i === 0 ? {class: "name"} : {}, h)));
  t.appendChild(tr);
  return t;
}
function nameCell(text) { return el("td", {class: "name"}, text); }

// -- header and navigation -------------------------------------------------------------------
const libs = doc.libraries;
const fileBytes = libs.reduce((a, l) => a + l.size, 0);
const devBytes = libs.reduce((a, l) => a + l.stored, 0);
const header = el("header");
header.appendChild(el("h1", {}, "fatbinkit report: " + doc.source));
header.appendChild(el("p", {id: "headline"},
  libs.length + (libs.length === 1 ? " library" : " libraries") + " with device code, " +
  size(fileBytes) + " (" + size(devBytes) + " of it device code, " +
  size(libs.reduce((a, l) => a + l.uncompressed, 0)) + " once inflated)" +
  (doc.other_files ? "; " + size(doc.other_files) + " in other files" : "") +
  (doc.old ? "; compared with " + doc.old : "") + ". " + doc.tool + "."));
body.appendChild(header);
const nav = el("nav");
[["bytes", "Bytes"], ["coverage", "Coverage"], ["what-if", "What-if"]]
  .concat(doc.comparison ? [["comparison", "Comparison"]] : [])
  .forEach(([id, t]) => { const a = el("a", {href: "#" + id}, t); nav.appendChild(a); });
body.appendChild(nav);
const drawn = [];

// -- 1. bytes --------------------------------------------------------------------------------
(function () {
  const s = section("bytes", "Where the bytes go",
    "Each library's file, split into its host code and its device code per arch, module " +
    "(fatbin container) and kernel. Click a block to open it, the bar above to go back. " +
    "Stored: bytes in the file (a kernel: its share of its compressed image); uncompressed: " +
    "with every image inflated (a kernel: its SASS code). Modules marked (xN) are stored N " +
    "times in this input.");
  const bar = el("div", {class: "bar"});
  const bStored = el("button", {id: "bytes-stored", class: "on"}, "stored");
  const bUnc = el("button", {id: "bytes-uncompressed"}, "uncompressed");
  bar.appendChild(bStored); bar.appendChild(bUnc);
  s.appendChild(bar);
  const detail = el("div", {id: "bytes-detail"});
  s.appendChild(detail);
  const div = el("div", {id: "bytes-chart", class: "chart", style: "height:640px"});
  s.appendChild(div);
  const t = doc.bytes;
  const palette = {input: "#ffffff", library: "#5b8def", host: "#b8c0cc", other: "#d9dde3",
                   sass: "#3c9a50", ptx: "#e9cf5f", module: "#8fc79a", kernel: "#b9dfc0",
                   rest: "#eef1f4"};
  const legend = el("p", {class: "help"});
  [["library", "a library"], ["host", "host code and data"], ["sass", "native code (SASS)"],
   ["ptx", "PTX"], ["module", "a module"], ["kernel", "a kernel"],
   ["rest", "the rest of an image"], ["other", "files without device code"],
   ["dup", "a module stored more than once"]]
    .forEach(([k, w]) => legend.appendChild(el("span", {style: "display:inline-block;" +
      (["library", "sass"].includes(k) ? "color:#fff;" : "") + "margin-bottom:3px;background:" +
      (k === "dup" ? "#f0a04b" : palette[k]) + ";padding:1px 8px;margin-right:8px;" +
      "border-radius:3px;border:1px solid #ccd"}, w)));
  s.insertBefore(legend, div);
  const colors = t.kind.map((k, i) => t.copies[i] > 1 ? "#f0a04b" : (palette[k] || "#9fb7e3"));
  const index = new Map(t.ids.map((id, i) => [id, i]));
  const kids = t.ids.map(() => []);
  t.parents.forEach((p, i) => { if (p !== "") kids[index.get(p)].push(i); });
  let mode = "stored", root = 0;
  const byName = new Map(libs.map((l) => [l.name, l]));
  function show(i) {
    const full = t.name[i] || t.labels[i];
    detail.setAttribute("data-node", t.ids[i]);
    detail.setAttribute("data-name", full);
    detail.setAttribute("data-stored", t.stored[i]);
    detail.setAttribute("data-uncompressed", t.uncompressed[i]);
    const l = t.kind[i] === "library" ? byName.get(full) : null;
    detail.textContent = full + ": " + (l ? size(l.size) + " file: " +
      size(l.size - l.stored - l.other_images) + " host code and data, " + size(l.stored) +
      " device code (" + size(l.uncompressed) + " inflated)" :
      size(t.stored[i]) + (i === 0 && doc.summary.total ? " unpacked" : " stored") + ", " +
      size(t.uncompressed[i]) + " with its images inflated") +
      (t.copies[i] > 1 ? " (stored " + t.copies[i] + " times in this input)" : "");
  }
  // Only what a view shows is drawn (torch: 16,000 nodes drawn at once freeze the page for
  // seconds): the view's root, its children, and their children when they are few; the
  // root's ancestors give the path bar. A click draws the view of the block clicked.
  const GRANDCHILDREN = 1500;
  function nodes(r) {
    const chain = [];
    for (let a = r; a !== undefined; a = index.get(t.parents[a])) chain.unshift(a);
    const shown = chain.concat(kids[r]);
    const grand = kids[r].reduce((n, c) => n + kids[c].length, 0);
    if (grand <= GRANDCHILDREN) kids[r].forEach((c) => shown.push(...kids[c]));
    return shown;
  }
  function trace(r) {
    const n = nodes(r);
    const values = mode === "stored" ? t.stored : t.uncompressed;
    return {type: "treemap", ids: n.map((i) => t.ids[i]), labels: n.map((i) => t.labels[i]),
      parents: n.map((i) => t.parents[i]), values: n.map((i) => values[i]),
      level: t.ids[r], branchvalues: "total", maxdepth: 3, sort: true,
      marker: {colors: n.map((i) => colors[i]), line: {width: 0.5, color: "#ffffff"}},
      textinfo: "label+value+percent parent", texttemplate: "%{label}<br>%{value:.3s}B",
      hovertemplate: "%{label}<br>%{value:,} bytes (%{percentParent:.1%} of %{parent})" +
                     "<extra></extra>",
      pathbar: {visible: true}};
  }
  function layout() {
    return {margin: {t: 50, l: 4, r: 4, b: 4}, title: {text: (mode === "stored" ?
      "bytes as stored" : "bytes with every image inflated") + " (click a block to open it)",
      font: {size: 13}, x: 0.01}};
  }
  const config = {responsive: true, displaylogo: false, displayModeBar: false};
  function draw(r) {
    root = r;
    return Plotly.react(div, [trace(r)], layout(), config);
  }
  show(0);
  drawn.push(Plotly.newPlot(div, [trace(0)], layout(), config).then(function () {
    div.on("plotly_treemapclick", function (ev) {
      const p = ev.points && ev.points[0];
      if (!p) return false;
      const i = index.get(p.id);
      show(i);
      if (i !== root && kids[i].length) draw(i);
      else if (i === root && i !== 0) draw(index.get(t.parents[i]));  // the root: back up
      return false;  // drawn here, not by Plotly's own zoom
    });
  }));
  function mode_(m) {
    mode = m;
    bStored.classList.toggle("on", m === "stored");
    bUnc.classList.toggle("on", m === "uncompressed");
    draw(root);
  }
  bStored.addEventListener("click", () => mode_("stored"));
  bUnc.addEventListener("click", () => mode_("uncompressed"));
  const tab = table("bytes-table", ["library", "file", "device code stored",
                                    "device code uncompressed", "host code and data",
                                    "stored more than once"]);
  libs.forEach((l) => {
    const tr = el("tr", {"data-library": l.name});
    tr.appendChild(nameCell(l.name));
    tr.appendChild(cell("size", l.size));
    tr.appendChild(cell("stored", l.stored));
    tr.appendChild(cell("uncompressed", l.uncompressed));
    tr.appendChild(cell("host", l.size - l.stored - l.other_images));
    tr.appendChild(cell("duplicated", l.duplicated));
    tab.appendChild(tr);
  });
  s.appendChild(scroll(tab));
})();

// -- 2. coverage -----------------------------------------------------------------------------
(function () {
  const s = section("coverage", "Which GPUs each library runs on",
    "Per library and GPU: native SASS, PTX JIT (the driver compiles it at first load), both " +
    "(some modules each way), no image, or fails (the driver picks an image it cannot load" +
    (doc.driver ? " with driver " + doc.driver : "") + "). The number in a cell is the " +
    "minimum driver (CUDA version) that GPU needs for that library; the bottom row is the " +
    "whole input, as `fatbinkit check --min-driver` says it.");
  const tot = doc.total_coverage;
  // GPUs no library has code for are folded out of the picture (named under it; the table
  // keeps every one)
  const some = (d) => libs.some((l) => l.coverage[d] && l.coverage[d].status !== "none") ||
    (tot[d] && tot[d].status !== "none");
  const devices = doc.devices.some(some) ? doc.devices.filter(some) : doc.devices;
  const folded = doc.devices.filter((d) => !devices.includes(d));
  const rows = libs.map((l) => l.name.split("/").pop());
  const z = [], text = [], hover = [];
  libs.forEach((l) => {
    const zr = [], tr = [], hr = [];
    devices.forEach((d) => {
      const c = l.coverage[d];
      zr.push(c ? STATUS.indexOf(c.status) : null);
      tr.push(c && c.min_driver && c.status !== "none" ?
              (c.status === "fails" ? "✗ " : "") + c.min_driver : "");
      hr.push(c ? l.name + " on " + d + ": " + WORDS[c.status] + " (" + c.reason + ")" +
        (c.min_driver ? "; needs a CUDA " + c.min_driver + " driver" : "") : "");
    });
    z.push(zr); text.push(tr); hover.push(hr);
  });
  rows.push("whole input");
  z.push(devices.map((d) => tot[d] ? STATUS.indexOf(tot[d].status) : null));
  text.push(devices.map((d) => tot[d] && tot[d].min_driver ?
                              (tot[d].status === "fails" ? "✗ " : "") + tot[d].min_driver : ""));
  hover.push(devices.map((d) => tot[d] ? d + ": " + tot[d].verdict + " (" + tot[d].reason +
                                          ")" : ""));
  const scale = [];
  STATUS.forEach((st, i) => { scale.push([i / STATUS.length, COLORS[st]]);
                              scale.push([(i + 1) / STATUS.length, COLORS[st]]); });
  const div = el("div", {id: "coverage-chart", class: "chart",
                         style: "height:" + (140 + 28 * rows.length) + "px"});
  s.appendChild(div);
  drawn.push(Plotly.newPlot(div, [{type: "heatmap", x: devices, y: rows, z: z, text: text,
    texttemplate: "%{text}", customdata: hover, hovertemplate: "%{customdata}<extra></extra>",
    colorscale: scale, zmin: 0, zmax: STATUS.length, xgap: 2, ygap: 2, showscale: false}],
    {margin: {t: 10, l: 200, r: 10, b: 60}, yaxis: {autorange: "reversed"},
     xaxis: {type: "category", tickangle: -45}},
    {responsive: true, displaylogo: false, displayModeBar: false}));
  if (folded.length) {
    s.appendChild(el("p", {id: "coverage-folded", class: "help",
                           "data-devices": folded.join(",")},
      "No library has code for " + folded.join(", ") + " (left out of the picture; the " +
      "table below lists them)."));
  }
  const failing = devices.filter((d) => tot[d] && tot[d].status === "fails");
  if (failing.length) {
    const notes = el("ul", {id: "coverage-notes", class: "help"});
    failing.forEach((d) => notes.appendChild(el("li", {"data-device": d},
      d + " fails: " + tot[d].reason)));
    s.appendChild(notes);
  }
  const legend = el("p", {class: "help"});
  STATUS.forEach((st) => { const sp = el("span", {style: "background:" + COLORS[st] +
    ";padding:1px 8px;margin-right:8px;border-radius:3px"}, WORDS[st]); legend.appendChild(sp); });
  s.appendChild(legend);
  const det = el("details");
  det.appendChild(el("summary", {}, "the table"));
  const tab = table("coverage-table", ["library"].concat(doc.devices));
  libs.forEach((l) => {
    const tr = el("tr", {"data-library": l.name});
    tr.appendChild(nameCell(l.name));
    doc.devices.forEach((d) => {
      const c = l.coverage[d] || {status: "none", min_driver: null};
      tr.appendChild(el("td", {class: c.status, "data-device": d, "data-status": c.status,
                               "data-verdict": c.verdict, "data-min-driver": c.min_driver || ""},
                        WORDS[c.status] + (c.min_driver && c.status !== "none" ?
                                           " (" + c.min_driver + ")" : "")));
    });
    tab.appendChild(tr);
  });
  const tr = el("tr", {"data-total": "1"});
  tr.appendChild(nameCell("whole input: minimum driver"));
  doc.devices.forEach((d) => {
    const c = tot[d] || {};
    tr.appendChild(el("td", {class: c.status || "", "data-device": d,
                             "data-status": c.status || "", "data-verdict": c.verdict || "",
                             "data-min-driver": c.min_driver || ""}, c.min_driver || "-"));
  });
  tab.appendChild(tr);
  det.appendChild(scroll(tab));
  s.appendChild(det);
})();

// -- 3. what-if ------------------------------------------------------------------------------
// prune's rules (fatbinkit/slim.py, as fatbinkit/report.py's _what_if weighs them) for any set
// of GPUs, from each library's "choosable" modules: per module the image each GPU picks, PTX and
// other kinds kept, the images that hold kernels the kept ones lack, the smallest image of a
// module left none that holds nothing
function weigh(lib, chosen) {
  const ch = lib.choosable, sets = ch.kernel_sets;
  let kept = 0, total = 0, exact = true, loads = false;
  ch.units.forEach((u) => {
    const [, stored, fixed, loadable, ksets, picks, empty, inexact] = u;
    const all = stored.reduce((a, b) => a + b, 0);
    total += all;
    const mine = chosen.filter((i) => picks[i] !== -2);
    if (!mine.length) { kept += all; return; }
    const keep = new Set(fixed);
    mine.forEach((i) => { if (picks[i] >= 0) { loads = true; keep.add(picks[i]); } });
    const bySize = (a, b) => stored[a] - stored[b] || a - b;
    if (loadable.length && loadable.every((j) => !keep.has(j))) {
      if (empty) keep.add(loadable.slice().sort(bySize)[0]);
    } else if (loadable.length) {
      const have = new Set(), want = new Set(), names = {};
      loadable.forEach((j, n) => {
        names[j] = sets[ksets[n]];
        names[j].forEach((k) => { want.add(k); if (keep.has(j)) have.add(k); });
      });
      for (const j of loadable.filter((j) => !keep.has(j)).sort(bySize)) {
        if (have.size === want.size) break;
        if (names[j].some((k) => !have.has(k))) {
          keep.add(j);
          names[j].forEach((k) => have.add(k));
        }
      }
    }
    keep.forEach((j) => { kept += stored[j]; });
    if (keep.size < stored.length && inexact) exact = false;
  });
  return {gpus: chosen.map((i) => doc.devices[i]), kept: kept, dropped: total - kept,
          exact: exact, refused: ch.units.length > 0 && !loads};
}
window.fatbinkitWeigh = function (gpus) {  // a script's door: the what-if of any GPU set
  const chosen = gpus.map((g) => doc.devices.indexOf(g));
  if (chosen.some((i) => i < 0)) throw new Error("not a GPU of this report: " + gpus);
  const per = libs.map((l) => weigh(l, chosen));
  return {gpus: gpus, libraries: per,
          kept: per.reduce((a, w) => a + w.kept, 0),
          dropped: per.reduce((a, w) => a + w.dropped, 0),
          exact: per.every((w) => w.exact), refused: per.some((w) => w.refused)};
};
(function () {
  const s = section("what-if", "What pruning would keep",
    "For each set of GPUs: the device code `fatbinkit prune --for` those GPUs would keep " +
    "(what each of them loads, and every PTX: --ptx keep) and drop, per library; nothing is " +
    "written. Host code is not counted; prune refuses to leave a library no device code for " +
    "the GPUs named (marked). Tick GPUs below to weigh a set of your own." +
    (doc.what_if.some((w) => !w.exact) ?
    " A figure marked ~ is an estimate: AMD's compressed bundles (CCOB) are compressed anew " +
    "by prune, and their images' sizes are shares." : ""));
  const sets = doc.what_if.map((w) => ({gpus: w.gpus, total: w,
    libraries: libs.map((l) => l.what_if.find((x) => x.gpus.join() === w.gpus.join()))}));
  const pick = el("fieldset", {id: "what-if-choose"});
  pick.appendChild(el("legend", {}, "your set of GPUs"));
  doc.devices.forEach((d) => {
    const label = el("label", {style: "margin-right:10px;white-space:nowrap"});
    label.appendChild(el("input", {type: "checkbox", value: d, "data-device": d}));
    label.appendChild(document.createTextNode(" " + d));
    pick.appendChild(label);
  });
  const button = el("button", {id: "what-if-weigh", type: "button"}, "weigh this set");
  pick.appendChild(button);
  s.appendChild(pick);
  const div = el("div", {id: "what-if-chart", class: "chart"});
  s.appendChild(div);
  const holder = el("div");
  s.appendChild(holder);
  function render(first) {
    const labels = sets.map((w) => (w.custom ? "★ " : "") + w.gpus.join(" + ") +
                                   (w.total.refused ? " ⚠ prune refuses" : ""));
    div.style.height = (160 + 34 * Math.max(1, sets.length)) + "px";
    const data = [
      {type: "bar", orientation: "h", name: "kept", y: labels,
       x: sets.map((w) => w.total.kept), marker: {color: "#3c9a50"},
       hovertemplate: "%{y}: keeps %{x:,} bytes<extra></extra>"},
      {type: "bar", orientation: "h", name: "dropped", y: labels,
       x: sets.map((w) => w.total.dropped), marker: {color: "#c8ccd3"},
       hovertemplate: "%{y}: drops %{x:,} bytes<extra></extra>"}];
    const layout = {barmode: "stack", margin: {t: 10, l: 200, r: 10, b: 40},
      legend: {traceorder: "normal"}, yaxis: {autorange: "reversed"},
      xaxis: {title: {text: "device code, bytes stored"}, ticksuffix: "B"}};
    const config = {responsive: true, displaylogo: false, displayModeBar: false};
    const done = (first ? Plotly.newPlot : Plotly.react)(div, data, layout, config);
    const tab = table("what-if-table", ["GPUs", "library", "kept", "dropped", "saved"]);
    sets.forEach((w) => {
      libs.map((l, i) => [l.name, w.libraries[i]]).concat([["all libraries", w.total]])
        .forEach(([name, x]) => {
          if (!x) return;
          const tr = el("tr", {"data-gpus": w.gpus.join(","), "data-library":
                               name === "all libraries" ? "" : name,
                               "data-custom": w.custom ? "1" : null});
          tr.appendChild(nameCell((w.custom ? "★ " : "") + w.gpus.join(" + ")));
          tr.appendChild(nameCell(name));
          const about = x.exact ? "" : "~";  // a compressed AMD bundle: prune compresses anew
          tr.appendChild(cell("kept", x.kept, about + size(x.kept)));
          tr.appendChild(cell("dropped", x.dropped, about + size(x.dropped)));
          const total = x.kept + x.dropped;
          tr.appendChild(el("td", x.refused ? {class: "fails", "data-refused": "1"} : {},
            x.refused ? "prune refuses: nothing for these GPUs" :
            total ? (100 * x.dropped / total).toFixed(1) + " %" : "-"));
          tab.appendChild(tr);
        });
    });
    holder.replaceChildren(scroll(tab));
    return done;
  }
  if (!sets.length) s.insertBefore(el("p", {class: "empty"}, "no GPU set given"), div);
  drawn.push(render(true));
  button.addEventListener("click", () => {
    const gpus = [...pick.querySelectorAll("input:checked")].map((i) => i.value);
    if (!gpus.length) return;
    const w = window.fatbinkitWeigh(gpus);
    const at = sets.findIndex((x) => x.custom && x.gpus.join() === gpus.join());
    const mine = {gpus: gpus, custom: true, total: w, libraries: w.libraries};
    if (at >= 0) sets[at] = mine; else sets.push(mine);
    render(false).then(() => div.setAttribute("data-sets", String(sets.length)));
  });
})();

// -- 4. comparison ---------------------------------------------------------------------------
(function () {
  const c = doc.comparison;
  if (!c) return;
  const s = section("comparison", "What changed from " + doc.old.split("/").pop(),
    "What `fatbinkit diff OLD NEW` reports: kernels added, removed and changed per arch, " +
    "archs and PTX lost or gained, minimum drivers raised, the worst register, spill and " +
    "stack growth; and each library's bytes on both sides.");
  const sum = table("comparison-table", ["kernel images", "added", "removed", "changed",
                                         "unchanged", "regressions"]);
  const tr = el("tr");
  tr.appendChild(nameCell("all libraries"));
  ["added", "removed", "changed", "unchanged", "regressions"].forEach((k) =>
    tr.appendChild(cell(k, c.summary[k], String(c.summary[k]))));
  sum.appendChild(tr);
  s.appendChild(scroll(sum));
  const names = c.sizes.map((x) => x.library.split("/").pop());
  const div = el("div", {id: "comparison-chart", class: "chart",
                         style: "height:" + (160 + 40 * names.length) + "px"});
  s.appendChild(div);
  drawn.push(Plotly.newPlot(div, [
    {type: "bar", orientation: "h", name: "old", y: names,
     x: c.sizes.map((x) => x.old ? x.old.size : 0), marker: {color: "#9aa5b4"}},
    {type: "bar", orientation: "h", name: "new", y: names,
     x: c.sizes.map((x) => x.new ? x.new.size : 0), marker: {color: "#5b8def"}}],
    {barmode: "group", margin: {t: 10, l: 200, r: 10, b: 40},
     xaxis: {title: {text: "file bytes"}}, yaxis: {autorange: "reversed"}},
    {responsive: true, displaylogo: false, displayModeBar: false}));
  const sizes = table("comparison-sizes", ["library", "old", "new", "change",
                                           "device code old", "device code new", "change"]);
  const change = (key, a, b) => {
    const d = a === null || b === null ? null : b - a;
    return el("td", {"data-key": key, "data-value": d === null ? "" : String(d),
                     class: d > 0 ? "fails" : ""},
              d === null ? "-" : (d > 0 ? "+" : d < 0 ? "\u2212" : "") + size(Math.abs(d)) +
              (a ? " (" + (d >= 0 ? "+" : "\u2212") + (Math.abs(d) * 100 / a).toFixed(1) + " %)"
                 : ""));
  };
  c.sizes.forEach((x) => {
    const r = el("tr", {"data-library": x.library});
    r.appendChild(nameCell(x.library));
    r.appendChild(cell("old", x.old ? x.old.size : null));
    r.appendChild(cell("new", x.new ? x.new.size : null));
    r.appendChild(change("change", x.old ? x.old.size : null, x.new ? x.new.size : null));
    r.appendChild(cell("old_stored", x.old ? x.old.stored : null));
    r.appendChild(cell("new_stored", x.new ? x.new.stored : null));
    r.appendChild(change("stored_change", x.old ? x.old.stored : null,
                         x.new ? x.new.stored : null));
    sizes.appendChild(r);
  });
  s.appendChild(scroll(sizes));
  s.appendChild(el("h3", {}, "Device code per arch"));
  const per = table("comparison-arch-sizes", ["library", "kind", "arch", "old", "new",
                                              "change"]);
  c.arch_sizes.forEach((x) => {
    const r = el("tr", {"data-library": x.library, "data-kind": x.kind, "data-arch": x.arch});
    r.appendChild(nameCell(x.library)); r.appendChild(el("td", {}, x.kind));
    r.appendChild(el("td", {}, x.arch));
    r.appendChild(cell("old", x.old)); r.appendChild(cell("new", x.new));
    r.appendChild(x.old === null || x.new === null ?
      el("td", {"data-key": "change", "data-value": "",
                class: x.new === null ? "fails" : ""}, x.new === null ? "lost" : "new") :
      change("change", x.old, x.new));
    per.appendChild(r);
  });
  s.appendChild(scroll(per));
  const lost = c.coverage.concat(c.archs.filter((a) => a.field === "min_driver"));
  s.appendChild(el("h3", {}, "Archs and drivers"));
  if (!lost.length) s.appendChild(el("p", {class: "empty"}, "no arch lost or gained"));
  else {
    const t = table("comparison-archs", ["library", "kind", "arch", "change"]);
    lost.forEach((x) => {
      const r = el("tr", {"data-library": x.library, "data-arch": x.arch,
                          "data-regression": String(x.regression)});
      r.appendChild(nameCell(x.library)); r.appendChild(el("td", {}, x.kind));
      r.appendChild(el("td", {}, x.arch));
      r.appendChild(el("td", {class: x.regression ? "fails" : ""}, x.change ? x.change :
        "minimum driver " + x.old + " -> " + x.new));
      t.appendChild(r);
    });
    s.appendChild(scroll(t));
  }
  s.appendChild(el("h3", {}, "Worst register, spill and stack growth" + (c.worst.length ?
    " (the " + c.worst.length + " largest of " + c.summary.regressions + " regressions)" : "")));
  if (!c.worst.length) s.appendChild(el("p", {class: "empty"}, "none"));
  else {
    // one row per kernel image (library, kernel, arch), its fields that grew, largest first
    const rows = new Map();
    c.worst.forEach((x) => {
      const key = [x.library, x.kernel, x.arch, x.instance].join("\u0000");
      if (!rows.has(key)) rows.set(key, []);
      rows.get(key).push(x);
    });
    const t = table("comparison-worst", ["library", "kernel", "arch", "grew", "largest"]);
    rows.forEach((fields) => {
      const x = fields[0];
      const r = el("tr", {"data-library": x.library, "data-kernel": x.kernel,
                          "data-arch": x.arch,
                          "data-fields": fields.map((f) => f.field).join(",")});
      const lib = nameCell(x.library.split("/").pop());
      lib.setAttribute("title", x.library);
      const name = nameCell(x.demangled.length > 110 ? x.demangled.slice(0, 109) + "…" :
                            x.demangled);
      name.setAttribute("title", x.demangled);
      r.appendChild(lib); r.appendChild(name); r.appendChild(el("td", {}, x.arch));
      r.appendChild(nameCell(fields.map((f) => f.field.replace("_", " ") + " " + f.old +
                                        " → " + f.new + " (+" + f.delta + ")").join("; ")));
      r.appendChild(cell("delta", x.delta, "+" + x.delta));
      t.appendChild(r);
    });
    s.appendChild(scroll(t));
  }
})();

Promise.all(drawn).then(function () {
  window.fatbinkitReady = true;
  document.body.setAttribute("data-ready", "1");
});
})();
"""
