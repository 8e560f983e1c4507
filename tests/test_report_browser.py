"""``fatbinkit report`` (issue 33) in a real browser: headless Chromium (tests/browser.py) opens
the pages the CLI writes and the tests read what it drew and what its tables say.

Inputs: the nvidia-curand 10.4.5.25 wheel (cuRAND for CUDA 13) against its 10.4.0.35 wheel, the
same wheel judged with a CUDA 12.8 driver, and one library (CuPy 14.2's cupy.random module for
CUDA 13). Each page is written once, by ``fatbinkit report ... -o`` run as a child process, and
one browser session serves the module. Every figure a table shows is held to the command that
computes it, run on the same input as a child process (``ls --summary``, ``check``, ``check
--min-driver``, ``diff``); the page's embedded JSON to ``report --json``.

Skipped only where Chromium, chromedriver or Selenium are not installed (.ci/run installs them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Browser, missing, start
from tests.test_prune_truth import mixed  # noqa: F401  (the fixture: libguard.so, libmix.so)
from tests.thirdparty import (
    CACHE,
    CUPY13_RANDOM,
    CUPY_ROCM7_RANDOM,
    CURAND13,
    CURAND130,
    JAX_ROCM7_PRNG,
    WheelMember,
    fetch,
)

_MISSING = missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"no browser: {_MISSING}")

DRIVER = "12.8"  # curand 13's cubins need a CUDA 13.0 driver: 12.8 refuses them


class Run:
    """``python -m fatbinkit ARGS`` started as a child process; :meth:`out` waits for it."""

    def __init__(self, *args: object, codes: Sequence[int] = (0,)) -> None:
        self.args = [sys.executable, "-m", "fatbinkit", *map(str, args)]
        self.codes = codes
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._out: str | None = None

    def out(self) -> str:
        if self._out is None:
            out, err = self.proc.communicate(timeout=300)
            assert self.proc.returncode in self.codes, \
                f"{' '.join(self.args)}: exit {self.proc.returncode}: {err[-3000:]}"
            self._out = out
        return self._out

    def json(self) -> Any:
        return json.loads(self.out())

    def stop(self) -> None:
        """Ended, and its pipes closed, if no test waited for it."""
        if self._out is None:
            self.proc.kill()
            self.proc.communicate()


def _wheel(item: WheelMember) -> Path:
    fetch(item)  # downloads the wheel on first use
    (wheel,) = sorted((CACHE / "wheels").glob(
        f"{item.package.replace('-', '_')}-{item.version}-*linux*_x86_64.whl"))
    return wheel


@dataclass(frozen=True)
class Page:
    """One page the CLI wrote: its input and arguments, ``report --json`` of the same, and
    the commands its figures are held to (``ls``, ``check``, ``min-driver``, ``diff``: each
    ``--json``, on the same input, still running when the tests start)."""

    name: str
    path: Path
    input: Path
    old: Path | None
    driver: str | None
    doc: dict[str, Any]
    commands: dict[str, Run]

    def json(self, command: str) -> Any:
        return self.commands[command].json()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Page]]:
    """The three pages, each one's document and the commands' documents, made by child
    processes run side by side (``check --arch`` once the report names the GPUs)."""
    new, old, library = _wheel(CURAND13), _wheel(CURAND130), fetch(CUPY13_RANDOM)
    out = tmp_path_factory.mktemp("report")
    cases = {"wheel": (new, old, None), "driver": (new, None, DRIVER),
             "library": (library, None, None)}
    started: dict[tuple[str, ...], Run] = {}  # one run of each command line

    def run(*args: object, codes: Sequence[int] = (0,)) -> Run:
        key = tuple(map(str, args))
        if key not in started:
            started[key] = Run(*key, codes=codes)
        return started[key]

    try:
        yield _made(out, cases, run)
    finally:  # a command no test waited for (a test failed first)
        for each in started.values():
            each.stop()


def _made(out: Path, cases: dict[str, tuple[Path, Path | None, str | None]],
          run: Callable[..., Run]) -> dict[str, Page]:
    commands: dict[str, dict[str, Run]] = {}
    for name, (src, before, driver) in cases.items():
        args = [src, *([before] if before else []), *(["--driver", driver] if driver else [])]
        commands[name] = {"page": run("report", *args, "-o", out / f"{name}.html"),
                          "doc": run("report", *args, "--json"),
                          "min-driver": run("check", src, "--min-driver", "--json"),
                          "ls": run("ls", src, "--summary", "--json")}
        if before is not None:
            commands[name]["diff"] = run("diff", before, src, "--json")
    made = {}
    for name, (src, before, driver) in cases.items():
        doc = commands[name]["doc"].json()
        devices = (a for d in doc["devices"] for a in ("--arch", d))
        commands[name]["check"] = run("check", src, *devices,
                                      *(["--driver", driver] if driver else []), "--json",
                                      codes=(0, 1))  # 1: a GPU fails
        made[name] = Page(name, out / f"{name}.html", src, before, driver, doc,
                          commands[name])
    for page in made.values():
        page.commands["page"].out()
    return made


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    session = start()
    yield session
    session.close()


@pytest.fixture(scope="module")
def page(request: pytest.FixtureRequest, pages: dict[str, Page]) -> Page:
    """The page a test is parametrized with (``indirect``: pytest runs the tests of one page
    together, and the browser loads each page less often)."""
    return pages[request.param]


def _open(browser: Browser, page: Page, fresh: bool = False) -> None:
    """``page`` loaded and drawn: loaded again when ``fresh`` (the test must see it load),
    when another page is open or when a test clicked in it."""
    if fresh or browser.clicked or browser.driver.current_url != page.path.resolve().as_uri():
        browser.driver.get("about:blank")
        browser.open(page.path)


def _per_file(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A command's per-library documents: a wheel's ``files``, or a library's document."""
    files: list[dict[str, Any]] = doc.get("files", [doc])
    return files


