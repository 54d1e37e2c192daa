"""Build small, valid PE images in memory for unit tests.

Each image has one section holding an import directory (and optionally a delay-import
directory) whose thunks point to one named function per DLL (or to the names and ordinals
given in ``symbols``), and optionally an export directory with names, ordinals and
forwarders, which is all pefile and the Windows loader need.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

#: What every built image exports and imports from each DLL unless told otherwise, so that
#: images built together bind at symbol level by default.
DEFAULT_SYMBOL = "torchguard_test_entry"

AMD64 = 0x8664
I386 = 0x14C
ARM64 = 0xAA64

_FILE_ALIGN = 0x200
_SECTION_RVA = 0x1000


def build_pe(
    imports: Sequence[str] = (),
    delay_imports: Sequence[str] = (),
    *,
    machine: int = AMD64,
    dll: bool = True,
    linker: tuple[int, int] = (14, 29),
    file_version: tuple[int, int, int, int] | None = None,
    symbols: Mapping[str, Sequence[str | int]] | None = None,
    exports: Sequence[str] = (DEFAULT_SYMBOL,),
    ordinal_exports: Sequence[int] = (),
    forwarders: Mapping[str, str] | None = None,
    export_base: int = 1,
    export_counts: tuple[int, int] | None = None,
    strings: Sequence[bytes] = (),
) -> bytes:
    """Bytes of a PE image importing ``imports`` and delay-importing ``delay_imports``.

    ``symbols`` maps a (delay-)imported DLL name to the names (str) and ordinals (int) taken
    from it (default: :data:`DEFAULT_SYMBOL`). ``exports`` are exported
    names, ``ordinal_exports`` extra ordinals exported without a name, ``forwarders`` exported
    names that forward (``{"Foo": "other.Bar"}``); ``export_counts`` overrides the
    (NumberOfFunctions, NumberOfNames) the export directory claims; ``strings`` are raw
    bytes placed in the (data) section, as a binary's string constants are.
    """
    symbols = symbols or {}
    forwarders = forwarders or {}
    pe32plus = machine != I386
    thunk = struct.Struct("<Q" if pe32plus else "<I")
    body = bytearray()

    def place(blob: bytes) -> int:
        while len(body) % 8:
            body.append(0)
        offset = len(body)
        body.extend(blob)
        return _SECTION_RVA + offset

    import_table_size = 20 * (len(imports) + 1)
    import_rva = place(bytes(import_table_size)) if imports else 0
    delay_table_size = 32 * (len(delay_imports) + 1)
    delay_rva = place(bytes(delay_table_size)) if delay_imports else 0

    ordinal_flag = 1 << (thunk.size * 8 - 1)

    def thunks_for(dll: str, default: str) -> tuple[int, int]:
        """An import lookup table and an address table for what is taken from ``dll``."""
        values = []
        for function in symbols.get(dll, [default]):
            if isinstance(function, int):
                values.append(ordinal_flag | function)
            else:
                values.append(place(struct.pack("<H", 0) + function.encode() + b"\0"))
        table = b"".join(thunk.pack(value) for value in values) + thunk.pack(0)
        return place(table), place(table)

    for index, name in enumerate(imports):
        name_rva = place(name.encode() + b"\0")
        int_rva, iat_rva = thunks_for(name, DEFAULT_SYMBOL)
        offset = import_rva - _SECTION_RVA + 20 * index
        body[offset : offset + 20] = struct.pack("<5I", int_rva, 0, 0, name_rva, iat_rva)
    for index, name in enumerate(delay_imports):
        name_rva = place(name.encode() + b"\0")
        int_rva, iat_rva = thunks_for(name, DEFAULT_SYMBOL)
        handle_rva = place(bytes(8))
        offset = delay_rva - _SECTION_RVA + 32 * index
        body[offset : offset + 32] = struct.pack(
            "<8I", 1, name_rva, handle_rva, iat_rva, int_rva, 0, 0, 0
        )
    export_rva = export_size = 0
    if exports or ordinal_exports or forwarders:
        export_rva, export_size = _export_directory(
            place, body, exports, ordinal_exports, forwarders, export_base, export_counts
        )
    for blob in strings:
        place(blob + b"\0")
    resource_rva = resource_size = 0
    if file_version is not None:
        blob = _version_resource(file_version)
        resource_rva = place(bytes(len(blob)))
        blob = _version_resource(file_version, resource_rva)
        body[resource_rva - _SECTION_RVA : resource_rva - _SECTION_RVA + len(blob)] = blob
        resource_size = len(blob)
    if not body:
        body.extend(bytes(16))
    raw_size = _align(len(body), _FILE_ALIGN)
    body.extend(bytes(raw_size - len(body)))

    directories = [(0, 0)] * 16
    if export_rva:
        directories[0] = (export_rva, export_size)
    if imports:
        directories[1] = (import_rva, import_table_size)
    if delay_imports:
        directories[13] = (delay_rva, delay_table_size)
    if resource_rva:
        directories[2] = (resource_rva, resource_size)
    optional = _optional_header(pe32plus, linker, raw_size, directories)
    characteristics = 0x0002 | (0x2000 if dll else 0) | (0x0020 if pe32plus else 0x0100)
    coff = struct.pack("<HHIIIHH", machine, 1, 0, 0, 0, len(optional), characteristics)
    section = struct.pack(
        "<8sIIIIIIHHI",
        b".idata",
        len(body),
        _SECTION_RVA,
        raw_size,
        _FILE_ALIGN,
        0,
        0,
        0,
        0,
        0xC0000040,
    )
    dos = bytearray(0x40)
    dos[0:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, 0x40)
    headers = bytes(dos) + b"PE\0\0" + coff + optional + section
    headers += bytes(_FILE_ALIGN - len(headers))
    return headers + bytes(body)


def _export_directory(
    place: Callable[[bytes], int],
    body: bytearray,
    names: Sequence[str],
    ordinal_exports: Sequence[int],
    forwarders: Mapping[str, str],
    base: int,
    counts: tuple[int, int] | None,
) -> tuple[int, int]:
    """An export directory; returns its (RVA, size). Forwarder strings lie inside it."""
    code = place(b"\xc3" * 16)  # what every non-forwarded export points to
    named = sorted({*names, *forwarders})  # the loader binary-searches the name table
    slots = len(named) + len(ordinal_exports)
    directory = place(bytes(40))
    functions = place(bytes(4 * max(slots, 1)))
    name_table = place(bytes(4 * max(len(named), 1)))
    ordinal_table = place(bytes(2 * max(len(named), 1)))
    addresses = [code] * slots
    for index, name in enumerate(named):
        pointer = place(name.encode() + b"\0")
        struct.pack_into("<I", body, name_table - _SECTION_RVA + 4 * index, pointer)
        struct.pack_into("<H", body, ordinal_table - _SECTION_RVA + 2 * index, index)
    for index, ordinal in enumerate(ordinal_exports):
        if ordinal != base + len(named) + index:
            raise ValueError("ordinal_exports must follow the named exports' ordinals")
    for index, name in enumerate(named):
        if name in forwarders:
            addresses[index] = place(forwarders[name].encode() + b"\0")
    for index, address in enumerate(addresses):
        struct.pack_into("<I", body, functions - _SECTION_RVA + 4 * index, address)
    end = _SECTION_RVA + len(body)
    claimed = counts or (slots, len(named))
    body[directory - _SECTION_RVA : directory - _SECTION_RVA + 40] = struct.pack(
        "<IIHHIIIIIII",
        0,
        0,
        0,
        0,
        0,
        base,
        claimed[0],
        claimed[1],
        functions,
        name_table,
        ordinal_table,
    )
    return directory, end - directory


def _optional_header(
    pe32plus: bool, linker: tuple[int, int], raw_size: int, directories: list[tuple[int, int]]
) -> bytes:
    size_of_image = _SECTION_RVA + _align(raw_size, 0x1000)
    if pe32plus:
        head = struct.pack(
            "<HBBIIIIIQIIHHHHHHIIIIHHQQQQII",
            0x20B,
            linker[0],
            linker[1],
            0,
            raw_size,
            0,
            0,
            _SECTION_RVA,
            0x180000000,
            0x1000,
            _FILE_ALIGN,
            6,
            0,
            0,
            0,
            6,
            0,
            0,
            size_of_image,
            _FILE_ALIGN,
            0,
            3,
            0x160,
            0x100000,
            0x1000,
            0x100000,
            0x1000,
            0,
            16,
        )
    else:
        head = struct.pack(
            "<HBBIIIIIIIIIHHHHHHIIIIHHIIIIII",
            0x10B,
            linker[0],
            linker[1],
            0,
            raw_size,
            0,
            0,
            _SECTION_RVA,
            _SECTION_RVA,
            0x10000000,
            0x1000,
            _FILE_ALIGN,
            6,
            0,
            0,
            0,
            6,
            0,
            0,
            size_of_image,
            _FILE_ALIGN,
            0,
            3,
            0x140,
            0x100000,
            0x1000,
            0x100000,
            0x1000,
            0,
            16,
        )
    return head + b"".join(struct.pack("<II", rva, size) for rva, size in directories)


def _version_resource(version: tuple[int, int, int, int], rva: int = 0) -> bytes:
    """A resource directory holding one RT_VERSION entry whose FileVersion is ``version``."""

    def directory(entry_id: int, offset: int) -> bytes:
        return struct.pack("<IIHHHH", 0, 0, 0, 0, 0, 1) + struct.pack("<II", entry_id, offset)

    key = "VS_VERSION_INFO\0".encode("utf-16-le")
    fixed = struct.pack(
        "<13I",
        0xFEEF04BD,
        0x10000,
        version[0] << 16 | version[1],
        version[2] << 16 | version[3],
        version[0] << 16 | version[1],
        version[2] << 16 | version[3],
        0x3F,
        0,
        0x40004,
        2,
        0,
        0,
        0,
    )
    header = struct.pack("<HHH", 6 + len(key) + 2 + len(fixed), len(fixed), 0) + key + bytes(2)
    info = header + fixed
    data_offset = 88
    return (
        directory(16, 0x80000000 | 24)
        + directory(1, 0x80000000 | 48)
        + directory(0x409, 72)
        + struct.pack("<IIII", rva + data_offset, len(info), 0, 0)
        + info
    )


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment
