"""Add blobs to an already linked shared library (post-link injection, with LIEF).

All blobs go into one new read-only section, ``.fatbinkit``, which LIEF maps with one new
``PT_LOAD`` segment (flags ``R``); each blob gets dynamic symbols ``__<name>_start`` and
``__<name>_end`` (in that section) and ``__<name>_size`` (absolute), so ``dlopen`` + ``dlsym``
find them with no relink. A library that already references those names as undefined symbols gets
them defined in place, so its own code resolves to the blobs.

Refused, with an error instead of a guess: a file that is not ELF or not ELF64 little-endian, one
that is not a shared object (``ET_DYN``), one LIEF cannot parse or write back, names the library
already defines or only imports with a version, and a library injected once already.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from .errors import (
    FatbinkitError,
    FormatError,
    InjectError,
    InputError,
    OutputError,
    TruncatedError,
    UnsupportedError,
)
from .formats import elf
from .formats.elf_writer import DEFAULT_ALIGN, Blob, Placed, place
from .infile import FilePath, as_path, open_input, read_input
from .outfile import atomic_path
from .toolchain import WorkerResult, run_worker

__all__ = [
    "MEMORY_FLOOR",
    "MEMORY_PER_BYTE",
    "SECTION",
    "TIME_FLOOR",
    "TIME_PER_BYTE",
    "inject",
]

SECTION = ".fatbinkit"

_MAX_CHECKED = 1 << 16  # bytes of each blob compared after writing (head and tail)


@contextmanager
def _quiet_lief() -> Iterator[Any]:
    """Import LIEF with its logger silenced (its failures become our exceptions instead)."""
    import lief

    level = lief.logging.get_level()
    lief.logging.set_level(lief.logging.LEVEL.OFF)
    try:
        yield lief
    finally:
        lief.logging.set_level(level)


def _read_header(path: Path) -> os.stat_result:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the open below for ever
            kind = "it is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise InputError(f"cannot read {path}: {kind}")
        with open(path, "rb") as f:
            head = f.read(elf.FileHeader.FORMAT.size)
    except InputError:
        raise
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    if head[:4] != elf.ELFMAG:
        raise FormatError(f"{path} is not an ELF file", offset=0)
    header = elf.FileHeader.unpack(head)
    if not header.is_elf64_le:
        raise UnsupportedError(f"{path}: only ELF64 little-endian libraries can be injected")
    if header.type != elf.ET_DYN:
        raise UnsupportedError(
            f"{path} is not a shared library (e_type {header.type}, expected ET_DYN {elf.ET_DYN})"
        )
    for what, count, entsize, expected in (
        ("program header", header.phnum, header.phentsize, 56),
        ("section header", header.shnum, header.shentsize, elf.SectionHeader.FORMAT.size),
    ):
        if count and entsize != expected:
            raise FormatError(f"{path}: {what} size {entsize}, expected {expected}", offset=0)
    for what, offset, count, entsize in (
        ("program headers", header.phoff, header.phnum, header.phentsize),
        ("section headers", header.shoff, header.shnum, header.shentsize),
    ):
        if offset + count * entsize > st.st_size:
            raise TruncatedError(
                f"{path}: {what} end at {offset + count * entsize}, past the file end {st.st_size}",
                offset=offset,
            )
    return st


def _content(p: Placed) -> bytes:
    if isinstance(p.source, Path):
        data = read_input(p.source)
        if len(data) != p.size:
            raise InputError(f"{p.source} changed size while being embedded")
        return data
    return bytes(p.source)


# The worker's limits: LIEF holds the library several times over while it rewrites it.
MEMORY_FLOOR = 2 << 30
MEMORY_PER_BYTE = 16
TIME_FLOOR = 120.0
TIME_PER_BYTE = 1e-7  # 100 s per GB

_ERRORS: dict[str, type[FatbinkitError]] = {
    cls.__name__: cls
    for cls in (FormatError, TruncatedError, UnsupportedError, InputError, OutputError,
                InjectError)
}


class _Row(NamedTuple):
    """A placed blob as the worker needs it: its three symbol names, offset and size."""

    symbols: tuple[str, str, str]
    offset: int
    size: int


def inject(
    library: FilePath,
    output: FilePath,
    blobs: Iterable[Blob],
    *,
    align: int = DEFAULT_ALIGN,
    timeout: float | None = None,
    memory: int | None = None,
) -> None:
    """Write ``output``: ``library`` plus ``blobs`` (style ``"aoti"`` names) and their symbols.

    ``output`` may equal ``library``; it is replaced atomically either way. The library is first
    read with fatbinkit's own bounds-checked ELF reader; LIEF then parses, edits and writes it in
    a child process limited to ``memory`` bytes and ``timeout`` seconds (defaults grow with the
    library), so that a LIEF crash, runaway allocation or hang is an :class:`InjectError` and
    neither this process nor ``output`` is touched. The result is parsed again and checked
    (section, segment flags, every symbol's address and the blob bytes there) before it
    replaces ``output``.
    """
    src = as_path(library, "inject() library")
    output = as_path(output, "inject() output")
    st = _read_header(src)
    try:
        with open_input(src) as f:  # section table and names, bounds-checked, before LIEF
            names = {s.name for s in elf.sections(elf.FileSource(f.fileno(), st.st_size))}
    except FormatError as e:
        raise FormatError(f"{src}: {e}", offset=e.offset) from e
    _check_sections(src, names)  # the refusals that need no LIEF (the child checks them again)
    placement = place(blobs, style="aoti", align=align)
    payload = bytearray()
    for p in placement.blobs:
        payload += bytes(p.padding)
        payload += _content(p)
    rows = [_Row(p.symbols, p.offset, p.size) for p in placement.blobs]
    memory = memory if memory is not None else MEMORY_FLOOR + MEMORY_PER_BYTE * (
        st.st_size + len(payload))
    timeout = timeout if timeout is not None else TIME_FLOOR + TIME_PER_BYTE * st.st_size
    with tempfile.TemporaryDirectory(prefix="fatbinkit-inject-") as work, \
            atomic_path(output, mode=stat.S_IMODE(st.st_mode)) as tmp:
        blob_file = Path(work) / "payload"
        blob_file.write_bytes(payload)
        spec = Path(work) / "spec.json"
        spec.write_text(json.dumps({"align": placement.align, "blobs": rows}))
        result = run_worker("fatbinkit.inject", [os.fsdecode(src), str(blob_file), str(spec),
                                                 str(tmp), str(memory)], timeout=timeout)
        _raise_for(result, src, output, timeout, memory)


def _raise_for(result: WorkerResult, src: Path, output: os.PathLike[str] | os.PathLike[bytes],
               timeout: float, memory: int) -> None:
    """Map how the worker ended to the library's errors (nothing on success)."""
    if result.returncode == 0:
        return
    untouched = f"{os.fsdecode(os.fspath(output))} untouched"
    if result.returncode is None:
        raise InjectError(f"LIEF ran past {timeout:g} s on {src}; stopped, {untouched}")
    if result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        raise InjectError(f"LIEF crashed ({name}) on {src}, in a process held to {memory >> 20} "
                          f"MiB of memory (inject(memory=...) raises it); {untouched}")
    try:
        doc = json.loads(result.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        cls, message = _ERRORS[doc["error"]], str(doc["message"])
    except (ValueError, IndexError, KeyError, TypeError):
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        raise InjectError(f"LIEF failed on {src} (exit status {result.returncode}"
                          f"{': ' + tail[0] if tail else ''}); {untouched}") from None
    if cls is InjectError and "memory" in message:
        message += f" ({memory} bytes; inject(memory=...) raises it)"
    raise cls(message)


def _check_sections(src: Path, names: set[str]) -> None:
    """Refuse a library without ``.dynsym`` or with a ``.fatbinkit`` section already."""
    if ".dynsym" not in names:
        raise UnsupportedError(f"{src} has no dynamic symbol table to export from")
    if SECTION in names:
        raise UnsupportedError(
            f"{src} already has a {SECTION} section; inject all blobs into the original at once")


def _edit(src: Path, payload: bytes, rows: list[_Row], align: int, out: Path) -> None:
    """The worker: LIEF parses ``src``, adds the section and symbols, writes ``out``, and the
    result is checked."""
    with _quiet_lief() as lief:
        binary = lief.ELF.parse(str(src))
        if binary is None:
            raise FormatError(f"LIEF cannot parse {src}")
        _check_sections(src, {sec.name for sec in binary.sections})
        existing: dict[str, Any] = {}
        for row in rows:
            for name in row.symbols:
                if not binary.has_dynamic_symbol(name):
                    continue
                sym = binary.get_dynamic_symbol(name)
                if sym.shndx != elf.SHN_UNDEF:
                    raise UnsupportedError(f"{src} already defines {name}")
                version = sym.symbol_version
                if version is not None and version.value > 1:
                    raise UnsupportedError(
                        f"{src} imports {name} with a symbol version; cannot define it in place"
                    )
                existing[name] = sym

        section = lief.ELF.Section(SECTION)
        section.type = lief.ELF.Section.TYPE.PROGBITS
        section.flags = lief.ELF.Section.FLAGS.ALLOC
        section.alignment = align
        section.content = memoryview(payload)
        section = binary.add(section, loaded=True)
        if section is None:
            raise UnsupportedError(f"LIEF could not add a section to {src}; nothing written")
        base = section.virtual_address
        shndx = [s.name for s in binary.sections].index(SECTION)

        for row in rows:
            start, end, size = row.symbols
            for name, value, index in (
                (start, base + row.offset, shndx),
                (end, base + row.offset + row.size, shndx),
                (size, row.size, elf.SHN_ABS),
            ):
                sym = existing.get(name)
                if sym is None:
                    sym = lief.ELF.Symbol()
                    sym.name = name
                    sym = binary.add_dynamic_symbol(sym)
                sym.binding = lief.ELF.Symbol.BINDING.GLOBAL
                sym.type = lief.ELF.Symbol.TYPE.NOTYPE
                sym.visibility = lief.ELF.Symbol.VISIBILITY.DEFAULT
                sym.value = value
                sym.size = 0
                sym.shndx = index

        try:  # to bytes, not write(path): LIEF cannot open a path that is not UTF-8
            data = binary.write_to_bytes()
        except Exception as e:  # LIEF raises its own types, or nothing at all
            raise OutputError(f"LIEF failed to write the library for {src}: {e}") from e
        out.write_bytes(data)
        _check(lief, out, rows, payload, src)


def _worker(argv: list[str]) -> int:
    """``python -m fatbinkit.inject SRC PAYLOAD SPEC OUT MEMORY``: :func:`_edit` under a memory
    limit; an error is printed as one JSON line ``{"error", "message"}`` (exit status 3)."""
    src, payload, spec_path, out, memory = argv
    try:
        import resource

        limit = int(memory)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # no RLIMIT_AS here: the time limit still holds
        pass
    try:
        spec = json.loads(Path(spec_path).read_text())
        rows = [_Row((r[0][0], r[0][1], r[0][2]), r[1], r[2]) for r in spec["blobs"]]
        _edit(Path(src), Path(payload).read_bytes(), rows, spec["align"], Path(out))
    except FatbinkitError as e:
        error, message = type(e).__name__, str(e)
    except MemoryError:
        error, message = "InjectError", f"LIEF ran out of its memory limit on {src}"
    except Exception as e:  # LIEF returning None where an object was expected, and the like
        error, message = "InjectError", f"LIEF failed on {src}: {type(e).__name__}: {e}"
    else:
        return 0
    print(json.dumps({"error": error if error in _ERRORS else "InjectError",
                      "message": message}))
    return 3


def _check(lief: Any, path: Path, placed: list[_Row], payload: bytes, src: Path) -> None:
    """Re-read LIEF's output and refuse it unless every symbol points at its blob, read-only."""
    with warnings.catch_warnings():  # LIEF warns on enum values it does not know
        warnings.simplefilter("ignore")
        _check_output(lief, path, placed, payload, src)


def _check_output(lief: Any, path: Path, placed: list[_Row], payload: bytes, src: Path) -> None:
    out = lief.ELF.parse(str(path)) if path.stat().st_size else None
    if out is None or not out.has_section(SECTION):
        raise UnsupportedError(f"LIEF wrote an unreadable library for {src}; nothing written")
    section = out.get_section(SECTION)
    segment = out.segment_from_virtual_address(section.virtual_address)
    flags = lief.ELF.Segment.FLAGS
    if (
        segment is None
        or segment.type != lief.ELF.Segment.TYPE.LOAD
        or not segment.has(flags.R)
        or segment.has(flags.W)
        or segment.has(flags.X)
    ):
        raise UnsupportedError(f"LIEF did not map {SECTION} read-only for {src}; nothing written")
    # mmap needs offset = address modulo the page size; the library's largest p_align is the
    # largest page size it was linked for (64 KiB on aarch64).
    page = max(
        (s.alignment for s in out.segments if s.type == lief.ELF.Segment.TYPE.LOAD), default=1
    )
    if page and (segment.file_offset - segment.virtual_address) % page:
        raise UnsupportedError(
            f"LIEF placed {SECTION} at offset {segment.file_offset:#x} for address "
            f"{segment.virtual_address:#x}, not congruent modulo {page:#x}; nothing written"
        )
    base = section.virtual_address
    for p in placed:
        start, end, size = (
            out.get_dynamic_symbol(n) if out.has_dynamic_symbol(n) else None for n in p.symbols
        )
        if (
            start is None
            or end is None
            or size is None
            or start.value != base + p.offset
            or end.value != base + p.offset + p.size
            or size.value != p.size
            or size.shndx != elf.SHN_ABS
        ):
            raise UnsupportedError(
                f"LIEF lost or moved the symbols of {p.symbols[0]} in {src}; nothing written"
            )
        for lo, hi in ((0, min(p.size, _MAX_CHECKED)), (max(0, p.size - _MAX_CHECKED), p.size)):
            if hi > lo:
                got = bytes(out.get_content_from_virtual_address(start.value + lo, hi - lo))
                if got != payload[p.offset + lo : p.offset + hi]:
                    raise UnsupportedError(
                        f"LIEF wrote wrong bytes for {p.symbols[0]} in {src}; nothing written"
                    )


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
