"""The dynamic symbol table with its versions: what an object defines and what it needs.

``.dynsym`` is located through DT_SYMTAB and counted through DT_GNU_HASH (the highest
symbol a bucket or chain reaches) or DT_HASH (``nchain``), else the ``.dynsym`` section
header. Each symbol's version comes from DT_VERSYM: for a definition, the version node it
belongs to and whether it is hidden (``name@V``, reachable only by a reference to V) or the
default (``name@@V``); for a reference, the version and the file the version need names.

Only what ld.so's ``check_match`` can bind is kept as a definition: a global, weak or unique
symbol with a section, a non-zero value (TLS excepted) and a type ld.so accepts. References
are every undefined global or weak symbol. Names stay ``bytes``, exactly as ld.so compares
them; records are named tuples because torch's libraries define ~80 k symbols each.

Resources are bounded by the file: the table must lie in the file's loadable segments, and the
names together may not exceed twice the file's size plus 1 MiB (real files: well under 1x),
so no overlapping-string trick makes a small file cost much memory.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import NamedTuple

import torchguard._binary.elf.constants as c
from torchguard._binary.elf.facts import Dynamic, VersionDef, VersionNeed
from torchguard._binary.elf.layout import ElfReadError, Layout

_BINDABLE_TYPES = frozenset(
    {c.STT_NOTYPE, c.STT_OBJECT, c.STT_FUNC, c.STT_COMMON, c.STT_TLS, c.STT_GNU_IFUNC}
)
_EXTERNAL = frozenset({c.STB_GLOBAL, c.STB_WEAK, c.STB_GNU_UNIQUE})


class Defined(NamedTuple):
    """A symbol the object defines, as ld.so can bind to it."""

    name: bytes
    version: str | None
    """Its version node (``GLIBCXX_3.4.30``); None for an unversioned definition."""
    hidden: bool
    """``name@V``: only a reference to version V binds here; ``name@@V`` is the default."""
    weak: bool
    kind: int
    """The symbol type (STT_FUNC, STT_OBJECT, STT_TLS ...)."""
    version_index: int = 1
    """Its raw ``.gnu.version`` index (hidden bit removed): 0 local, 1 global, 2+ a node.

    glibc's ``check_match`` needs it: an unversioned reference binds to index 0-2 but only
    counts higher ones, and in an object with version definitions index 1 is the base node
    (named by the soname), which a versioned reference does not bind to.
    """

    @property
    def default(self) -> bool:
        return not self.hidden


class Undefined(NamedTuple):
    """A symbol the object needs from another."""

    name: bytes
    version: str | None
    """The version it needs (``GLIBC_2.34``), or None for an unversioned reference."""
    file: str | None
    """The soname the version need names (``libc.so.6``); None when unversioned."""
    weak: bool
    """A weak reference: ld.so leaves it at 0 when no object defines it."""


@dataclass(frozen=True)
class ElfSymbols:
    """An object's dynamic symbols: definitions and references, in table order."""

    defined: tuple[Defined, ...]
    undefined: tuple[Undefined, ...]
    count: int
    """Entries in .dynsym, the null symbol included (readelf's count)."""

    def names(self) -> frozenset[bytes]:
        """Every defined name, whatever its version."""
        return frozenset(symbol.name for symbol in self.defined)


def read_symbols(
    layout: Layout,
    dynamic: Dynamic,
    verneed: tuple[VersionNeed, ...],
    verdef: tuple[VersionDef, ...],
) -> ElfSymbols:
    tags = dynamic.tags
    if c.DT_SYMTAB not in tags:
        return ElfSymbols((), (), 0)
    entry = tags.get(c.DT_SYMENT, layout.sym.size)
    if entry != layout.sym.size:
        raise ElfReadError(f"symbol entry size {entry} is not the expected {layout.sym.size}")
    count = _count(layout, dynamic)
    if count == 0:
        return ElfSymbols((), (), 0)
    table_at = layout.offset(tags[c.DT_SYMTAB], count * entry, f"the {count} dynamic symbols")
    table = layout.slice(table_at, count * entry, "the dynamic symbols")
    versions = _versym(layout, tags, count)
    needs = {need.index: need for need in verneed}
    # ld.so's l_versions: one table of names for needed and defined nodes alike (an
    # executable's copy-relocated definitions carry a needed version's index).
    labels = {need.index: need.name for need in verneed}
    labels.update((node.index, node.name) for node in verdef if not node.base)
    strtab = layout.slice(dynamic.strtab, dynamic.strend - dynamic.strtab, ".dynstr")
    names = _Names(strtab, 2 * layout.size + (1 << 20))
    # Columns of 32-bit words, sliced in C: the name offset, the word holding st_info and
    # st_shndx, and st_value (two words on ELF64) for the "no value" test.
    words = array_of(layout, table)
    step = entry // 4
    name_column = words[0::step]
    packed = words[1::step] if layout.wide else words[3::step]
    value_low = words[2::step] if layout.wide else words[1::step]
    value_high = words[3::step] if layout.wide else value_low
    little = layout.little
    known = names.starts.get
    defined: list[Defined] = []
    undefined: list[Undefined] = []
    rows = zip(name_column, packed, value_low, value_high, versions or repeat(0, count))
    for index, (name_at, word, low, high, raw) in enumerate(rows):
        info, shndx = (word & 0xFF, word >> 16) if little else (word >> 24, word & 0xFFFF)
        bind = info >> 4
        if bind not in _EXTERNAL or name_at == 0 or index == 0:
            continue
        kind = info & 0xF
        name = known(name_at) or names.at(name_at, index)
        slot = raw & 0x7FFF
        weak = bind == c.STB_WEAK
        if shndx == c.SHN_UNDEF:
            need = needs.get(slot) if slot > c.VER_NDX_GLOBAL else None
            if need is not None:
                undefined.append(Undefined(name, need.name, need.file, weak))
            else:
                version = labels.get(slot) if slot > c.VER_NDX_GLOBAL else None
                undefined.append(Undefined(name, version, None, weak))
        elif kind in _BINDABLE_TYPES and (low or high or kind == c.STT_TLS):
            version = labels.get(slot) if slot > c.VER_NDX_GLOBAL else None
            hidden = bool(raw & c.VERSYM_HIDDEN)
            defined.append(Defined(name, version, hidden, weak, kind, slot))
    return ElfSymbols(tuple(defined), tuple(undefined), count)


