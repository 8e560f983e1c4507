"""PTX modules: the header (``.version``, ``.target``, ``.address_size``) and ``.entry`` kernels.

Enough of the PTX text is read to decide loadability (:mod:`fatbinkit.compat`) and list kernels:
the ISA version, the target (with its ``a``/``f`` suffix), the address size, and each entry's
parameters. Nothing is compiled; comments are skipped as the PTX ISA defines them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import FormatError, InvalidArgumentError, UnsupportedError
from ..infile import as_content
from .arch import Arch

__all__ = [
    "HEADER_LIMIT",
    "MAX_VERSION_PART",
    "NEWEST_KNOWN_CUDA",
    "PTX_ISA_MIN_CUDA",
    "Ptx",
    "PtxEntry",
    "PtxParam",
    "is_ptx",
    "max_ptx_isa_for_driver",
    "min_driver_for_ptx_isa",
    "parse_ptx_version",
    "ptx_header",
    "ptx_in_steps",
]

# Minimum CUDA version (driver, nvPTXCompiler, nvJitLink) able to load each PTX ISA version: the
# first CUDA release shipping that ISA. Source: NVIDIA PTX ISA, "Release Notes / PTX ISA Version
# release history" (docs.nvidia.com/cuda/parallel-thread-execution/#release-notes), as mirrored in
# NVIDIA's cuda-python ``cuda/bindings/utils/_ptx_utils.py`` (13.5); the test suite compares this
# table with ``cuda.bindings.utils.get_minimal_required_cuda_ver_from_ptx_ver``. CUDA's
# minor-version compatibility does not extend to PTX: a 13.0 driver refuses PTX ISA 9.1.
PTX_ISA_MIN_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    (1, 0): (1, 0), (1, 1): (1, 1), (1, 2): (2, 0), (1, 3): (2, 1), (1, 4): (2, 2),
    (2, 0): (3, 0), (2, 1): (3, 1), (2, 2): (3, 2), (2, 3): (4, 0),
    (3, 0): (4, 1), (3, 1): (5, 0), (3, 2): (5, 5),
    (4, 0): (6, 0), (4, 1): (6, 5), (4, 2): (7, 0), (4, 3): (7, 5),
    (5, 0): (8, 0),
    (6, 0): (9, 0), (6, 1): (9, 1), (6, 2): (9, 2), (6, 3): (10, 0), (6, 4): (10, 1),
    (6, 5): (10, 2),
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4),
    (7, 5): (11, 5), (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4),
    (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0), (9, 1): (13, 1), (9, 2): (13, 2), (9, 3): (13, 3), (9, 4): (13, 4),
    (9, 5): (13, 5),
}
NEWEST_KNOWN_CUDA = max(PTX_ISA_MIN_CUDA.values())

MAX_VERSION_PART = 99  # anything larger in .version is not a PTX ISA version
HEADER_LIMIT = 65536  # bytes read by ptx_header: the header directives open the module

# Comments; an unterminated block comment runs to the end (which also keeps the scan linear).
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_LINE_COMMENT_RE = re.compile(r"//[^\n]*")
_SNIFF_RE = re.compile(rb"^\s*\.version\s+\d+\.\d+", re.M)
_VERSION_RE = re.compile(r"^[ \t]*\.version[ \t]+(\S+)", re.M)
_VERSION_NUM_RE = re.compile(r"^([0-9]{1,9})\.([0-9]{1,9})$")
_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+([^\n;]+)", re.M)
_ADDRESS_RE = re.compile(r"^[ \t]*\.address_size[ \t]+([0-9]{1,9})", re.M)
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*(\(([^)]*)(\)|\Z))?")
_COUNT_RE = re.compile(r"^[0-9]{1,9}$")  # ASCII digits only, bounded: int() takes both
_TYPE_RE = re.compile(r"^\.(?:[bsuf]|bf)([0-9]{1,4})(x2)?$")
_NAME_RE = re.compile(r"^([A-Za-z_$%][\w$]*)(?:\[([0-9]{0,9})\])?$")
# a declaration of the usual shape: `.param`, modifiers without brackets, then the name and an
# optional `[count]` (a lazy run of non-separators: linear, it cannot backtrack across commas)
_DECL_RE = re.compile(
    r"\s*\.param\s((?:[^,\[\]]*?\s)?)([A-Za-z_$%][\w$]*)(?:\s*\[([0-9]{0,9})\])?\s*\Z")
_NOT_NUL_RE = re.compile(rb"[^\0]")
_SPACE_TO_END_RE = re.compile(r"\s*\Z")
#: how much text :func:`ptx_in_steps` carries from one step to the next at most (a line or an
#: entry's opening longer than this: the caller reads whole)
STEP_CARRY = 4 << 20


@dataclass(frozen=True)
class PtxParam:
    """One ``.param`` of an ``.entry``: name, element type, alignment, element count, bytes."""

    name: str
    type: str
    align: int | None
    count: int
    size: int


@dataclass(frozen=True)
class PtxEntry:
    """A kernel (``.entry``) and its parameters, in declaration order."""

    name: str
    params: tuple[PtxParam, ...]

    def __str__(self) -> str:
        """``.entry axpy(.f32 a, .u64 x, .u64 y)``."""
        return f".entry {self.name}({', '.join(f'.{p.type} {p.name}' for p in self.params)})"


@dataclass(frozen=True)
class Ptx:
    """A PTX module's header and kernels."""

    version: tuple[int, int]
    targets: tuple[str, ...]
    arch: Arch
    address_size: int
    entries: tuple[PtxEntry, ...]

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Ptx:
        """Parse PTX text (trailing NULs, as fatbins store it, are ignored)."""
        as_content(data, "Ptx.from_bytes()")
        text = bytes(data).rstrip(b"\0").decode("utf-8", "replace")
        if "\0" in text:
            raise FormatError("PTX text contains a NUL byte", offset=text.index("\0"))
        return cls.from_text(text)

    @classmethod
    def from_text(cls, text: str) -> Ptx:
        """Parse PTX source text."""
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"Ptx.from_text() takes the PTX text (str), not {type(text).__name__}"
                + (": use Ptx.from_bytes()" if isinstance(text, (bytes, bytearray, memoryview))
                   else ""))
        code = _strip_comments(text)
        version, targets, arch = _header(code)
        a = _ADDRESS_RE.search(code)
        address_size = int(a.group(1)) if a else 32  # PTX ISA: 32 when the directive is absent
        if address_size not in (32, 64):
            raise FormatError(f"PTX '.address_size {address_size}' is not 32 or 64")
        entries = []
        for m_entry in _ENTRY_RE.finditer(code):
            name = m_entry.group(1)
            if m_entry.group(2) and not m_entry.group(4):
                raise FormatError(f"PTX entry {_quote(name)}: parameter list never closed")
            entries.append(PtxEntry(name, _params(m_entry.group(3) or "")))
        return cls(version, targets, arch, address_size, tuple(entries))

    @property
    def min_driver(self) -> tuple[int, int] | None:
        """The oldest CUDA driver able to JIT this PTX (None: ISA newer than the table)."""
        try:
            return min_driver_for_ptx_isa(self.version)
        except UnsupportedError:
            return None

    def __str__(self) -> str:
        """``PTX 8.4 compute_90a, 64-bit, 2 entries (axpy, scale)``."""
        n = len(self.entries)
        names = ", ".join(e.name for e in self.entries[:5]) + (", ..." if n > 5 else "")
        return (f"PTX {self.version[0]}.{self.version[1]} {self.arch.compute}, "
                f"{self.address_size}-bit, {n} entr{'y' if n == 1 else 'ies'}"
                + (f" ({names})" if n else ""))


