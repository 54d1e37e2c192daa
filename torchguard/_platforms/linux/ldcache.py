"""``/etc/ld.so.cache`` parsed directly, as ld.so reads it (no ``ldconfig -p`` subprocess).

Three layouts exist (glibc ``sysdeps/generic/dl-cache.h``; ``ldconfig -c new|old|compat``):

- **new** (``glibc-ld.so.cache1.1``, what current glibc writes): a 48-byte header (entry
  count, string table size, a byte-order flag, the offset of an extension area), then 24-byte
  entries (flags, key, value, an unused OS version, a 64-bit hwcap word). String offsets are
  relative to the header. The extension area names the ``glibc-hwcaps`` subdirectory of an
  entry whose hwcap word has bit 62 set (its low 32 bits index that table).
- **old** (``ld.so-1.7.0``): a 16-byte header and 12-byte entries; string offsets are
  relative to the end of the entries.
- **compat**: an old cache followed (8-byte aligned) by a new one; ld.so uses the new part,
  whose string offsets count from its own header.

Each entry maps a soname (key) to a path (value) with flags: the low byte is the kind
(3 = ELF libc6), the high byte the ABI (0x03 = x86-64). :func:`cache_flags` gives the
flags ld.so accepts for a machine, :meth:`LdCache.lookup` lists the candidates for a soname
in cache order, and :meth:`LdCache.resolve` picks the one ld.so's ``search_cache`` picks.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
DEFAULT_PATH = "/etc/ld.so.cache"
MAX_BYTES = 64 << 20

FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
FLAG_S390_LIB64 = 0x0400
FLAG_POWERPC_LIB64 = 0x0500
FLAG_X8664_LIBX32 = 0x0800
FLAG_AARCH64_LIB64 = 0x0A00
FLAG_RISCV_FLOAT_ABI_DOUBLE = 0x1000
HWCAP_EXTENSION = 1 << 62

_ISA_LEVEL_MASK = (1 << 10) - 1
_EXTENSION_MAGIC = 0xEAA42174
_TAG_GENERATOR = 0
_TAG_GLIBC_HWCAPS = 1
_MAX_STRING = 4096
_MAX_SECTIONS = 64

#: ldconfig's names for the ABI byte (``ldconfig -p`` prints "libc6,x86-64").
_ABI_LABELS = {
    0x0100: "64bit",
    0x0200: "IA-64",
    FLAG_X8664_LIB64: "x86-64",
    FLAG_S390_LIB64: "64bit",
    FLAG_POWERPC_LIB64: "64bit",
    0x0600: "N32",
    0x0700: "64bit",
    FLAG_X8664_LIBX32: "x32",
    0x0900: "hard-float",
    FLAG_AARCH64_LIB64: "AArch64",
    0x0B00: "soft-float",
    FLAG_RISCV_FLOAT_ABI_DOUBLE: "double-float",
}
_KIND_LABELS = {0: "libc4", 1: "ELF", 2: "libc5", 3: "libc6"}

#: (ELF machine, ELF class) -> the flags ld.so's ``_dl_cache_check_flags`` accepts.
_MACHINE_FLAGS = {
    (62, 2): FLAG_ELF_LIBC6 | FLAG_X8664_LIB64,  # x86-64
    (62, 1): FLAG_ELF_LIBC6 | FLAG_X8664_LIBX32,  # x32
    (183, 2): FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64,  # aarch64
    (21, 2): FLAG_ELF_LIBC6 | FLAG_POWERPC_LIB64,  # ppc64
    (22, 2): FLAG_ELF_LIBC6 | FLAG_S390_LIB64,  # s390x
    (243, 2): FLAG_ELF_LIBC6 | FLAG_RISCV_FLOAT_ABI_DOUBLE,  # riscv64 (lp64d)
}


class LdCacheError(Exception):
    """The cache file is missing, unreadable, of an unknown format, or cut short."""


@dataclass(frozen=True)
class CacheEntry:
    """One cache entry: ``soname`` is found at ``path``."""

    soname: str
    path: str
    flags: int
    hwcap: int = 0
    hwcaps_subdir: str | None = None
    """``x86-64-v3`` for an entry from a ``glibc-hwcaps/x86-64-v3`` directory, else None."""

    @property
    def label(self) -> str:
        """ldconfig's description: ``libc6,x86-64`` (plus the hwcaps subdirectory)."""
        kind = _KIND_LABELS.get(self.flags & 0xFF, "unknown")
        abi = _ABI_LABELS.get(self.flags & 0xFF00)
        text = f"{kind},{abi}" if abi else kind
        if self.hwcaps_subdir is not None:
            text += f', hwcap: "{self.hwcaps_subdir}"'
        elif self.hwcap:
            text += f", hwcap: {self.hwcap:#018x}"
        return text


