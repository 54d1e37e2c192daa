"""The own ELF reader on built shared objects: facts, versioned symbols, layouts, errors."""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path

import pytest
from elf_builder import EM_386, EM_AARCH64, build_elf, region
from test_fatbin import container, entry

from torchguard._binary.elf import (
    Defined,
    ElfReadError,
    Undefined,
    elf_header,
    read_elf_bytes,
    read_elf_file,
    read_fatbin_archs,
    split_search_path,
)
from torchguard._binary.elf import constants as c

RICH = {
    "needed": ["libc10.so", "libcudart.so.12", "libc.so.6"],
    "soname": "libtorch_cpu.so",
    "rpath": "$ORIGIN/../../nvidia/cublas/lib:$ORIGIN",
    "flags": c.DF_BIND_NOW | c.DF_STATIC_TLS,
    "flags_1": c.DF_1_NODELETE | c.DF_1_NOW | c.DF_1_GLOBAL,
    "defined": ["plain", "cur@@LIB_2.0", "old@LIB_1.0", "tls_thing@@LIB_2.0"],
    "undefined": [
        "unversioned",
        ("memcpy", "GLIBC_2.14", "libc.so.6"),
        ("__nvJitLinkCreate_12_8", "libnvJitLink.so.12", "libnvJitLink.so.12"),
        ("_ZNSt7__cxx1112basic_string", "GLIBCXX_3.4.21", "libstdc++.so.6"),
        ("weakref", "GLIBC_2.2.5", "libc.so.6"),
    ],
    "weak": ["weakref", "plain"],
    "interpreter": "/lib64/ld-linux-x86-64.so.2",
    "tls_size": 64,
}

EXPECTED_DEFINED = (
    Defined(b"plain", None, False, True, c.STT_FUNC, 1),
    Defined(b"cur", "LIB_2.0", False, False, c.STT_FUNC, 2),
    Defined(b"old", "LIB_1.0", True, False, c.STT_FUNC, 3),
    Defined(b"tls_thing", "LIB_2.0", False, False, c.STT_FUNC, 2),
)
EXPECTED_UNDEFINED = (
    Undefined(b"unversioned", None, None, False),
    Undefined(b"memcpy", "GLIBC_2.14", "libc.so.6", False),
    Undefined(b"__nvJitLinkCreate_12_8", "libnvJitLink.so.12", "libnvJitLink.so.12", False),
    Undefined(b"_ZNSt7__cxx1112basic_string", "GLIBCXX_3.4.21", "libstdc++.so.6", False),
    Undefined(b"weakref", "GLIBC_2.2.5", "libc.so.6", True),
)


def test_dynamic_facts_of_a_built_object() -> None:
    facts = read_elf_bytes(build_elf(**RICH)).facts  # type: ignore[arg-type]
    assert (facts.bits, facts.little_endian, facts.machine_name) == (64, True, "x86_64")
    assert facts.type == c.ET_DYN
    assert facts.needed == ("libc10.so", "libcudart.so.12", "libc.so.6")
    assert facts.soname == "libtorch_cpu.so"
    assert facts.rpath == "$ORIGIN/../../nvidia/cublas/lib:$ORIGIN"
    assert facts.rpath_entries == ("$ORIGIN/../../nvidia/cublas/lib", "$ORIGIN")
    assert facts.runpath is None and facts.runpath_entries == ()
    assert facts.nodelete and facts.bind_now and facts.global_ and facts.static_tls
    assert not facts.nodeflib
    assert facts.interpreter == "/lib64/ld-linux-x86-64.so.2"
    assert (facts.tls_size, facts.tls_align, facts.exec_stack) == (64, 8, False)
    assert facts.fatbin is None


def test_versions_needed_and_defined() -> None:
    facts = read_elf_bytes(build_elf(**RICH, weak_needs={"GLIBC_2.2.5"})).facts  # type: ignore[arg-type]
    needs = {(n.file, n.name): n for n in facts.verneed}
    assert set(needs) == {
        ("libc.so.6", "GLIBC_2.14"),
        ("libc.so.6", "GLIBC_2.2.5"),
        ("libnvJitLink.so.12", "libnvJitLink.so.12"),
        ("libstdc++.so.6", "GLIBCXX_3.4.21"),
    }
    assert needs[("libc.so.6", "GLIBC_2.2.5")].weak
    assert not needs[("libc.so.6", "GLIBC_2.14")].weak
    assert len({n.index for n in facts.verneed}) == 4
    assert [(d.name, d.index, d.base) for d in facts.verdef] == [
        ("libtorch_cpu.so", 1, True),
        ("LIB_2.0", 2, False),
        ("LIB_1.0", 3, False),
    ]
    assert facts.provides("LIB_1.0") and not facts.provides("libtorch_cpu.so")