class _Names:
    """Names out of .dynstr: whole strings split once in C, tail-merged suffixes on demand.

    A name that starts a string is shared with the split (no new memory whatever the number
    of symbols naming it); a suffix costs its length, charged to ``budget``.
    """

    def __init__(self, strtab: bytes, budget: int) -> None:
        self.strtab = strtab
        self.budget = budget
        parts = strtab.split(b"\0")
        starts = accumulate(map((1).__add__, map(len, parts)), initial=0)
        # the last part follows the last NUL: empty, or a string the table never terminates
        self.starts = dict(zip(starts, parts[:-1]))

    def at(self, offset: int, index: int) -> bytes:
        name = self.starts.get(offset)
        if name is not None:
            return name
        if offset >= len(self.strtab):
            raise ElfReadError(f"symbol {index}: name offset {offset} lies outside .dynstr")
        stop = self.strtab.find(b"\0", offset)
        if stop < 0:
            raise ElfReadError(f"symbol {index}: unterminated name at .dynstr offset {offset}")
        self.budget -= stop - offset
        if self.budget < 0:
            raise ElfReadError("the symbol names add up to far more than the file holds")
        name = self.strtab[offset:stop]
        self.starts[offset] = name  # the same suffix again costs nothing
        return name


def _versym(layout: Layout, tags: dict[int, int], count: int) -> array[int] | None:
    if c.DT_VERSYM not in tags:
        return None
    at = layout.offset(tags[c.DT_VERSYM], 2 * count, "the symbol versions")
    versions = array("H", layout.slice(at, 2 * count, "the symbol versions"))
    if layout.little != (sys.byteorder == "little"):
        versions.byteswap()
    return versions


def _count(layout: Layout, dynamic: Dynamic) -> int:
    """How many entries .dynsym has, as the hash tables and the section header say.

    A GNU hash table counts only up to its last hashed (defined) symbol; when no symbol is
    hashed, GNU ld writes ``symoffset`` 1 whatever number of undefined symbols precede
    (torch's libtorch_global_deps.so: 4). The ``.dynsym`` section header, when present and
    inside the table's segment, then gives the rest: the larger count wins.
    """
    tags = dynamic.tags
    if c.DT_GNU_HASH in tags:
        counted = _gnu_hash_count(layout, tags[c.DT_GNU_HASH])
    elif c.DT_HASH in tags:
        at = layout.offset(tags[c.DT_HASH], 8, "DT_HASH")
        counted = layout.unpack(layout.u32, at + 4, "DT_HASH's nchain")[0]
    else:
        counted = 0
    return max(counted, _section_count(layout, tags[c.DT_SYMTAB]))


def _section_count(layout: Layout, symtab: int) -> int:
    """Entries of the SHT_DYNSYM section at ``symtab``, if its size fits its segment; else 0."""
    for _name, kind, _offset, size in layout.sections() or ():
        if kind == c.SHT_DYNSYM:
            count = size // layout.sym.size
            try:
                layout.segment_of(symtab, count * layout.sym.size, ".dynsym")
            except ElfReadError:
                return 0
            return count
    return 0


def _gnu_hash_count(layout: Layout, vaddr: int) -> int:
    at, end = layout.extent(vaddr, "DT_GNU_HASH")
    header = layout.slice(at, 16, "DT_GNU_HASH's header")
    buckets, offset, bloom, _shift = array_of(layout, header)
    start = at + 16 + bloom * layout.addr_size
    if start + 4 * buckets > end:
        raise ElfReadError("truncated: DT_GNU_HASH's buckets run past their segment")
    highest = max(array_of(layout, layout.slice(start, 4 * buckets, "buckets")), default=0)
    if highest < offset:
        return offset  # every bucket is empty: only the symbols below symoffset exist
    chains = start + 4 * buckets
    position = chains + 4 * (highest - offset)
    step = 1 << 12
    while position < end:
        block = array_of(
            layout,
            layout.slice(position, min(4 * step, end - position) // 4 * 4, "DT_GNU_HASH's chains"),
        )
        if not block:
            break
        for index, value in enumerate(block):
            if value & 1:
                return highest + index + 1
        highest += len(block)
        position += 4 * len(block)
    raise ElfReadError("DT_GNU_HASH's last chain never ends")


def array_of(layout: Layout, raw: bytes) -> array[int]:
    """32-bit words of the file's byte order."""
    words = array("I", raw)
    if words.itemsize != 4:  # pragma: no cover - every supported platform has a 4-byte "I"
        words = array("L", raw)
    if layout.little != (sys.byteorder == "little"):
        words.byteswap()
    return words
