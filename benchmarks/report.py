"""Report benchmark (issue 33), side by side in one run on torch's CUDA wheels: the time of
``fatbinkit report`` against the command a user runs for the same input's figures, the pages'
sizes, and the pages in headless chromium (load, first render, clicks); and the screenshots of
the pages that docs/report/ holds (``--screenshots DIR``).

- **one wheel**: ``fatbinkit report TORCH_2.14.1 -o page.html`` against ``fatbinkit ls
  TORCH_2.14.1 --summary`` (goal: the report in less than twice the time of the summary);
- **reference rows** (no goal): ``fatbinkit ls TORCH_2.14.1 --summary --kernels`` and ``fatbinkit
  check TORCH_2.14.1 --min-driver``, which read every image as the report does;
- **comparison**: ``fatbinkit report TORCH_2.14.1 TORCH_2.13.0 -o cmp.html`` beside ``fatbinkit
  diff TORCH_2.13.0 TORCH_2.14.1 --json`` (no goal);
- **page size** of both pages (goal: under 10 MB, 10^7 bytes);
- **in the browser** (Debian's chromium, headless, 1400 px wide, a new browser for each load):
  load (``loadEventEnd``) and first render (navigation start to ``window.fatbinkitReady``
  true, ``performance.now()`` taken by a setter that the test installs before the page runs),
  with where the time goes (plotly.js evaluated, the document's ``JSON.parse``, each
  ``Plotly.newPlot``); a click on libtorch_cuda.so's block in the treemap (from the click event
  to ``#bytes-detail`` changing, to the page's ``Plotly.react`` of the library's view done
  (``plotly_react``), and to the frame after it); the switch to ``#bytes-uncompressed`` and back
  (from the click to the frame after the redraw);
- **peak RSS** of the report command.

Inputs come through the package registry into the fixtures cache (``benchmarks/inputs.py``).
Each command runs in a new process under GNU time (Python start-up included), the commands of
one input interleaved run after run: wall and CPU (user + system of the process and of the
workers it waited for: ``RUSAGE_CHILDREN``) seconds are medians of ``--runs``, memory the highest
peak RSS; the page cache is warm (each wheel read before). Browser figures are medians of
``--runs`` loads or clicks.

Usage: python benchmarks/report.py [--write docs/benchmarks-report.md] [--runs N]
       [--screenshots docs/report]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))  # this checkout's fatbinkit, as in the children

from hidden import Figure, child  # noqa: E402  (benchmarks/hidden.py: GNU time of a child)
from inputs import TORCH, TORCH_OLD, torch_wheel  # noqa: E402
from revision import prepared  # noqa: E402

RUNS = 3
MB = 10**6
PAGE_GOAL = 10 * MB
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1400, 1200
LIBRARY = "torch/lib/libtorch_cuda.so"  # the block clicked
PNG_MAX = 400 * 1024  # a screenshot committed in docs/report/
CUT_AT = 1600  # px of the comparison section kept when its PNG would pass PNG_MAX
# Before the page runs: the time of window.fatbinkitReady = true, of plotly.js evaluated, of the
# document's JSON.parse and of each Plotly.newPlot (synchronous part, and its promise).
PROBE = r"""
(function () {
  const t = window.__fk = {plots: [], parse: []};
  Object.defineProperty(window, "fatbinkitReady", {configurable: true,
    get() { return t.value; },
    set(v) { if (v === true && t.readyAt === undefined) t.readyAt = performance.now();
             t.value = v; }});
  let P;
  Object.defineProperty(window, "Plotly", {configurable: true,
    get() { return P; },
    set(v) {
      P = v; t.plotlyAt = performance.now();
      const np = v.newPlot;
      v.newPlot = function (div) {
        const s = performance.now(), r = np.apply(this, arguments);
        const rec = {id: div.id, start: s, sync: performance.now() - s};
        t.plots.push(rec);
        Promise.resolve(r).then(() => { rec.done = performance.now() - s; });
        return r;
      };
    }});
  const jp = JSON.parse;
  JSON.parse = function (s) {
    const a = performance.now(), r = jp.apply(this, arguments);
    if (typeof s === "string" && s.length > 1e6)
      t.parse.push({chars: s.length, ms: performance.now() - a});
    return r;
  };
})();
"""
TIMES = r"""
const n = performance.getEntriesByType("navigation")[0];
const fcp = performance.getEntriesByType("paint").find((p) => p.name === "first-contentful-paint");
return {ready: window.__fk.readyAt, load: n.loadEventEnd, dcl: n.domContentLoadedEventEnd,
        fcp: fcp ? fcp.startTime : null, plotly: window.__fk.plotlyAt,
        parse: window.__fk.parse.reduce((a, p) => a + p.ms, 0),
        plots: window.__fk.plots.map((p) => [p.id, p.sync, p.done]),
        heap: performance.memory ? performance.memory.usedJSHeapSize : null,
        slices: document.querySelectorAll("#bytes-chart g.slice").length,
        nodes: document.getElementsByTagName("*").length};