def ptx_in_steps(steps: Iterable[bytes | bytearray | memoryview],
                 lines: Callable[[bytes], object] | None = None,
                 carry: int = STEP_CARRY) -> Ptx | None:
    """:meth:`Ptx.from_bytes` of the text that ``steps`` give one after the other (each step may
    be overwritten by the next: what is kept is copied), never holding the whole text nor a
    decoded copy of it: prune's memory on cuBLASLt's 16 MiB PTX texts. ``lines`` is given the
    raw bytes of the text in pieces of whole lines (the last one perhaps without its line
    break; trailing NULs left out), in order: a per-line reader sees what it would see whole.

    The same :class:`Ptx`, or None where this read is not known to give it (the caller then
    reads whole, which gives its value or its error): a ``/*`` block comment anywhere; a NUL
    followed by anything but NULs (trailing NULs are padding); ``.version``, ``.target`` and
    ``.address_size`` not all in the first ``carry`` characters; a line, or a piece that cannot
    be cut before an ``.entry``, longer than ``carry`` characters; any error the parse raises (a
    bad header, an unclosed parameter list, a parameter with no name).

    How it stays exact: the text is cut only after a line break, so every line is whole in one
    piece and UTF-8 decoding (a line break never continues a sequence), line comments and the
    line-anchored header directives read the same in the piece as in the whole text. An
    ``.entry`` match may span lines, so a piece is parsed only where its last match is closed
    (``)``) or ends before the piece does, and its last ``.entry`` is followed by more than
    white space; otherwise the piece is cut just before the line of its last ``.entry`` (the
    rest carried to the next step), or, where that cannot be done, carried whole. The header
    regexes take their first match, so the first piece parsed, carried until it holds all
    three, gives the whole text's header.
    """
    raw = b""  # the text after the last line break seen (a line not yet complete)
    code = ""  # comment-free text carried: from the line of an .entry whose match is not closed
    padding = False  # a NUL was seen: only NULs may follow
    head: tuple[tuple[int, int], tuple[str, ...], Arch, int] | None = None
    entries: list[PtxEntry] = []

    def parse(piece: str, matches: list[re.Match[str]]) -> bool:
        """Take the header (first piece) and the entries (``matches``) of the comment-free
        ``piece``; False where that is not what the whole read takes."""
        nonlocal head
        if head is None:
            a = _ADDRESS_RE.search(piece)
            if not (a and _VERSION_RE.search(piece) and _TARGET_RE.search(piece)):
                return False
            version, targets, arch = _header(piece)
            size = int(a.group(1))
            if size not in (32, 64):
                return False
            head = version, targets, arch, size
        for m in matches:
            if m.group(2) and not m.group(4):
                return False  # never closed (at the end of the text: the whole read raises it)
            entries.append(PtxEntry(m.group(1), _params(m.group(3) or "")))
        return True

    def closed(piece: str) -> list[re.Match[str]] | None:
        """The ``.entry`` matches of ``piece`` where they are those of the whole text there (a
        piece of whole lines followed by more text), else None."""
        matches = list(_ENTRY_RE.finditer(piece))
        if matches and matches[-1].end() == len(piece) and matches[-1].group(4) != ")":
            return None  # the whole text may go on: more white space, a '(' or parameters
        k = piece.rfind(".entry")
        if k >= 0 and _SPACE_TO_END_RE.match(piece, k + 6) is not None:
            return None  # '.entry' and white space: its name may follow
        return matches

    def take(text: bytes, final: bool) -> bool:
        """Take whole lines of raw ``text`` (all that is left when ``final``); False: read
        whole."""
        nonlocal code
        if b"/*" in text:
            return False
        if lines is not None and text:
            lines(text)
        buf = code + _LINE_COMMENT_RE.sub("", text.decode("utf-8", "replace"))
        code = ""
        if final:
            return parse(buf, list(_ENTRY_RE.finditer(buf)))
        if head is None and not (_ADDRESS_RE.search(buf) and _VERSION_RE.search(buf)
                                 and _TARGET_RE.search(buf)):
            code = buf  # the header is read from the first piece that holds it all
            return len(code) <= carry
        matches = closed(buf)
        if matches is not None:
            return parse(buf, matches)
        k = buf.rfind(".entry")  # cut before the line of the last .entry, carry the rest
        cut = buf.rfind("\n", 0, k) + 1 if k >= 0 else 0
        matches = closed(buf[:cut]) if cut else None
        if matches is not None:
            code = buf[cut:]
            return parse(buf[:cut], matches)
        code = buf  # no cut: wait for the text that closes it
        return len(code) <= carry

    try:
        for step in steps:
            if padding:
                if _NOT_NUL_RE.search(step):
                    return None
                continue
            data = raw + bytes(step)
            nul = data.find(b"\0")
            if nul >= 0:
                if _NOT_NUL_RE.search(data, nul):
                    return None
                padding, data = True, data[:nul]
            end = data.rfind(b"\n") + 1
            raw = data[end:]
            if len(raw) > carry or (end and not take(data[:end], False)):
                return None
        if not take(raw, True):
            return None
    except FormatError:
        return None  # the whole read raises it, or another error it meets first
    assert head is not None
    version, targets, arch, address_size = head
    return Ptx(version, targets, arch, address_size, tuple(entries))


