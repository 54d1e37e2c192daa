"""Bounds-checked access to an ELF file's bytes: its header, segments and dynamic section.

Every read goes through :class:`Layout`, which checks that what it reads lies inside the
file (or inside the segment the file declares for it) and raises :class:`ElfReadError`
otherwise, so a damaged file never escapes as ``struct.error`` or ``IndexError``. Addresses in
the dynamic section are virtual addresses and are translated through the ``PT_LOAD``
segments, as ld.so's mapping would.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import torchguard._binary.elf.constants as c
from torchguard._binary.pe.errors import FileUnreadable

#: A mapped file or its bytes.
Buffer = Union[bytes, mmap.mmap]

#: Hard caps, whatever a header claims (real files: torch's RPATH is ~400 bytes, 1-2 k dynamic
#: entries, a few hundred version entries).
MAX_PATH_STRING = 1 << 16
MAX_DYNAMIC = 1 << 16
MAX_VERSIONS = 1 << 15  # .gnu.version indexes are 15 bits wide
MAX_SEGMENTS = 1 << 12


class ElfReadError(Exception):
    """Not an ELF file, or one whose structures are cut short or point outside the file."""


class ElfUnreadable(ElfReadError, FileUnreadable):
    """The file could not be read here and now (an ``OSError``, ``MemoryError``, or more
    memory than its own size allows): says nothing about the file, so never cached.

    An :class:`ElfReadError` still (a caller that only asks "can it be read?" gets the same
    answer) and a :class:`~torchguard._binary.pe.errors.FileUnreadable` (the same split as the
    PE reader's): a caller that caches a verdict on the file catches this one first.
    """


class NotKept(Exception):
    """A structure lies in a part of the file that a streaming read did not keep.

    Not damage: the caller reads the whole file (or member) instead.
    """


@dataclass(frozen=True)
class Segment:
    """One program header."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


class Layout:
    """The header and the segments of one ELF file, and bounds-checked reads over it."""

    def __init__(
        self, data: Buffer, kept: Sequence[tuple[int, int]] | None = None, whole: bool = True
    ) -> None:
        """``whole``: ``data`` is the whole file, so every loadable segment must lie in it."""
        self.data = data
        self.size = len(data)
        self.kept = kept
        if self.size == 0:
            raise ElfReadError("the file is empty (0 bytes)")
        if bytes(data[:4]) != c.MAGIC:
            raise ElfReadError("not an ELF file (no \\x7fELF magic)")
        if self.size < 16:
            raise ElfReadError(f"file too short: {self.size} bytes")
        self.elf_class, self.data_encoding, _version, self.osabi = bytes(data[4:8])
        if self.elf_class not in (c.ELFCLASS32, c.ELFCLASS64):
            raise ElfReadError(f"invalid ELF class {self.elf_class}")
        if self.data_encoding not in (c.ELFDATA2LSB, c.ELFDATA2MSB):
            raise ElfReadError(f"invalid ELF data encoding {self.data_encoding}")
        self.wide = self.elf_class == c.ELFCLASS64
        self.little = self.data_encoding == c.ELFDATA2LSB
        order = "<" if self.little else ">"
        addr = "Q" if self.wide else "I"
        self.order = order
        self.addr_size = 8 if self.wide else 4
        self.u16 = struct.Struct(order + "H")
        self.u32 = struct.Struct(order + "I")
        self.header = struct.Struct(order + "HHI" + addr * 3 + "IHHHHHH")
        if self.wide:
            self.phdr = struct.Struct(order + "IIQQQQQQ")
            self.dyn = struct.Struct(order + "qQ")
            self.shdr = struct.Struct(order + "IIQQQQIIQQ")
            self.sym = struct.Struct(order + "IBBHQQ")
        else:
            self.phdr = struct.Struct(order + "8I")
            self.dyn = struct.Struct(order + "iI")
            self.shdr = struct.Struct(order + "10I")
            self.sym = struct.Struct(order + "IIIBBH")
        (
            self.type,
            self.machine,
            _e_version,
            _entry,
            self.phoff,
            self.shoff,
            _flags,
            _ehsize,
            phentsize,
            phnum,
            self.shentsize,
            self.shnum,
            self.shstrndx,
        ) = self.unpack(self.header, 16, "the ELF header")
        if phnum and phentsize != self.phdr.size:
            raise ElfReadError(
                f"program header size {phentsize} is not the expected {self.phdr.size}"
            )
        if phnum == c.PN_XNUM:  # extended numbering: the real count is in section 0's sh_info
            phnum = self._section_zero()[7]
        self.segments = self._segments(phnum)
        self.loads = [s for s in self.segments if s.type == c.PT_LOAD]
        for load in self.loads if whole else ():
            if load.offset + load.filesz > self.size:
                raise ElfReadError(
                    f"truncated: a loadable segment ends at byte {load.offset + load.filesz}, "
                    f"the file has {self.size}"
                )

    # -- raw reads ---------------------------------------------------------------------------

    def unpack(self, layout: struct.Struct, offset: int, what: str) -> tuple[int, ...]:
        if offset < 0 or offset + layout.size > self.size:
            raise ElfReadError(
                f"truncated: {what} at byte {offset} lies past the end of the file "
                f"({self.size} bytes)"
            )
        self._require(offset, layout.size, what)
        return layout.unpack_from(self.data, offset)

    def slice(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfReadError(
                f"truncated: {what} ({length} bytes at byte {offset}) lies past the end of the "
                f"file ({self.size} bytes)"
            )
        self._require(offset, length, what)
        return bytes(self.data[offset : offset + length])

    def string(self, offset: int, end: int, what: str, cap: int = MAX_PATH_STRING) -> bytes:
        """The NUL-terminated bytes at ``offset``, which must end before ``end``."""
        if offset < 0 or offset >= end:
            raise ElfReadError(f"{what}: string offset {offset} lies outside its table")
        stop = self.data.find(b"\0", offset, min(end, offset + cap))
        if stop < 0:
            self._require(offset, min(end, offset + cap) - offset, what)
            raise ElfReadError(f"{what}: unterminated string at byte {offset}")
        self._require(offset, stop + 1 - offset, what)
        return bytes(self.data[offset:stop])

    def _require(self, offset: int, length: int, what: str) -> None:
        """A streaming read kept ``[offset, offset + length)``, or :class:`NotKept`."""
        if self.kept is None:
            return
        for start, stop in self.kept:
            if start <= offset and offset + length <= stop:
                return
        raise NotKept(f"{what} ({length} bytes at byte {offset}) was not kept")

    # -- addresses ---------------------------------------------------------------------------

    def segment_of(self, vaddr: int, length: int, what: str) -> Segment:
        """The loadable segment whose file-backed bytes hold ``[vaddr, vaddr + length)``."""
        for load in self.loads:
            if load.vaddr <= vaddr and vaddr + length <= load.vaddr + load.filesz:
                return load
        raise ElfReadError(
            f"{what} at address {vaddr:#x} ({length} bytes) lies outside the file's loadable "
            "segments"
        )

    def offset(self, vaddr: int, length: int, what: str) -> int:
        """The file offset of ``length`` bytes at virtual address ``vaddr``."""
        load = self.segment_of(vaddr, length, what)
        return load.offset + (vaddr - load.vaddr)

    def extent(self, vaddr: int, what: str) -> tuple[int, int]:
        """(file offset of ``vaddr``, file offset where its segment's file bytes end)."""
        load = self.segment_of(vaddr, 1, what)
        return load.offset + (vaddr - load.vaddr), load.offset + load.filesz

    # -- headers -----------------------------------------------------------------------------

    def _segments(self, count: int) -> tuple[Segment, ...]:
        if count > MAX_SEGMENTS:
            raise ElfReadError(f"{count} program headers (at most {MAX_SEGMENTS} are read)")
        found = []
        for index in range(count):
            fields = self.unpack(self.phdr, self.phoff + index * self.phdr.size, "a program header")
            if self.wide:
                p_type, flags, offset, vaddr, _paddr, filesz, memsz, align = fields
            else:
                p_type, offset, vaddr, _paddr, filesz, memsz, flags, align = fields
            found.append(Segment(p_type, flags, offset, vaddr, filesz, memsz, align))
        return tuple(found)

    def _section_zero(self) -> tuple[int, ...]:
        if not self.shoff:
            raise ElfReadError("extended numbering without a section header table")
        return self.unpack(self.shdr, self.shoff, "section header 0")

    def sections(self) -> list[tuple[str, int, int, int]] | None:
        """(name, type, offset, size) per section header; None when the table is unreadable.

        ld.so never reads section headers, so a damaged table does not make the file
        unloadable: callers treat None as "no sections".
        """
        try:
            if not self.shoff or self.shentsize != self.shdr.size:
                return None
            count, names_index = self.shnum, self.shstrndx
            if count == 0 or names_index == c.SHN_XINDEX:
                zero = self._section_zero()
                count = count or zero[5]
                names_index = zero[6] if names_index == c.SHN_XINDEX else names_index
            if count > self.size // self.shdr.size:
                return None
            rows = [
                self.unpack(self.shdr, self.shoff + index * self.shdr.size, "a section header")
                for index in range(count)
            ]
            if names_index >= count:
                return None
            names_at, names_size = _offset_size(rows[names_index])
            names_end = min(names_at + names_size, self.size)
            found = []
            for row in rows:
                offset, size = _offset_size(row)
                name = self.string(names_at + row[0], names_end, "a section name", 256)
                found.append((name.decode("latin-1"), row[1], offset, size))
            return found
        except ElfReadError:
            return None


def _offset_size(row: tuple[int, ...]) -> tuple[int, int]:
    # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, ... in both classes
    return row[4], row[5]


def decode(raw: bytes) -> str:
    """A file name or path as Python's ``os.fsdecode`` gives it on Linux (UTF-8)."""
    return raw.decode("utf-8", "surrogateescape")
