"""GPU architectures compiled into a Windows DLL, read from its ``.nv_fatb`` section.

Pure file reading: the section table comes from the PE headers (no pefile parse), the section
is memory-mapped and only the fatbin headers are touched, so a 250 MiB section costs a few
hundred small reads. Nothing is loaded and CUDA is never initialised.

The fatbin container format is public (NVIDIA's ``fatbinary_section.h`` names the magic;
cuda-fatbin-decompression and nvopen-tools document the headers): a 16-byte header (magic
``0xBA55ED50``, version 1, header size, size of the entries), then entries back to back, each
with a kind (1 PTX, 2 ELF cubin, i.e. SASS), its header size, its payload size and the SM
architecture (``86`` for sm_86); containers follow each other at 8-byte alignment. Checked
against NVIDIA's ``cuobjdump`` on sections cut out of real NVIDIA DLLs (tests).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from torchguard._binary.stream import CHUNK, Readable, read_exactly

MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQ")  # kind, (unknown), header size, payload size
_ARCH_OFFSET = 28
_KIND_PTX = 1
_KIND_ELF = 2
_MAX_GAP = 4096  # zero padding allowed between containers before the scan gives up


class FatbinError(ValueError):
    """The file is not a readable PE image, or its fatbin headers are inconsistent."""


@dataclass(frozen=True)
class FatbinArchs:
    """SM architectures with SASS (cubin) and with PTX, as integers (86 is sm_86)."""

    sass: frozenset[int]
    ptx: frozenset[int]
    containers: int
    entries: int

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether a GPU of this compute capability can run this code.

        SASS runs on the same major version at an equal or higher minor (sm_80 code on an
        sm_86 GPU); PTX is JIT-compiled by the driver for any equal or newer GPU.
        """
        arch = capability[0] * 10 + capability[1]
        if any(s // 10 == capability[0] and s <= arch for s in self.sass):
            return True
        return any(p <= arch for p in self.ptx)


def parse_fatbin(data: bytes | memoryview) -> FatbinArchs:
    """The architectures in a run of fatbin containers (an ``.nv_fatb`` section's bytes)."""
    with memoryview(data) as view:
        return _parse(view)


def _parse(view: memoryview) -> FatbinArchs:
    size = len(view)
    sass: set[int] = set()
    ptx: set[int] = set()
    containers = entries = 0
    position = 0
    while position + _HEADER.size <= size:
        if bytes(view[position : position + 4]) != _MAGIC_BYTES:
            gap = _skip_zeros(view, position, min(size, position + _MAX_GAP))
            if gap is None or gap == position:
                break
            position = gap
            continue
        _magic, _version, header_size, body = _HEADER.unpack_from(view, position)
        end = position + header_size + body
        if header_size < _HEADER.size or end > size:
            raise FatbinError(f"fatbin container at {position:#x} runs past the section")
        containers += 1
        entry = position + header_size
        while entry + 32 <= end:
            kind, _unknown, entry_header, payload = _ENTRY.unpack_from(view, entry)
            if entry_header < 32 or entry + entry_header + payload > end:
                raise FatbinError(f"fatbin entry at {entry:#x} runs past its container")
            (arch,) = struct.unpack_from("<I", view, entry + _ARCH_OFFSET)
            if kind == _KIND_ELF:
                sass.add(arch)
            elif kind == _KIND_PTX:
                ptx.add(arch)
            entries += 1
            entry += entry_header + payload
        position = end
    return FatbinArchs(frozenset(sass), frozenset(ptx), containers, entries)


def parse_fatbin_stream(
    stream: Readable, size: int, *, max_containers: int | None = None
) -> FatbinArchs:
    """:func:`parse_fatbin` of the next ``size`` bytes of a forward-only stream (a wheel
    member's ``.nv_fatbin``): only the headers are kept, payloads are read past, so a 915 MiB
    section costs a few MiB of memory. ``max_containers`` stops after that many containers
    (a sample of a section read over the network)."""
    reader = _Forward(stream, size)
    sass: set[int] = set()
    ptx: set[int] = set()
    containers = entries = 0
    while reader.left >= _HEADER.size:
        if max_containers is not None and containers >= max_containers:
            break
        head = reader.take(4)
        if head != _MAGIC_BYTES:
            if head != bytes(4):
                break
            skipped = 4  # zero padding between containers, 4-aligned as they are
            while reader.left >= _HEADER.size and skipped < _MAX_GAP:
                head = reader.take(4)
                if head != bytes(4):
                    break
                skipped += 4
            if head != _MAGIC_BYTES:
                break
        position = reader.position - 4
        _magic, _version, header_size, body = _HEADER.unpack(head + reader.take(12))
        if header_size < _HEADER.size or header_size - _HEADER.size + body > reader.left:
            raise FatbinError(f"fatbin container at {position:#x} runs past the section")
        reader.skip(header_size - _HEADER.size)
        containers += 1
        end = reader.position + body
        while end - reader.position >= 32:
            at = reader.position
            raw = reader.take(32)
            kind, _unknown, entry_header, payload = _ENTRY.unpack_from(raw)
            if entry_header < 32 or at + entry_header + payload > end:
                raise FatbinError(f"fatbin entry at {at:#x} runs past its container")
            (arch,) = struct.unpack_from("<I", raw, _ARCH_OFFSET)
            if kind == _KIND_ELF:
                sass.add(arch)
            elif kind == _KIND_PTX:
                ptx.add(arch)
            entries += 1
            reader.skip(entry_header - 32 + payload)
        reader.skip(end - reader.position)
    return FatbinArchs(frozenset(sass), frozenset(ptx), containers, entries)


class _Forward:
    """A stream read forward within ``size`` bytes; a short stream is a damaged section."""

    def __init__(self, stream: Readable, size: int) -> None:
        self.stream = stream
        self.position = 0
        self.size = size

    @property
    def left(self) -> int:
        return self.size - self.position

    def take(self, count: int) -> bytes:
        data = read_exactly(self.stream, count)
        if len(data) < count:
            raise FatbinError(f"the section ends at {self.position + len(data)} of {self.size}")
        self.position += count
        return data

    def skip(self, count: int) -> None:
        while count > 0:
            step = min(count, CHUNK)
            self.take(step)
            count -= step


def nv_fatb_span(head: bytes) -> tuple[int, int] | None:
    """(file offset, size) of the ``.nv_fatb`` section from a PE's first bytes; None if absent."""
    from torchguard._binary.pe.sections import SectionTableError, section_table

    try:
        sections = section_table(head)
    except SectionTableError as exc:
        raise FatbinError(str(exc)) from exc
    for section in sections:
        if section.name == ".nv_fatb":
            return section.raw_pointer, section.raw_size
    return None


def read_dll_archs(path: str) -> FatbinArchs | None:
    """The architectures compiled into a DLL; None when it has no ``.nv_fatb`` section."""
    import mmap

    try:
        with open(path, "rb") as handle:
            head = handle.read(0x1000)
            span = nv_fatb_span(head)
            if span is None:
                return None
            offset, size = span
            handle.seek(0, 2)
            if offset + size > handle.tell():
                raise FatbinError(f"truncated: .nv_fatb ends past the end of {path}")
            try:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as exc:  # e.g. a file that cannot be mapped
                raise FatbinError(f"cannot map {path}: {exc}") from exc
            with mapped, memoryview(mapped) as view, view[offset : offset + size] as section:
                return parse_fatbin(section)
    except OSError as exc:
        raise FatbinError(f"cannot read {path}: {exc}") from exc


def _skip_zeros(view: memoryview, start: int, limit: int) -> int | None:
    """The first non-zero offset in ``[start, limit)``; None if all zero (padding to the end)."""
    for index in range(start, limit):
        if view[index]:
            return index
    return None


__all__ = [
    "FatbinArchs",
    "FatbinError",
    "nv_fatb_span",
    "parse_fatbin",
    "parse_fatbin_stream",
    "read_dll_archs",
]