def _rows(browser: Browser, table: str) -> list[dict[str, Any]]:
    """Per ``tr[data-library]`` of ``table``: ``library`` (its data-library) and ``cells``, its
    cells by data-key or data-device, each one's data-* attributes."""
    rows: list[dict[str, Any]] = browser.js("""
        return [...document.querySelectorAll(arguments[0] + ' tr[data-library]')].map((tr) => ({
          library: tr.getAttribute('data-library'),
          cells: Object.fromEntries([...tr.querySelectorAll('td[data-key], td[data-device]')]
            .map((td) => [td.getAttribute('data-key') || td.getAttribute('data-device'),
                          Object.fromEntries([...td.attributes].filter((a) =>
                            a.name.startsWith('data-')).map((a) => [a.name, a.value]))]))}));
        """, table)
    return rows


PAGES = ["wheel", "driver", "library"]


# -- 1. offline, no errors ---------------------------------------------------------------------

def test_the_console_log_reaches_the_tests(browser: Browser, tmp_path: Path) -> None:
    """The log the next test reads is the browser's: a script error and a load from the
    network (refused: the browser is offline) both show up in it as SEVERE entries."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://example.com/x.png">'
                   '<script>console.error("seen"); window.fatbinkitReady = true;</script>'
                   "<script>undefinedFunction();</script></body></html>")
    since = len(browser.log())
    browser.open(bad)
    browser.wait(lambda: len(browser.severe(since)) >= 3, 10, "three SEVERE entries")
    text = "\n".join(browser.severe(since))
    assert '"seen"' in text and "undefinedFunction" in text and "example.com" in text, text


@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_the_page_loads_offline_without_errors(browser: Browser, page: Page) -> None:
    """The page draws every chart (``fatbinkitReady``) with nothing logged as an error, loads
    nothing but itself (no resource in the Performance API, no element pointing to a URL of
    the network), on a browser that has no network."""
    since = len(browser.log())
    _open(browser, page, fresh=True)
    assert browser.js("return document.body.getAttribute('data-ready');") == "1"
    assert browser.severe(since) == []
    assert browser.js("return performance.getEntriesByType('resource').map((e) => e.name);") \
        == []
    outside = browser.js("""
        return [...document.querySelectorAll('[src], [href]')]
          .map((e) => e.getAttribute('src') || e.getAttribute('href'))
          .filter((u) => !u.startsWith('#'));""")
    assert outside == []
    assert browser.js("return document.querySelectorAll('script[src], link').length;") == 0


# -- 2. every view drawn -----------------------------------------------------------------------

def _visible_nodes(bytes_: dict[str, list[Any]], values: str, maxdepth: int = 3) -> int:
    """The treemap nodes Plotly draws at its first level: the root and two levels under it,
    those with a size."""
    depth: dict[str, int] = {}
    for i, parent in zip(bytes_["ids"], bytes_["parents"], strict=True):
        depth[i] = 0 if parent == "" else depth[parent] + 1
    return sum(1 for i, v in zip(bytes_["ids"], bytes_[values], strict=True)
               if depth[i] < maxdepth and v > 0)


@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_every_view_is_drawn(browser: Browser, page: Page) -> None:
    """Each chart holds what the document says: the treemap a block with an area for each
    node of its first three levels, the heatmap its picture, a label per cell that has a
    minimum driver and a tick per GPU and library, the what-if chart a bar per GPU set for
    the bytes kept and one for those dropped, the comparison one per library and side (old,
    new), each that is not 0; no comparison without OLD."""
    doc = page.doc
    _open(browser, page)
    for chart in ("bytes", "coverage", "what-if"):
        assert browser.js(f"return document.querySelectorAll('#{chart}-chart svg.main-svg')"
                          ".length;") >= 1, chart
    slices = browser.js("""
        return [...document.querySelectorAll('#bytes-chart g.slice path.surface')]
          .filter((p) => { const b = p.getBBox(); return b.width > 0 && b.height > 0; })
          .length;""")
    assert slices == _visible_nodes(doc["bytes"], "stored") > len(doc["libraries"]) + 2
    picture = browser.js("""
        const i = document.querySelector('#coverage-chart g.hm image');
        return i && [i.getAttribute('href').slice(0, 15), i.getBBox().width > 0];""")
    assert picture == ["data:image/png;", True]
    labels = sum(1 for lib in doc["libraries"] for c in lib["coverage"].values()
                 if c["min_driver"] and c["status"] != "none") + \
        sum(1 for c in doc["total_coverage"].values() if c["min_driver"])
    assert labels > 0
    assert browser.js("return [...document.querySelectorAll("
                      "'#coverage-chart g.heatmap-label text')].filter((t) => t.textContent)"
                      ".length;") == labels
    ticks = browser.js("return ['xtick', 'ytick'].map((k) => document.querySelectorAll("
                       "'#coverage-chart g.' + k + ' text').length);")
    # GPUs no library (nor the whole input) has code for are folded out of the picture
    empty = [d for d in doc["devices"]
             if all(lib["coverage"].get(d, {"status": "none"})["status"] == "none"
                    for lib in doc["libraries"])
             and doc["total_coverage"].get(d, {"status": "none"})["status"] == "none"]
    assert ticks == [len(doc["devices"]) - len(empty), len(doc["libraries"]) + 1]
    folded = browser.js("const p = document.getElementById('coverage-folded');"
                        "return p && p.dataset.devices;")
    assert (folded.split(",") if folded else []) == empty
    bars = ("return [...document.querySelectorAll(arguments[0] + ' g.point path')]"
            ".filter((p) => { const b = p.getBBox(); return b.width > 0 && b.height > 0; })"
            ".length;")
    kept_dropped = [v for w in doc["what_if"] for v in (w["kept"], w["dropped"])]
    assert len(kept_dropped) > 2
    assert browser.js(bars, "#what-if-chart") == sum(1 for v in kept_dropped if v)
    if page.old is None:
        assert browser.js("return document.getElementById('comparison');") is None
    else:
        sizes = [s[side]["size"] if s[side] else 0 for s in doc["comparison"]["sizes"]
                 for side in ("old", "new")]
        assert browser.js(bars, "#comparison-chart") == sum(1 for v in sizes if v) > 0


# -- 3. clicks ---------------------------------------------------------------------------------

def _shown_slices(browser: Browser) -> list[str]:
    """The text of each treemap block drawn with an area."""
    shown: list[str] = browser.js("""
        return [...document.querySelectorAll('#bytes-chart g.slice')].filter((g) => {
          const b = g.querySelector('path.surface').getBBox();
          return b.width > 0 && b.height > 0; }).map((g) => g.textContent);""")
    return shown


def test_a_click_on_a_library_opens_it(browser: Browser, pages: dict[str, Page]) -> None:
    """A mouse click on the library's block (its label, at the top of it) opens it: the detail
    line names the library as the wheel does and gives its bytes, the treemap's root becomes
    the library (Plotly's ``level``, the first block drawn) and the path bar above leads back
    to the wheel."""
    page = pages["wheel"]
    t = page.doc["bytes"]
    (lib,) = page.doc["libraries"]
    node = t["name"].index(lib["name"])
    _open(browser, page)
    detail = "#bytes-detail"
    assert browser.attrs(detail, ["data-name"]) == [{"data-name": t["labels"][0]}]
    assert browser.js("return document.querySelectorAll('#bytes-chart g.pathbar').length;") == 0
    block = browser.js("""
        const label = [...document.querySelectorAll('#bytes-chart g.slice text.slicetext')]
          .find((text) => text.textContent === arguments[0]);
        return label || null;""", t["labels"][node])
    assert block is not None, f"no treemap block labelled {t['labels'][node]}"
    browser.click(block)
    browser.wait(lambda: browser.attrs(detail, ["data-name"])[0]["data-name"] == lib["name"], 10,
                 f"{detail}[data-name={lib['name']}]")
    assert browser.attrs(detail, ["data-stored", "data-uncompressed"]) == [
        {"data-stored": str(t["stored"][node]),
         "data-uncompressed": str(t["uncompressed"][node])}]
    assert lib["name"] == "nvidia/cu13/lib/libcurand.so.10"
    browser.wait(lambda: browser.js("return document.getElementById('bytes-chart')"
                                    ".data[0].level;") == t["ids"][node], 10, "level")
    browser.wait(lambda: _shown_slices(browser)[0] == t["labels"][node], 10,
                 "the library drawn as the treemap's root")
    assert browser.js("return [...document.querySelectorAll('#bytes-chart g.pathbar')]"
                      ".map((g) => g.textContent);") == [t["labels"][0]]


def test_the_uncompressed_button_redraws_the_treemap(browser: Browser,
                                                     pages: dict[str, Page]) -> None:
    """A click on "uncompressed" gives the blocks drawn the document's uncompressed sizes and
    redraws them (the blocks' texts change); "stored" brings the stored sizes back."""
    page = pages["wheel"]
    t = page.doc["bytes"]
    assert t["stored"] != t["uncompressed"]
    _open(browser, page)
    drawn = ("const d = document.getElementById('bytes-chart').data[0];"
             "return [d.ids, d.values];")

    def values_are(key: str) -> bool:
        ids, values = browser.js(drawn)
        return len(ids) > 2 and values == [t[key][int(i)] for i in ids]

    assert values_are("stored")
    before = _shown_slices(browser)
    browser.click(browser.find("#bytes-uncompressed"))
    browser.wait(lambda: values_are("uncompressed"), 10, "uncompressed values")
    browser.wait(lambda: _shown_slices(browser) != before, 10, "the treemap redrawn")
    assert browser.attrs(".bar button.on", ["id"]) == [{"id": "bytes-uncompressed"}]
    browser.click(browser.find("#bytes-stored"))
    browser.wait(lambda: values_are("stored"), 10, "stored values")


# -- 4. the tables are the commands' figures ---------------------------------------------------

@pytest.mark.parametrize("page", ["wheel", "library"], indirect=True)
def test_bytes_table_is_ls_summary(browser: Browser, page: Page) -> None:
    """Each library's stored and uncompressed device code bytes are ``ls --summary``'s."""
    summaries = _per_file(page.json("ls"))
    _open(browser, page)
    rows = _rows(browser, "#bytes-table")
    assert len(rows) == len(summaries) > 0
    for row, s in zip(rows, summaries, strict=True):
        assert s["file"] == row["library"] or Path(s["file"]).name == row["library"]
        for key in ("stored", "uncompressed"):
            assert row["cells"][key]["data-value"] == str(s[key]), (row["library"], key)


def _coverage(browser: Browser, page: Page) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The coverage table's library rows and its total row's cells."""
    _open(browser, page)
    rows = _rows(browser, "#coverage-table")
    total = browser.js("""
        return Object.fromEntries([...document.querySelectorAll(
          '#coverage-table tr[data-total] td[data-device]')].map((td) =>
            [td.getAttribute('data-device'), {verdict: td.getAttribute('data-verdict'),
             min: td.getAttribute('data-min-driver')}]));""")
    return rows, total


@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_coverage_cells_are_check_verdicts(browser: Browser, page: Page) -> None:
    """Every cell's verdict is ``check --arch`` (every GPU the page shows) ``--json``'s for
    that library and GPU, with the page's driver; the total row's is check's for the input."""
    devices = page.doc["devices"]
    checked = page.json("check")
    files = _per_file(checked)
    rows, total = _coverage(browser, page)
    assert len(devices) > 1 and len(rows) == len(files) > 0
    for row, f in zip(rows, files, strict=True):
        assert f["file"] == row["library"] or Path(f["file"]).name == row["library"]
        assert sorted(row["cells"]) == sorted(devices)
        for d in devices:
            assert row["cells"][d]["data-verdict"] == f["verdicts"][d]["status"], \
                (row["library"], d, f["verdicts"][d]["reason"])
    assert {d: c["verdict"] for d, c in total.items()} == \
        {d: checked["verdicts"][d]["status"] for d in devices}


def test_a_cuda_12_8_driver_fails_curand_13(browser: Browser, pages: dict[str, Page]) -> None:
    """With ``--driver 12.8`` (given to ``report`` and ``check``), sm_90 fails: its cubins
    need a CUDA 13.0 driver; the cell says so, as check does. Without a driver it loads."""
    rows, _ = _coverage(browser, pages["driver"])
    checked = pages["driver"].json("check")
    ((f),) = _per_file(checked)
    assert f["verdicts"]["sm_90"]["status"] == "fails"
    assert "12.8" in f["verdicts"]["sm_90"]["reason"]
    ((row),) = rows
    assert row["cells"]["sm_90"]["data-status"] == "fails"
    assert row["cells"]["sm_90"]["data-verdict"] == "fails"
    rows, _ = _coverage(browser, pages["wheel"])
    assert rows[0]["cells"]["sm_90"]["data-status"] in ("native", "mixed")


@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_no_cell_that_fails_is_drawn_as_loading(browser: Browser, page: Page) -> None:
    """A cell whose verdict is ``fails`` (check: the library cannot load on that GPU, with
    the page's driver or with any) is not coloured as loading (native, PTX JIT or both)."""
    rows, _ = _coverage(browser, page)
    wrong = [(r["library"], d, c["data-status"]) for r in rows for d, c in r["cells"].items()
             if c["data-verdict"] == "fails" and c["data-status"] not in ("fails", "none")]
    assert wrong == []


@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_minimum_drivers_are_check_min_driver(browser: Browser, page: Page) -> None:
    """The total row's minimum driver per GPU is ``check --min-driver --json``'s (whatever
    driver the page judges with)."""
    floors = page.json("min-driver")["min_driver"]
    _, total = _coverage(browser, page)
    assert total and set(total) <= set(floors)
    assert {d: c["min"] for d, c in total.items()} == \
        {d: floors[d]["min_driver"] or "" for d in total}
    assert any(c["min"] for c in total.values())


def test_comparison_is_diff(browser: Browser, pages: dict[str, Page]) -> None:
    """The comparison's counts are ``diff OLD NEW --json``'s summary."""
    page = pages["wheel"]
    assert page.old is not None
    summary = page.json("diff")["summary"]
    _open(browser, page)
    cells = browser.attrs("#comparison-table td[data-key]", ["data-key", "data-value"])
    keys: Sequence[str] = ("added", "removed", "changed", "unchanged", "regressions")
    assert {c["data-key"]: c["data-value"] for c in cells} == {k: str(summary[k]) for k in keys}
    assert summary["added"] and summary["removed"] and summary["changed"]


def test_comparison_size_changes_are_the_files(browser: Browser, pages: dict[str, Page]) -> None:
    """Each library's change columns are the difference of its file sizes inside the two wheels
    (zipfile's) and of its device code (``ls --summary --json`` of each wheel), the rows per arch
    are each wheel's ``ls --summary`` archs (the library's path is the same in both cuRAND
    wheels), and the worst growth is one row per kernel image (library, kernel, arch) with the
    fields that grew, largest first."""
    page = pages["wheel"]
    assert page.old is not None
    _open(browser, page)
    rows = {r["library"]: r["cells"] for r in _rows(browser, "#comparison-sizes")}

    def sizes(wheel: Path) -> dict[str, int]:
        with zipfile.ZipFile(wheel) as zf:
            return {i.filename: i.file_size for i in zf.infolist()}

    def stored(doc: dict[str, Any]) -> dict[str, int]:
        return {f["file"]: f["stored"] for f in _per_file(doc)}

    old_size, new_size = sizes(page.old), sizes(page.input)
    old_doc = json.loads(subprocess.run(
        [sys.executable, "-m", "fatbinkit", "ls", str(page.old), "--summary", "--json"],
        capture_output=True, text=True, check=True).stdout)
    old_stored = stored(old_doc)
    new_stored = stored(page.json("ls"))
    assert rows and set(rows) <= set(new_size) | set(old_size)
    for library, cells in rows.items():
        if library in old_size and library in new_size:
            assert int(cells["change"]["data-value"]) == new_size[library] - old_size[library]
            assert int(cells["stored_change"]["data-value"]) == \
                new_stored[library] - old_stored[library]
        else:
            assert cells["change"]["data-value"] == ""
    per_arch = browser.js("""
        return [...document.querySelectorAll('#comparison-arch-sizes tr[data-arch]')].map(
          (tr) => [tr.dataset.library, tr.dataset.kind, tr.dataset.arch,
                   ...['old', 'new'].map((k) =>
                     tr.querySelector('td[data-key=' + k + ']').dataset.value)]);""")

    def archs(doc: dict[str, Any]) -> dict[tuple[str, str, str], int]:
        return {(f["file"], a["kind"], a["arch"]): a["stored"]
                for f in _per_file(doc) for a in f["archs"]}

    old_archs, new_archs = archs(old_doc), archs(page.json("ls"))
    assert {(lib, k, a): (o, n) for lib, k, a, o, n in per_arch} == {
        key: (str(old_archs.get(key, "")), str(new_archs.get(key, "")))
        for key in old_archs.keys() | new_archs.keys()}
    worst = browser.attrs("#comparison-worst tr[data-kernel]",
                          ["data-library", "data-kernel", "data-arch", "data-fields"])
    assert worst and {w["data-library"] for w in worst} <= set(rows)
    grouped: dict[tuple[str, str, str, int], list[str]] = {}  # one row per kernel image
    for c in page.doc["comparison"]["worst"]:
        grouped.setdefault((c["library"], c["kernel"], c["arch"], c["instance"]),
                           []).append(c["field"])
    assert [(w["data-library"], w["data-kernel"], w["data-arch"], w["data-fields"])
            for w in worst] == [(k[0], k[1], k[2], ",".join(f)) for k, f in grouped.items()]


def _weighed(browser: Browser, doc: dict[str, Any], gpus: list[str]) -> None:
    """The page's ``fatbinkitWeigh(gpus)`` equals ``doc``'s what-if of that set (Python's, held
    to what prune writes by tests/test_report.py), per library and in total."""
    got = browser.js("return window.fatbinkitWeigh(arguments[0]);", gpus)
    keys = ("kept", "dropped", "exact", "refused")
    (total,) = [w for w in doc["what_if"] if w["gpus"] == gpus]
    assert {k: got[k] for k in keys} == {k: total[k] for k in keys}, gpus
    for lib, mine in zip(doc["libraries"], got["libraries"], strict=True):
        (theirs,) = [w for w in lib["what_if"] if w["gpus"] == gpus]
        assert {k: mine[k] for k in keys} == {k: theirs[k] for k in keys}, (lib["name"], gpus)


# AMD GPUs as the report names them (its devices: the GPU with its default features)
MI300, MI200 = "gfx942:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"


def test_any_gpu_set_is_weighed_in_the_page(browser: Browser, pages: dict[str, Page],
                                            mixed: Path, tmp_path: Path) -> None:  # noqa: F811
    """The page weighs GPU sets of the reader's choice by prune's rules: its JavaScript gives,
    per library and in total, what ``report(keep=...)`` gives for sets the page was not made
    for (a pair, three GPUs, a GPU that loads nothing: refused) on cuRAND 13, CuPy, and AMD's
    JAX wheel (compressed bundles: not exact) and CuPy ROCm, and libraries built where prune's
    rules bite (tests/test_prune_truth.py's: a kernel only one image holds, a module with no
    kernel, a module left no image); ticking GPUs and pressing the button adds that set's rows
    to the table and a bar to the chart."""
    from fatbinkit.report import report

    page = pages["wheel"]
    sets = [["sm_90"], ["sm_80", "sm_120"], ["sm_75", "sm_89", "sm_100"], ["sm_50"]]
    doc = report(page.input, keep=sets).to_dict()
    assert [w["refused"] for w in doc["what_if"]] == [False, False, False, True]
    _open(browser, page)
    for gpus in sets:
        _weighed(browser, doc, gpus)
    for gpus in ("sm_80", "sm_120"):
        browser.click(browser.js("return document.querySelector("
                                 "'#what-if-choose input[data-device=' + arguments[0] + ']');",
                                 gpus))
    browser.click(browser.js("return document.getElementById('what-if-weigh');"))
    row = "#what-if-table tr[data-custom][data-gpus='sm_80,sm_120'][data-library='']"
    browser.wait(lambda: browser.js(f"return document.querySelector(\"{row}\") !== null;"),
                 10, row)
    (total,) = [w for w in doc["what_if"] if w["gpus"] == ["sm_80", "sm_120"]]
    assert browser.attrs(f"{row} td[data-key=kept]", ["data-value"]) == [
        {"data-value": str(total["kept"])}]
    browser.wait(lambda: browser.js("return document.getElementById('what-if-chart')"
                                    ".dataset.sets;") == str(len(page.doc["what_if"]) + 1),
                 10, "the chart drawn with the set added")
    others = [(pages["library"].input, [["sm_90"], ["sm_70", "sm_120"]]),
              (mixed / "libguard.so", [["sm_75"], ["sm_80"]]),
              (mixed / "libmix.so", [["sm_90"], ["sm_120"], ["sm_80", "sm_120"]]),
              (_wheel(JAX_ROCM7_PRNG), [[MI300], [MI200, "gfx1100"], ["gfx1250"]]),
              (fetch(CUPY_ROCM7_RANDOM), [[MI300], [MI200, "gfx1100"]])]
    for n, (source, keep) in enumerate(others):
        made = report(source, keep=keep)
        path = tmp_path / f"other{n}.html"
        made.write(path)
        browser.open(path)
        for gpus in keep:
            _weighed(browser, made.to_dict(), gpus)
    assert not report(_wheel(JAX_ROCM7_PRNG), keep=[[MI300]]).to_dict()["what_if"][0]["exact"]


# -- 5. a script reads the page ----------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, indirect=True)
def test_the_embedded_json_is_the_report(browser: Browser, page: Page) -> None:
    """The document in ``script#fatbinkit-report``, parsed by the browser, is ``report
    --json``'s (kernel names with ``<`` and all)."""
    _open(browser, page)
    text = browser.js("return JSON.stringify(JSON.parse("
                      "document.getElementById('fatbinkit-report').textContent));")
    assert json.loads(text) == page.doc