@dataclass(frozen=True)
class LdCache:
    """The entries of one cache file, in file order (ldconfig sorts them by soname)."""

    format: str
    """``new``, ``old`` or ``compat``."""
    entries: tuple[CacheEntry, ...]
    generator: str | None = None
    """The writer (``ldconfig (GNU libc) 2.36``), when the new format records it."""

    def lookup(self, soname: str, flags: int | None = None) -> tuple[CacheEntry, ...]:
        """The entries for ``soname`` (with exactly ``flags`` when given), in cache order."""
        return tuple(
            entry
            for entry in self.entries
            if entry.soname == soname and (flags is None or entry.flags == flags)
        )

    def resolve(
        self, soname: str, machine: int, elf_class: int, hwcaps: Sequence[str] = ()
    ) -> CacheEntry | None:
        """The entry ld.so's ``search_cache`` picks for ``soname``, or None.

        ``hwcaps`` are the glibc-hwcaps subdirectories the CPU supports, best first
        (``("x86-64-v3", "x86-64-v2")``; ``ld.so --list-diagnostics`` shows them): among the
        named-hwcaps entries (ldconfig lists them first) the best supported one wins, else
        the first plain entry with acceptable flags and no legacy hwcap bits. On machines
        where glibc also accepts plain ELF entries, an entry with the default flags is
        preferred to an earlier plain ELF one.
        """
        accepted = cache_flags(machine, elf_class)
        preferred = max(accepted)
        rank = {name: position for position, name in enumerate(hwcaps)}
        best: CacheEntry | None = None
        best_rank = len(rank)
        for entry in self.lookup(soname):
            if entry.flags not in accepted:
                continue
            if entry.hwcaps_subdir is not None:
                position = rank.get(entry.hwcaps_subdir)
                if position is not None and position < best_rank:
                    best, best_rank = entry, position
                continue
            if best is not None and best.hwcaps_subdir is not None:
                return best
            if entry.hwcap:
                continue  # legacy hwcaps (removed in glibc 2.37): not modelled, never chosen
            best = entry
            if entry.flags == preferred:
                return entry
        return best


def cache_flags(machine: int, elf_class: int) -> frozenset[int]:
    """The entry flags ld.so's ``_dl_cache_check_flags`` accepts for this ELF machine/class.

    x86-64, AArch64, ppc64, s390x and riscv64 accept exactly their libc6 ABI flags; other
    machines use glibc's generic rule (plain ELF or ELF libc6 entries).
    """
    exact = _MACHINE_FLAGS.get((machine, elf_class))
    if exact is not None:
        return frozenset({exact})
    return frozenset({1, FLAG_ELF_LIBC6})


def read_ld_cache(path: str = DEFAULT_PATH) -> LdCache:
    """Parse the cache file at ``path``. Raises :class:`LdCacheError`.

    ld.so maps only a regular file (anything else is no cache); a file past
    :data:`MAX_BYTES` is refused rather than read whole (a real cache is under a few MiB).
    """
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise LdCacheError(f"{path} is not a regular file")
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise LdCacheError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise LdCacheError(f"{path} is larger than {MAX_BYTES >> 20} MiB: not an ld.so cache")
    return parse_ld_cache(data)


def parse_ld_cache(data: bytes) -> LdCache:
    """Parse the bytes of an ld.so cache in any of its three layouts."""
    if data.startswith(NEW_MAGIC):
        entries, generator = _new(data, 0)
        return LdCache("new", entries, generator)
    if data.startswith(OLD_MAGIC):
        count = _unpack("<I", data, 12, "the old header")[0]
        end = 16 + 12 * count
        if end > len(data):
            raise LdCacheError(f"truncated: {count} old entries need {end} bytes")
        aligned = (end + 7) & ~7  # ALIGN_CACHE: the new header is 8-byte aligned
        if data[aligned : aligned + len(NEW_MAGIC)] == NEW_MAGIC:
            entries, generator = _new(data, aligned)
            return LdCache("compat", entries, generator)
        return LdCache("old", _old(data, count, end), None)
    raise LdCacheError("not an ld.so cache (unknown magic)")