"""
# Arm the timers of a click on a treemap block: the click event (capture phase, before Plotly's
# handler), #bytes-detail's data-name set, the frame after it (the page's handler draws the view
# of the block clicked with Plotly.react, synchronously, before that frame), and Plotly's
# plotly_react event (the end of that Plotly.react).
ARM_CLICK = r"""
const det = document.getElementById("bytes-detail"), gd = document.getElementById("bytes-chart");
det.setAttribute("data-name", "");
const r = window.__fkClick = {};
document.addEventListener("click", () => { r.t0 = performance.now(); },
                          {capture: true, once: true});
const mo = new MutationObserver(() => {
  if (r.detail !== undefined || !det.getAttribute("data-name")) return;
  r.detail = performance.now(); mo.disconnect();
  requestAnimationFrame(() => { r.frame = performance.now();
                                setTimeout(() => { r.painted = performance.now(); }, 0); });
});
mo.observe(det, {attributes: true, attributeFilter: ["data-name"]});
if (!gd.__fkArmed) {
  gd.__fkArmed = true;
  gd.on("plotly_react", () => { const c = window.__fkClick;
                                if (c && c.t0 !== undefined && c.drawn === undefined)
                                  c.drawn = performance.now(); });
}
"""
# The header strip of a library's block (where a click opens that library, not one of its
# archs drawn inside it), in viewport pixels.
BLOCK = r"""
const g = Array.from(document.querySelectorAll("#bytes-chart g.slice")).find((g) => {
  const t = g.querySelector("text"); return t && t.textContent === arguments[0]; });
if (!g) return null;
const b = g.querySelector("path.surface").getBoundingClientRect();
return [b.left + Math.min(40, b.width / 2), b.top + 8, b.width, b.height];
"""
# Back to the top of the treemap: the page draws only the view of one block (its ``level``, the
# first id drawn is the top's) and a click on that block draws its parent's view, so the page's
# own handler is called with the view's block until the top is shown; true once there, drawn.
TOP = r"""
const done = arguments[arguments.length - 1];
const gd = document.getElementById("bytes-chart");
for (let n = 0; gd.data[0].level !== gd.data[0].ids[0] && n < 50; n += 1)
  gd.emit("plotly_treemapclick", {points: [{id: gd.data[0].level}]});
requestAnimationFrame(() => done(gd.data[0].level === gd.data[0].ids[0]));
"""
# Arm the timers of a button's click: the click event (capture phase), the frame after the
# button's handler (a listener after it, on the way up) redrew the chart.
ARM_BUTTON = r"""
const r = window.__fkButton = {};
document.addEventListener("click", () => { r.t0 = performance.now(); },
                          {capture: true, once: true});
