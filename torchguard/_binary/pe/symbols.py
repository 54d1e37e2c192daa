"""Read the symbol tables of a PE image: what it exports, and what it imports from each DLL.

pefile cannot be trusted here with its defaults: it reads at most 8,192 exports (torch_cpu.dll
2.4.1 exports 57,772 names), stops at its first "invalid" name, truncates names at 512 bytes
(torch's longest is 3,199) and drops whole import descriptors past 8,192 symbols. This reader
walks the export name table and the import lookup tables itself, with ``struct`` over the
mapped file: lossless, and about 15 times faster than pefile with its caps lifted.

Names stay ``bytes`` (exactly what the loader compares); nothing here decodes them.
A structurally impossible import table raises :class:`~.errors.PEReadError` (the loader
refuses such an image); a damaged export table is read as far as it is sound, and says so; a
damaged delay-import table (which no load reads) is read as far as it is sound.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Union

from torchguard._binary.budget import mib, name_budget
from torchguard._binary.pe.errors import OverBudget, PEReadError
from torchguard._binary.pe.sections import SectionTableError, section_table

#: An imported or exported symbol: a name, or an ordinal number.
Symbol = Union[bytes, int]
#: A mapped file or its bytes.
Buffer = Union[bytes, mmap.mmap]

_MAX_NAME = 16384  # torch's longest mangled name is 3,199 bytes
_MAX_DESCRIPTORS = 4096
#: Symbols one image may import in all (torch_python.dll: 6,790). A bound on the total, not
#: per table: descriptors that all point into one long table must not take minutes.
_MAX_THUNKS = 1 << 18
_MAX_EXPORTS = 1 << 16  # ordinals are 16-bit: no export table can hold more

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class NotKept(Exception):
    """An RVA falls in a part of the file that a streaming read did not keep."""


@dataclass(frozen=True)
class Exports:
    """What a DLL exports: names, ordinals, and which of them forward to another DLL."""

    names: frozenset[bytes] = frozenset()
    ordinals: frozenset[int] = frozenset()
    forwarders: Mapping[Symbol, bytes] = field(default_factory=dict)
    """Export name or ordinal -> ``b"TARGET.Name"`` or ``b"TARGET.#12"``."""
    damaged: str | None = None
    """Why the table could not be read completely, or None."""
    directory: bool = True
    """False when the image has no export directory: the loader refuses to bind to it."""

    def has(self, symbol: Symbol) -> bool:
        if isinstance(symbol, int):
            return symbol in self.ordinals
        return symbol in self.names


@dataclass(frozen=True)
class SymbolTables:
    """A binary's imports per DLL (lower-case name -> symbols in thunk order) and exports."""

    imports: Mapping[str, tuple[Symbol, ...]]
    delay_imports: Mapping[str, tuple[Symbol, ...]]
    exports: Exports


class _Image:
    """RVA-addressed, bounds-checked reads over a mapped file (or part of one)."""

    def __init__(self, data: Buffer, kept: Sequence[tuple[int, int]] | None = None) -> None:
        self.data = data
        self.kept = kept
        #: Every name read, by RVA: thousands of thunks naming one string share one copy.
        self._names: dict[int, bytes] = {}
        #: Bytes of distinct names still allowed: a linker stores each name once, so more
        #: than the file's size means overlapping strings (a hostile table).
        self._name_room = name_budget(len(data))
        try:
            (e_lfanew,) = _U32.unpack_from(data, 0x3C)
            if bytes(data[e_lfanew : e_lfanew + 4]) != b"PE\0\0":
                raise PEReadError("not a PE image (no PE signature)")
            optional = e_lfanew + 24
            (magic,) = _U16.unpack_from(data, optional)
            if magic not in (0x10B, 0x20B):
                raise PEReadError(f"unknown optional header magic {magic:#x}")
            self.pe32plus = magic == 0x20B
            self.image_base = (
                _U64.unpack_from(data, optional + 24)[0]
                if self.pe32plus
                else _U32.unpack_from(data, optional + 28)[0]
            )
            (self.header_size,) = _U32.unpack_from(data, optional + 60)
            first = optional + (108 if self.pe32plus else 92)
            (directory_count,) = _U32.unpack_from(data, first)
            self.directories = [
                struct.unpack_from("<II", data, first + 4 + 8 * index)
                if index < directory_count
                else (0, 0)
                for index in range(16)
            ]
            self.sections = section_table(data)
        except (struct.error, SectionTableError):
            raise PEReadError("truncated: the PE headers are incomplete") from None

    def offset(self, rva: int, length: int) -> int:
        """The file offset of ``length`` bytes at ``rva``; raises when they are not in the file."""
        if rva < 0:  # an old-style delay descriptor's VA below the image base
            raise PEReadError(f"address {rva:#x} lies below the image")
        for section in self.sections:
            span = max(section.virtual_size, section.raw_size)
            if section.rva <= rva < section.rva + span:
                delta = rva - section.rva
                if delta + length > section.raw_size:
                    raise PEReadError(f"RVA {rva:#x} points past the data of its section")
                start = section.raw_pointer + delta
                break
        else:
            if rva + length > self.header_size:
                raise PEReadError(f"RVA {rva:#x} lies in no section")
            start = rva
        if start + length > len(self.data):
            raise PEReadError(f"RVA {rva:#x} points past the end of the file")
        if self.kept is not None and not any(
            low <= start and start + length <= high for low, high in self.kept
        ):
            raise NotKept(rva)
        return start

    def u16(self, rva: int) -> int:
        return int(_U16.unpack_from(self.data, self.offset(rva, 2))[0])

    def u32(self, rva: int) -> int:
        return int(_U32.unpack_from(self.data, self.offset(rva, 4))[0])

    def cstring(self, rva: int) -> bytes:
        """A NUL-terminated string at ``rva`` (at most ``_MAX_NAME`` bytes), read once.

        Raises :class:`OverBudget` when the distinct names read exceed the image's size.
        """
        known = self._names.get(rva)
        if known is not None:
            return known
        result = self._read_cstring(rva)
        self._name_room -= len(result) + 1
        if self._name_room < 0:
            raise OverBudget(
                f"its symbol tables name more than {mib(name_budget(len(self.data)))} of "
                f"distinct strings in a file of {mib(len(self.data))}: overlapping names no "
                "linker writes"
            )
        self._names[rva] = result
        return result

    def _read_cstring(self, rva: int) -> bytes:
        start = self.offset(rva, 1)
        section_end = len(self.data)
        for section in self.sections:
            if section.raw_pointer <= start < section.raw_pointer + section.raw_size:
                section_end = section.raw_pointer + section.raw_size
                break
        limit = min(start + _MAX_NAME, section_end, len(self.data))
        found = self.data.find(b"\0", start, limit)
        if found < 0:
            raise PEReadError(f"unterminated name at RVA {rva:#x}")
        result = bytes(self.data[start:found])
        if self.kept is not None:
            self.offset(rva, len(result) + 1)
        return result


def kept_ranges(head: bytes, size: int) -> list[tuple[int, int]] | None:
    """File ranges a streaming read must keep: headers and every non-code section.

    Import, delay-import and export tables and their names live in data sections
    (``.rdata``, ``.idata``, ``.edata``); code is never needed. None for a layout that cannot
    be judged from ``head`` (the caller then reads everything).
    """
    try:
        image = _Image(head)
    except PEReadError:
        return None
    wanted = [image.directories[index][0] for index in (0, 1, 2, 13)]
    ranges = [(0, min(len(head), size))]
    for section in image.sections:
        span = max(section.virtual_size, section.raw_size)
        holds_table = any(rva and section.rva <= rva < section.rva + span for rva in wanted)
        if holds_table or not section.executable:
            ranges.append((section.raw_pointer, min(section.raw_pointer + section.raw_size, size)))
    return ranges


