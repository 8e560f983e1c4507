"""Wheels (PEP 427, the binary distribution format): find the ELF files inside one, and write a
copy with some members replaced and ``RECORD`` made anew (each file's SHA-256 and size).

The copy keeps every member's name, order, time stamp and permissions, and the file name (so
its tags); only ``RECORD`` moves to the end, as the format recommends. Signatures over the old
``RECORD`` (``RECORD.jws``, ``RECORD.p7s``) no longer hold: they are left out, and the caller
says so.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import lzma
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from .errors import FatbinkitError, FormatError, InputError
from .outfile import atomic_path

__all__ = ["SIGNATURES", "ZIP_ERRORS", "corrupt", "extract_binaries", "is_wheel", "record_name",
           "rewrite"]

SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_CHUNK = 1 << 20


def is_wheel(path: os.PathLike[str]) -> bool:
    """Whether ``path`` names a wheel: a ``.whl`` file that is a zip archive."""
    return os.fspath(path).endswith(".whl") and zipfile.is_zipfile(path)


# What reading a zip archive raises for bad data: a bad header or CRC, corrupt deflate, LZMA or
# bzip2 data (bzip2's is an OSError without a file name), an encrypted member (RuntimeError), an
# unknown method, a short file.
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, NotImplementedError,
              RuntimeError)


def corrupt(e: BaseException) -> bool:
    """Whether an exception met while reading a zip archive is about its data (not the disk)."""
    return isinstance(e, ZIP_ERRORS) or (
        isinstance(e, OSError) and not isinstance(e, FatbinkitError) and e.filename is None
        and not e.errno)


@contextlib.contextmanager
def _reading(path: os.PathLike[str], member: str = "") -> Iterator[None]:
    """Errors of the zip archive (:func:`corrupt`) as a :class:`FormatError` that names the
    wheel and the member; those of the disk as an :class:`InputError`."""
    where = f"{os.fspath(path)}" + (f": {member}" if member else "")
    try:
        yield
    except (*ZIP_ERRORS, OSError) as e:
        if isinstance(e, FatbinkitError):
            raise
        if corrupt(e):
            raise FormatError(f"corrupt wheel {where}: {e}") from e
        assert isinstance(e, OSError)
        raise InputError(f"cannot read wheel {where}: {e.strerror or e}") from e


def _open(path: os.PathLike[str]) -> zipfile.ZipFile:
    with _reading(path):
        return zipfile.ZipFile(path)


def record_name(zf: zipfile.ZipFile) -> str:
    """The member name of the wheel's ``RECORD`` (``<name>-<version>.dist-info/RECORD``)."""
    found = [n for n in zf.namelist()
             if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(found) != 1:
        raise FormatError(f"a wheel has one .dist-info/RECORD; this one has {len(found)}")
    return found[0]


def extract_binaries(path: os.PathLike[str], folder: Path) -> list[tuple[str, Path]]:
    """Every member that is an ELF or PE file (a ``.so``, or a Windows ``.pyd``/``.dll``: by its
    first bytes), written to ``folder`` as ``<n>.bin``: (member name, file), in one pass over
    the archive."""
    from .formats import pe

    out: list[tuple[str, Path]] = []
    with _open(path) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.file_size < 64:
                continue
            with _reading(path, info.filename), zf.open(info) as src:
                head = src.read(1024)  # a PE signature is found through the offset at 0x3C
                if head[:4] != b"\x7fELF" and not pe.is_pe(head):
                    continue
                target = folder / f"{len(out)}.bin"
                with open(target, "wb") as dst:
                    dst.write(head)
                    while chunk := src.read(_CHUNK):
                        dst.write(chunk)
            out.append((info.filename, target))
    return out


def rewrite(source: os.PathLike[str], output: os.PathLike[str],
            replaced: Mapping[str, os.PathLike[str]]) -> tuple[str, ...]:
    """Write ``source`` to ``output`` with the members named in ``replaced`` taken from those
    files and ``RECORD`` made anew; returns the signature files left out."""
    dropped: list[str] = []
    with _open(source) as zin, atomic_path(output) as tmp, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        record = record_name(zin)
        lines: list[str] = []
        for info in zin.infolist():
            name = info.filename
            if name == record:
                continue
            if name.rsplit("/", 1)[-1] in SIGNATURES and name.startswith(record.split("/")[0]):
                dropped.append(name)
                continue
            new = zipfile.ZipInfo(name, info.date_time)
            new.external_attr = info.external_attr
            new.compress_type = zipfile.ZIP_STORED if info.is_dir() else zipfile.ZIP_DEFLATED
            if info.is_dir():
                zout.writestr(new, b"")
                continue
            path = replaced.get(name)
            digest = hashlib.sha256()
            with _reading(source, name):
                if path is None and _RAW_COPY:  # as stored: hashed by inflating, not deflated
                    with zin.open(info) as src:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                    _copy_stored(zin, info, zout)
                    size = info.file_size
                else:
                    size = os.path.getsize(path) if path is not None else info.file_size
                    with (open(path, "rb") if path is not None else zin.open(info)) as src, \
                            zout.open(new, "w", force_zip64=size > zipfile.ZIP64_LIMIT) as dst:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                            dst.write(chunk)
            lines.append(f"{name},sha256={_b64(digest.digest())},{size}")
        lines.append(f"{record},,")
        info = zipfile.ZipInfo(record, zin.getinfo(record).date_time)
        info.external_attr = zin.getinfo(record).external_attr
        info.compress_type = zipfile.ZIP_DEFLATED
        zout.writestr(info, "\n".join(lines) + "\n")
    return tuple(dropped)


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name and extra field lengths
# Copying a member's compressed bytes as they are needs what ZipFile keeps for itself (its file,
# where the central directory starts, its member list): CPython 3.10 to 3.13 have them; else
# members are inflated and deflated again.
_RAW_COPY = hasattr(zipfile.ZipFile, "_writecheck") and hasattr(zipfile.ZipInfo, "FileHeader")


def _copy_stored(zin: zipfile.ZipFile, info: zipfile.ZipInfo, zout: zipfile.ZipFile) -> None:
    """Append ``info``'s member of ``zin`` to ``zout`` with its compressed bytes copied, as
    ``ZipFile.open(.., "w")`` would lay it out (local header with sizes and CRC, no descriptor)."""
    src, dst = zin.fp, zout.fp
    if src is None or dst is None:
        raise InputError("a wheel's zip file is closed")
    src.seek(info.header_offset)
    magic, name_len, extra_len = _LOCAL_HEADER.unpack(src.read(_LOCAL_HEADER.size))
    if magic != b"PK\x03\x04":
        raise FormatError(f"wheel member {info.filename}: no local header at "
                          f"{info.header_offset:#x}")
    new = zipfile.ZipInfo(info.filename, info.date_time)
    new.compress_type, new.external_attr = info.compress_type, info.external_attr
    new.create_system, new.flag_bits = info.create_system, info.flag_bits & ~0x08
    new.file_size, new.compress_size, new.CRC = info.file_size, info.compress_size, info.CRC
    zout._writecheck(new)  # type: ignore[attr-defined]
    dst.seek(zout.start_dir)
    new.header_offset = dst.tell()
    zip64 = max(info.file_size, info.compress_size) > zipfile.ZIP64_LIMIT
    dst.write(new.FileHeader(zip64))
    src.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    left = info.compress_size
    while left:
        chunk = src.read(min(_CHUNK, left))
        if not chunk:
            raise FormatError(f"wheel member {info.filename} ends early")
        dst.write(chunk)
        left -= len(chunk)
    zout.start_dir = dst.tell()
    zout.filelist.append(new)
    zout.NameToInfo[new.filename] = new
    zout._didModify = True  # type: ignore[attr-defined]


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