def test_symbols_with_versions_hidden_default_and_weak() -> None:
    image = read_elf_bytes(build_elf(**RICH), symbols=True)  # type: ignore[arg-type]
    assert image.symbols is not None
    assert image.symbols.defined == EXPECTED_DEFINED
    assert image.symbols.undefined == EXPECTED_UNDEFINED
    assert image.symbols.count == 10
    assert image.symbols.names() == {b"plain", b"cur", b"old", b"tls_thing"}
    assert EXPECTED_DEFINED[1].default and not EXPECTED_DEFINED[2].default
    assert read_elf_bytes(build_elf(**RICH)).symbols is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bits", "little", "machine"),
    [(32, True, EM_386), (64, False, EM_AARCH64), (32, False, EM_AARCH64)],
)
def test_other_classes_and_byte_orders_read_the_same(bits: int, little: bool, machine: int) -> None:
    image = read_elf_bytes(
        build_elf(**RICH, bits=bits, little=little, machine=machine),  # type: ignore[arg-type]
        symbols=True,
    )
    assert (image.facts.bits, image.facts.little_endian, image.facts.machine) == (
        bits,
        little,
        machine,
    )
    assert image.facts.needed == tuple(RICH["needed"])  # type: ignore[arg-type]
    assert image.symbols is not None
    assert image.symbols.defined == EXPECTED_DEFINED
    assert image.symbols.undefined == EXPECTED_UNDEFINED


@pytest.mark.parametrize("hash_style", ["gnu", "sysv", "none"])
def test_symbol_count_from_either_hash_table_or_the_section(hash_style: str) -> None:
    image = read_elf_bytes(build_elf(**RICH, hash_style=hash_style), symbols=True)  # type: ignore[arg-type]
    assert image.symbols is not None and image.symbols.count == 10
    assert image.symbols.defined == EXPECTED_DEFINED


def test_without_hash_table_or_section_headers_no_symbol_is_invented() -> None:
    data = build_elf(**RICH, hash_style="none", section_headers=False)  # type: ignore[arg-type]
    image = read_elf_bytes(data, symbols=True)
    assert image.symbols is not None and image.symbols.count == 0
    assert image.facts.needed == tuple(RICH["needed"])  # type: ignore[arg-type]


def test_gnu_hash_with_only_undefined_symbols() -> None:
    image = read_elf_bytes(build_elf(["libc.so.6"], undefined=["a", "b"]), symbols=True)
    assert image.symbols is not None
    assert [s.name for s in image.symbols.undefined] == [b"a", b"b"]
    assert image.symbols.defined == ()


def test_an_empty_gnu_hash_with_ld_symoffset_one_still_counts_every_reference() -> None:
    """GNU ld writes symoffset 1 when nothing is hashed (torch's libtorch_global_deps.so)."""
    refs = ["__gmon_start__", ("__cxa_finalize", "GLIBC_2.2.5", "libc.so.6")]
    data = build_elf(["libc.so.6"], undefined=refs, weak=["__gmon_start__"], gnu_symoffset=1)  # type: ignore[arg-type]
    image = read_elf_bytes(data, symbols=True)
    assert image.symbols is not None and image.symbols.count == 3
    assert [s.name for s in image.symbols.undefined] == [b"__gmon_start__", b"__cxa_finalize"]


def test_dynstr_in_a_segment_at_another_address_is_found_through_the_mapping() -> None:
    """patchelf moved torch 2.9.1's .dynstr into a new segment at the end of the file."""
    image = read_elf_bytes(build_elf(**RICH, dynstr_segment=True), symbols=True)  # type: ignore[arg-type]
    assert image.facts.soname == "libtorch_cpu.so"
    assert image.symbols is not None and image.symbols.undefined == EXPECTED_UNDEFINED


def test_runpath_and_nodeflib() -> None:
    facts = read_elf_bytes(
        build_elf(runpath="$ORIGIN::/opt/x", flags_1=c.DF_1_NODEFLIB, exec_stack=True)
    ).facts
    assert facts.runpath_entries == ("$ORIGIN", ".", "/opt/x")
    assert facts.rpath is None and facts.nodeflib and not facts.nodelete
    assert facts.exec_stack is True
    assert read_elf_bytes(build_elf(exec_stack=None)).facts.exec_stack is None


