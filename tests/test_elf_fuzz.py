"""Damage aimed at each ELF structure: the file reads, or ElfReadError, never a traceback.

The section headers of an intact built object locate every structure (the ELF header, the
program headers, .dynamic, .dynsym, .dynstr, the hash table, the version tables); random
bytes, boundary values and zeroed runs then land inside them, and every cut length is tried.
The memory a damaged file costs is bounded by a small multiple of its size. Seeded: a failure
reproduces.
"""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from elf_builder import EM_AARCH64, build_elf, region

from torchguard._binary.elf import ElfImage, ElfReadError, read_elf_bytes

_BOUNDARY = (0, 1, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0)
_SECTIONS = (
    ".dynsym",
    ".dynstr",
    ".gnu.hash",
    ".hash",
    ".gnu.version",
    ".gnu.version_d",
    ".gnu.version_r",
    ".dynamic",
    ".nv_fatbin",
)


def built(bits: int = 64, little: bool = True, hash_style: str = "gnu") -> bytes:
    return build_elf(
        ["libc.so.6", "libstdc++.so.6", "libnvJitLink.so.12"],
        soname="libfuzz.so.1",
        rpath="$ORIGIN/../lib",
        runpath="$ORIGIN",
        defined=["a", "b@@V_2", "c@V_1", "d"],
        undefined=[
            "u",
            ("memcpy", "GLIBC_2.14", "libc.so.6"),
            ("x", "GLIBCXX_3.4.30", "libstdc++.so.6"),
        ],
        weak=["d", "u"],
        interpreter="/lib64/ld-linux-x86-64.so.2",
        tls_size=16,
        fatbin=b"\x50\xed\x55\xba" + b"\0" * 60,
        bits=bits,
        little=little,
        machine=EM_AARCH64,
        hash_style=hash_style,
    )


def regions(data: bytes, bits: int) -> list[tuple[str, int, int]]:
    header = 64 if bits == 64 else 52
    phdrs = (56 if bits == 64 else 32) * 6
    found = [("ELF header", 0, header), ("program headers", header, phdrs)]
    for name in _SECTIONS:
        try:
            offset, size = region(data, name)
        except KeyError:
            continue
        found.append((name, offset, size))
    return found


def read(data: bytes) -> ElfImage | None:
    try:
        return read_elf_bytes(data, symbols=True)
    except ElfReadError as exc:
        assert str(exc)
        return None


def damaged(data: bytes, where: tuple[str, int, int], rng: random.Random, little: bool) -> bytes:
    _what, offset, length = where
    out = bytearray(data)
    choice = rng.randrange(4)
    if choice == 0:  # random bytes
        for _ in range(rng.randint(1, 4)):
            out[offset + rng.randrange(max(length, 1))] = rng.randrange(256)
    elif choice == 1 and length >= 4:  # a boundary 32-bit value at an aligned spot
        at = offset + rng.randrange(length // 4) * 4
        struct.pack_into("<I" if little else ">I", out, at, rng.choice(_BOUNDARY))
    elif choice == 2 and length >= 8:  # a large 64-bit value (offsets, sizes, addresses)
        at = offset + rng.randrange(length // 8) * 8
        struct.pack_into(
            "<Q" if little else ">Q", out, at, rng.choice((1 << 63, 1 << 40, 2**64 - 1))
        )
    else:  # a zeroed run
        start = offset + rng.randrange(max(length, 1))
        out[start : start + rng.randint(1, 16)] = b"\0" * min(16, len(out) - start)
    return bytes(out[: len(data)])


@pytest.mark.parametrize(
    ("bits", "little", "hash_style"),
    [
        (64, True, "gnu"),
        (64, True, "sysv"),
        (32, True, "gnu"),
        (64, False, "gnu"),
        (32, False, "sysv"),
    ],
)
def test_random_damage_reads_or_raises_the_narrow_error(
    bits: int, little: bool, hash_style: str
) -> None:
    data = built(bits, little, hash_style)
    assert read(data) is not None
    rng = random.Random(f"{bits}{little}{hash_style}")
    places = regions(data, bits)
    for _ in range(1500):
        read(damaged(data, rng.choice(places), rng, little))


def test_every_cut_length() -> None:
    data = built()
    for length in range(len(data)):
        read(data[:length])


def test_whole_file_noise() -> None:
    rng = random.Random(7)
    data = built()
    for _ in range(300):
        noisy = bytearray(data)
        for _ in range(rng.randint(1, 40)):
            noisy[rng.randrange(len(noisy))] = rng.randrange(256)
        read(bytes(noisy))


def test_memory_stays_a_small_multiple_of_the_file() -> None:
    """1000 damaged files, each read under tracemalloc: the peak never exceeds 20x the size."""
    data = built()
    rng = random.Random(11)
    places = regions(data, 64)
    worst = 0
    for _ in range(1000):
        sample = damaged(data, rng.choice(places), rng, True)
        tracemalloc.start()
        try:
            read(sample)
            worst = max(worst, tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert worst < 20 * len(data) + (1 << 20)
