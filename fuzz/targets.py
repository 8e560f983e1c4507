"""What each fuzz target feeds a mutant to: the public readers, the CLI, ``inject`` and ``prune``.

A target returns normally (the input was read) or raises :class:`FatbinkitError` (it was refused
with a clear error); anything else is a failure. Targets also assert properties an independent
reader would agree with: a parsed fatbin writes back byte for byte, JSON output parses, extract
writes inside its folder only and nothing on failure, a failed ``inject`` leaves no output.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from fatbinkit.errors import FatbinkitError
from fatbinkit.formats.arch import Arch

__all__ = ["TARGETS", "Target"]

_DEVICES = (Arch(75), Arch(90), Arch(100), Arch(120))
_DRIVERS = (None, (12, 4), (13, 0))
INJECT_TIMEOUT = 5.0  # seconds for LIEF's child: a slower input is an InjectError


def _fatbin(data: bytes, work: Path) -> None:
    from fatbinkit.formats.fatbin import DecompressionBudget, Fatbin

    fb = Fatbin.from_bytes(data)
    assert fb.to_bytes() == data, "a parsed fatbin does not write back byte for byte"
    budget = DecompressionBudget.for_input(len(data))
    for e in fb.entries:
        _ = (e.arch, e.identifier, e.options, e.compression, e.data_size, e.code_version)
        e.data(budget=budget)


def _scan(data: bytes, work: Path) -> None:
    from fatbinkit.scan import extract_names, scan

    codes = scan(data, all=True)
    names = extract_names(codes, "input.so")
    assert all(n and "/" not in n and n not in (".", "..") for n in names), names
    for c in codes:
        _ = (c.entry.arch, c.entry.identifier)


def _cubin(data: bytes, work: Path) -> None:
    from fatbinkit.formats import cubin as module

    _walks_agree(data)
    cubin = module.Cubin.from_bytes(data)
    json.dumps([f.to_dict() for f in cubin.functions])
    _ = (cubin.arch, cubin.toolkit, cubin.virtual_arch)


def _walks_agree(data: bytes) -> None:
    """Where the cubin walk in C accepts a cubin, the pure reader reads it the same (and does
    not refuse it): tests/test_cubin_fast.py's property, on every mutant."""
    from fatbinkit.formats import cubin as module

    walk = module._compiled
    if walk is None:
        return
    for mode, read in ((0, module.Cubin.from_bytes), (1, module.cubin_outline)):
        if walk.walk(data, mode, module.KernelParam, module.CubinFunction) is None:
            continue
        fast = _outcome(read, data)
        module._compiled = None
        try:
            pure = _outcome(read, data)
        finally:
            module._compiled = walk
        assert fast == pure and repr(fast) == repr(pure), "the C walk and _Reader differ"


def _outcome(read: Callable[[bytes], Any], data: bytes) -> Any:
    """What ``read(data)`` returns, or the type and text of the error it raises."""
    try:
        return read(data)
    except FatbinkitError as e:
        return type(e), str(e)


def _ptx(data: bytes, work: Path) -> None:
    from fatbinkit.formats.ptx import Ptx

    ptx = Ptx.from_bytes(data)
    _ = (ptx.min_driver, [(e.name, e.params) for e in ptx.entries])


def _compat(data: bytes, work: Path) -> None:
    from fatbinkit.compat import file_verdict, image_sets

    sets = image_sets(data)
    for device in _DEVICES:
        for driver in _DRIVERS:
            str(file_verdict(sets, device, driver))
            for s in sets:
                for kernel in s.kernels[:2]:
                    s.decide(device, driver, kernel=kernel)


_CUDA_ARGV: tuple[tuple[str, ...], ...] = (
    ("ls", "{}", "--all"), ("ls", "{}", "--resources", "--json"),
    ("extract", "{}", "-o", "{out}", "--all"),
    ("check", "{}", "--arch", "sm_90", "--arch", "sm_100", "--driver", "12.4", "--json"),
    ("check", "{}", "--arch", "sm_80", "-v"),
    ("ls", "{}", "--summary", "--kernels", "--json"),
    ("ls", "{}", "--resources", "--top", "5", "--demangle", "--json"),
    ("extract", "{}", "-o", "{out}", "--arch", "sm_90", "--kernel", "*"),
    ("check", "{}", "--arch", "sm_90", "--kernel", "re:.", "--json"),
    ("diff", "{}", "{}", "--json"),
    ("gate", "{}", "--no-spills", "--require-arch", "sm_90", "--max-size", "1M", "--format",
     "json"))
_AMD_ARGV: tuple[tuple[str, ...], ...] = (
    ("ls", "{}", "--all"), ("ls", "{}", "--json"), ("ls", "{}", "--summary", "--json"),
    ("ls", "{}", "--resources", "--json"), ("ls", "{}", "--resources", "--kernel", "*a*"),
    ("extract", "{}", "-o", "{out}", "--all"),
    ("check", "{}", "--arch", "gfx942", "--arch", "gfx90a", "--json"),
    ("check", "{}", "--arch", "gfx1100", "--rocm", "6.1", "--json"), ("check", "{}", "--min-rocm"),
    ("gate", "{}", "--require-arch", "gfx942", "--max-registers", "64", "--format", "json"),
    ("check", "{}", "--arch", "gfx1100", "-v"),
    ("diff", "{}", "{}", "--json"))


