"""Small ELF64 shared objects built in memory, for the ld.so model's unit tests.

Only what ld.so's dynamic linking reads: one PT_LOAD mapping the file at address 0, PT_DYNAMIC,
``.dynstr``, ``.dynsym`` (count from DT_HASH), ``.gnu.version``, ``_r`` and ``_d``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

EM_X86_64 = 62
EM_AARCH64 = 183


def build_so(
    soname: str | None = None,
    *,
    needed: Sequence[str] = (),
    rpath: str | None = None,
    runpath: str | None = None,
    defines: Sequence[str] = (),
    undefined: Sequence[str] = (),
    verdef: Sequence[str] = (),
    verneed: dict[str, Sequence[str]] | None = None,
    machine: int = EM_X86_64,
) -> bytes:
    """A shared object. Symbols are ``name`` or ``name@VERSION``; a defined ``name@VERSION``
    needs ``VERSION`` in ``verdef``, an undefined one needs it in ``verneed``."""
    verneed = dict(verneed or {})
    strings = bytearray(b"\0")
    offsets: dict[str, int] = {}

    def text(value: str) -> int:
        if value not in offsets:
            offsets[value] = len(strings)
            strings.extend(value.encode() + b"\0")
        return offsets[value]

    def_index = {name: 2 + i for i, name in enumerate(verdef)}
    need_index: dict[str, int] = {}
    for names in verneed.values():
        for name in names:
            need_index.setdefault(name, 2 + len(verdef) + len(need_index))
    symbols: list[tuple[int, int, int]] = []  # (name offset, shndx, version index)
    for entry, shndx in [(s, 1) for s in defines] + [(s, 0) for s in undefined]:
        name, _, version = entry.partition("@")
        index = 1
        if version:
            index = def_index[version] if shndx else need_index[version]
        symbols.append((text(name), shndx, index))
    dyn: list[tuple[int, int]] = [(1, text(n)) for n in needed]
    if soname:
        dyn.append((14, text(soname)))
    if rpath is not None:
        dyn.append((15, text(rpath)))
    if runpath is not None:
        dyn.append((29, text(runpath)))
    verdef_blob = bytearray()
    entries = [(soname or "base", 1, 1)] + [(name, 0, def_index[name]) for name in verdef]
    for i, (name, flags, index) in enumerate(entries):
        last = i == len(entries) - 1
        verdef_blob += struct.pack("<HHHHIII", 1, flags, index, 1, 0, 20, 0 if last else 28)
        verdef_blob += struct.pack("<II", text(name), 0)
    verneed_blob = bytearray()
    files = list(verneed.items())
    for i, (filename, names) in enumerate(files):
        last = i == len(files) - 1
        size = 16 + 16 * len(names)
        verneed_blob += struct.pack(
            "<HHIII", 1, len(names), text(filename), 16, 0 if last else size
        )
        for j, name in enumerate(names):
            nxt = 0 if j == len(names) - 1 else 16
            verneed_blob += struct.pack("<IHHII", 0, 0, need_index[name], text(name), nxt)

    count = len(symbols) + 1
    symtab = bytearray(24)
    for name, shndx, _ in symbols:
        symtab += struct.pack("<IBBHQQ", name, (1 << 4) | 2, 0, shndx, 0x1000 if shndx else 0, 0)
    versym = struct.pack(f"<{count}H", 0, *(v for _, _, v in symbols))
    hashtab = struct.pack(f"<II1I{count}I", 1, count, 0, *([0] * count))

    phoff, phnum = 64, 2
    cursor = phoff + phnum * 56
    blobs: list[tuple[str, bytes]] = [
        ("str", bytes(strings)),
        ("sym", bytes(symtab)),
        ("hash", hashtab),
        ("versym", versym),
        ("verdef", bytes(verdef_blob)),
        ("verneed", bytes(verneed_blob)),
    ]
    placed: dict[str, int] = {}
    body = bytearray()
    for name, blob in blobs:
        cursor = (cursor + 7) & ~7
        placed[name] = cursor
        body += b"\0" * (cursor - phoff - phnum * 56 - len(body)) + blob
        cursor += len(blob)
    dyn += [(5, placed["str"]), (10, len(strings)), (6, placed["sym"]), (11, 24)]
    dyn += [(4, placed["hash"]), (0x6FFFFFF0, placed["versym"])]
    if verdef:
        dyn += [(0x6FFFFFFC, placed["verdef"]), (0x6FFFFFFD, len(entries))]
    if verneed:
        dyn += [(0x6FFFFFFE, placed["verneed"]), (0x6FFFFFFF, len(files))]
    dyn.append((0, 0))
    cursor = (cursor + 7) & ~7
    dynamic_at = cursor
    body += b"\0" * (cursor - phoff - phnum * 56 - len(body))
    body += b"".join(struct.pack("<qQ", tag, value) for tag, value in dyn)
    total = phoff + phnum * 56 + len(body)

    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, machine, 1, 0, phoff, 0, 0, 64, 56, phnum, 64, 0, 0
    )
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
    dynamic = struct.pack(
        "<IIQQQQQQ", 2, 6, dynamic_at, dynamic_at, dynamic_at, 16 * len(dyn), 16 * len(dyn), 8
    )
    return header + load + dynamic + bytes(body)


def write_so(folder: Path, name: str, **kwargs: object) -> Path:
    """``build_so(**kwargs)`` written to ``folder/name`` (soname defaults to ``name``)."""
    folder.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("soname", name)
    path = folder / name
    path.write_bytes(build_so(**kwargs))  # type: ignore[arg-type]
    return path
