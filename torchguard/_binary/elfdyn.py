"""The dynamic-linking facts of an ELF file: what glibc's ld.so reads to load and bind it.

One pass over the file through ``mmap``: the header, ``PT_DYNAMIC`` (found through the
``PT_LOAD`` mapping, as ld.so finds it), NEEDED/SONAME/RPATH/RUNPATH/FLAGS_1, and ``.dynsym``
with its versions (``.gnu.version``, ``_r``, ``_d``). The symbol count comes from DT_HASH or
DT_GNU_HASH, the way the loader knows it, so stripped section headers do not matter. Damage
that ld.so would reject becomes :class:`ElfReadError`; anything else propagates.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

_Offset = Callable[[int], int]
_Text = Callable[[int], str]

_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NEEDED, _DT_HASH, _DT_STRTAB, _DT_SYMTAB = 1, 4, 5, 6
_DT_STRSZ, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 10, 14, 15, 29
_DT_GNU_HASH, _DT_VERSYM, _DT_VERDEF, _DT_VERDEFNUM = 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
_DT_VERNEED, _DT_VERNEEDNUM, _DT_FLAGS_1 = 0x6FFFFFFE, 0x6FFFFFFF, 0x6FFFFFFB
_DF_1_NODEFLIB = 0x800
_STB_WEAK = 2
_SHN_UNDEF = 0
_VER_FLG_WEAK = 0x2
_MAX_SYMBOLS = 4_000_000
_MAX_ENTRIES = 100_000


class ElfReadError(Exception):
    """A file ld.so rejects: not ELF ("invalid ELF header"), or truncated ("file too short")."""


@dataclass(frozen=True)
class ElfFacts:
    """What the ld.so model needs of one shared object.

    ``defined`` maps a symbol to its version names (``""``: unversioned); ``default`` holds
    the symbols whose definition is the default one (``S@@V`` or unversioned). ``undefined``
    lists the non-weak references as (symbol, version or ``""``). ``verneed`` maps a needed
    file to its (version, weak) pairs; ``verdef`` is None when the object defines no versions.
    """

    elf_class: int
    machine: int
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...] | None
    runpath: tuple[str, ...] | None
    nodeflib: bool
    verneed: dict[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    verdef: frozenset[str] | None = None
    defined: dict[str, frozenset[str]] = field(default_factory=dict)
    undefined: tuple[tuple[str, str], ...] = ()


def read_elf_file(path: str, *, symbols: bool = True) -> ElfFacts:
    """The facts of the file at ``path`` (``symbols=False``: skip the symbol table)."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        if handle.tell() < 16:
            raise ElfReadError("file too short")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return read_elf(view, symbols=symbols)


def read_elf(data: bytes | mmap.mmap, *, symbols: bool = True) -> ElfFacts:
    """The facts of one ELF image held in ``data``."""
    return _Reader(data).facts(symbols)


