"""``/etc/ld.so.cache`` read directly (no ``ldconfig -p`` subprocess): soname -> paths.

glibc's format ``glibc-ld.so.cache1.1``, alone or after the old ``ld.so-1.7.0`` table. Only
entries of this machine's flavour count (ld.so's ``_dl_cache_check_flags``). A damaged or
unknown cache reads as empty: ld.so then falls back to the default directories, as we do.
"""

from __future__ import annotations

import struct

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