document.addEventListener("click", () => { r.handled = performance.now();
  requestAnimationFrame(() => { r.frame = performance.now();
                                setTimeout(() => { r.painted = performance.now(); }, 0); });
}, {once: true});
"""
# Hide the rows of the comparison's worst-growth table that end below arguments[0] px from the
# section's top (a screenshot's size: a demangled CUTLASS name can fill a screen); [kept, rows].
CUT_WORST = r"""
const top = document.getElementById("comparison").getBoundingClientRect().top;
const rows = Array.from(document.querySelectorAll("#comparison-worst tr[data-kernel]"));
let kept = 0, cut = false;
rows.forEach((r) => {
  cut = cut || r.getBoundingClientRect().bottom - top > arguments[0];
  if (cut) r.style.display = "none"; else kept += 1;
});
return [kept, rows.length];
"""
# The treemap's values now (the nodes of the view drawn, by id): "stored" or "uncompressed" when
# they are the document's figures of that kind, "both" when the two agree on every node drawn.
SHOWS = r"""
const doc = JSON.parse(document.getElementById("fatbinkit-report").textContent).bytes;
const at = new Map(doc.ids.map((id, i) => [id, i]));
const d = document.getElementById("bytes-chart").data[0];
const is = (a) => d.ids.length > 0 && d.ids.every((id, k) => d.values[k] === a[at.get(id)]);
const s = is(doc.stored), u = is(doc.uncompressed);
return s && u ? "both" : s ? "stored" : u ? "uncompressed" : null;
"""


def fk(*args: object) -> list[str]:
    return [sys.executable, "-m", "fatbinkit", *map(str, args)]


def to_file(argv: list[str], out: Path) -> list[str]:
    """A shell running ``argv`` with its stdout to ``out`` (as a user keeps it)."""
    return ["bash", "-c", f"{shlex.join(argv)} > {shlex.quote(str(out))}"]


def commands(tmp: Path, new: Path, old: Path) -> dict[str, list[str]]:
    return {
        "ls": to_file(fk("ls", new, "--summary"), tmp / "summary.txt"),
        "kernels": to_file(fk("ls", new, "--summary", "--kernels"), tmp / "kernels.txt"),
        "min_driver": to_file(fk("check", new, "--min-driver"), tmp / "min-driver.txt"),
        "report": fk("report", new, "-o", tmp / "page.html"),
        "diff": to_file(fk("diff", old, new, "--json"), tmp / "diff.json"),
        "compare": fk("report", new, old, "-o", tmp / "cmp.html"),
    }


def cli(argvs: dict[str, list[str]], runs: int
        ) -> dict[str, tuple[Figure, list[tuple[float, float]]]]:
    """Every command ``runs`` times, interleaved (one run of each, then the next): per command
    its :class:`~hidden.Figure` (medians, highest peak RSS) and each run's wall time with the
    1-minute load average just before it (another job on the machine shows there)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    found: dict[str, list[tuple[float, float, int]]] = {k: [] for k in argvs}
    loads: dict[str, list[float]] = {k: [] for k in argvs}
    for i in range(runs):
        for key, argv in argvs.items():
            loads[key].append(os.getloadavg()[0])
            found[key].append(child(argv, ROOT, env))
            w, c, m = found[key][-1]
            print(f"run {i + 1}/{runs} {key}: {w:.2f} s wall, {c:.2f} s CPU, {m / 2**20:.0f} MiB",
                  file=sys.stderr)
    return {k: (Figure(statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v),
                       max(m for _, _, m in v)),
                [(w, a) for (w, _, _), a in zip(v, loads[k], strict=True)])
            for k, v in found.items()}


# -- the browser -------------------------------------------------------------------------------

def browser(height: int = HEIGHT) -> Any:
    """Headless chromium (Debian's) through its chromedriver, ``WIDTH`` x ``height`` pixels,
    with :data:`PROBE` run before every page."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
              f"--window-size={WIDTH},{height}", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(300)
    driver.set_script_timeout(120)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    return driver


def until(driver: Any, script: str, what: str, timeout: float = 300.0, *args: Any) -> Any:
    """Poll ``script`` in the page until it returns something true; that value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = driver.execute_script(script, *args)
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"{what}: not within {timeout:.0f} s")


def open_page(driver: Any, page: Path) -> dict[str, Any]:
    """Load ``page``, wait for ``window.fatbinkitReady``; its :data:`TIMES`."""
    driver.get(page.as_uri())
    until(driver, "return window.fatbinkitReady === true && document.body.dataset.ready === '1'",
          f"{page.name} ready")
    times: dict[str, Any] = driver.execute_script(TIMES)
    return times


def loads(page: Path, runs: int) -> list[dict[str, Any]]:
    """``runs`` loads of ``page``, each in a new browser (as a user opens the file)."""
    found = []
    for i in range(runs):
        driver = browser()
        try:
            found.append(open_page(driver, page))
        finally:
            driver.quit()
        print(f"load {i + 1}/{runs} {page.name}: ready at {found[-1]['ready']:.0f} ms, load "
              f"event {found[-1]['load']:.0f} ms", file=sys.stderr)
    return found


