"""Reading an ELF file from a forward-only stream (a wheel member) keeps only the tables."""

from __future__ import annotations

import io
import random
import struct
import zipfile

import pytest
from elf_builder import build_elf, region
from test_elf import RICH

from torchguard._binary.elf import (
    ElfReadError,
    NotKept,
    read_elf_bytes,
    read_elf_stream,
)
from torchguard._binary.elf import constants as c

CODE = b"\xcc" * 300_000


class Trickle(io.RawIOBase):
    """A stream that returns at most ``step`` bytes per read, as a zip member may."""

    def __init__(self, data: bytes, step: int = 7919) -> None:
        self.data = data
        self.position = 0
        self.step = step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        count = self.step if size < 0 else min(size, self.step)
        chunk = self.data[self.position : self.position + count]
        self.position += len(chunk)
        return chunk


@pytest.mark.parametrize("dynstr_segment", [False, True])
def test_stream_reads_what_the_bytes_read(dynstr_segment: bool) -> None:
    data = build_elf(**RICH, code=CODE, dynstr_segment=dynstr_segment)  # type: ignore[arg-type]
    assert len(data) > 1 << 16
    expected = read_elf_bytes(data, symbols=True)
    assert read_elf_stream(Trickle(data), len(data), symbols=True) == expected
    assert read_elf_stream(io.BytesIO(data), len(data)).facts == expected.facts


def test_a_zip_member_streams() -> None:
    data = build_elf(**RICH, code=CODE)  # type: ignore[arg-type]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("torch/lib/libx.so", data)
    with zipfile.ZipFile(archive) as wheel:
        info = wheel.getinfo("torch/lib/libx.so")
        with wheel.open(info) as member:
            image = read_elf_stream(member, info.file_size, symbols=True)
    assert image == read_elf_bytes(data, symbols=True)


def test_small_files_are_read_whole() -> None:
    data = build_elf(**RICH)  # type: ignore[arg-type]
    assert read_elf_stream(Trickle(data), len(data), symbols=True) == read_elf_bytes(
        data, symbols=True
    )


def test_a_table_inside_code_is_not_kept() -> None:
    """The full read sees strings in the code segment; the stream skipped it and says so."""
    data = bytearray(build_elf(["libc.so.6"], code=b"libc.so.6\0" * 30_000))
    text, _ = region(bytes(data), ".text")
    dynamic, size = region(bytes(data), ".dynamic")
    for at in range(dynamic, dynamic + size, 16):
        tag, _value = struct.unpack_from("<qQ", data, at)
        if tag == c.DT_STRTAB:
            struct.pack_into("<qQ", data, at, tag, text + 100_000)  # past the 64 KiB head
    assert read_elf_bytes(bytes(data)).facts.needed  # readable as a whole
    with pytest.raises(NotKept):
        read_elf_stream(io.BytesIO(bytes(data)), len(data))


def test_a_stream_shorter_than_its_size_is_truncated() -> None:
    data = build_elf(**RICH, code=CODE)  # type: ignore[arg-type]
    with pytest.raises(ElfReadError, match="truncated"):
        read_elf_stream(io.BytesIO(data[:200_000]), len(data))
    with pytest.raises(ElfReadError, match="truncated"):
        read_elf_stream(io.BytesIO(data[:100]), len(data))
    with pytest.raises(ElfReadError, match="empty"):
        read_elf_stream(io.BytesIO(b""), 0)


def test_an_impossible_size_is_an_error() -> None:
    with pytest.raises(ElfReadError):
        read_elf_stream(io.BytesIO(build_elf()), 1 << 62)


def test_damaged_streams_read_raise_or_say_not_kept() -> None:
    data = build_elf(**RICH, code=CODE)  # type: ignore[arg-type]
    rng = random.Random(3)
    structures = [region(data, name) for name in (".dynamic", ".dynsym", ".dynstr", ".gnu.hash")]
    structures.append((0, 64 + 56 * 7))
    for _ in range(300):
        damaged = bytearray(data)
        offset, size = rng.choice(structures)
        for _ in range(rng.randint(1, 4)):
            damaged[offset + rng.randrange(size)] = rng.randrange(256)
        try:
            streamed = read_elf_stream(io.BytesIO(bytes(damaged)), len(damaged), symbols=True)
        except (ElfReadError, NotKept):
            continue
        assert streamed == read_elf_bytes(bytes(damaged), symbols=True)


class Padded(io.RawIOBase):
    """``data`` then ``padding`` zero bytes, made as they are read (a member that inflates
    far past what it takes in the archive)."""

    def __init__(self, data: bytes, padding: int) -> None:
        self.data, self.size, self.position = data, len(data) + padding, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        stop = self.size if size < 0 else min(self.size, self.position + size)
        head = self.data[self.position : stop]
        chunk = head + bytes(stop - self.position - len(head))
        self.position = stop
        return chunk


def test_a_member_over_its_inflate_budget_is_unreadable_before_inflating() -> None:
    """The tail past the dynamic section is kept: 256 MiB of it from a tiny archive entry
    is a deflate bomb, refused (not damage) before a byte past the head is inflated."""
    from torchguard._binary.budget import inflate_budget
    from torchguard._binary.elf import ElfUnreadable

    data = build_elf(**RICH, code=CODE)  # type: ignore[arg-type]
    bomb = Padded(data, 256 << 20)
    with pytest.raises(ElfUnreadable, match="deflate bomb"):
        read_elf_stream(bomb, bomb.size, budget=inflate_budget(100_000))
    assert bomb.position <= 1 << 16
    fine = Padded(data, 0)
    streamed = read_elf_stream(fine, fine.size, symbols=True, budget=inflate_budget(100_000))
    assert streamed == read_elf_bytes(data, symbols=True)
