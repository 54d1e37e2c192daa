"""Add sections to a PE image built by ``pe_builder`` (``.nv_fatb`` payloads, writable data)."""

from __future__ import annotations

import struct

_FILE_ALIGN = 0x200
_SECTION_ALIGN = 0x1000
READ_ONLY_DATA = 0x40000040  # INITIALIZED_DATA | MEM_READ, as NVIDIA's .nv_fatb
WRITABLE_DATA = 0xC0000040  # ... | MEM_WRITE


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def with_section(
    image: bytes,
    name: str,
    data: bytes,
    characteristics: int = READ_ONLY_DATA,
    virtual_size: int | None = None,
) -> bytes:
    """``image`` plus one section holding ``data`` (its virtual size may exceed the data)."""
    out = bytearray(image)
    (e_lfanew,) = struct.unpack_from("<I", out, 0x3C)
    coff = e_lfanew + 4
    sections, optional_size = struct.unpack_from("<H12xH", out, coff + 2)
    table = coff + 20 + optional_size
    last = table + 40 * (sections - 1)
    last_vsize, last_rva = struct.unpack_from("<II", out, last + 8)
    rva = _align(last_rva + last_vsize, _SECTION_ALIGN)
    if table + 40 * (sections + 1) > _FILE_ALIGN:
        raise ValueError("no room for another section header")
    raw_pointer = _align(len(out), _FILE_ALIGN)
    raw_size = _align(len(data), _FILE_ALIGN)
    vsize = virtual_size if virtual_size is not None else len(data)
    header = struct.pack(
        "<8sIIIIIIHHI",
        name.encode()[:8],
        vsize,
        rva,
        raw_size,
        raw_pointer if raw_size else 0,
        0,
        0,
        0,
        0,
        characteristics,
    )
    out[table + 40 * sections : table + 40 * (sections + 1)] = header
    struct.pack_into("<H", out, coff + 2, sections + 1)
    optional = coff + 20
    struct.pack_into("<I", out, optional + 56, _align(rva + vsize, _SECTION_ALIGN))  # SizeOfImage
    out.extend(bytes(raw_pointer - len(out)))
    out.extend(data)
    out.extend(bytes(raw_pointer + raw_size - len(out)))
    return bytes(out)