def read_symbols(data: Buffer, kept: Sequence[tuple[int, int]] | None = None) -> SymbolTables:
    """The symbol tables of the image in ``data``.

    ``kept``: the file ranges actually present (a streaming read); an RVA outside them raises
    :class:`NotKept`, and the caller reads the whole file instead.
    """
    image = _Image(data, kept)
    return SymbolTables(
        imports=_imports(image),
        delay_imports=_delay_imports(image),
        exports=_exports(image),
    )


def _thunks(image: _Image, rva: int, what: str, budget: int) -> tuple[Symbol, ...]:
    """The symbols of one import lookup table: names, or ordinals (high bit set).

    Raises when the table does not end within ``budget`` entries.
    """
    width = 8 if image.pe32plus else 4
    flag = 1 << (width * 8 - 1)
    unpack = _U64.unpack_from if image.pe32plus else _U32.unpack_from
    symbols: list[Symbol] = []
    for _ in range(budget):
        (value,) = unpack(image.data, image.offset(rva, width))
        if not value:
            return tuple(symbols)
        if value & flag:
            symbols.append(int(value & 0xFFFF))
        else:
            symbols.append(image.cstring((value & 0x7FFFFFFF) + 2))
        rva += width
    raise PEReadError(f"the import lookup tables hold more than {_MAX_THUNKS} symbols ({what})")


def _imports(image: _Image) -> dict[str, tuple[Symbol, ...]]:
    rva, size = image.directories[1]
    found: dict[str, tuple[Symbol, ...]] = {}
    if not rva or not size:
        return found
    total = 0
    for index in range(_MAX_DESCRIPTORS):
        descriptor = rva + 20 * index
        lookup, name_rva, first_thunk = (
            image.u32(descriptor),
            image.u32(descriptor + 12),
            image.u32(descriptor + 16),
        )
        if not name_rva or not first_thunk:  # where the loader's walk stops, too
            return found
        name = image.cstring(name_rva).decode("ascii", "replace").lower()
        symbols = _thunks(image, lookup or first_thunk, name, _MAX_THUNKS - total)
        total += len(symbols)
        found[name] = found.get(name, ()) + symbols
    raise PEReadError("the import directory does not end")


def _delay_imports(image: _Image) -> dict[str, tuple[Symbol, ...]]:
    """The delay-import tables, as far as they are sound.

    The loader never reads them (the delay-load helper does, on a first call), so damage here
    cannot fail a load: what cannot be read is left out (and so not judged), never raised.
    """
    rva, _ = image.directories[13]
    found: dict[str, tuple[Symbol, ...]] = {}
    if not rva:
        return found
    total = 0
    for index in range(_MAX_DESCRIPTORS):
        descriptor = rva + 32 * index
        try:
            attributes, name_rva = image.u32(descriptor), image.u32(descriptor + 4)
            lookup = image.u32(descriptor + 16)
            if not name_rva:
                return found
            if not attributes & 1 and not image.pe32plus:  # pre-VC7 descriptors hold VAs
                name_rva -= image.image_base
                lookup -= image.image_base
            name = image.cstring(name_rva).decode("ascii", "replace").lower()
            symbols = _thunks(image, lookup, name, _MAX_THUNKS - total)
        except PEReadError:
            return found
        total += len(symbols)
        found[name] = found.get(name, ()) + symbols
    return found


