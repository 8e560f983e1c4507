"""Wheels (PEP 427, the binary distribution format): find the ELF files inside one, and write a
copy with some members replaced and ``RECORD`` made anew (each file's SHA-256 and size).

The copy keeps every member's name, order, time stamp and permissions, and the file name (so
its tags); only ``RECORD`` moves to the end, as the format recommends. Signatures over the old
``RECORD`` (``RECORD.jws``, ``RECORD.p7s``) no longer hold: they are left out, and the caller
says so.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .errors import FormatError, InputError
from .outfile import atomic_path

__all__ = ["SIGNATURES", "elf_members", "is_wheel", "record_name", "rewrite"]

SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_CHUNK = 1 << 20


def is_wheel(path: os.PathLike[str]) -> bool:
    """Whether ``path`` names a wheel: a ``.whl`` file that is a zip archive."""
    return os.fspath(path).endswith(".whl") and zipfile.is_zipfile(path)


def _open(path: os.PathLike[str]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"cannot read wheel {os.fspath(path)}: {e}") from e


def record_name(zf: zipfile.ZipFile) -> str:
    """The member name of the wheel's ``RECORD`` (``<name>-<version>.dist-info/RECORD``)."""
    found = [n for n in zf.namelist()
             if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(found) != 1:
        raise FormatError(f"a wheel has one .dist-info/RECORD; this one has {len(found)}")
    return found[0]


def elf_members(path: os.PathLike[str]) -> Iterator[str]:
    """The names of the members that are ELF files (by their first bytes)."""
    with _open(path) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.file_size < 64:
                continue
            with zf.open(info) as f:
                if f.read(4) == b"\x7fELF":
                    yield info.filename


def extract(path: os.PathLike[str], member: str, target: Path) -> None:
    """Write one member to ``target``."""
    with _open(path) as zf, zf.open(member) as src, open(target, "wb") as dst:
        while chunk := src.read(_CHUNK):
            dst.write(chunk)


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
            size = os.path.getsize(path) if path is not None else info.file_size
            digest = hashlib.sha256()
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


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
