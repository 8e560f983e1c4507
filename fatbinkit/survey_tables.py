"""The tables of a survey (:mod:`fatbinkit.survey`): their Arrow schemas, versioned, and the rows
one wheel gives, flattened from the records ``ls --summary --json``, ``check --min-driver
--json`` and ``report --json`` emit (:func:`fatbinkit.report.report`'s document).

A survey's output folder holds one Parquet dataset per table, one part per wheel named by the
wheel's SHA-256 (``wheels/<sha256>.parquet``): a retry overwrites its part, ``--resume`` skips
wheels whose part is there, and any Parquet reader (pyarrow, DuckDB, pandas, Spark) reads a
table as ``OUT/wheels/``.

- ``wheels``: one row per wheel read: package, version, tags, sizes, the archs (``ls
  --summary``'s total; ``native`` the archs of SASS or AMD code objects, ``jit`` those of PTX),
  per GPU the verdict and minimum driver (``check --min-driver``'s), what ``prune`` would keep
  per GPU set (``report``'s what-if).
- ``files``: one row per library with device code in a wheel, the same figures per library.
- ``kernels`` (``--kernels``): one row per function of each SASS image and kernel of each PTX
  image, with its resources and the digest of its image (what tells images apart).
- ``errors``: one row per wheel that could not be read: the error, whether it was the input
  (``input``: a corrupt wheel, read again it fails the same) or the run (``engine``: a worker
  lost, a download failed, after the engine's retries), and the attempts made.

Every part's schema metadata says :data:`FORMAT` under the key ``fatbinkit``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import UnsupportedError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FORMAT", "TABLES", "WheelName", "rows", "schema", "wheel_name"]

#: the version of the tables' schemas, in each part's metadata (key ``fatbinkit``)
FORMAT = "fatbinkit-survey/1"
#: the tables of a survey, each a folder of the output
TABLES = ("wheels", "files", "kernels", "errors")


def _pa() -> Any:
    try:
        import pyarrow
    except ImportError as e:  # the extra is not installed
        raise UnsupportedError("fatbinkit survey needs pyarrow: pip install "
                               "'fatbinkit[survey]'") from e
    return pyarrow


def schema(table: str) -> pa.Schema:
    """The Arrow schema of ``table`` (one of :data:`TABLES`)."""
    pa = _pa()
    archs = pa.list_(pa.struct([
        ("kind", pa.string()), ("arch", pa.string()), ("entries", pa.int64()),
        ("stored", pa.int64()), ("uncompressed", pa.int64()),
        ("compression", pa.list_(pa.string())), ("ptx_versions", pa.list_(pa.string()))]))
    devices = pa.list_(pa.struct([
        ("device", pa.string()), ("status", pa.string()), ("coverage", pa.string()),
        ("min_driver", pa.string()), ("native", pa.int64()), ("jit", pa.int64()),
        ("cannot", pa.int64()), ("other_gpus", pa.int64())]))
    what_if = pa.list_(pa.struct([
        ("gpus", pa.list_(pa.string())), ("kept", pa.int64()), ("dropped", pa.int64()),
        ("exact", pa.bool_()), ("refused", pa.bool_())]))
    wheel = [("sha256", pa.string()), ("package", pa.string()), ("version", pa.string())]
    fields: dict[str, list[tuple[str, Any]]] = {
        "wheels": [*wheel, ("filename", pa.string()), ("url", pa.string()),
                   ("build", pa.string()), ("tags", pa.list_(pa.string())),
                   ("size", pa.int64()), ("files", pa.int64()), ("modules", pa.int64()),
                   ("entries", pa.int64()), ("stored", pa.int64()),
                   ("uncompressed", pa.int64()), ("other_files", pa.int64()),
                   ("native", pa.list_(pa.string())), ("jit", pa.list_(pa.string())),
                   ("archs", archs), ("devices", devices), ("what_if", what_if),
                   ("tool", pa.string())],
        "files": [*wheel, ("file", pa.string()), ("size", pa.int64()),
                  ("stored", pa.int64()), ("uncompressed", pa.int64()),
                  ("modules", pa.int64()), ("entries", pa.int64()),
                  ("duplicated", pa.int64()), ("native", pa.list_(pa.string())),
                  ("jit", pa.list_(pa.string())), ("archs", archs), ("devices", devices),
                  ("what_if", what_if)],
        "kernels": [*wheel, ("file", pa.string()), ("kind", pa.string()), ("arch", pa.string()),
                    ("module", pa.int64()), ("kernel", pa.string()), ("entry", pa.bool_()),
                    ("registers", pa.int64()), ("stack", pa.int64()), ("shared", pa.int64()),
                    ("local", pa.int64()), ("spill_stores", pa.int64()),
                    ("spill_loads", pa.int64()), ("size", pa.int64()), ("image", pa.string())],
        "errors": [*wheel, ("filename", pa.string()), ("url", pa.string()),
                   ("kind", pa.string()), ("type", pa.string()), ("error", pa.string()),
                   ("attempts", pa.int64())],
    }
    if table not in fields:
        raise ValueError(f"no survey table {table!r}")
    return pa.schema(fields[table], metadata={"fatbinkit": FORMAT})


@dataclass(frozen=True)
class WheelName:
    """What a wheel's file name says (PEP 427): its package (normalized as PEP 503 says),
    version, build tag and every ``python-abi-platform`` tag it expands to."""

    package: str
    version: str
    build: str | None
    tags: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.package} {self.version} ({', '.join(self.tags)})"


def wheel_name(filename: str) -> WheelName | None:
    """:class:`WheelName` of a wheel's file name; None when it is not one (a ``.pt2``, a
    file named otherwise): its package and version are then not known."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        name, version, build, tags = parse_wheel_filename(os.path.basename(filename))
    except InvalidWheelFilename:
        return None
    return WheelName(str(name), str(version), None if not build else "".join(map(str, build)),
                     tuple(sorted(str(t) for t in tags)))


