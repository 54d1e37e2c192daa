"""Read what the Linux loader model needs from an ELF file, with ``struct`` over ``mmap``.

Public interface (stable: the Linux loader model builds on it)

- :func:`read_elf_file(path, *, symbols=False) <read_elf_file>` -> :class:`ElfImage`: maps
  the file read-only and copies out only the tables it reads (never the whole file).
- :func:`read_elf_bytes(data, *, symbols=False) <read_elf_bytes>` -> :class:`ElfImage`.
- :func:`read_elf_stream(stream, size, *, symbols=False, budget=None) <read_elf_stream>` ->
  :class:`ElfImage` from a forward-only stream (a wheel member), keeping only what the
  tables can live in; :class:`NotKept` when a table lies elsewhere (then read the whole
  member); :class:`ElfUnreadable` when that would hold more than ``budget`` bytes.
- :func:`elf_header(head)` -> ``(elf_class, little_endian, machine)`` or None, from a file's
  first 20+ bytes: recognise ELF by content and skip a candidate of the wrong class or
  machine cheaply, as ld.so does.
- :func:`read_fatbin_archs(path)` -> :class:`~torchguard._binary.fatbin.FatbinArchs` or
  None: the SM/PTX architectures in ``.nv_fatbin``.
- :class:`ElfImage`: ``facts`` (:class:`ElfFacts`) and ``symbols`` (:class:`ElfSymbols`,
  None unless asked for).
- :class:`ElfFacts`: ``elf_class`` (1/2; ``bits`` 32/64), ``little_endian``, ``machine``
  (``machine_name``), ``osabi``, ``type``, ``interpreter``, ``soname``, ``needed`` (in
  order), ``rpath``/``runpath`` (raw strings; ``rpath_entries``/``runpath_entries`` split as
  ld.so splits them), ``flags`` (DT_FLAGS), ``flags_1`` (DT_FLAGS_1; ``nodelete``,
  ``bind_now``, ``global_``, ``nodeflib``, ``static_tls``), ``verneed``
  (:class:`VersionNeed`: file, name, index, hash, weak), ``verdef`` (:class:`VersionDef`:
  name, index, hash, base, weak, parents; ``provides(version)``), ``tls_size``,
  ``tls_align``, ``exec_stack``, ``fatbin`` ((offset, size) of ``.nv_fatbin`` or None),
  ``segments``.
- :class:`ElfSymbols`: ``defined`` (:class:`Defined`: name bytes, version or None, hidden,
  weak, kind, version_index; ``default``), ``undefined`` (:class:`Undefined`: name bytes,
  version, file, weak), ``count`` (.dynsym entries with the null one), ``names()``.
- :class:`ElfReadError`: the one error for damaged or non-ELF input, with a message a user
  can act on; its :class:`ElfUnreadable` says the file could not be read here and now (an
  ``OSError``, no memory, over its budget): never damage, never cached. Anything else
  escaping is a bug of torchguard's.
- :mod:`.constants`: classes, machines, tags and flags (``EM_X86_64``, ``DF_1_NODELETE`` ...).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchguard._binary.budget import over_budget
from torchguard._binary.elf import constants
from torchguard._binary.elf.facts import (
    Dynamic,
    ElfFacts,
    VersionDef,
    VersionNeed,
    read_facts,
    split_search_path,
)
from torchguard._binary.elf.layout import (
    Buffer,
    ElfReadError,
    ElfUnreadable,
    Layout,
    NotKept,
    Segment,
)
from torchguard._binary.elf.mapped import PathLike, mapped_file
from torchguard._binary.elf.symbols import Defined, ElfSymbols, Undefined, read_symbols
from torchguard._binary.stream import Readable, keep_ranges, read_exactly

if TYPE_CHECKING:
    from torchguard._binary.fatbin import FatbinArchs

#: Bump when what is read from a file changes: cached facts of another reader are ignored.
READER_VERSION = 1


@dataclass(frozen=True)
class ElfImage:
    """One ELF file as read: its facts and, when asked for, its dynamic symbols."""

    facts: ElfFacts
    symbols: ElfSymbols | None = None


def read_elf_bytes(data: bytes, *, symbols: bool = False) -> ElfImage:
    """Read an ELF file held in memory. Raises :class:`ElfReadError` for damaged input."""
    return _read(data, symbols)


def read_elf_file(path: PathLike, *, symbols: bool = False) -> ElfImage:
    """Read an ELF file through a read-only mapping that is closed before returning.

    Raises :class:`ElfUnreadable` (an :class:`ElfReadError`) when it cannot be read now."""
    with mapped_file(path) as data:
        return _read(data, symbols)


def _read(data: Buffer, symbols: bool, kept: Sequence[tuple[int, int]] | None = None) -> ElfImage:
    layout = Layout(data, kept)
    facts = read_facts(layout)
    if not symbols:
        return ElfImage(facts)
    return ElfImage(facts, read_symbols(layout, Dynamic(layout), facts.verneed, facts.verdef))


_HEAD = 1 << 16


def read_elf_stream(
    stream: Readable, size: int, *, symbols: bool = False, budget: int | None = None
) -> ElfImage:
    """:func:`read_elf_bytes` for a forward-only stream of ``size`` bytes (a wheel member).

    The whole member is inflated once, but only what the dynamic tables can live in is kept,
    in an anonymous mapping whose untouched pages cost no memory: everything before the first
    executable segment (where the linker puts .dynsym, .dynstr, the hash and version tables;
    the first 32 MiB when one executable segment starts the file), the segment holding the
    dynamic section when it starts near it (where patchelf moves .dynstr), and after the
    dynamic section only the tables it points to and the section headers. torch 2.9.1's
    975 MiB libtorch_cuda.so then keeps about 40 MiB, no member of its 15 NVIDIA wheels more
    than 57 MiB. A table found elsewhere raises :class:`NotKept`: read the whole member
    instead.

    ``budget``: the bytes the kept parts may take (see :func:`~torchguard._binary.budget.
    inflate_budget`); more raises :class:`ElfUnreadable` before anything is inflated.
    """
    head = read_exactly(stream, min(size, _HEAD))
    if len(head) < min(size, _HEAD):
        raise ElfReadError(f"truncated: the data ends at {len(head)} of {size} bytes")
    if size <= len(head):
        return _read(head, symbols)
    ranges = _kept_ranges(head, size, budget)
    kept = sum(stop - start for start, stop in ranges)
    if budget is not None and kept > budget:
        raise ElfUnreadable(over_budget(kept, size, budget))
    try:
        buffer = mmap.mmap(-1, size)
    except (OverflowError, ValueError) as exc:  # a size no address space can hold
        raise ElfReadError(f"cannot hold {size} bytes: {exc}") from None
    except OSError as exc:  # no memory here and now: not the file's doing
        raise ElfUnreadable.from_error(exc) from None
    try:
        buffer[: len(head)] = head
        reached = len(head)
        dynamic_end = _dynamic_end(head, ranges, size)
        if dynamic_end is not None:  # read to the end of .dynamic, then keep only what it names
            reached = keep_ranges(stream, buffer, reached, dynamic_end, ranges)
            if reached == dynamic_end:
                ranges = _after_dynamic(buffer, ranges, dynamic_end, size)
        reached = keep_ranges(stream, buffer, reached, size, ranges)
        if reached < size:
            raise ElfReadError(f"truncated: the data ends at {reached} of {size} bytes")
        return _read(buffer, symbols, ranges)
    finally:
        buffer.close()


#: The tables ``.dynamic`` points to (their offsets decide what of the rest is kept).
_TABLE_TAGS = (
    constants.DT_STRTAB,
    constants.DT_SYMTAB,
    constants.DT_VERSYM,
    constants.DT_VERNEED,
    constants.DT_VERDEF,
    constants.DT_GNU_HASH,
    constants.DT_HASH,
)


def _dynamic_end(head: bytes, ranges: list[tuple[int, int]], size: int) -> int | None:
    """Where ``.dynamic`` ends, when the last kept range runs from before it to the end of
    the file (so what lies after it may be dropped once it is read); else None."""
    try:
        segments = Layout(head, whole=False).segments
    except ElfReadError:
        return None
    found = [s for s in segments if s.type == constants.PT_DYNAMIC and s.filesz]
    if not found or len(ranges) < 2 or ranges[-1][1] != size:
        return None
    end = found[0].offset + found[0].filesz
    return end if ranges[-1][0] <= found[0].offset and end < size else None


def _after_dynamic(
    buffer: mmap.mmap, ranges: list[tuple[int, int]], dynamic_end: int, size: int
) -> list[tuple[int, int]]:
    """``ranges`` with the part after ``.dynamic`` cut to what is read from there: the tables
    it points to that lie beyond it (patchelf's moved ``.dynstr``) and the section headers
    with the names before them. cuFFT's 266 MiB then keeps its tables, not its GPU code."""
    start = ranges[-1][0]
    try:
        layout = Layout(buffer, [*ranges[:-1], (start, dynamic_end)], whole=False)
        dynamic = Dynamic(layout)
        extents = [
            layout.extent(dynamic.tags[tag], "a dynamic table")
            for tag in _TABLE_TAGS
            if tag in dynamic.tags
        ]
    except (ElfReadError, NotKept):
        return ranges  # damage, or a table the full parse will judge: keep as planned
    kept = [*ranges[:-1], (start, dynamic_end)]
    # each table that lies beyond, to the end of its segment's bytes (its size is not known)
    kept += [(offset, end) for offset, end in extents if offset >= dynamic_end]
    table = layout.shnum * layout.shentsize
    if layout.shoff >= dynamic_end and layout.shoff + table <= size:
        kept.append((max(dynamic_end, layout.shoff - _NAMES_WINDOW), layout.shoff + table))
    return kept


#: Where one read-and-execute segment starts the file (no ``-z separate-code``), the dynamic
#: tables lie inside it, before ``.text``: this much of its start is kept (cuDNN's
#: ``libcudnn_graph.so.9`` keeps its version needs at 0.3 MiB, NVSHMEM's soname at 0.1 MiB).
_SHARED_HEAD = 32 << 20
#: How far before ``.dynamic`` the start of its segment may lie and still be kept.
_SEGMENT_SLACK = 64 << 20
#: ``.shstrtab`` (the section names) precedes the section header table: this much before it.
_NAMES_WINDOW = 1 << 16


def _kept_ranges(head: bytes, size: int, budget: int | None = None) -> list[tuple[int, int]]:
    """What a streaming read keeps; the whole file when the head does not tell."""
    try:
        layout = Layout(head, whole=False)
        segments = layout.segments
    except ElfReadError:
        return [(0, size)]  # program headers past the head, or damage the full parse judges
    code = [
        s.offset
        for s in segments
        if s.type == constants.PT_LOAD and s.flags & constants.PF_X and s.filesz
    ]
    dynamic = [s.offset for s in segments if s.type == constants.PT_DYNAMIC]
    first_code = max(min(code, default=size), len(head))
    tail = min(dynamic, default=size)
    # patchelf puts a moved .dynstr (and .gnu.hash) in a new segment just before .dynamic
    # (cuSPARSELt's 26 MB of names): the start of the segment holding it, when near
    holding = [
        s.offset
        for s in segments
        if s.type == constants.PT_LOAD and s.offset <= tail < s.offset + s.filesz
    ]
    if holding and first_code <= holding[0] and tail - holding[0] <= _SEGMENT_SLACK:
        tail = holding[0]
    if tail <= first_code:
        return [(0, size)]
    ranges = [(0, first_code), (tail, size)]
    table = layout.shnum * layout.shentsize
    if layout.shoff and first_code < layout.shoff < tail and layout.shoff + table <= size:
        ranges.append((max(first_code, layout.shoff - _NAMES_WINDOW), layout.shoff + table))
    if 0 in code:
        shared = [(0, min(max(first_code, _SHARED_HEAD), tail)), *ranges[1:]]
        if budget is None or sum(b - a for a, b in shared) <= budget:
            ranges = shared
    return ranges


def elf_header(head: bytes) -> tuple[int, bool, int] | None:
    """(elf_class, little_endian, machine) from a file's first bytes; None if not ELF."""
    if len(head) < 20 or head[:4] != constants.MAGIC:
        return None
    elf_class, encoding = head[4], head[5]
    if elf_class not in (constants.ELFCLASS32, constants.ELFCLASS64):
        return None
    if encoding not in (constants.ELFDATA2LSB, constants.ELFDATA2MSB):
        return None
    little = encoding == constants.ELFDATA2LSB
    machine = int.from_bytes(head[18:20], "little" if little else "big")
    return elf_class, little, machine


def read_fatbin_archs(path: PathLike) -> FatbinArchs | None:
    """The GPU architectures in an ELF file's ``.nv_fatbin``; None without that section.

    Raises :class:`ElfReadError` for a damaged ELF file and
    :class:`~torchguard._binary.fatbin.FatbinError` for damaged fatbin containers.
    """
    from torchguard._binary.fatbin import parse_fatbin

    with mapped_file(path) as mapped:
        span = read_facts(Layout(mapped)).fatbin
        if span is None:
            return None
        offset, size = span
        if isinstance(mapped, bytes):
            return parse_fatbin(mapped[offset : offset + size])
        with memoryview(mapped) as view, view[offset : offset + size] as section:
            return parse_fatbin(section)


__all__ = [
    "READER_VERSION",
    "Defined",
    "ElfFacts",
    "ElfImage",
    "ElfReadError",
    "ElfSymbols",
    "ElfUnreadable",
    "NotKept",
    "Readable",
    "Segment",
    "Undefined",
    "VersionDef",
    "VersionNeed",
    "constants",
    "elf_header",
    "read_elf_bytes",
    "read_elf_file",
    "read_elf_stream",
    "read_fatbin_archs",
    "split_search_path",
]
