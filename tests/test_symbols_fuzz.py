"""Damage aimed at each symbol-table structure: tables read, or PEReadError, never a traceback.

pefile locates the structures (import descriptors and lookup tables, hint/name entries,
export address/name/ordinal tables, export names and forwarder strings, the export counts,
the data directories, the section headers) in an intact image; random bytes, 32-bit values
(boundary values among them) and zeroed runs then land inside them. Every damaged image must
read, or raise :class:`PEReadError`. The streaming read must agree
with the full read, or say :class:`NotKept`, or raise :class:`PEReadError`. Seeded: a failure
reproduces.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile

import pefile
import pytest
from pe_builder import I386, build_pe
from pefile_judge import parsed, pefile_view

from torchguard._binary.pe.errors import PEReadError
from torchguard._binary.pe.image import PEImage, read_image, read_image_stream
from torchguard._binary.pe.symbols import NotKept

Region = tuple[str, int, int]  # what, file offset, length

_BOUNDARY_U32 = (0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0)


def built(machine: int = 0x8664) -> bytes:
    """Two imported DLLs, two delay-imported ones, names, ordinals and forwarders."""
    return build_pe(
        ["KERNEL32.dll", "c10.dll"],
        ["late.dll", "other.dll"],
        symbols={"c10.dll": ["one", "two", 4, "three"], "late.dll": ["x", 7], "other.dll": ["y"]},
        exports=["a", "b", "c", "d"],
        ordinal_exports=[7],
        forwarders={"f": "x.y", "g": "z.#3"},
        machine=machine,
    )


def regions(data: bytes) -> list[Region]:
    """Where each symbol-table structure of an intact image lies in the file."""
    pe = parsed(data)
    offset = pe.get_offset_from_rva
    width = 8 if pe.OPTIONAL_HEADER.Magic == 0x20B else 4
    found: list[Region] = []
    for index, what in ((0, "export-directory"), (1, "import-descriptors"), (13, "delay")):
        directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[index]
        if directory.VirtualAddress:
            found.append((what, offset(directory.VirtualAddress), max(directory.Size, 20)))
    for entry in getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()):
        lookup = entry.struct.OriginalFirstThunk or entry.struct.FirstThunk
        found.append(("import-lookup", offset(lookup), width * (len(entry.imports) + 1)))
        found.append(("dll-name", offset(entry.struct.Name), len(entry.dll) + 1))
        found += [
            ("hint-name", offset(s.hint_name_table_rva), len(s.name) + 3)
            for s in entry.imports
            if s.hint_name_table_rva
        ]
    for entry in getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", ()):
        found.append(("delay-lookup", offset(entry.struct.pINT), width * (len(entry.imports) + 1)))
        found += [
            ("delay-hint-name", offset(s.hint_name_table_rva), len(s.name) + 3)
            for s in entry.imports
            if s.hint_name_table_rva
        ]
    export = getattr(pe, "DIRECTORY_ENTRY_EXPORT", None)
    if export is not None:
        header = export.struct
        directory_offset = offset(pe.OPTIONAL_HEADER.DATA_DIRECTORY[0].VirtualAddress)
        found.append(("export-counts", directory_offset + 16, 24))
        found.append(
            ("export-addresses", offset(header.AddressOfFunctions), 4 * header.NumberOfFunctions)
        )
        if header.NumberOfNames:
            found.append(
                ("export-name-pointers", offset(header.AddressOfNames), 4 * header.NumberOfNames)
            )
            found.append(
                ("export-ordinals", offset(header.AddressOfNameOrdinals), 2 * header.NumberOfNames)
            )
        for symbol in export.symbols[:500]:
            if symbol.name:
                found.append(("export-name", symbol.name_offset, len(symbol.name) + 1))
            if symbol.forwarder:
                found.append(("forwarder", symbol.forwarder_offset, len(symbol.forwarder) + 1))
    optional = pe.DOS_HEADER.e_lfanew + 24
    found.append(("data-directories", optional + (112 if width == 8 else 96), 16 * 8))
    found.append(("section-headers", pe.sections[0].get_file_offset(), 40 * len(pe.sections)))
    return found


def damage(rng: random.Random, data: bytes, targets: list[Region]) -> bytes:
    """One to four hits inside the targets: a byte, a 32-bit value, or a zeroed run."""
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        _, start, length = rng.choice(targets)
        position = min(start + rng.randrange(max(length, 1)), len(data) - 4)
        roll = rng.random()
        if roll < 0.45:
            damaged[position] = rng.randrange(256)
        elif roll < 0.6:  # a neighbouring value: off-by-a-few pointers and counts
            (value,) = struct.unpack_from("<I", damaged, position)
            value = (value + rng.choice((-8, -4, -2, -1, 1, 2, 4, 8))) & 0xFFFFFFFF
            struct.pack_into("<I", damaged, position, value)
        elif roll < 0.8:
            struct.pack_into("<I", damaged, position, rng.choice(_BOUNDARY_U32))
        else:
            end = min(len(data), position + rng.randint(1, 16))
            damaged[position:end] = bytes(end - position)
    return bytes(damaged)


def read_both(data: bytes) -> PEImage | None:
    """Full and streaming reads; fails the test on anything but tables or PEReadError."""
    try:
        full: PEImage | None = read_image(data, symbols=True)
    except PEReadError:
        full = None
    try:
        streamed = read_image_stream(io.BytesIO(data), len(data), symbols=True)
    except NotKept:
        pass  # the caller inflates the whole member and reads it as above
    except PEReadError:
        assert full is None, "the streaming read refuses an image the full read accepts"
    else:
        assert streamed == full, "the streaming read disagrees with the full read"
    return full


def fuzz(data: bytes, targets: list[Region], rounds: int, seed: int) -> tuple[int, int]:
    """(images read, images refused) over ``rounds`` damaged copies of ``data``."""
    rng = random.Random(seed)
    read = refused = 0
    for _ in range(rounds):
        if read_both(damage(rng, data, targets)) is None:
            refused += 1
        else:
            read += 1
    return read, refused


STRUCTURES = [
    "import-descriptors",
    "import-lookup",
    "hint-name",
    "dll-name",
    "delay",
    "delay-lookup",
    "delay-hint-name",
    "export-directory",
    "export-counts",
    "export-addresses",
    "export-name-pointers",
    "export-ordinals",
    "export-name",
    "forwarder",
    "data-directories",
    "section-headers",
]


@pytest.mark.parametrize("machine", [0x8664, I386], ids=["pe32plus", "pe32"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_damage_inside_one_structure(structure: str, machine: int) -> None:
    original = built(machine)
    targets = [region for region in regions(original) if region[0] == structure]
    assert targets, f"the built image has no {structure}"
    fuzz(original, targets, rounds=150, seed=STRUCTURES.index(structure))


def test_damage_anywhere_in_the_tables() -> None:
    original = built()
    read, refused = fuzz(original, regions(original), rounds=1500, seed=7)
    assert read and refused  # the damage both spared some images and broke others


def test_every_truncation_is_refused_cleanly() -> None:
    """A file cut anywhere, and a stream that ends before its announced size."""
    original = built()
    for length in range(0, len(original), 8):
        with pytest.raises(PEReadError):
            read_image(original[:length], symbols=True)
        with pytest.raises(PEReadError):
            read_image_stream(io.BytesIO(original[:length]), len(original), symbols=True)


def test_an_old_style_delay_descriptor_below_the_image_base() -> None:
    """A VC6 descriptor (attributes 0) holds VAs; RVAs there lie below the image: left out.

    This used to escape as ``struct.error`` from a negative offset.
    """
    image = bytearray(built(I386))
    pe = pefile.PE(data=bytes(image), fast_load=True)
    delay = pe.get_offset_from_rva(pe.OPTIONAL_HEADER.DATA_DIRECTORY[13].VirtualAddress)
    struct.pack_into("<I", image, delay, 0)  # attributes: the old, VA-based format
    base = pe.OPTIONAL_HEADER.ImageBase
    name, lookup = delay + 4, delay + 16

    def as_va(position: int) -> None:
        (rva,) = struct.unpack_from("<I", image, position)
        struct.pack_into("<I", image, position, rva + base)

    as_va(name)  # the name a VA, the lookup table still an RVA: below the image
    tables = read_image(bytes(image), symbols=True).symbols
    assert tables is not None and "late.dll" not in tables.delay_imports
    as_va(lookup)  # both real VAs: read as the old format means them
    tables = read_image(bytes(image), symbols=True).symbols
    assert tables is not None and tables.delay_imports["late.dll"] == (b"x", 7)


@pytest.mark.realwheel
@pytest.mark.parametrize("member", ["torch/lib/shm.dll", "torch/lib/asmjit.dll"])
def test_damage_in_a_real_dll(member: str) -> None:
    """MSVC's own layout: .rdata holding every table, names far from their pointers."""
    from realwheels import wheel

    with zipfile.ZipFile(wheel("torch", "2.4.1")) as archive:
        original = archive.read(member)
    assert read_both(original) is not None
    read, refused = fuzz(original, regions(original), rounds=400, seed=11)
    assert read and refused


