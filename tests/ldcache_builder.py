"""Build ``/etc/ld.so.cache`` files in memory (new, old and compat layouts) for unit tests.

``entries`` are (soname, path, flags, hwcaps subdirectory or None); like ldconfig, named
hwcaps entries get bit 62 in their hwcap word and an index into the extension's table.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

X86_64 = 0x0303


def build_cache(
    entries: Sequence[tuple[str, str, int, str | None]],
    layout: str = "new",
    *,
    big_endian: bool = False,
    generator: str = "ldconfig (test) 2.99",
    legacy_hwcap: dict[int, int] | None = None,
) -> bytes:
    """Bytes of a cache holding ``entries`` in order; ``legacy_hwcap`` sets raw hwcap words."""
    legacy_hwcap = legacy_hwcap or {}
    subdirs = sorted({subdir for *_, subdir in entries if subdir is not None})
    if layout == "old":
        return _old(entries)
    new = _new(entries, subdirs, big_endian, generator, legacy_hwcap, base=0)
    if layout == "new":
        return new
    old_header = 16 + 12 * len(entries)
    base = (old_header + 7) & ~7
    new = _new(entries, subdirs, big_endian, generator, legacy_hwcap, base=base)
    # the old entries point into the new part's string table (offsets from the new header)
    old = bytearray(b"ld.so-1.7.0\0" + struct.pack("<I", len(entries)))
    order = ">" if big_endian else "<"
    for index in range(len(entries)):
        flags, key, value = struct.unpack_from(order + "iII", new, 48 + 24 * index)
        old += struct.pack("<iII", flags, key, value)
    old += b"\0" * (base - len(old))
    return bytes(old) + new


def _old(entries: Sequence[tuple[str, str, int, str | None]]) -> bytes:
    strings = bytearray()
    rows = bytearray()
    for soname, path, flags, _subdir in entries:
        key = len(strings)
        strings += soname.encode() + b"\0"
        value = len(strings)
        strings += path.encode() + b"\0"
        rows += struct.pack("<iII", flags, key, value)
    return b"ld.so-1.7.0\0" + struct.pack("<I", len(entries)) + bytes(rows) + bytes(strings)


def _new(
    entries: Sequence[tuple[str, str, int, str | None]],
    subdirs: list[str],
    big_endian: bool,
    generator: str,
    legacy_hwcap: dict[int, int],
    base: int,
) -> bytes:
    order = ">" if big_endian else "<"
    strings_at = 48 + 24 * len(entries)
    strings = bytearray()

    def add(text: str) -> int:
        offset = strings_at + len(strings)
        strings.extend(text.encode() + b"\0")
        return offset

    rows = bytearray()
    for index, (soname, path, flags, subdir) in enumerate(entries):
        hwcap = legacy_hwcap.get(index, 0)
        if subdir is not None:
            hwcap = (1 << 62) | subdirs.index(subdir)
        rows += struct.pack(order + "iIIIQ", flags, add(soname), add(path), 0, hwcap)
    # hwcaps names are addressed from the start of the file (as ld.so reads them)
    name_at = [base + add(name) for name in subdirs]
    while (strings_at + len(strings)) % 8:
        strings.append(0)
    extension = strings_at + len(strings)
    gen = generator.encode()
    sections_at = extension + 8 + 16 * 2
    hwcaps_at = sections_at + len(gen)
    hwcaps_at += (-hwcaps_at) % 4
    body = struct.pack(order + "II", 0xEAA42174, 2)
    body += struct.pack(order + "IIII", 0, 0, base + sections_at, len(gen))
    body += struct.pack(order + "IIII", 1, 0, base + hwcaps_at, 4 * len(subdirs))
    body += gen + b"\0" * (hwcaps_at - sections_at - len(gen))
    body += b"".join(struct.pack(order + "I", at) for at in name_at)
    header = b"glibc-ld.so.cache1.1" + struct.pack(
        order + "IIB3xI12x", len(entries), len(strings), 3 if big_endian else 2, base + extension
    )
    assert len(header) == 48
    return header + bytes(rows) + bytes(strings) + body
