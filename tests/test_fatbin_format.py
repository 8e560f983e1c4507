"""The container model on its own: round trips (hypothesis), corrupt and hostile input."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fatbin_kernels import Kernels, kernels_in, system_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fatbinkit.errors import (
    DecompressionError,
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    TruncatedError,
    UnsupportedError,
)
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import (
    EntryFlags,
    EntryHeader,
    EntryKind,
    Fatbin,
    FatbinEntry,
    build_fatbin,
    is_fatbin,
    make_entry,
)
from fatbinkit.scan import scan

FIXTURE_OK = HealthCheck.function_scoped_fixture  # the session fixture is never mutated
PTX = b".version 9.0\n.target sm_90\n.address_size 64\n"
# A minimal stand-in cubin: ELF identification with ABI version 8 (sm < 100 needs nothing more).
FAKE_CUBIN = b"\x7fELF\x02\x01\x01\x41\x08" + bytes(55)


def fake_cubin(sm: int) -> bytes:
    """A header-only ABI v2 cubin for ``sm``: EM_CUDA, the SM in e_flags bits 8-15."""
    head = bytearray(FAKE_CUBIN)
    head[18:20] = (190).to_bytes(2, "little")
    head[48:52] = (sm << 8).to_bytes(4, "little")
    return bytes(head)


@pytest.fixture(scope="session")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    return kernels_in(tmp_path_factory)


def _entry_bytes(**changes: int) -> bytes:
    """One plain PTX entry in a container, with header fields overridden."""
    e = make_entry(EntryKind.PTX, Arch(90), PTX)
    fields = {**e.header.__dict__, **changes}
    return _container(EntryHeader(**fields).pack() + e.extra + bytes(e.stored))


def _container(body: bytes, payload_size: int | None = None) -> bytes:
    size = len(body) if payload_size is None else payload_size
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, size) + body


# -- round trips -----------------------------------------------------------------------------

ARCHS = st.builds(
    Arch,
    st.sampled_from([75, 80, 86, 89, 90, 100, 103, 110, 120, 121]),
    st.sampled_from(["", "a", "f"]),
)
IMAGES = st.lists(
    st.tuples(
        st.sampled_from([EntryKind.ELF, EntryKind.PTX]),
        ARCHS,
        st.binary(max_size=300),
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=20),
        st.text(st.characters(codec="ascii", exclude_characters="\0"), max_size=20),
        st.sampled_from([None, "lz4", "zstd"]),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(images=IMAGES)
def test_writer_reader_round_trip(
    images: list[tuple[EntryKind, Arch, bytes, str, str, str | None]],
) -> None:
    entries = []
    expected = []
    for kind, arch, body, ident, options, codec in images:
        if kind == EntryKind.ELF:
            if arch.number >= 100:
                arch = Arch(90, arch.suffix)  # a fake cubin has no .nv.compat to copy
            data, options = fake_cubin(arch.number) + body, ""
        else:
            data = PTX + body.replace(b"\0", b" ")
        entries.append(make_entry(kind, arch, data, identifier=ident, options=options,
                                  compression=codec))
        expected.append((kind, arch, data, ident, options, codec))
    blob = build_fatbin(entries)
    assert is_fatbin(blob) and len(blob) % 8 == 0
    parsed = Fatbin.from_bytes(blob)
    assert parsed.to_bytes() == blob
    assert parsed.entries == tuple(entries)
    for e, (kind, arch, data, ident, options, codec) in zip(parsed.entries, expected, strict=True):
        assert (e.kind, e.arch, e.identifier, e.options, e.compression) == (
            kind, arch, ident, options, codec
        )
        payload = e.data()
        if kind == EntryKind.PTX:
            assert payload.rstrip(b"\0") == data.rstrip(b"\0") and payload.endswith(b"\0")
        else:
            assert payload.rstrip(b"\0") == data.rstrip(b"\0")


def test_unknown_kind_and_flags_are_kept() -> None:
    blob = _entry_bytes(kind=0x100, flags=0x4000_0000_0011, reserved=7)
    fb = Fatbin.from_bytes(blob)
    (e,) = fb.entries
    assert e.kind == 0x100 and not isinstance(e.kind, EntryKind)
    assert e.flags & 0x4000_0000_0000 and EntryFlags.ADDR64 in e.flags
    assert e.header.reserved == 7
    assert fb.to_bytes() == blob


def test_padding_between_containers_round_trips() -> None:
    one = _entry_bytes()
    blob = one + bytes(24) + one + bytes(8)
    fb = Fatbin.from_bytes(blob)
    assert len(fb.containers) == 2 and fb.to_bytes() == blob
    assert [e.offset for e in fb.entries] == [16, len(one) + 24 + 16]


# -- hostile input ---------------------------------------------------------------------------


def test_not_a_fatbin() -> None:
    assert not is_fatbin(b"\x7fELF")
    with pytest.raises(FormatError, match="not a fatbin"):
        Fatbin.from_bytes(b"\0" * 64)


def test_truncated_container_header() -> None:
    with pytest.raises(TruncatedError, match="container header") as info:
        Fatbin.from_bytes(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 0)[:12])
    assert info.value.offset == 0


def test_payload_past_end() -> None:
    blob = _entry_bytes()
    with pytest.raises(TruncatedError, match="past the input") as info:
        Fatbin.from_bytes(blob[:-8])
    assert info.value.offset == 0


def test_entry_past_container() -> None:
    with pytest.raises(TruncatedError, match="past its container") as info:
        Fatbin.from_bytes(_entry_bytes(size=1 << 40))
    assert info.value.offset == 16


def test_entry_header_too_small() -> None:
    with pytest.raises(FormatError, match="entry header size 8") as info:
        Fatbin.from_bytes(_entry_bytes(header_size=8))
    assert info.value.offset == 16


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"identifier_offset": 0x10, "identifier_size": 4}, "identifier"),
        ({"identifier_offset": 0x40, "identifier_size": 1000}, "identifier"),
        ({"options_offset": 0x1000}, "options pair"),
        ({"options_offset": 0x20}, "options pair"),
    ],
)
def test_header_areas_overlapping_or_outside(changes: dict[str, int], message: str) -> None:
    """Identifier/options areas must lie in the entry header, past its fixed 64 bytes."""
    with pytest.raises(FormatError, match=message) as info:
        Fatbin.from_bytes(_entry_bytes(**changes))
    assert info.value.offset == 16


def test_options_data_outside_header() -> None:
    e = make_entry(EntryKind.PTX, Arch(90), PTX)
    extra = struct.pack("<II", 0x48, 0x500) + e.extra[8:]
    with pytest.raises(FormatError, match="options data"):
        Fatbin.from_bytes(_container(e.header.pack() + extra + bytes(e.stored)))


def test_an_options_pair_of_zeros_means_no_options() -> None:
    """CUDA 10/11 PTX entries: a 72-byte header whose pair at 64 is (0, 0) (tests/test_old_eras.py
    reads real ones as cuobjdump 11.8 does); a pair of size 0 needs no place in the header."""
    e = make_entry(EntryKind.PTX, Arch(90), PTX, options="-O3")
    extra = struct.pack("<II", 0, 0)
    header = dataclasses.replace(e.header, header_size=72)
    (entry,) = Fatbin.from_bytes(_container(header.pack() + extra + bytes(e.stored))).entries
    assert (entry.options_data, entry.options, entry.data()) == (b"", "", bytes(e.stored))
    with pytest.raises(FormatError, match="options data"):
        Fatbin.from_bytes(_container(header.pack() + struct.pack("<II", 0, 1) +
                                     bytes(e.stored)))


def test_garbage_between_containers() -> None:
    one = _entry_bytes()
    with pytest.raises(FormatError, match="zero padding") as info:
        Fatbin.from_bytes(one + b"\0\0junk")
    assert info.value.offset == len(one) + 2


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_bomb_refused_before_allocating(codec: str) -> None:
    e = make_entry(EntryKind.PTX, Arch(90), PTX, compression=codec)
    bomb = FatbinEntry(
        EntryHeader(**{**e.header.__dict__, "uncompressed_size": 1 << 40}), e.extra, e.stored
    )
    with pytest.raises(DecompressionError, match="limit"):
        bomb.data()
    (parsed,) = Fatbin.from_bytes(build_fatbin([bomb])).entries
    with pytest.raises(DecompressionError, match=str(1 << 40)):
        parsed.data()


def test_lz4_size_beyond_max_ratio() -> None:
    """A recorded size LZ4 cannot reach from this input is refused before allocating."""
    e = make_entry(EntryKind.PTX, Arch(90), PTX, compression="lz4")
    forged = FatbinEntry(
        EntryHeader(**{**e.header.__dict__, "uncompressed_size": 900 << 20}), e.extra, e.stored
    )
    with pytest.raises(DecompressionError, match="cannot inflate"):
        forged.data()


def test_zstd_frame_larger_than_recorded() -> None:
    """A frame that inflates past the recorded size is cut at size + 1 and refused."""
    import zstandard

    big = zstandard.ZstdCompressor().compress(bytes(50_000_000))
    e = make_entry(EntryKind.PTX, Arch(90), PTX, compression="zstd")
    stored = big + bytes(-len(big) % 8)
    forged = FatbinEntry(
        EntryHeader(**{**e.header.__dict__, "size": len(stored), "compressed_size": len(big),
                       "uncompressed_size": 100}),
        e.extra, stored,
    )
    with pytest.raises(DecompressionError, match="101\\+ bytes, header records 100"):
        forged.data()


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_garbage_compressed_payload(codec: str) -> None:
    e = make_entry(EntryKind.PTX, Arch(90), PTX * 20, compression=codec)
    junk = bytes((b * 7 + 3) & 0xFF for b in range(len(e.stored)))
    forged = FatbinEntry(e.header, e.extra, junk)
    with pytest.raises(DecompressionError, match=f"{codec}") as info:
        Fatbin.from_bytes(build_fatbin([forged])).entries[0].data()
    assert info.value.offset == 16


def test_invalid_sm_number() -> None:
    fb = Fatbin.from_bytes(_entry_bytes(sm=5))
    with pytest.raises(FormatError, match="SM number 5"):
        _ = fb.entries[0].arch
    with pytest.raises(FormatError, match="SM number 5"):
        fb.validate()
    Fatbin.from_bytes(_entry_bytes()).validate()


def test_32bit_host_elf_refused() -> None:
    header = b"\x7fELF\x01\x01\x01" + bytes(9) + (3).to_bytes(2, "little")
    header += (3).to_bytes(2, "little") + bytes(64 - len(header) - 2)
    with pytest.raises(UnsupportedError, match="64-bit little-endian"):
        scan(header)


def test_writer_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="ELF header"):
        make_entry(EntryKind.ELF, Arch(90), b"not elf")
    with pytest.raises(InvalidArgumentError, match=r"\.version"):
        make_entry(EntryKind.PTX, Arch(90), b"garbage")
    with pytest.raises(InvalidArgumentError, match="compression"):
        make_entry(EntryKind.PTX, Arch(90), PTX, compression="gzip")
    with pytest.raises(InvalidArgumentError, match="kind"):
        make_entry(EntryKind.LTOIR, Arch(90), b"")
    with pytest.raises(InvalidArgumentError, match="NUL"):
        make_entry(EntryKind.PTX, Arch(90), PTX, identifier="a\0b")


# -- mutation: any corruption of real fatbins gives a FatbinkitError, never a crash ----------


@pytest.fixture(scope="session")
def samples(kernels: Kernels) -> list[bytes]:
    out = []
    for codec in (None, "lz4", "zstd"):
        entries = [
            make_entry(EntryKind.ELF, Arch.parse("sm_100"), kernels.cubins["sm_100"].read_bytes(),
                       identifier="k.cu", compression=codec),
            make_entry(EntryKind.PTX, Arch.parse("sm_90"), kernels.ptx["sm_90"].read_bytes(),
                       options="-O3", compression=codec),
        ]
        out.append(build_fatbin(entries) + bytes(8) + build_fatbin(entries[:1]))
    return out


def _consume(blob: bytes) -> None:
    try:
        fb = Fatbin.from_bytes(blob)
    except FatbinkitError:
        return
    assert fb.to_bytes() == blob
    for e in fb.entries:
        for name in ("arch", "identifier", "options", "data"):
            with contextlib.suppress(FatbinkitError):
                value = getattr(e, name)
                if callable(value):
                    value()


@settings(max_examples=150, deadline=None, suppress_health_check=[FIXTURE_OK])
@given(data=st.data())
def test_mutations_raise_library_errors_only(samples: list[bytes], data: st.DataObject) -> None:
    blob = bytearray(data.draw(st.sampled_from(samples)))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(blob)))
    _consume(bytes(blob[:cut]))
    _consume(bytes(blob))


@settings(max_examples=100, deadline=None, suppress_health_check=[FIXTURE_OK])
@given(data=st.data())
def test_header_field_mutations(samples: list[bytes], data: st.DataObject) -> None:
    """Overwrite one header word with extreme values (sizes, offsets, kinds, flags)."""
    blob = bytearray(data.draw(st.sampled_from(samples)))
    offset = 16 + data.draw(st.sampled_from([0, 4, 8, 16, 20, 24, 28, 32, 36, 40, 48, 56]))
    value = data.draw(st.sampled_from([0, 1, 7, 0x40, 0xFFFF, 0xFFFF_FFFF, 1 << 40]))
    width = 8 if offset - 16 in (8, 40, 48, 56) else 4
    blob[offset : offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    _consume(bytes(blob))


def test_section_past_end_of_file(kernels: Kernels, tmp_path: Path) -> None:
    """An ELF whose .nv_fatbin header claims more bytes than the file has."""
    from elftools.elf.elffile import ELFFile

    obj = tmp_path / "k.o"
    subprocess.run(
        [system_tool("nvcc"), "-c", "-arch=sm_90", str(kernels.source), "-o", str(obj)], check=True
    )
    raw = bytearray(obj.read_bytes())
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".nv_fatbin")
        shdr = elf["e_shoff"] + index * elf["e_shentsize"]
        fatbin_offset = elf.get_section(index)["sh_offset"]
    raw[shdr + 32 : shdr + 40] = (1 << 32).to_bytes(8, "little")  # sh_size
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(raw))
    with pytest.raises(TruncatedError, match=r"\.nv_fatbin") as info:
        scan(bad)
    assert info.value.offset == fatbin_offset
    cut = tmp_path / "cut.o"
    cut.write_bytes(obj.read_bytes()[: shdr + 10])
    with pytest.raises(TruncatedError, match="section header table"):
        scan(cut)


# -- the writer's section lookup (elf.find_section) ------------------------------------------


def test_find_section_matches_pyelftools(kernels: Kernels) -> None:
    """Every section of every real cubin, looked up by name, as pyelftools reads it."""
    from elftools.elf.elffile import ELFFile

    from fatbinkit.formats.elf import find_section

    for path in kernels.cubins.values():
        data = path.read_bytes()
        with open(path, "rb") as f:
            expected: dict[str, bytes] = {}
            for s in ELFFile(f).iter_sections():
                expected.setdefault(s.name, b"" if s["sh_type"] == "SHT_NOBITS" else s.data())
        assert ".nv.compat" in expected or "sm_100" not in path.name
        for name, contents in expected.items():
            assert find_section(data, name) == contents, (path.name, name)
        assert find_section(data, ".no.such.section") is None


@settings(max_examples=150, deadline=None, suppress_health_check=[FIXTURE_OK])
@given(data=st.data())
def test_find_section_checks_like_sections(kernels: Kernels, data: st.DataObject) -> None:
    """Corrupt header or section table bytes: find_section fails exactly when sections() does,
    with the same error (it checks the whole table, not just the section it returns)."""
    from fatbinkit.formats.elf import find_section, sections

    blob = bytearray(kernels.cubins["sm_100"].read_bytes())
    shoff = int.from_bytes(blob[0x28:0x30], "little")
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.one_of(st.integers(0x20, 0x3F), st.integers(shoff, len(blob) - 1)))
        blob[pos] = data.draw(st.sampled_from([0, 1, 0x7F, 0xFF]))
    name = data.draw(st.sampled_from([".nv.compat", ".text.add1", ".no.such.section", ""]))

    def outcome(fn: Callable[[], object]) -> tuple[object, object]:
        try:
            return "ok", fn()
        except FatbinkitError as e:
            return type(e), str(e)

    listed = outcome(lambda: sections(bytes(blob)))
    found = outcome(lambda: find_section(bytes(blob), name))
    if listed[0] != "ok":
        assert found == listed
    else:
        assert found[0] == "ok"
        by_name = [s for s in sections(bytes(blob)) if s.name == name]
        assert (found[1] is None) == (not by_name)