def is_ptx(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` looks like PTX text (a ``.version X.Y`` line near the start, no NUL
    before the trailing ones)."""
    head = bytes(data[:4096])
    if b"\0" in head.rstrip(b"\0"):
        return False
    return _SNIFF_RE.search(head) is not None


def ptx_header(data: bytes | bytearray | memoryview) -> tuple[tuple[int, int], Arch]:
    """``.version`` and the ``.target`` arch of PTX text, read from its first
    :data:`HEADER_LIMIT` bytes only: what listing a PTX image needs, without its kernels."""
    text = bytes(data[:HEADER_LIMIT]).decode("utf-8", "replace")
    version, _targets, arch = _header(_strip_comments(text))
    return version, arch


def _strip_comments(text: str) -> str:
    """``text`` with comments blanked out (line breaks kept, so lines stay lines). Text with no
    ``/*`` has line comments only: they go with no callback per comment (nvcc's PTX has a
    million of them in cuBLASLt, 2.7 s the other way)."""
    if "/*" not in text:
        return _LINE_COMMENT_RE.sub("", text)
    return _COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _header(code: str) -> tuple[tuple[int, int], tuple[str, ...], Arch]:
    """Version, every ``.target`` word and the arch of comment-free PTX ``code``."""
    m = _VERSION_RE.search(code)
    if not m:
        raise FormatError("not PTX: no '.version' directive")
    version = parse_ptx_version(m.group(1))
    t = _TARGET_RE.search(code)
    if not t:
        raise FormatError("PTX has no '.target' directive")
    targets = tuple(x.strip() for x in t.group(1).split(",") if x.strip())
    archs = [x for x in targets if x.startswith(("sm_", "compute_"))]
    if not archs:
        raise FormatError(f"PTX .target {_quote(t.group(1).strip())} names no sm_XY target")
    try:
        arch = Arch.parse(archs[0])
    except InvalidArgumentError as e:
        raise FormatError(f"PTX target {_quote(archs[0])} is not a GPU arch") from e
    return version, targets, arch


def _quote(text: str, limit: int = 60) -> str:
    """``text`` for an error message: quoted, cut to ``limit`` characters (input can be huge)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_ptx_version(text: str) -> tuple[int, int]:
    """``"8.4"`` -> ``(8, 4)``; anything else (``9``, ``1e9.0``, ``100.1``) is a FormatError."""
    m = _VERSION_NUM_RE.match(text.strip())
    if not m:
        raise FormatError(f"PTX .version {_quote(text)} is not MAJOR.MINOR")
    major, minor = int(m.group(1)), int(m.group(2))
    if not (1 <= major <= MAX_VERSION_PART and minor <= MAX_VERSION_PART):
        raise FormatError(f"PTX .version {_quote(text)} is out of range (1.0 .. 99.99)")
    return major, minor


def min_driver_for_ptx_isa(version: tuple[int, int]) -> tuple[int, int]:
    """The minimum CUDA driver version (major, minor) that can JIT PTX ISA ``version``.

    Raises :class:`UnsupportedError` for an ISA version newer (or other) than the table knows.
    """
    try:
        return PTX_ISA_MIN_CUDA[version]
    except KeyError:
        raise UnsupportedError(
            f"PTX ISA {version[0]}.{version[1]} is not in the known table (up to CUDA "
            f"{NEWEST_KNOWN_CUDA[0]}.{NEWEST_KNOWN_CUDA[1]})") from None


def max_ptx_isa_for_driver(driver: tuple[int, int]) -> tuple[int, int] | None:
    """The newest PTX ISA a CUDA ``driver`` can JIT, or None when the driver is newer than the
    table (then every known ISA loads and newer ones are unknown)."""
    if driver > NEWEST_KNOWN_CUDA:
        return None
    ok = [isa for isa, cuda in PTX_ISA_MIN_CUDA.items() if cuda <= driver]
    return max(ok) if ok else (0, 0)


def _params(text: str) -> tuple[PtxParam, ...]:
    """Parse ``.param .u64 .ptr .global .align 1 p0, .param .align 8 .b8 p1[48]``.

    Declarations of the usual shape (``_DECL_RE``) have their modifiers decoded once per
    distinct modifier text (kernels repeat them; 200 k parameters in 3 MB: 0.59 s, not 1.46 s);
    anything else goes through the token-by-token path, which also makes the errors.
    """
    out = []
    known: dict[str, tuple[str, int, int | None]] = {}
    for decl in text.split(","):
        m = _DECL_RE.match(decl)
        if m:
            mods, name, count_text = m.groups()
            decoded = known.get(mods)
            if decoded is None:
                decoded = known[mods] = _modifiers(mods.split())
            typ, width, align = decoded
            count = int(count_text) if count_text else 1
            out.append(PtxParam(name, typ, align, count, width * count))
            continue
        parts: list[list[str]] = []
        for tok in decl.split():  # `p1 [48]` is `p1[48]`: glue a bracket to the name before it
            if tok.startswith("[") and parts:
                parts[-1].append(tok)  # joined once below: no quadratic string growth
            else:
                parts.append([tok])
        tokens = ["".join(p) for p in parts]
        if not tokens or tokens[0] != ".param":
            continue
        name_m = _NAME_RE.match(tokens[-1])
        if not name_m:
            raise FormatError(f"PTX parameter declaration {_quote(decl.strip())} has no name")
        typ, width, align = _modifiers(tokens[1:-1])
        count = int(name_m.group(2)) if name_m.group(2) else 1
        out.append(PtxParam(name_m.group(1), typ, align, count, width * count))
    return tuple(out)


def _modifiers(tokens: list[str]) -> tuple[str, int, int | None]:
    """Type, element width in bytes and ``.align`` of the tokens between ``.param`` and the
    parameter's name (the last type wins; ``.align`` takes the count after it, never the name:
    a name starts with a letter, ``_``, ``$`` or ``%``)."""
    typ, width, align = "", 0, None
    for i, tok in enumerate(tokens):
        t = _TYPE_RE.match(tok)
        if t:
            typ = tok[1:]
            width = int(t.group(1)) // 8 * (2 if t.group(2) else 1)
        elif tok == ".pred":
            typ, width = "pred", 1
        elif tok == ".align" and i + 1 < len(tokens) and _COUNT_RE.match(tokens[i + 1]):
            align = int(tokens[i + 1])
    return typ, width, align