def _cli(data: bytes, work: Path, argvs: tuple[tuple[str, ...], ...] = _CUDA_ARGV) -> None:
    from fatbinkit.cli import main

    path = work / "input.so"
    path.write_bytes(data)
    out = work / "out"
    refused = None
    for argv in ([out if a == "{out}" else path if a == "{}" else a for a in args]
                 for args in argvs):
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main([str(a) for a in argv])
        if status == 1 and argv[0] in ("check", "gate"):
            status = 0  # a verdict: the file does not load everywhere asked, breaks a rule
        if status == 3:  # refused: one line naming the error, and extract left nothing
            lines = stderr.getvalue().splitlines()
            assert len(lines) == 1 and lines[0].startswith("fatbinkit: error: "), lines
            assert argv[0] != "extract" or not out.exists(), "extract failed half-way"
            refused = lines[0]
            continue
        assert status == 0, (argv, status, stderr.getvalue())
        if "--json" in argv:  # one of the documents docs/json-schema.json describes
            _schema().validate(json.loads(stdout.getvalue()))
        if argv[0] == "extract":
            for p in out.rglob("*"):
                assert p.parent == out and p.is_file(), f"extract wrote {p}"
            shutil.rmtree(out)
    if refused is not None:
        raise _Refused(refused)


@functools.cache
def _schema() -> Any:
    """A validator of docs/json-schema.json, made once: ``jsonschema.validate`` checks the
    schema itself on every call (0.1-0.2 s each, a tenth of an input's time budget)."""
    schema = json.loads(
        (Path(__file__).resolve().parent.parent / "docs" / "json-schema.json").read_text())
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    return validator(schema)


class _Refused(FatbinkitError):
    """The CLI said ``fatbinkit: error: ...`` and exited 1."""


def _inject(data: bytes, work: Path) -> None:
    from fatbinkit.formats.elf_writer import Blob
    from fatbinkit.inject import inject

    lib, out = work / "lib.so", work / "out.so"
    lib.write_bytes(data)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    try:
        inject(lib, out, [Blob("kernel", b"\x50\xed\x55\xba" + bytes(60))], timeout=INJECT_TIMEOUT)
    except FatbinkitError:
        assert not out.exists(), "a failed inject left its output"
        assert lib.read_bytes() == data, "a failed inject changed its input"
        raise
    assert out.is_file() and os.path.getsize(out) > len(data) // 2



def _pruned(data: bytes, work: Path, archs: list[Any], **options: Any) -> tuple[Path, Any]:
    """``prune`` of ``data`` written to a file in ``work``: the output file and the report; a
    refusal must leave no output and the input as it was (then raised again)."""
    from fatbinkit.slim import prune

    src, out = work / "in.bin", work / "out.bin"
    src.write_bytes(data)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    try:
        return out, prune(src, out, archs, **options)
    except FatbinkitError:
        assert not out.exists(), "a failed prune left its output"
        assert src.read_bytes() == data, "a failed prune changed its input"
        raise


def _slim(data: bytes, work: Path) -> None:
    """prune (the mutant's first byte picks same-size or a recompression too): a refusal leaves
    no output and the input as it was; an output scans and holds nothing but sm_90 SASS or
    PTX."""
    from fatbinkit.formats.arch import Arch
    from fatbinkit.scan import scan

    how = data[-1] % 3 if data else 0
    out, _ = _pruned(data, work, [Arch(90)], same_size=how == 1,
                     codec="zstd" if how == 2 else None, allow_newer_driver=True)
    for code in scan(out, all=True):
        e = code.entry
        assert e.header.kind != 2 or e.arch.number == 90, f"kept {e.arch} SASS"
    out.unlink()


def _amd_slim(data: bytes, work: Path) -> None:
    """prune for gfx942 of an AMD file (the mutant's last byte picks same-size or zstd too): a
    refusal leaves no output and the input as it was; an output's code objects all run on a
    gfx942 (its own processor or its generic target)."""
    from fatbinkit.scan import scan

    how = data[-1] % 3 if data else 0
    out, _ = _pruned(data, work, ["gfx942"], same_size=how == 1,
                     codec="zstd" if how == 2 else None, allow_newer_rocm=True)
    for code in scan(out, all=True):
        if code.kind == "hsaco":
            assert code.target.split(":")[0] in ("gfx942", "gfx9-4-generic"), code.target
    out.unlink()