def test_split_search_path() -> None:
    assert split_search_path(None) == ()
    assert split_search_path("") == ()
    assert split_search_path("/a:/b;/c") == ("/a", "/b", "/c")
    assert split_search_path(":/a") == (".", "/a")


def test_fatbin_range_and_architectures(tmp_path: Path) -> None:
    blob = container(entry(2, 86, b"\x01" * 32), entry(1, 90, b"ptx\0"))
    data = build_elf(["libcudart.so.12"], fatbin=blob)
    facts = read_elf_bytes(data).facts
    assert facts.fatbin == region(data, c.NV_FATBIN)
    offset, size = facts.fatbin
    assert data[offset : offset + size] == blob
    path = tmp_path / "libk.so"
    path.write_bytes(data)
    archs = read_fatbin_archs(path)
    assert archs is not None and archs.sass == {86} and archs.ptx == {90}
    (tmp_path / "plain.so").write_bytes(build_elf())
    assert read_fatbin_archs(tmp_path / "plain.so") is None


def test_elf_header_recognises_by_content() -> None:
    assert elf_header(build_elf()[:64]) == (c.ELFCLASS64, True, c.EM_X86_64)
    assert elf_header(build_elf(bits=32, little=False, machine=EM_AARCH64)[:20]) == (
        c.ELFCLASS32,
        False,
        EM_AARCH64,
    )
    assert elf_header(b"MZ" + b"\0" * 62) is None
    assert elf_header(b"\x7fELF\x03\x01" + b"\0" * 20) is None
    assert elf_header(b"\x7fELF") is None


def test_path_and_bytes_agree(tmp_path: Path) -> None:
    data = build_elf(**RICH)  # type: ignore[arg-type]
    path = tmp_path / "libx.so"
    path.write_bytes(data)
    assert read_elf_file(path, symbols=True) == read_elf_bytes(data, symbols=True)
    assert read_elf_file(str(path)).facts == read_elf_bytes(data).facts


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"MZ\x90\x00" + b"\0" * 200, "not an ELF file"),
        (b"\x7fELF", "too short"),
        (b"\x7fELF\x05\x01\x01" + b"\0" * 100, "invalid ELF class"),
        (b"\x7fELF\x02\x07\x01" + b"\0" * 100, "invalid ELF data encoding"),
        (b"\x7fELF\x02\x01\x01" + b"\0" * 20, "truncated"),
    ],
)
def test_not_elf_or_too_short(tmp_path: Path, content: bytes, message: str) -> None:
    with pytest.raises(ElfReadError, match=message):
        read_elf_bytes(content)
    path = tmp_path / "f.so"
    path.write_bytes(content)
    with pytest.raises(ElfReadError, match=message):
        read_elf_file(path)


def test_unreadable_paths(tmp_path: Path) -> None:
    from torchguard._binary.elf import ElfUnreadable

    with pytest.raises(ElfReadError, match="cannot read"):
        read_elf_file(tmp_path / "missing.so")
    with pytest.raises(ElfUnreadable):  # the environment's, not damage: never cached
        read_elf_file(tmp_path / "missing.so")
    with pytest.raises(ElfUnreadable):
        read_fatbin_archs(tmp_path / "missing.so")
    with pytest.raises(ElfReadError, match="not a regular file"):
        read_elf_file(tmp_path)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.so")
        with pytest.raises(ElfReadError, match="not a regular file"):
            read_elf_file(tmp_path / "pipe.so")  # must not block waiting for a writer
        with pytest.raises(ElfReadError, match="not a regular file"):
            read_fatbin_archs(tmp_path / "pipe.so")


def test_a_cut_short_file_is_truncated() -> None:
    """A partial download: the loadable segment claims bytes the file no longer has."""
    data = build_elf(**RICH)  # type: ignore[arg-type]
    offset, _size = region(data, ".dynamic")
    with pytest.raises(ElfReadError, match="truncated"):
        read_elf_bytes(data[: offset + 8])


def test_damaged_section_headers_do_not_make_the_object_unreadable() -> None:
    """ld.so never reads section headers: the dynamic facts still stand."""
    data = bytearray(build_elf(**RICH))  # type: ignore[arg-type]
    struct.pack_into("<Q", data, 0x28, len(data) + 4096)  # e_shoff past the end
    facts = read_elf_bytes(bytes(data)).facts
    assert facts.needed == tuple(RICH["needed"])  # type: ignore[arg-type]
    assert facts.fatbin is None