def _old(data: bytes, count: int, strings: int) -> tuple[CacheEntry, ...]:
    found = []
    for index in range(count):
        flags, key, value = struct.unpack_from("<iII", data, 16 + 12 * index)
        found.append(
            CacheEntry(
                _string(data, strings + key, "a soname"),
                _string(data, strings + value, "a path"),
                flags,
            )
        )
    return tuple(found)


def _new(data: bytes, base: int) -> tuple[tuple[CacheEntry, ...], str | None]:
    header = data[base : base + 48]
    if len(header) < 48:
        raise LdCacheError("truncated: the cache header is incomplete")
    endian = header[28] & 3
    if endian == 1:
        raise LdCacheError("the cache marks its byte order as invalid")
    order = {2: "<", 3: ">"}.get(endian, "<" if sys.byteorder == "little" else ">")
    count, _strings_size = struct.unpack_from(order + "II", header, 20)
    (extension,) = struct.unpack_from(order + "I", header, 32)
    start = base + 48
    if start + 24 * count > len(data):
        raise LdCacheError(f"truncated: {count} entries need {start + 24 * count} bytes")
    subdirs, generator = _extensions(data, base, extension, order)
    found = []
    entry = struct.Struct(order + "iIIIQ")
    for index in range(count):
        flags, key, value, _osversion, hwcap = entry.unpack_from(data, start + 24 * index)
        subdir = None
        if (hwcap >> 32) & ~_ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32:
            slot = hwcap & 0xFFFFFFFF
            if slot >= len(subdirs):
                raise LdCacheError(
                    f"entry {index} names hwcaps subdirectory {slot} of {len(subdirs)}"
                )
            subdir = subdirs[slot]
        found.append(
            CacheEntry(
                _string(data, base + key, "a soname"),
                _string(data, base + value, "a path"),
                flags,
                hwcap,
                subdir,
            )
        )
    return tuple(found), generator


def _extensions(data: bytes, base: int, offset: int, order: str) -> tuple[list[str], str | None]:
    """The glibc-hwcaps subdirectory names and the generator string, if recorded.

    The extension area, its sections and the subdirectory names are all addressed from the
    start of the file, as ld.so's ``cache_extension_load`` and ``glibc_hwcaps_compare`` read
    them (in a compat cache that makes the names garbage, for ld.so and ``ldconfig -p`` alike).
    """
    if not offset:
        return [], None
    at = offset
    magic, count = _unpack(order + "II", data, at, "the extension header")
    if magic != _EXTENSION_MAGIC:
        raise LdCacheError("the cache's extension area has a wrong magic number")
    subdirs: list[str] = []
    generator = None
    for index in range(min(count, _MAX_SECTIONS)):
        tag, _flags, where, size = _unpack(order + "IIII", data, at + 8 + 16 * index, "a section")
        if where + size > len(data):
            raise LdCacheError("truncated: an extension section lies past the end")
        if tag == _TAG_GENERATOR:
            raw = data[where : where + size]
            generator = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif tag == _TAG_GLIBC_HWCAPS:
            for slot in range(size // 4):
                (name,) = struct.unpack_from(order + "I", data, where + 4 * slot)
                subdirs.append(_string(data, name, "a hwcaps subdirectory"))
    return subdirs, generator


def _unpack(layout: str, data: bytes, offset: int, what: str) -> tuple[int, ...]:
    if offset < 0 or offset + struct.calcsize(layout) > len(data):
        raise LdCacheError(f"truncated: {what} lies past the end of the cache")
    return struct.unpack_from(layout, data, offset)


def _string(data: bytes, offset: int, what: str) -> str:
    if offset < 0 or offset >= len(data):
        raise LdCacheError(f"{what} at byte {offset} lies past the end of the cache")
    stop = data.find(b"\0", offset, offset + _MAX_STRING)
    if stop < 0:
        raise LdCacheError(f"{what} at byte {offset} is not terminated")
    return data[offset:stop].decode("utf-8", "surrogateescape")