@pytest.mark.realwheel
def test_a_real_dll_cut_at_every_section_boundary() -> None:
    from realwheels import wheel

    with zipfile.ZipFile(wheel("torch", "2.4.1")) as archive:
        original = archive.read("torch/lib/asmjit.dll")
    pe = pefile.PE(data=original, fast_load=True)
    cuts = {
        point + delta
        for section in pe.sections
        for point in (section.PointerToRawData, section.PointerToRawData + section.SizeOfRawData)
        for delta in (-1, 0, 1)
    }
    for length in sorted(cut for cut in cuts if 0 < cut < len(original)):
        with pytest.raises(PEReadError):
            read_image(original[:length], symbols=True)
        with pytest.raises(PEReadError):
            read_image_stream(io.BytesIO(original[:length]), len(original), symbols=True)


def test_descriptors_sharing_one_long_table_are_bounded() -> None:
    """40 descriptors all pointing at one 20,000-entry lookup table: 800,000 symbols to read,
    past the bound on a whole image's imports, refused at once instead of read for seconds
    (4,096 such descriptors took minutes)."""
    names = [f"d{index}.dll" for index in range(40)]
    image = bytearray(build_pe(names, symbols={"d0.dll": ["a"] * 20_000}))
    first = regions(bytes(image))
    ((_, descriptors, _),) = [region for region in first if region[0] == "import-descriptors"]
    lookup, first_thunk = struct.unpack_from("<I12xI", image, descriptors)
    for index in range(1, len(names)):
        struct.pack_into("<I", image, descriptors + 20 * index, lookup)
        struct.pack_into("<I", image, descriptors + 20 * index + 16, first_thunk)
    with pytest.raises(PEReadError, match="hold more than"):
        read_image(bytes(image), symbols=True)


@pytest.mark.parametrize("machine", [0x8664, I386], ids=["pe32plus", "pe32"])
def test_delay_imports_agree_with_pefile(machine: int) -> None:
    """No real wheel at hand has a delay-import table: pefile judges built ones instead."""
    image = built(machine)
    theirs = pefile_view(image)["delay_imports"]
    tables = read_image(image, symbols=True).symbols
    assert tables is not None
    assert tables.delay_imports == theirs == {"late.dll": (b"x", 7), "other.dll": (b"y",)}