def test_wrong_program_header_size_is_rejected() -> None:
    data = bytearray(build_elf())
    struct.pack_into("<H", data, 0x36, 40)  # e_phentsize
    with pytest.raises(ElfReadError, match="program header size"):
        read_elf_bytes(bytes(data))


def test_string_offset_outside_dynstr() -> None:
    data = bytearray(build_elf(["libc.so.6"]))
    offset, _size = region(bytes(data), ".dynamic")
    struct.pack_into("<qQ", data, offset, c.DT_NEEDED, 1 << 20)
    with pytest.raises(ElfReadError, match="DT_NEEDED"):
        read_elf_bytes(bytes(data))


def _long_name_file(shift: int) -> bytes:
    """4000 symbols whose names all point into one 60 kB string (at +shift*index)."""
    many = [f"s{i}" for i in range(4000)]
    long_name = "x" * 60_000
    data = bytearray(build_elf(defined=[long_name], undefined=many, hash_style="sysv"))
    table, _ = region(bytes(data), ".dynsym")
    strtab, _ = region(bytes(data), ".dynstr")
    long_at = bytes(data).index(long_name.encode(), strtab) - strtab
    for index in range(1, 4001):
        struct.pack_into("<I", data, table + 24 * index, long_at + shift * index)
    return bytes(data)


def test_overlapping_long_names_cannot_blow_up_memory() -> None:
    """4000 distinct suffixes of one long string would cost 230 MB: bounded by the file."""
    with pytest.raises(ElfReadError, match="names add up"):
        read_elf_bytes(_long_name_file(1), symbols=True)


def test_names_sharing_one_string_share_its_bytes() -> None:
    data = _long_name_file(0)
    tracemalloc.start()
    try:
        image = read_elf_bytes(data, symbols=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert image.symbols is not None and len(image.symbols.undefined) == 4000
    assert peak < 10 * len(data)


def test_version_names_on_distinct_suffixes_of_one_long_string_are_bounded() -> None:
    """3000 version needs naming suffixes of one 60 kB string would decode 180 MB."""
    long_name = "v" * 60_000
    refs = [(f"s{i}", f"V_{i}", "libx.so.1") for i in range(3000)]
    data = bytearray(build_elf([long_name], undefined=refs))  # type: ignore[arg-type]
    strtab, _ = region(bytes(data), ".dynstr")
    verneed, _ = region(bytes(data), ".gnu.version_r")
    long_at = bytes(data).index(long_name.encode(), strtab) - strtab
    for index in range(3000):
        struct.pack_into("<I", data, verneed + 16 + 16 * index + 8, long_at + index)
    with pytest.raises(ElfReadError, match="dynamic strings add up"):
        read_elf_bytes(bytes(data))


def test_repeated_dynamic_strings_are_decoded_once() -> None:
    long_name = "w" * 60_000
    data = build_elf([long_name] * 2000)
    facts = read_elf_bytes(data).facts
    assert len(facts.needed) == 2000
    assert len({id(name) for name in facts.needed}) == 1


def test_a_name_the_string_table_never_terminates() -> None:
    """A symbol name running past DT_STRSZ is damage, not a shorter name."""
    from torchguard._binary.elf.symbols import _Names

    names = _Names(b"abc\0tail", 1 << 20)
    assert names.at(0, 1) == b"abc" and names.at(1, 1) == b"bc"
    with pytest.raises(ElfReadError, match="unterminated"):
        names.at(4, 2)


def test_a_gnu_hash_bucket_past_its_segment() -> None:
    data = bytearray(build_elf(defined=["a", "b"]))
    offset, _size = region(bytes(data), ".gnu.hash")
    struct.pack_into("<I", data, offset + 16 + 8, 0x7FFFFFFF)  # bucket 0
    with pytest.raises(ElfReadError, match="never ends"):
        read_elf_bytes(bytes(data), symbols=True)


def test_system_library_reads(tmp_path: Path) -> None:
    """This interpreter's own libc: a smoke test; readelf judges it in test_elf_crosscheck."""
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.skip("no x86-64 glibc here")
    image = read_elf_file(libc, symbols=True)
    assert image.facts.soname == "libc.so.6"
    assert image.symbols is not None
    assert any(s.name == b"memcpy" and s.version == "GLIBC_2.14" for s in image.symbols.defined)