class _Reader:
    def __init__(self, data: bytes | mmap.mmap) -> None:
        if len(data) < 16 or data[:4] != _MAGIC:
            raise ElfReadError("invalid ELF header")
        self.data = data
        klass, order = data[4], data[5]
        if klass not in (1, 2) or order not in (1, 2):
            raise ElfReadError("invalid ELF header")
        self.wide = klass == 2
        self.end = "<" if order == 1 else ">"
        self.klass = klass
        header = "HHIQQQIHHHHHH" if self.wide else "HHIIIIIHHHHHH"
        (_, self.machine, _, _, self.phoff, _, _, _, self.phentsize, self.phnum, *_rest) = (
            self._unpack(header, 16)
        )

    def _unpack(self, fmt: str, offset: int) -> tuple[int, ...]:
        layout = struct.Struct(self.end + fmt)
        if offset < 0 or offset + layout.size > len(self.data):
            raise ElfReadError("file too short")
        return layout.unpack_from(self.data, offset)

    def _string(self, table: int, size: int, offset: int) -> str:
        if offset >= size:
            raise ElfReadError("string offset out of range")
        start = table + offset
        stop = self.data.find(b"\0", start, table + size)
        if stop < 0:
            raise ElfReadError("unterminated string")
        return bytes(self.data[start:stop]).decode("utf-8", "surrogateescape")

    def facts(self, symbols: bool) -> ElfFacts:
        loads, dynamic = self._segments()
        if dynamic is None:
            return ElfFacts(self.klass, self.machine, None, (), None, None, False)
        tags = self._dynamic(dynamic)

        def offset(address: int) -> int:
            for vaddr, filesz, off in loads:
                if vaddr <= address < vaddr + filesz:
                    return off + address - vaddr
            raise ElfReadError(f"address {address:#x} outside the file's segments")

        first = {tag: values[0] for tag, values in tags.items()}
        if _DT_STRTAB not in first:
            raise ElfReadError("dynamic section without a string table")
        strtab, strsz = offset(first[_DT_STRTAB]), first.get(_DT_STRSZ, 0)
        if strtab + strsz > len(self.data):
            raise ElfReadError("file too short")

        def text(value: int) -> str:
            return self._string(strtab, strsz, value)

        def paths(tag: int) -> tuple[str, ...] | None:
            if tag not in first:
                return None
            return tuple(p for v in tags[tag] for p in text(v).split(":") if p)

        verneed = self._verneed(offset, first, text) if _DT_VERNEED in first else {}
        verdefs = self._verdef(offset, first, text) if _DT_VERDEF in first else None
        defined: dict[str, frozenset[str]] = {}
        undefined: tuple[tuple[str, str], ...] = ()
        if symbols and _DT_SYMTAB in first:
            defined, undefined = self._symbols(offset, first, verneed, verdefs)
        return ElfFacts(
            elf_class=self.klass,
            machine=self.machine,
            soname=text(first[_DT_SONAME]) if _DT_SONAME in first else None,
            needed=tuple(text(v) for v in tags.get(_DT_NEEDED, ())),
            rpath=paths(_DT_RPATH),
            runpath=paths(_DT_RUNPATH),
            nodeflib=bool(first.get(_DT_FLAGS_1, 0) & _DF_1_NODEFLIB),
            verneed={f: tuple((n, w) for n, w, _ in v) for f, v in verneed.items()},
            verdef=frozenset(verdefs.values()) if verdefs is not None else None,
            defined=defined,
            undefined=undefined,
        )

    def _segments(self) -> tuple[list[tuple[int, int, int]], tuple[int, int] | None]:
        fmt = "IIQQQQQQ" if self.wide else "IIIIIIII"
        loads: list[tuple[int, int, int]] = []
        dynamic = None
        if self.phnum > _MAX_ENTRIES:
            raise ElfReadError("too many program headers")
        for index in range(self.phnum):
            fields = self._unpack(fmt, self.phoff + index * self.phentsize)
            if self.wide:
                kind, _, off, vaddr, _, filesz, _, _ = fields
            else:
                kind, off, vaddr, _, filesz, _, _, _ = fields
            if kind == _PT_LOAD:
                loads.append((vaddr, filesz, off))
            elif kind == _PT_DYNAMIC:
                dynamic = (off, filesz)
        return loads, dynamic

    def _dynamic(self, where: tuple[int, int]) -> dict[int, list[int]]:
        off, size = where
        fmt = "qQ" if self.wide else "iI"
        step = 16 if self.wide else 8
        tags: dict[int, list[int]] = {}
        for index in range(min(size // step, _MAX_ENTRIES)):
            tag, value = self._unpack(fmt, off + index * step)
            if tag == 0:
                break
            tags.setdefault(tag & 0xFFFFFFFFFFFFFFFF if tag < 0 else tag, []).append(value)
        return tags

    def _verneed(
        self, offset: _Offset, first: dict[int, int], text: _Text
    ) -> dict[str, list[tuple[str, bool, int]]]:
        """file -> [(version, weak, index)] from ``.gnu.version_r``."""
        result: dict[str, list[tuple[str, bool, int]]] = {}
        at = offset(first[_DT_VERNEED])
        for _ in range(min(first.get(_DT_VERNEEDNUM, _MAX_ENTRIES), _MAX_ENTRIES)):
            _, count, file_off, aux, nxt = self._unpack("HHIII", at)
            entries = result.setdefault(text(file_off), [])
            entry = at + aux
            for _ in range(min(count, _MAX_ENTRIES)):
                _, flags, other, name, nxt_aux = self._unpack("IHHII", entry)
                entries.append((text(name), bool(flags & _VER_FLG_WEAK), other))
                if not nxt_aux:
                    break
                entry += nxt_aux
            if not nxt:
                break
            at += nxt
        return result

    def _verdef(self, offset: _Offset, first: dict[int, int], text: _Text) -> dict[int, str]:
        """index -> version name from ``.gnu.version_d`` (the base entry excluded)."""
        result: dict[int, str] = {}
        at = offset(first[_DT_VERDEF])
        for _ in range(min(first.get(_DT_VERDEFNUM, _MAX_ENTRIES), _MAX_ENTRIES)):
            _, flags, index, count, _, aux, nxt = self._unpack("HHHHIII", at)
            if count and not flags & 0x1:  # VER_FLG_BASE names the file itself
                (name, _) = self._unpack("II", at + aux)
                result[index] = text(name)
            if not nxt:
                break
            at += nxt
        return result

    def _count(self, offset: _Offset, first: dict[int, int]) -> int:
        if _DT_HASH in first:
            return self._unpack("II", offset(first[_DT_HASH]))[1]
        if _DT_GNU_HASH not in first:
            raise ElfReadError("symbol table without a hash table")
        at = offset(first[_DT_GNU_HASH])
        nbuckets, symoffset, bloom_size, _ = self._unpack("IIII", at)
        buckets = at + 16 + bloom_size * (8 if self.wide else 4)
        if buckets + 4 * nbuckets > len(self.data):
            raise ElfReadError("file too short")
        last = max(struct.unpack_from(f"{self.end}{nbuckets}I", self.data, buckets), default=0)
        if last < symoffset:
            return symoffset
        chain = buckets + 4 * nbuckets + 4 * (last - symoffset)
        while True:
            (value,) = self._unpack("I", chain)
            last += 1
            if value & 1:
                return last
            chain += 4

    def _symbols(
        self,
        offset: _Offset,
        first: dict[int, int],
        verneed: dict[str, list[tuple[str, bool, int]]],
        verdefs: dict[int, str] | None,
    ) -> tuple[dict[str, frozenset[str]], tuple[tuple[str, str], ...]]:
        count = self._count(offset, first)
        if count > _MAX_SYMBOLS:
            raise ElfReadError("too many symbols")
        symtab = offset(first[_DT_SYMTAB])
        step = 24 if self.wide else 16
        if symtab + count * step > len(self.data):
            raise ElfReadError("file too short")
        versym = offset(first[_DT_VERSYM]) if _DT_VERSYM in first else None
        indices: tuple[int, ...] = ()
        if versym is not None:
            if versym + 2 * count > len(self.data):
                raise ElfReadError("file too short")
            indices = struct.unpack_from(f"{self.end}{count}H", self.data, versym)
        needed_names = {i: n for entries in verneed.values() for n, _, i in entries}
        defs = verdefs or {}
        strtab, strsz = offset(first[_DT_STRTAB]), first.get(_DT_STRSZ, 0)
        data = self.data
        layout = struct.Struct(self.end + ("IBBHQQ" if self.wide else "IIIBBH"))
        defined: dict[str, set[str]] = {}
        undefined: list[tuple[str, str]] = []
        for index in range(1, count):
            fields = layout.unpack_from(data, symtab + index * step)
            if self.wide:
                name, info, _, shndx, _, _ = fields
            else:
                name, _, _, info, _, shndx = fields
            bind = info >> 4
            if not name or bind == 0:  # STB_LOCAL
                continue
            stop = data.find(b"\0", strtab + name, strtab + strsz)
            if name >= strsz or stop < 0:
                raise ElfReadError("symbol name out of range")
            symbol = bytes(data[strtab + name : stop]).decode("utf-8", "surrogateescape")
            version = indices[index] & 0x7FFF if indices else 1
            if shndx == _SHN_UNDEF:
                if bind != _STB_WEAK:
                    undefined.append((symbol, needed_names.get(version, "")))
            else:
                defined.setdefault(symbol, set()).add(defs.get(version, ""))
        return {k: frozenset(v) for k, v in defined.items()}, tuple(undefined)
