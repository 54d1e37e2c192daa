"""A PE image's section table from its first bytes, without pefile."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass

#: IMAGE_SCN_MEM_WRITE: a writable section, mapped copy-on-write in every process.
MEM_WRITE = 0x80000000
#: IMAGE_SCN_MEM_EXECUTE: code, which no table torchguard reads lives in.
MEM_EXECUTE = 0x20000000
PAGE = 0x1000
#: Enough for the headers of any image seen in practice (the table follows the optional header).
HEAD_BYTES = 0x1000


class SectionTableError(ValueError):
    """Not a PE image, or its headers are cut short."""


@dataclass(frozen=True)
class Section:
    name: str
    virtual_size: int
    raw_size: int
    raw_pointer: int
    characteristics: int
    rva: int

    @property
    def executable(self) -> bool:
        return bool(self.characteristics & MEM_EXECUTE)

    @property
    def writable(self) -> bool:
        return bool(self.characteristics & MEM_WRITE)

    @property
    def mapped_size(self) -> int:
        """The bytes the section occupies once mapped: its virtual size in whole pages."""
        size = max(self.virtual_size, 0) or self.raw_size
        return (size + PAGE - 1) // PAGE * PAGE


def section_table(head: bytes | mmap.mmap) -> tuple[Section, ...]:
    """The sections of the PE image whose first bytes (or whole mapping) are ``head``.

    The one parser of section headers: the symbol reader, the fatbin reader and the commit
    estimate all take their sections from here.
    """
    try:
        if head[:2] != b"MZ":
            raise SectionTableError("not a PE image (no MZ signature)")
        (e_lfanew,) = struct.unpack_from("<I", head, 0x3C)
        if head[e_lfanew : e_lfanew + 4] != b"PE\0\0":
            raise SectionTableError("not a PE image (no PE signature)")
        count, optional_size = struct.unpack_from("<H12xH", head, e_lfanew + 6)
        table = e_lfanew + 24 + optional_size
        sections = []
        for index in range(count):
            name, vsize, rva, raw_size, raw_pointer = struct.unpack_from(
                "<8sIIII", head, table + 40 * index
            )
            (characteristics,) = struct.unpack_from("<I", head, table + 40 * index + 36)
            sections.append(
                Section(
                    name.rstrip(b"\0").decode("latin-1"),
                    vsize,
                    raw_size,
                    raw_pointer,
                    characteristics,
                    rva,
                )
            )
    except struct.error as exc:
        raise SectionTableError("truncated PE headers") from exc
    return tuple(sections)