def click_at(driver: Any, x: float, y: float) -> None:
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    action = ActionBuilder(driver)
    action.pointer_action.move_to_location(int(x), int(y))  # type: ignore[no-untyped-call]
    action.pointer_action.click()
    action.perform()


def top(driver: Any) -> None:
    """The treemap back at its top level (:data:`TOP`)."""
    if not driver.execute_async_script(TOP):
        raise SystemExit("the treemap is not back at its top level")


def drill(driver: Any, label: str = LIBRARY) -> dict[str, float]:
    """Click ``label``'s library block at the treemap's top level; the timers of
    :data:`ARM_CLICK`, in ms from the click event. Checks that the page says that library and
    draws its view."""
    block = driver.execute_script(BLOCK, label.rpartition("/")[2])
    if block is None:
        raise SystemExit(f"no block labelled {label} at the treemap's top level")
    driver.execute_script(ARM_CLICK)
    click_at(driver, block[0], block[1])
    r = until(driver, "const r = window.__fkClick; return r.drawn && r.painted && r;",
              f"the drill-down into {label}", 60)
    name, node, level = driver.execute_script(
        "const d = document.getElementById('bytes-detail');"
        "return [d.getAttribute('data-name'), d.getAttribute('data-node'),"
        "        document.getElementById('bytes-chart').data[0].level]")
    if name != label:
        raise SystemExit(f"clicked {label}'s block, #bytes-detail says {name!r}")
    if level != node:
        raise SystemExit(f"clicked {label}'s block ({node}), the treemap shows {level!r}")
    return {k: r[k] - r["t0"] for k in ("detail", "frame", "painted", "drawn")}


def press(driver: Any, button: str) -> dict[str, float]:
    """Click ``#button``; the timers of :data:`ARM_BUTTON`, in ms from the click event."""
    from selenium.webdriver.common.by import By

    driver.execute_script(ARM_BUTTON)
    driver.find_element(By.ID, button).click()
    r = until(driver, "const r = window.__fkButton; return r.painted && r;", f"#{button}", 60)
    return {k: r[k] - r["t0"] for k in ("handled", "frame", "painted")}


def interactions(page: Path, runs: int) -> dict[str, list[dict[str, float]]]:
    """``runs`` drill-downs into libtorch_cuda.so from the top level, and ``runs`` switches to
    uncompressed and back (each checked against the document's figures of the nodes drawn),
    in one loaded page."""
    driver = browser()
    found: dict[str, list[dict[str, float]]] = {"drill": [], "uncompressed": [], "stored": []}
    try:
        open_page(driver, page)
        for _ in range(runs):
            top(driver)
            found["drill"].append(drill(driver))
        top(driver)
        for _ in range(runs):
            for button, kind in (("bytes-uncompressed", "uncompressed"),
                                 ("bytes-stored", "stored")):
                found[kind].append(press(driver, button))
                shows = driver.execute_script(SHOWS)
                if shows != kind:
                    raise SystemExit(f"#{button} clicked: the treemap's values are {shows}, not "
                                     f"the {kind} ones")
    finally:
        driver.quit()
    return found


# -- screenshots -------------------------------------------------------------------------------

def screenshots(page: Path, comparison: Path, out: Path) -> list[tuple[Path, int, str]]:
    """PNGs of each section (``element.screenshot``, the section scrolled to the window's top),
    ``WIDTH`` px wide, as a reader first sees it (the coverage table folded): bytes.png (the
    top level), bytes-library.png (drilled into libtorch_cuda.so, the pointer moved off the
    chart), coverage.png, what-if.png, and comparison.png of the comparison page (its table of
    the worst growth cut to the rows within :data:`CUT_AT` px of the section's top when the PNG
    would pass :data:`PNG_MAX` bytes). The window is taller than every section, so that none
    is cut."""
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    shots: list[tuple[Path, int, str]] = []

    def shot(driver: Any, section: str, name: str, note: str = "") -> None:
        path = out / name
        element = driver.find_element(By.ID, section)
        driver.execute_script("arguments[0].scrollIntoView(true)", element)
        element.screenshot(str(path))
        shots.append((path, path.stat().st_size, note))

    driver = browser(4000)
    try:
        open_page(driver, page)
        shot(driver, "bytes", "bytes.png")
        driver.execute_script("window.scrollTo(0, 0)")
        drill(driver)
        click_free(driver)
        shot(driver, "bytes", "bytes-library.png")
        shot(driver, "coverage", "coverage.png")
        shot(driver, "what-if", "what-if.png")
    finally:
        driver.quit()
    driver = browser(4000)
    try:
        open_page(driver, comparison)
        shot(driver, "comparison", "comparison.png")
        if shots[-1][1] > PNG_MAX:
            kept, rows = driver.execute_script(CUT_WORST, CUT_AT)
            shots.pop()
            shot(driver, "comparison", "comparison.png",
                 f"the worst-growth table cut to its first {kept} of {rows} rows")
    finally:
        driver.quit()
    return shots