def _archs(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"kind": a["kind"], "arch": a["arch"], "entries": a["entries"],
             "stored": a["stored"], "uncompressed": a["uncompressed"],
             "compression": list(a["compression"]),
             "ptx_versions": list(a.get("ptx_versions") or ())}  # PTX's only
            for a in summary["archs"]]


def _kinds(summary: Mapping[str, Any], native: bool) -> list[str]:
    """The archs of native code (NVIDIA's SASS, AMD's code objects) or of code the runtime
    compiles when loading it (PTX, SPIR-V), in the vendors' order."""
    from . import vendors

    found = {a["arch"] for a in summary["archs"]
             if (a["kind"] in vendors.of_target(a["arch"]).function_kinds) == native}
    return sorted(found, key=vendors.target_key)


def rows(doc: Mapping[str, Any], head: Mapping[str, Any],
         kernels: Sequence[Mapping[str, Any]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The rows of one wheel from its report document (:func:`fatbinkit.report.document`):
    ``head`` holds its ``sha256``, ``package``, ``version``, ``filename``, ``url``, ``build``,
    ``tags``, ``size``; ``kernels`` the kernel rows, when they are surveyed."""
    key = {k: head[k] for k in ("sha256", "package", "version")}
    files = doc["summary"]["files"]
    total = doc["summary"]["total"] or files[0]
    libraries = doc["libraries"]
    wheel = {
        **key, "filename": head["filename"], "url": head["url"], "build": head["build"],
        "tags": list(head["tags"]), "size": head["size"], "files": len(files),
        "modules": total["modules"], "entries": total["entries"], "stored": total["stored"],
        "uncompressed": total["uncompressed"], "other_files": doc["other_files"],
        "native": _kinds(total, True), "jit": _kinds(total, False), "archs": _archs(total),
        "devices": [{"device": d, "status": c["verdict"], "coverage": c["status"],
                     "min_driver": c["min_driver"], "native": c["native"], "jit": c["jit"],
                     "cannot": c["cannot"], "other_gpus": c["other_gpus"]}
                    for d, c in doc["total_coverage"].items()],
        "what_if": [dict(w) for w in doc["what_if"]], "tool": doc["tool"]}
    per_file = []
    for summary, lib in zip(files, libraries, strict=True):
        per_file.append({
            **key, "file": lib["name"], "size": lib["size"], "stored": lib["stored"],
            "uncompressed": lib["uncompressed"], "modules": summary["modules"],
            "entries": summary["entries"], "duplicated": lib["duplicated"],
            "native": _kinds(summary, True), "jit": _kinds(summary, False),
            "archs": _archs(summary),
            "devices": [{"device": d, "status": c["verdict"], "coverage": c["status"],
                         "min_driver": c["min_driver"], "native": c["native"], "jit": c["jit"],
                         "cannot": c["cannot"], "other_gpus": c["other_gpus"]}
                        for d, c in lib["coverage"].items()],
            "what_if": [dict(w) for w in lib["what_if"]]})
    return {"wheels": [wheel], "files": per_file,
            "kernels": [{**key, **k} for k in kernels or ()], "errors": []}
