"""fatbinkit's AMD listing and extraction against the LLVM oracles, on every HIP fixture of
tests/hipbuild.py and on the ROCm wheels' libraries (jax-rocm7-plugin, cupy-rocm-7-0/5-0).

What fatbinkit says (``fatbinkit.open(...).select()``, ``Binary.extract``, ``ls --json``,
``ls --summary --json``) is compared with what LLVM 19's and 22's tools say of the same bytes:

* Listing: per bundle, the multiset of (bundle entry ID, size) equals what
  ``clang-offload-bundler --list`` prints (IDs only, in hash order: compared as sets; the host
  entry, which fatbinkit skips, taken out) with the sizes of the files its ``--unbundle`` writes,
  and what ``llvm-readelf-22 --offloading`` prints (ID, offset, size: offsets compared for plain
  bundles only, since for a CCOB it prints the decompressed bundle's offsets, ROCM.md §1.2).
* Extracted bytes: each image ``extract`` writes equals ``clang-offload-bundler --unbundle
  --targets=<id>`` of its bundle, for every LLVM version that reads that bundle.
* Where an oracle fails (LLVM 19 on CCOB v3; readelf 22 stopping after a plain bundle that a
  CCOB follows) fatbinkit is proven right another way: the bundle's own truncated-MD5 hash
  (``MD5(uncompressed).low()``, clang's ``CompressedOffloadBundle``) is recomputed with hashlib
  over the bytes that ``zstandard``/``zlib`` decompress, and that plain bundle, written to a
  file, is listed and unbundled by both bundlers.
* Every extracted code object is an AMDGPU ELF for pyelftools (``e_machine`` 224, HSA OS ABI);
  its target as fatbinkit derives it from ``e_flags`` is the target ID of its bundle entry, and
  llvm-readelf 22 names the same processor.
* ``ls --summary --json`` adds up to the listing; a compressed bundle's entries' ``stored``
  sizes add up to its CCOB total size.

How a bundle reaches the bundler: the bundler's ``--type=o`` reads only the object-file form
(``__CLANG_OFFLOAD_BUNDLE__<id>`` sections, ``-fgpu-rdc`` objects), so for a ``.hip_fatbin``
section llvm-objcopy 22 dumps the section and the test cuts it into bundles: each starts at a
4096-aligned offset with the plain magic or ``CCOB`` (clang aligns each bundle to 4096,
``CGCUDANV.cpp``; their number must equal the 24-byte ``.hipFatBinSegment`` records, which
pyelftools counts), a plain bundle runs to the next start (trailing zero padding is ignored by
the bundler's ``ReadHeader``), a CCOB v2/v3 to its header's total size. Given one bundle at a
time, LLVM 22's bundler no longer reads past the first of two CCOBs ("Src size is incorrect",
ROCM.md §1.2). Archives are unpacked with ``llvm-ar x`` (the bundler's ``--list --type=a``
prints nothing); an archive of ``-fgpu-rdc`` objects is also unbundled with ``--type=a``.
llvm-objdump 22's ``--offloading`` is not used: it copies a CCOB's entries from the file at their
decompressed offsets (garbage; llvm/llvm-project PR #192729 fixed it after 22.1.8).
``.llvm.offloading`` (new driver) is listed by ``llvm-objdump-19 --offloading`` (22 reads
clang 19's kind as "none") and unpacked by ``clang-offload-packager`` 19 and 22.

Tool outputs are computed once per test session (``_oracle``), in a session temporary folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import zstandard
from elftools.elf.elffile import ELFFile
from hipbuild import build
from llvm import run_llvm
from thirdparty import (
    CUPY_ROCM5_RANDOM,
    CUPY_ROCM7_RANDOM,
    JAX_ROCM7_LINALG,
    JAX_ROCM7_PRNG,
    JAX_ROCM7_SOLVER,
    fetch,
)

import fatbinkit
from fatbinkit.cli import main
from fatbinkit.vendors.hip.images import HipImage

PLAIN = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB = b"CCOB"
ALIGN = 4096  # clang's HIPCodeObjectAlign: each bundle of .hip_fatbin starts on it
WRAPPER = 24  # one .hipFatBinSegment record per bundle
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
OBJECT_PREFIX = "__CLANG_OFFLOAD_BUNDLE__"
KINDS = ("hsaco", "spirv", "bitcode")  # every HIP image kind: extract writes them all here
# Processors LLVM 19's bundler lists entries of but will not unbundle ("Can't find bundles for
# hipv4-amdgcn-amd-amdhsa--gfx950-": its target-ID parser does not know them; both came in
# LLVM 20). jax-rocm7-plugin has both.
UNKNOWN19 = {"gfx950", "gfx1153"}
# ROCm 5's 4-component host entry, which LLVM 22's bundler lists but cannot parse when it
# unbundles: it walks the entries in its StringMap's (hash) order, and every target it would
# reach after the host entry fails with "invalid bundle id read from the bundle" (seen on
# cupy-rocm-5-0; reproduced on bundle19 with its host entry so respelled).
HOST4 = "host-x86_64-unknown-linux"


def refusal_known(major: int, listed: set[str], entry: str, error: str) -> bool:
    """Whether a bundler's refusal to unbundle ``entry`` (which it listed) is one of the two
    above."""
    processor = entry.split("-", 5)[5].split(":")[0]
    if major == 19:
        return processor in UNKNOWN19 and "Can't find bundles for" in error
    return HOST4 in listed and "invalid bundle id read from the bundle" in error


# -- the inputs -------------------------------------------------------------------------------

FILE, FATBIN, AR_FATBIN, OBJFORM, AR_OBJFORM, OFFLOADING = (
    "bundle file", ".hip_fatbin", "archive of .hip_fatbin objects", "object-file form",
    "archive of object-file-form objects", ".llvm.offloading")


@dataclass(frozen=True)
class Case:
    """An input: how to get it, where its device code is (``form``), whether it is read with
    ``all`` (bitcode), and how many of its bundles llvm-readelf 22 lists (None: all; it lists
    none of the object-file form or ``.llvm.offloading``, and only the first bundle of a
    ``.hip_fatbin`` where a CCOB follows a plain bundle, ROCM.md §3.3)."""

    path: Callable[[], Path]
    form: str
    all: bool = False
    readelf: int | None = None


CASES: dict[str, Case] = {
    "bundle19": Case(partial(build, "bundle19"), FILE),
    "obj19": Case(partial(build, "obj19"), FATBIN),
    "obj19z": Case(partial(build, "obj19z"), FATBIN),
    "obj22": Case(partial(build, "obj22"), FATBIN),
    "obj22z": Case(partial(build, "obj22z"), FATBIN),
    "generic19": Case(partial(build, "generic19"), FATBIN),
    "lib19mix": Case(partial(build, "lib19mix"), FATBIN, readelf=1),
    "lib22zz": Case(partial(build, "lib22zz"), FATBIN),
    "ar19": Case(partial(build, "ar19"), AR_FATBIN),
    "rdc19": Case(partial(build, "rdc19"), OBJFORM, all=True, readelf=0),
    "newdrv19": Case(partial(build, "newdrv19"), OFFLOADING, all=True, readelf=0),
    "ar19rdc": Case(partial(build, "ar19rdc"), AR_OBJFORM, all=True, readelf=0),
    "jax_linalg": Case(partial(fetch, JAX_ROCM7_LINALG), FATBIN),
    "jax_prng": Case(partial(fetch, JAX_ROCM7_PRNG), FATBIN),
    "jax_solver": Case(partial(fetch, JAX_ROCM7_SOLVER), FATBIN),
    "cupy_rocm7": Case(partial(fetch, CUPY_ROCM7_RANDOM), FATBIN),
    "cupy_rocm5": Case(partial(fetch, CUPY_ROCM5_RANDOM), FATBIN),
}
# the inputs with compressed bundles (CCOB v2: clang 19, v3: clang 22 and ROCm 7)
COMPRESSED = ["obj19z", "obj22z", "lib19mix", "lib22zz", "ar19", "jax_linalg", "jax_prng",
              "jax_solver"]


# -- the oracles' side --------------------------------------------------------------------------


@dataclass(frozen=True)
class Ccob:
    """A compressed bundle's header (clang's ``CompressedOffloadBundle``, ROCM.md §1.2)."""

    version: int
    method: int  # 0 zlib, 1 zstd (llvm::compression::Format)
    total: int
    size: int  # uncompressed
    hash: int  # MD5(uncompressed).low()
    header: int

    @classmethod
    def at(cls, data: bytes, off: int) -> Ccob | None:
        if data[off:off + 4] != CCOB:
            return None
        version, method = struct.unpack_from("<HH", data, off + 4)
        if version == 2:
            total, size, digest = struct.unpack_from("<IIQ", data, off + 8)
            return cls(version, method, total, size, digest, 24)
        if version == 3:
            total, size, digest = struct.unpack_from("<QQQ", data, off + 8)
            return cls(version, method, total, size, digest, 32)
        pytest.fail(f"CCOB v{version} at {off:#x}: no input here has one (v1 has no total size)")

    def decompress(self, blob: bytes) -> bytes:
        payload = blob[self.header:self.total]
        if self.method == 1:
            return bytes(zstandard.ZstdDecompressor().decompress(
                payload, max_output_size=self.size))
        assert self.method == 0, self.method
        return zlib.decompress(payload)


@dataclass
class Route:
    """What one tool listed of a bundle (host entry included where it lists one), the bytes it
    extracted per entry ID, and the entries it listed but refused to extract (ID -> error)."""

    ids: set[str]
    data: dict[str, bytes] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


@dataclass
class Bundle:
    """One bundle as the oracles read it. ``routes`` maps a way of reading it (``"19"``: LLVM
    19's bundler on the bundle as stored, ``"22 plain"``: LLVM 22's on the decompressed
    bundle, ``"packager 19"``...) to the IDs it listed (None: it could not list them, host
    included) and the bytes it extracted per ID; ``failed`` says why a route gave nothing."""

    member: str
    start: int  # the bundle's offset in its section (or file)
    ccob: Ccob | None = None
    stored: bytes = b""
    plain: bytes | None = None  # a CCOB's payload, decompressed
    routes: dict[str, Route] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class Oracle:
    """Everything the LLVM tools say of one input."""

    bundles: list[Bundle]
    readelf: list[tuple[str, list[tuple[str, int, int]]]]  # (file in the URI, [(id, off, size)])
    wrappers: dict[str, int]  # member -> .hipFatBinSegment records
    members: dict[str, int]  # archive member -> file offset of its bytes
    flags: dict[str, str] = field(default_factory=dict)  # code object file -> readelf's Flags


def check(major: int, tool: str, *args: str | Path, cwd: Path | None = None) -> str:
    proc = run_llvm(major, tool, *args, cwd=cwd)
    assert proc.returncode == 0, (tool, major, args, proc.stderr[-2000:])
    return proc.stdout


def bundler(major: int, bundle: Path, out: Path, kind: str = "o") -> Route | str:
    """``clang-offload-bundler --list``, then ``--unbundle`` of every listed entry but the host's
    (one call, one ``--output`` per target; when that fails, one call per target, to learn
    which it refuses); the error text where listing fails."""
    listed = run_llvm(major, "clang-offload-bundler", "--list", f"--type={kind}",
                      f"--input={bundle}")
    if listed.returncode != 0:
        return listed.stderr.strip() or f"exit {listed.returncode}"
    route = Route(set(listed.stdout.split()))
    targets = sorted(i for i in route.ids if not i.startswith("host-"))
    outs = [out.with_name(f"{out.name}.{major}.{n}") for n in range(len(targets))]

    def unbundle(ids: list[str], files: list[Path]) -> str:
        proc = run_llvm(major, "clang-offload-bundler", "--unbundle", f"--type={kind}",
                        f"--input={bundle}", f"--targets={','.join(ids)}",
                        *(f"--output={o}" for o in files))
        return proc.stderr.strip() if proc.returncode else ""

    if targets and unbundle(targets, outs):
        for target, o in zip(targets, outs, strict=True):
            if error := unbundle([target], [o]):
                route.refused[target] = error
    route.data.update({t: o.read_bytes() for t, o in zip(targets, outs, strict=True)
                       if t not in route.refused})
    return route


def read_routes(bundle: Bundle, path: Path) -> None:
    """The bundlers on the bundle at ``path``; for a CCOB also on its decompressed payload."""
    for major in (19, 22):
        got = bundler(major, path, path)
        if isinstance(got, str):
            bundle.failed[str(major)] = got
        else:
            bundle.routes[str(major)] = got
    if bundle.ccob is not None:
        bundle.plain = bundle.ccob.decompress(bundle.stored)
        plain = path.with_name(path.name + ".plain")
        plain.write_bytes(bundle.plain)
        for major in (19, 22):
            got = bundler(major, plain, plain)
            assert not isinstance(got, str), (major, plain, got)
            bundle.routes[f"{major} plain"] = got


def cut(section: bytes, member: str, into: Path) -> list[Bundle]:
    """The bundles of a ``.hip_fatbin`` section, each read by the bundlers (module docstring)."""
    starts = [o for o in range(0, len(section), ALIGN)
              if section.startswith(PLAIN, o) or section.startswith(CCOB, o)]
    found: list[Bundle] = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(section)
        ccob = Ccob.at(section, start)
        if ccob is not None:
            assert start + ccob.total <= end, (member, start, ccob)
            end = start + ccob.total
        bundle = Bundle(member, start, ccob, section[start:end])
        path = into / f"{member or 'file'}.{start:#x}.bundle"
        path.write_bytes(bundle.stored)
        read_routes(bundle, path)
        found.append(bundle)
    return found


def hip_fatbin(obj: Path, member: str, work: Path) -> tuple[list[Bundle], int]:
    """The bundles of ``obj``'s ``.hip_fatbin`` (dumped by llvm-objcopy 22) and the number of
    its wrapper records (pyelftools)."""
    section = work / f"{member or obj.name}.hip_fatbin"
    check(22, "llvm-objcopy", f"--dump-section=.hip_fatbin={section}", obj, work / "discard")
    with obj.open("rb") as f:
        segment = ELFFile(f).get_section_by_name(".hipFatBinSegment")
        wrappers = segment["sh_size"] // WRAPPER
    return cut(section.read_bytes(), member, work), wrappers


def unpack(archive: Path, into: Path) -> list[Path]:
    """The members of ``archive``, in order, written by ``llvm-ar x``."""
    into.mkdir()
    names = check(19, "llvm-ar", "t", archive).split()
    check(19, "llvm-ar", "x", archive, cwd=into)
    return [into / n for n in names]


def ar_offsets(archive: Path) -> dict[str, int]:
    """Member name -> file offset of its bytes (the ``ar`` format: 60-byte headers)."""
    data = archive.read_bytes()
    assert data[:8] == b"!<arch>\n"
    out: dict[str, int] = {}
    off = 8
    while off + 60 <= len(data):
        name = data[off:off + 16].decode().rstrip()
        size = int(data[off + 48:off + 58])
        if name not in ("/", "//", "/SYM64/"):
            assert not name.startswith("/"), f"long member name {name}: not expected here"
            out[name.rstrip("/")] = off + 60
        off += 60 + size + (size & 1)
    return out


def object_form_archive(archive: Path, work: Path, members: list[Path]) -> list[Bundle]:
    """Each ``-fgpu-rdc`` member listed and unbundled by the bundlers as an object, and the
    archive unbundled as a whole by ``--type=a`` (one archive per target, members named
    ``<stem>-<id, ':' as '_'><stem>.bc``) as another route."""
    found: list[Bundle] = []
    for obj in members:
        bundle = Bundle(obj.name, 0)
        read_routes(bundle, obj)
        found.append(bundle)
    ids = sorted({i for b in found for i in b.routes["19"].ids if not i.startswith("host-")})
    for major in (19, 22):
        outs = [work / f"type-a.{major}.{n}.a" for n in range(len(ids))]
        check(major, "clang-offload-bundler", "--unbundle", "--type=a", f"--input={archive}",
              f"--targets={','.join(ids)}", *(f"--output={o}" for o in outs))
        for target, out in zip(ids, outs, strict=True):
            for extracted in unpack(out, work / f"{out.name}.x"):
                [bundle] = [b for b in found if extracted.name.startswith(
                    f"{Path(b.member).stem}-{target.replace(':', '_')}")]
                route = bundle.routes.setdefault(f"{major} type=a", Route(set()))
                route.ids.add(target)
                route.data[target] = extracted.read_bytes()
    return found


def offloading(obj: Path, work: Path) -> list[Bundle]:
    """``.llvm.offloading``: one OffloadBinary blob per module, listed by llvm-objdump 19
    (``<producer>-<triple>--<arch>``, the ID fatbinkit gives it) and unpacked by
    clang-offload-packager 19 and 22 by triple and arch."""
    text = check(19, "llvm-objdump", "--offloading", obj)
    found: list[Bundle] = []
    for n, block in enumerate(text.split("OFFLOADING IMAGE [")[1:]):
        keys = dict(line.split(None, 1) for line in block.splitlines()[1:] if line.strip())
        entry = f"{keys['producer']}-{keys['triple']}--{keys['arch']}"
        bundle = Bundle("", n)
        for major in (19, 22):
            out = work / f"packager.{major}.{n}"
            check(major, "clang-offload-packager", obj,
                  f"--image=file={out},triple={keys['triple']},arch={keys['arch']}")
            bundle.routes[f"packager {major}"] = Route({entry}, {entry: out.read_bytes()})
        found.append(bundle)
    return found


_READELF = re.compile(r"^(\S+)\s+file://(.*)#offset=(\d+)&size=(\d+)$")


def readelf_offloading(path: Path) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """``llvm-readelf-22 --offloading``: per bundle (a host entry starts one), the file its
    URIs name and its entries (ID, offset, size)."""
    out: list[tuple[str, list[tuple[str, int, int]]]] = []
    for line in check(22, "llvm-readelf", "--offloading", path).splitlines():
        m = _READELF.match(line.strip())
        if m is None:
            continue
        entry, uri, off, size = m[1], m[2], int(m[3]), int(m[4])
        if entry.startswith("host-"):
            out.append((uri, []))
        out[-1][1].append((entry, off, size))
    return out


_ORACLES: dict[str, Oracle] = {}


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Oracle]:
    def get(name: str) -> Oracle:
        if name not in _ORACLES:
            _ORACLES[name] = _oracle(name, tmp_path_factory.mktemp(name))
        return _ORACLES[name]
    return get


def _oracle(name: str, work: Path) -> Oracle:
    case = CASES[name]
    path = case.path()
    bundles: list[Bundle] = []
    wrappers: dict[str, int] = {}
    members: dict[str, int] = {}
    if case.form == FILE:
        bundle = Bundle("", 0, None, path.read_bytes())
        read_routes(bundle, path)
        bundles.append(bundle)
    elif case.form == FATBIN:
        bundles, wrappers[""] = hip_fatbin(path, "", work)
    elif case.form == AR_FATBIN:
        members = ar_offsets(path)
        for obj in unpack(path, work / "members"):
            found, wrappers[obj.name] = hip_fatbin(obj, obj.name, work)
            bundles += found
    elif case.form == OBJFORM:
        bundle = Bundle("", 0)
        read_routes(bundle, path)
        bundles.append(bundle)
    elif case.form == AR_OBJFORM:
        members = ar_offsets(path)
        bundles = object_form_archive(path, work, unpack(path, work / "members"))
    else:
        bundles = offloading(path, work)
    listed = [] if case.form == FILE else readelf_offloading(path)
    return Oracle(bundles, listed, wrappers, members)


# -- fatbinkit's side -------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """One listed image, as fatbinkit gives it, with the bytes ``extract`` wrote for it."""

    name: str
    entry: str  # HipImage.identifier_text: the bundle entry ID
    bundle: tuple[str, str | int]  # (member, container; the object-file form: one bundle)
    kind: str
    arch: str
    member: str
    offset: int
    stored: int
    uncompressed: int
    compression: str | None
    data: bytes


_OURS: dict[str, list[Image]] = {}


@pytest.fixture(scope="session")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Image]]:
    def get(name: str) -> list[Image]:
        if name not in _OURS:
            _OURS[name] = _ours(name, tmp_path_factory.mktemp(f"{name}.ours"))
        return _OURS[name]
    return get


def _ours(name: str, out: Path) -> list[Image]:
    case = CASES[name]
    with fatbinkit.open(case.path(), all=case.all) as binary:
        items = binary.select()
        written = binary.extract(out, kinds=KINDS)
        assert sorted(p.name for p in written) == sorted(it.name for it in items)
        images: list[Image] = []
        for it in items:
            c = it.code
            assert isinstance(c.entry, HipImage)
            key: str | int = ("object form" if c.source.startswith(OBJECT_PREFIX)
                              else c.container)
            images.append(Image(it.name, c.entry.identifier_text, (c.member, key), it.kind,
                                it.arch, c.member, c.offset, it.stored, it.uncompressed,
                                c.compression, (out / it.name).read_bytes()))
    return images


def grouped(images: list[Image]) -> list[list[Image]]:
    """The images per bundle, bundles in file order."""
    groups: dict[tuple[str, str | int], list[Image]] = {}
    for img in images:
        groups.setdefault(img.bundle, []).append(img)
    return list(groups.values())


def paired(ours: list[Image], oracle: Oracle) -> Iterator[tuple[list[Image], Bundle]]:
    mine = grouped(ours)
    assert len(mine) == len(oracle.bundles), ([g[0].bundle for g in mine],
                                              [(b.member, b.start) for b in oracle.bundles])
    for group, bundle in zip(mine, oracle.bundles, strict=True):
        assert {img.member for img in group} == {bundle.member}
        yield group, bundle


def cli(*args: str | Path) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main([*map(str, args)])
    assert status == 0, (args, status)
    return buf.getvalue()


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_listing_equals_bundlers(name: str, ours: Callable[[str], list[Image]],
                                 oracle: Callable[[str], Oracle]) -> None:
    """Per bundle, fatbinkit's (entry ID, size) multiset equals each bundler's listing (IDs,
    one host entry taken out) with the sizes of what it unbundles; a plain bundle's entries are
    stored as they are. A ``.hip_fatbin`` holds one bundle per wrapper record."""
    found = oracle(name)
    for member, n in found.wrappers.items():
        assert n == sum(b.member == member for b in found.bundles), (member, n)
    for group, bundle in paired(ours(name), found):
        mine = Counter((img.entry, img.uncompressed) for img in group)
        assert bundle.routes, bundle.failed
        entries = {img.entry for img in group}
        for how, route in bundle.routes.items():
            hosts = {i for i in route.ids if i.startswith("host-")}
            # the bundler lists the host entry; --type=a and the packager extract none
            with_host = not how.startswith("packager") and not how.endswith("type=a")
            assert len(hosts) == with_host, (how, route.ids)
            assert route.ids - hosts == entries, how
            assert set(route.data) | set(route.refused) == entries, how
            assert Counter((i, len(b)) for i, b in route.data.items()) == Counter(
                (e, size) for e, size in mine.elements() if e in route.data), how
            for entry, error in route.refused.items():
                assert refusal_known(int(how.split()[0]), route.ids, entry, error), (
                    how, entry, error)
        if bundle.ccob is None:
            assert all(img.stored == img.uncompressed and img.compression is None
                       for img in group)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.form != FILE])
def test_listing_equals_readelf(name: str, ours: Callable[[str], list[Image]],
                                oracle: Callable[[str], Oracle]) -> None:
    """llvm-readelf 22 --offloading: the bundles it lists (all, or as many as ``Case.readelf``
    says) are fatbinkit's first ones, entry for entry with their sizes (uncompressed: for a CCOB
    it reports the decompressed bundle's entries), and a plain bundle's offsets, which are file
    offsets (in an archive, in the member's own file)."""
    case, found = CASES[name], oracle(name)
    mine = grouped(ours(name))
    expect = len(mine) if case.readelf is None else case.readelf
    assert len(found.readelf) == expect
    for (uri, entries), group, bundle in zip(found.readelf, mine, found.bundles, strict=False):
        member = group[0].member
        if member:
            assert uri == member
        listed = [(e, size) for e, _, size in entries if not e.startswith("host-")]
        assert Counter(listed) == Counter((img.entry, img.uncompressed) for img in group)
        if bundle.ccob is None:
            base = found.members.get(member, 0)
            offsets = {e: off for e, off, _ in entries}
            assert all(offsets[img.entry] == img.offset - base for img in group)


@pytest.mark.parametrize("name", CASES)
def test_extracted_bytes_equal_unbundled(name: str, ours: Callable[[str], list[Image]],
                                         oracle: Callable[[str], Oracle]) -> None:
    """Every image ``extract`` writes is, byte for byte, what every route that reads its bundle
    unbundles for its entry ID; no listed image is left unchecked."""
    for group, bundle in paired(ours(name), oracle(name)):
        for img in group:
            read = [how for how, r in bundle.routes.items() if img.entry in r.data]
            same = [how for how, r in bundle.routes.items() if r.data.get(img.entry) == img.data]
            assert read and same == read, (img.name, bundle.failed)


@pytest.mark.parametrize("name", COMPRESSED)
def test_compressed_bundles_where_oracles_fail(name: str, ours: Callable[[str], list[Image]],
                                               oracle: Callable[[str], Oracle]) -> None:
    """Each CCOB's hash is the truncated MD5 of its payload as zstandard/zlib decompress it,
    and both bundlers read that plain bundle (the ``plain`` routes, which the tests above
    compared with fatbinkit). The stored bundle itself: LLVM 22 reads CCOB v2 and v3 given one
    at a time, LLVM 19 only v2 ("Unknown frame descriptor" on v3). fatbinkit's compressed
    entries take the whole CCOB (its total size) among them."""
    bundles = [(g, b) for g, b in paired(ours(name), oracle(name)) if b.ccob is not None]
    assert bundles
    for group, bundle in bundles:
        ccob = bundle.ccob
        assert ccob is not None and bundle.plain is not None
        assert len(bundle.plain) == ccob.size and bundle.plain.startswith(PLAIN)
        digest = struct.unpack("<Q", hashlib.md5(bundle.plain).digest()[:8])[0]
        assert digest == ccob.hash
        assert {"19 plain", "22 plain", "22"} <= set(bundle.routes)
        if ccob.version == 3:
            assert "Unknown frame descriptor" in bundle.failed["19"]
        else:
            assert "19" in bundle.routes
        assert sum(img.stored for img in group) == ccob.total
        assert {img.compression for img in group} == {"zstd" if ccob.method else "zlib"}


@pytest.mark.parametrize("name", CASES)
def test_code_objects_are_amdgpu_elf(name: str, ours: Callable[[str], list[Image]],
                                     tmp_path: Path) -> None:
    """Each extracted code object: pyelftools reads an ELF64 for EM_AMDGPU (224) with the HSA
    OS ABI; fatbinkit's target (from ``e_flags``) is the target ID of the bundle entry; and
    llvm-readelf 22 names, from the same ``e_flags``, that entry's processor. Bitcode images
    (``-fgpu-rdc``) start with the bitcode magic."""
    images = ours(name)
    objects = [img for img in images if img.kind == "hsaco"]
    for img in images:
        if img.kind == "bitcode":
            assert img.data[:4] == b"BC\xc0\xde"
    if not objects:
        assert CASES[name].all
        return
    paths = []
    for img in objects:
        elf = ELFFile(io.BytesIO(img.data))
        assert elf.elfclass == 64 and elf.little_endian
        machine = elf["e_machine"]
        assert machine in ("EM_AMDGPU", EM_AMDGPU), machine
        # pyelftools names OS ABI 64 ELFOSABI_ARM_AEABI (the same number): read the byte
        assert img.data[7] == ELFOSABI_AMDGPU_HSA
        triple, target = img.entry.split("-", 5)[1:4], img.entry.split("-", 5)[5]
        assert triple == ["amdgcn", "amd", "amdhsa"]
        assert img.arch == target, img.name
        path = tmp_path / img.name
        path.write_bytes(img.data)
        paths.append(path)
    headers = check(22, "llvm-readelf", "-h", *paths)
    flags = re.findall(r"^File: (.*)$|^\s*Flags:\s+0x[0-9a-fA-F]+, ([^,\s]+)", headers, re.M)
    named: dict[str, str] = {}
    current = ""
    for file, proc in flags:
        if file:
            current = Path(file).name
        else:
            named[current] = proc
    assert named == {img.name: img.arch.split(":")[0] for img in objects}


@pytest.mark.parametrize("name", CASES)
def test_ls_json_and_summary_add_up(name: str, ours: Callable[[str], list[Image]],
                                    oracle: Callable[[str], Oracle]) -> None:
    """``ls --json`` rows are the API's items; ``ls --summary --json`` rows (kind, arch) add up
    to them, and the total stored bytes are the plain entries' sizes plus the CCOBs' total
    sizes, as the oracles read them."""
    case, images = CASES[name], ours(name)
    flags = ["--all"] if case.all else []
    path = case.path()
    rows = json.loads(cli("ls", "--json", *flags, path))["entries"]
    assert [(r["name"], r["kind"], r["arch"], r["member"], r["offset"], r["stored"],
             r["uncompressed"], r["compression"]) for r in rows] == [
        (i.name, i.kind, i.arch, i.member or None, i.offset, i.stored, i.uncompressed,
         i.compression) for i in images]
    summary = json.loads(cli("ls", "--summary", "--json", *flags, path))
    by_arch: dict[tuple[str, str], list[int]] = {}
    for img in images:
        row = by_arch.setdefault((img.kind, img.arch), [0, 0, 0])
        row[0] += 1
        row[1] += img.stored
        row[2] += img.uncompressed
    assert {(r["kind"], r["arch"]): [r["entries"], r["stored"], r["uncompressed"]]
            for r in summary["archs"]} == by_arch
    assert (summary["entries"], summary["stored"], summary["uncompressed"]) == (
        len(images), sum(i.stored for i in images), sum(i.uncompressed for i in images))
    found = oracle(name)
    stored = 0
    for bundle in found.bundles:
        if bundle.ccob is not None:
            stored += bundle.ccob.total
        else:
            stored += max(sum(map(len, r.data.values())) for r in bundle.routes.values())
    assert summary["stored"] == stored


@pytest.mark.parametrize("name", ["obj19", "lib22zz"])
def test_cli_extract_writes_what_the_api_does(name: str, ours: Callable[[str], list[Image]],
                                              tmp_path: Path) -> None:
    case = CASES[name]
    cli("extract", *(["--all"] if case.all else []), case.path(), "-o", tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        img.name: img.data for img in ours(name)}