def _exports(image: _Image) -> Exports:
    """Names, ordinals and forwarders; a table that lies about its counts is read as far as
    it is sound (the loader itself only ever looks up entries)."""
    rva, size = image.directories[0]
    if not rva:
        return Exports(directory=False)
    try:
        base = image.u32(rva + 16)
        functions, names = image.u32(rva + 20), image.u32(rva + 24)
        functions_rva, names_rva, ordinals_rva = (
            image.u32(rva + 28),
            image.u32(rva + 32),
            image.u32(rva + 36),
        )
    except PEReadError as exc:
        return Exports(damaged=f"the export directory cannot be read: {exc}")
    damaged: str | None = None
    if functions > _MAX_EXPORTS or names > functions:
        damaged = f"the export directory claims {functions} functions and {names} names"
        functions, names = min(functions, _MAX_EXPORTS), min(names, functions, _MAX_EXPORTS)
    addresses = _table(image, functions_rva, functions, 4)
    if len(addresses) < functions:
        damaged = damaged or "the export address table is cut short"
    ordinals = {base + index for index, address in enumerate(addresses) if address}
    forwarded_index: dict[int, bytes] = {}
    for index, address in enumerate(addresses):
        if rva <= address < rva + size:  # an address inside the directory names a forwarder
            try:
                forwarded_index[index] = image.cstring(address)
            except PEReadError:
                continue
    forwarders: dict[Symbol, bytes] = {
        base + index: target for index, target in forwarded_index.items()
    }
    name_pointers = _table(image, names_rva, names, 4)
    name_ordinals = _table(image, ordinals_rva, len(name_pointers), 2)
    if len(name_pointers) < names or len(name_ordinals) < len(name_pointers):
        damaged = damaged or "the export name table is cut short"
    bulk = _strings_at(image, name_pointers)
    count = len(addresses)
    if (
        not forwarded_index
        and len(name_ordinals) == len(name_pointers)
        and (not name_ordinals or max(name_ordinals) < count)
        and all(map(addresses.__getitem__, name_ordinals))
        and all(map(bulk.__contains__, name_pointers))
    ):  # the common, sound table: one pass in C (torch_cpu.dll: 57,772 names)
        names_found = frozenset(map(bulk.__getitem__, name_pointers))
        return Exports(names_found, frozenset(ordinals), forwarders, damaged)
    exported: set[bytes] = set()
    for pointer, index in zip(name_pointers, name_ordinals):
        if index >= count or not addresses[index]:
            continue
        name = bulk.get(pointer)
        if name is None:
            try:
                name = image.cstring(pointer)
            except PEReadError:
                damaged = damaged or "an export name cannot be read"
                continue
        exported.add(name)
        if index in forwarded_index:
            forwarders[name] = forwarded_index[index]
    return Exports(frozenset(exported), frozenset(ordinals), forwarders, damaged)


def _strings_at(image: _Image, pointers: list[int]) -> dict[int, bytes]:
    """The NUL-terminated strings at ``pointers``, read in one slice when they lie together.

    torch_cpu.dll's 57,772 export names sit side by side: one split of that block is many
    times faster than a bounds-checked read per name. Pointers it cannot serve (outside the
    block, or inside another string) are left to the careful reader.
    """
    if not pointers:
        return {}
    low, high = min(pointers), max(pointers)
    try:
        start = image.offset(low, 1)
        end = image.offset(high, 1) + 1
    except (PEReadError, NotKept):
        return {}
    if end - start != high - low + 1:
        return {}  # the names span sections: no single slice holds them
    stop = min(end + _MAX_NAME, len(image.data))
    block = bytes(image.data[start:stop])
    last = block.find(b"\0", high - low)
    if last < 0:
        return {}
    block = block[: last + 1]
    try:
        image.offset(low, len(block))  # the whole block lies in one section's data (and kept)
    except (PEReadError, NotKept):
        return {}
    pieces = block.split(b"\0")[:-1]
    starts = accumulate((len(piece) + 1 for piece in pieces), initial=low)
    return dict(zip(starts, pieces))


def _table(image: _Image, rva: int, count: int, width: int) -> list[int]:
    """``count`` little-endian integers at ``rva``, or as many as the file really holds."""
    if not count:
        return []
    try:
        start = image.offset(rva, width)
    except PEReadError:
        return []
    available = min(count, (len(image.data) - start) // width)
    while available:
        try:
            image.offset(rva, available * width)
            break
        except PEReadError:
            available //= 2
    if not available:
        return []
    fmt = f"<{available}{'I' if width == 4 else 'H'}"
    return list(struct.unpack_from(fmt, image.data, start))
