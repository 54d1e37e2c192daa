"""``/etc/ld.so.cache`` read directly (no ``ldconfig -p`` subprocess): soname -> paths.

glibc's format ``glibc-ld.so.cache1.1``, alone or after the old ``ld.so-1.7.0`` table. Only
entries of this machine's flavour count (ld.so's ``_dl_cache_check_flags``). A damaged or
unknown cache reads as empty: ld.so then falls back to the default directories, as we do.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping

_OLD = b"ld.so-1.7.0"
_NEW = b"glibc-ld.so.cache1.1"
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")
_NEW_ENTRY = struct.Struct("<iIIIQ")
_FLAGS = {62: 0x0303, 183: 0x0A03, 3: 0x0003}  # x86-64 lib64, aarch64 lib64, i386 libc6


def parse_ld_cache(data: bytes, machine: int = 62, root: str = "") -> dict[str, tuple[str, ...]]:
    """soname -> candidate paths, in cache order; ``root`` prefixes them (a sysroot)."""
    start = 0
    if data.startswith(_OLD):
        if len(data) < 16:
            return {}
        (count,) = struct.unpack_from("<I", data, 12)
        start = 16 + count * 12
        start = (start + 7) & ~7
    if data[start : start + len(_NEW)] != _NEW or len(data) < start + _NEW_HEADER.size:
        return {}
    _, count, _, _, _ = _NEW_HEADER.unpack_from(data, start)
    wanted = _FLAGS.get(machine)
    table = start + _NEW_HEADER.size
    if table + count * _NEW_ENTRY.size > len(data):
        return {}
    result: dict[str, list[str]] = {}
    for index in range(count):
        flags, key, value, _, _ = _NEW_ENTRY.unpack_from(data, table + index * _NEW_ENTRY.size)
        if wanted is not None and flags != wanted:
            continue
        name, path = _string(data, start + key), _string(data, start + value)
        if name and path:
            result.setdefault(name, []).append(root + path)
    return {name: tuple(paths) for name, paths in result.items()}


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        return ""
    return data[offset:end].decode("utf-8", "surrogateescape")


class LdCache(Mapping[str, tuple[str, ...]]):
    """The cache, decoded per name on first use (a warm analysis asks for a handful)."""

    def __init__(self, data: bytes, machine: int = 62, root: str = "") -> None:
        self._data = data
        self._machine = machine
        self._root = root
        self._found: dict[str, tuple[str, ...]] = {}
        self._entries: list[tuple[int, int]] | None = None
        self._start = 0
        self._all: dict[str, tuple[str, ...]] | None = None

    def _table(self) -> list[tuple[int, int]]:
        if self._entries is None:
            self._entries = []
            data, start = self._data, 0
            if data.startswith(_OLD) and len(data) >= 16:
                (count,) = struct.unpack_from("<I", data, 12)
                start = (16 + count * 12 + 7) & ~7
            if data[start : start + len(_NEW)] == _NEW and len(data) >= start + _NEW_HEADER.size:
                _, count, _, _, _ = _NEW_HEADER.unpack_from(data, start)
                table = start + _NEW_HEADER.size
                end = table + count * _NEW_ENTRY.size
                wanted = _FLAGS.get(self._machine)
                if end <= len(data):
                    self._entries = [
                        (key, value)
                        for flags, key, value, _, _ in _NEW_ENTRY.iter_unpack(data[table:end])
                        if wanted is None or flags == wanted
                    ]
            self._start = start
        return self._entries

    def get(self, name: str, default: object = None) -> tuple[str, ...]:
        found = self._found.get(name)
        if found is None:
            needle = name.encode("utf-8", "surrogateescape") + b"\0"
            data, start = self._data, self._start
            entries = self._table()
            start = self._start
            found = tuple(
                self._root + _string(data, start + value)
                for key, value in entries
                if data.startswith(needle, start + key)
            )
            self._found[name] = found
        return found

    def __getitem__(self, name: str) -> tuple[str, ...]:
        found = self.get(name)
        if not found:
            raise KeyError(name)
        return found

    def _everything(self) -> dict[str, tuple[str, ...]]:
        if self._all is None:
            self._all = parse_ld_cache(self._data, self._machine, self._root)
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._everything())

    def __len__(self) -> int:
        return len(self._everything())