def _hidden(data: bytes, work: Path) -> None:
    """The deep scan and ``prune --everywhere`` for sm_90 of a library whose device code lies in
    ``.data`` (the mutant's last byte picks zstd too): every image inside the input and read
    within one budget; a refusal leaves no output and the input as it was; in the output each
    hidden container holds no SASS but sm_90's (its zstd and bare cubins are left as they
    were)."""
    from fatbinkit.formats.codec import DecompressionBudget
    from fatbinkit.scan import scan

    budget = DecompressionBudget.for_input(len(data))
    for code in scan(data, everywhere=True):
        assert code.offset >= 0 and code.offset + code.stored <= len(data), str(code)
        if code.hidden:
            code.entry.data(budget=budget)
    out, report = _pruned(data, work, [Arch(90)], everywhere=True,
                          codec="zstd" if data and data[-1] % 2 else None,
                          allow_newer_driver=True)
    written = out.read_bytes()
    other = [code.target for code in scan(out, everywhere=True)
             if code.hidden and code.kind == "sass" and not code.target.startswith("sm_90")
             and written[code.offset - 16 : code.offset - 12] == b"\x50\xed\x55\xba"]
    # in a container, SASS an sm_90 GPU does not load stays only for kernels the loaded
    # image lacks (a mutant's PTX whose names cannot be read), as the report says
    assert len(other) <= report.for_kernels, f"kept {other} SASS"
    out.unlink()


def _bundles(data: bytes, work: Path) -> None:
    """``read_bundles`` on a ``.hip_fatbin`` region (or a bundle file): every entry lies inside
    its bundle's bytes, and a plain bundle's entry is the slice its descriptor names."""
    from fatbinkit.formats.codec import DecompressionBudget
    from fatbinkit.formats.offload_bundle import read_bundles

    for b in read_bundles(data, budget=DecompressionBudget.for_input(len(data))):
        _ = (str(b), b.header_fits_window, b.ids)
        assert b.offset + b.stored_size <= len(data), (b.offset, b.stored_size)
        for e in b.entries:
            _ = (e.bundle_id.processor, e.bundle_id.is_host, e.pack_descriptor())
            assert e.offset + e.size <= len(b.data) and len(e.data) == e.size, str(e)
            if b.compressed is None:
                start = b.offset + e.offset
                assert bytes(e.data) == data[start:start + e.size], str(e)


def _hsaco(data: bytes, work: Path) -> None:
    """``read_code_object``: target, kernels, descriptors read and printed."""
    from fatbinkit.formats.hsaco import read_code_object

    co = read_code_object(data)
    _ = (str(co), co.target_id, co.target_string)
    for k in co.kernels:
        _ = str(k)
        if k.descriptor is not None:
            _ = (str(k.descriptor), k.descriptor.disagreements(k), k.descriptor.pack())


def _offload(data: bytes, work: Path) -> None:
    """``read_offload_binaries``: every image's kind, triple, arch and bytes."""
    from fatbinkit.formats.codec import DecompressionBudget
    from fatbinkit.formats.offload_binary import read_offload_binaries

    for image in read_offload_binaries(data, budget=DecompressionBudget.for_input(len(data))):
        _ = (str(image), image.image_kind, image.offload_kind, image.triple, image.arch)


def _amd_cli(data: bytes, work: Path) -> None:
    """The front door on AMD files: ``fatbinkit.open`` of the bytes (every image read within
    one budget), then the CLI as ``_cli`` runs it, asked about AMD GPUs and ROCm releases."""
    import fatbinkit
    from fatbinkit.formats.codec import DecompressionBudget

    try:
        binary = fatbinkit.open(data, name="input.so")
        budget = DecompressionBudget.for_input(len(data))
        for code in binary.codes:
            _ = (code.kind, code.target, str(code))
            code.entry.data(budget=budget)
    except FatbinkitError:
        pass  # the CLI below must refuse it too, in one line
    _cli(data, work, _AMD_ARGV)


@dataclass(frozen=True)
class Target:
    """A fuzz target: its function, the seed families it mutates, and the largest mutant."""

    name: str
    run: Callable[[bytes, Path], None]
    families: tuple[str, ...]
    max_size: int = 4 << 20


TARGETS = {t.name: t for t in (
    Target("fatbin", _fatbin, ("fatbin",)),
    Target("scan", _scan, ("fatbin", "host", "cubin", "ptx")),
    Target("cubin", _cubin, ("cubin",)),
    Target("ptx", _ptx, ("ptx",)),
    Target("compat", _compat, ("fatbin", "host", "cubin", "ptx")),
    Target("cli", _cli, ("fatbin", "host", "cubin", "ptx")),
    Target("inject", _inject, ("library",)),
    Target("slim", _slim, ("fatbin", "host")),
    Target("amd_bundle", _bundles, ("hipfb",)),
    Target("amd_hsaco", _hsaco, ("hsaco",)),
    Target("amd_offload", _offload, ("offbin",)),
    Target("amd_cli", _amd_cli, ("amdfile",)),
    Target("amd_slim", _amd_slim, ("amdfile", "hipfb")),
    Target("hidden", _hidden, ("hidden",)),
)}