def click_free(driver: Any) -> None:
    """Move the pointer off the charts (to the window's top left corner) and wait until no
    hover label is left."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    action = ActionBuilder(driver)
    action.pointer_action.move_to_location(1, 1)  # type: ignore[no-untyped-call]
    action.perform()
    until(driver, "return !document.querySelector('#bytes-chart .hoverlayer .hovertext')",
          "the hover label gone", 30)


# -- the document ------------------------------------------------------------------------------

def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(med(values))} (runs: {', '.join(fmt(v) for v in values)})"


def ms(v: float) -> str:
    return f"{v:,.0f} ms"


def secs(v: float) -> str:
    return f"{v:.2f} s"


def size(n: int) -> str:
    return f"{n / MB:.2f} MB ({n / 2**20:.2f} MiB, {n:,} bytes)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="also write the document (markdown) here")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs each (default {RUNS})")
    parser.add_argument("--screenshots", type=Path, metavar="DIR",
                        help="also write the pages' PNG screenshots into DIR (docs/report)")
    args = parser.parse_args()
    new, old = torch_wheel(TORCH), torch_wheel(TORCH_OLD)
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} not found: apt-get install chromium chromium-driver")
    measured = prepared()
    started = time.gmtime()
    with tempfile.TemporaryDirectory(prefix="fatbinkit-report-bench-") as t:
        tmp = Path(t)
        for wheel in (new, old):  # a warm page cache for every command
            subprocess.run(["cat", str(wheel)], stdout=subprocess.DEVNULL, check=True)
        figures = cli(commands(tmp, new, old), args.runs)
        page, cmp = tmp / "page.html", tmp / "cmp.html"
        sizes = {"page": page.stat().st_size, "cmp": cmp.stat().st_size}
        load_page = loads(page, args.runs)
        load_cmp = loads(cmp, args.runs)
        clicks = interactions(page, args.runs)
        shots = screenshots(page, cmp, args.screenshots) if args.screenshots else []
    load = os.getloadavg()
    lines = document(args, figures, sizes, load_page, load_cmp, clicks, shots, new, old,
                     started, measured, load)
    print("\n".join(lines))
    if args.write:
        args.write.write_text("\n".join(lines) + "\n")
    return 0


def document(args: argparse.Namespace, figures: dict[str, tuple[Figure, list[tuple[float, float]]]],
             sizes: dict[str, int], load_page: list[dict[str, Any]],
             load_cmp: list[dict[str, Any]], clicks: dict[str, list[dict[str, float]]],
             shots: list[tuple[Path, int, str]], new: Path, old: Path, started: time.struct_time,
             commit: str, load: tuple[float, float, float]) -> list[str]:
    ls, report, diff, compare, kernels, least = (
        figures[k][0] for k in ("ls", "report", "diff", "compare", "kernels", "min_driver"))
    ratio = report.wall / ls.wall
    cpu_ratio = report.cpu / ls.cpu

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    ready = med([x["ready"] for x in load_page])
    ready_cmp = med([x["ready"] for x in load_cmp])
    drill_frame = med([x["frame"] for x in clicks["drill"]])
    drill_done = med([x["drawn"] for x in clicks["drill"]])
    unc = med([x["painted"] for x in clicks["uncompressed"]])
    table = [
        "| goal | measured | met |",
        "|---|---|---|",
        f"| `report` of the torch {TORCH} wheel in less than 2x the time of `ls --summary` | "
        f"{ratio:.2f}x: {report.wall:.2f} s against {ls.wall:.2f} s wall (CPU {report.cpu:.2f} "
        f"s against {ls.cpu:.2f} s: {cpu_ratio:.2f}x) | {yes(ratio < 2)} |",
        f"| (no goal) `report` beside `ls --summary --kernels` and `check --min-driver` (they "
        f"read every image, as `report` does) | {report.wall / kernels.wall:.2f}x and "
        f"{report.wall / least.wall:.2f}x: {kernels.wall:.2f} s and {least.wall:.2f} s wall "
        f"(CPU {kernels.cpu:.2f} s and {least.cpu:.2f} s) | - |",
        f"| torch {TORCH} page under 10 MB | {sizes['page'] / MB:.2f} MB | "
        f"{yes(sizes['page'] < PAGE_GOAL)} |",
        f"| comparison page ({TORCH} against {TORCH_OLD}) under 10 MB | "
        f"{sizes['cmp'] / MB:.2f} MB | {yes(sizes['cmp'] < PAGE_GOAL)} |",
        f"| (no goal) comparison `report NEW OLD` beside `diff OLD NEW --json` | "
        f"{compare.wall:.2f} s against {diff.wall:.2f} s wall ({compare.wall / diff.wall:.2f}x)"
        f"; CPU {compare.cpu:.2f} s against {diff.cpu:.2f} s | - |",
        f"| (no goal) first render in chromium, navigation start to `fatbinkitReady` | "
        f"{ready / 1000:.1f} s (torch page), {ready_cmp / 1000:.1f} s (comparison page) | - |",
        f"| (no goal) click on libtorch_cuda.so's block | {drill_done:,.0f} ms to its view "
        f"drawn (`plotly_react`), {drill_frame:,.0f} ms to the next frame | - |",
        f"| (no goal) switch to uncompressed | {unc:,.0f} ms to the frame after the redraw | - |",
        f"| (no goal) peak RSS of `report` | {report.rss / 2**20:.0f} MiB (one wheel), "
        f"{compare.rss / 2**20:.0f} MiB (comparison); `ls --summary` {ls.rss / 2**20:.0f} MiB, "
        f"`diff --json` {diff.rss / 2**20:.0f} MiB | - |",
    ]
    cli_rows = [
        ("`fatbinkit ls TORCH_2.14.1 --summary > summary.txt`", "ls"),
        ("`fatbinkit ls TORCH_2.14.1 --summary --kernels > kernels.txt`", "kernels"),
        ("`fatbinkit check TORCH_2.14.1 --min-driver > min-driver.txt`", "min_driver"),
        ("`fatbinkit report TORCH_2.14.1 -o page.html`", "report"),
        ("`fatbinkit diff TORCH_2.13.0 TORCH_2.14.1 --json > diff.json`", "diff"),
        ("`fatbinkit report TORCH_2.14.1 TORCH_2.13.0 -o cmp.html`", "compare"),
    ]

    def browser_rows(found: list[dict[str, Any]]) -> list[str]:
        plots: dict[str, list[tuple[float, float]]] = {}
        for x in found:
            for pid, sync, done in x["plots"]:
                plots.setdefault(pid, []).append((sync, done if done is not None else
                                                  float("nan")))
        rows = [
            f"| first render: navigation start to `window.fatbinkitReady` | "
            f"{spread([x['ready'] for x in found], ms)} |",
            f"| load event end (`loadEventEnd`) | {spread([x['load'] for x in found], ms)} |",
            f"| DOMContentLoaded end | {spread([x['dcl'] for x in found], ms)} |",
            f"| plotly.js evaluated (`window.Plotly` set) | "
            f"{spread([x['plotly'] for x in found], ms)} |",
            f"| the document's `JSON.parse` | {spread([x['parse'] for x in found], ms)} |",
        ]
        for pid, v in plots.items():
            rows.append(f"| `Plotly.newPlot` of #{pid}: synchronous / until its promise | "
                        f"{ms(med([a for a, _ in v]))} / {ms(med([b for _, b in v]))} |")
        heap = [x["heap"] for x in found if x["heap"]]
        rows.append(f"| JS heap used at ready; treemap blocks (`g.slice`) in the DOM; DOM "
                    f"elements | {med(heap) / 2**20:.0f} MiB; {found[-1]['slices']:,}; "
                    f"{found[-1]['nodes']:,} |")
        return rows

    out = [
        "# Report benchmark (issue 33)",
        "",
        f"`python benchmarks/report.py`, {time.strftime('%Y-%m-%d %H:%M UTC', started)}, "
        f"{platform.machine()}, {os.cpu_count()} cores (load average at the end "
        f"{load[0]:.1f}), Python {platform.python_version()}, fatbinkit at {commit}; "
        f"inputs {new.name} ({new.stat().st_size / 2**20:.0f} MiB) and {old.name} "
        f"({old.stat().st_size / 2**20:.0f} MiB) from the fixtures cache "
        "(benchmarks/inputs.py). Command figures: median wall and CPU (user + system of the "
        "process and of the workers it waited for) seconds of "
        f"{args.runs} runs each in a new process (Python start-up included), the six commands "
        "interleaved run after run, highest peak RSS (GNU time); warm page cache. Browser "
        f"figures: {chromium_version()}, headless, {WIDTH} px wide, medians of {args.runs} "
        "loads (a new browser each) or clicks.",
        "",
        *table,
        "",
        "## Commands",
        "",
        "| command | wall | CPU | peak RSS | wall of each run (1-minute load average before it) |",
        "|---|---|---|---|---|",
        *(f"| {label} | {figures[k][0].wall:.2f} s | {figures[k][0].cpu:.2f} s | "
          f"{figures[k][0].rss / 2**20:.0f} MiB | "
          f"{', '.join(f'{w:.2f} s ({a:.1f})' for w, a in figures[k][1])} |"
          for label, k in cli_rows),
        "",
        "## Pages",
        "",
        f"- torch {TORCH}: {size(sizes['page'])}",
        f"- comparison {TORCH} against {TORCH_OLD}: {size(sizes['cmp'])}",
        "",
        f"## torch {TORCH}'s page in chromium",
        "",
        "| measurement (ms from navigation start unless said) | median (each load) |",
        "|---|---|",
        *browser_rows(load_page),
        "",
        "## The comparison page in chromium",
        "",
        "| measurement (ms from navigation start unless said) | median (each load) |",
        "|---|---|",
        *browser_rows(load_cmp),
        "",
        "## Clicks on the torch page",
        "",
        "Timed in the page from the click event (capture phase, before the page's handlers). "
        "The drill-down: libtorch_cuda.so's block clicked at the treemap's top level (set back "
        "there between clicks through the page's own click handler, called with the view's "
        "block); the page draws the library's view with `Plotly.react` in its handler, "
        "without transition, and Plotly's `plotly_react` event marks that draw's end (it and "
        "`#bytes-detail`'s mutation observer both run right after the handler, so they agree).",
        "",
        "| click | median (each) |",
        "|---|---|",
        f"| libtorch_cuda.so's block: `#bytes-detail` says the library | "
        f"{spread([x['detail'] for x in clicks['drill']], ms)} |",
        f"| libtorch_cuda.so's block: its view drawn (`plotly_react`) | "
        f"{spread([x['drawn'] for x in clicks['drill']], ms)} |",
        f"| libtorch_cuda.so's block: the next frame (`requestAnimationFrame`) | "
        f"{spread([x['frame'] for x in clicks['drill']], ms)} |",
        f"| `#bytes-uncompressed`: handler done (Plotly.react) | "
        f"{spread([x['handled'] for x in clicks['uncompressed']], ms)} |",
        f"| `#bytes-uncompressed`: the frame after the redraw | "
        f"{spread([x['painted'] for x in clicks['uncompressed']], ms)} |",
        f"| `#bytes-stored` (back): the frame after the redraw | "
        f"{spread([x['painted'] for x in clicks['stored']], ms)} |",
    ]
    if shots:
        out += ["", "## Screenshots", "",
                *(f"- `{p.name}`: {n / 1024:.0f} KiB" + (f" ({note})" if note else "")
                  for p, n, note in shots)]
    return out


def chromium_version() -> str:
    proc = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() or "chromium"


if __name__ == "__main__":
    sys.exit(main())
