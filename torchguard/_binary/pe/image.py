"""Read what torchguard needs from a PE image, cheaply and safely, in one pass.

Facts (headers, import and delay-import DLL names, the linker version, the FileVersion) come
from pefile with ``fast_load`` and DLL names only: a full parse of torch_cpu.dll costs 10-20 s
and 1 GB, and pefile's symbol-level parsing silently drops DLL names past
``MAX_IMPORT_SYMBOLS``. Symbol tables (every imported and exported name) come from
:mod:`torchguard._binary.pe.symbols`, from the same bytes. Only what a damaged file really causes
becomes :class:`PEReadError`; an ``OSError`` or ``MemoryError`` while reading is the
environment's (:class:`FileUnreadable`, never cached); any other exception is a fault of
torchguard's own and propagates (``_api`` reports it as an internal error, never as a corrupt
DLL).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchguard._binary.budget import over_budget
from torchguard._binary.pe.errors import FileUnreadable, OverBudget, PEReadError
from torchguard._binary.stream import Readable, keep_ranges, read_exactly
from torchguard._facts.vocab import Machine

if TYPE_CHECKING:
    import pefile

    from torchguard._binary.pe.symbols import SymbolTables

#: Bump when what is read from a file changes: cached facts of another reader are ignored.
#: 4: a read error of the environment is no longer stored as damage; 5: OpenMP marks;
#: 6: how std::mutex is constructed.
READER_VERSION = 6

MACHINE_NAMES: dict[int, str] = {
    Machine.X86: "x86",
    Machine.X64: "x64",
    Machine.ARM64: "arm64",
    Machine.ARM: "arm",
    Machine.ARM64EC: "arm64ec",
}

_IMAGE_FILE_DLL = 0x2000
_DELAY_DESCRIPTOR = struct.Struct("<8I")
_MAX_DESCRIPTORS = 4096
_MAX_NAME = 256


@dataclass(frozen=True)
class PEFacts:
    """What the loader model needs to know about one binary."""

    machine: int
    is_dll: bool
    imports: tuple[str, ...]
    delay_imports: tuple[str, ...]
    linker_version: tuple[int, int]
    file_version: tuple[int, int, int, int] | None = None
    openmp: tuple[str, ...] = ()
    """What the binary is to OpenMP (:mod:`torchguard._binary.pe.openmp`); () for most."""
    mutex: str | None = None
    """How it constructs the ``std::mutex`` it uses (:mod:`torchguard._binary.pe.mutex`);
    None when its symbol tables were not read."""

    @property
    def machine_name(self) -> str:
        return MACHINE_NAMES.get(self.machine, hex(self.machine))


def machine_name(machine: int) -> str:
    return MACHINE_NAMES.get(machine, hex(machine))


@dataclass(frozen=True)
class PEImage:
    """One binary as read: its facts and, when asked for, its symbol tables."""

    facts: PEFacts
    symbols: SymbolTables | None = None


def read_pe(source: str | bytes) -> PEFacts:
    """Read :class:`PEFacts` from a file path or from the bytes of an image.

    Raises :class:`PEReadError` for anything the Windows loader would refuse to map.
    """
    return read_image(source).facts


def read_image(source: str | bytes, *, symbols: bool = False) -> PEImage:
    """:func:`read_pe`, plus the symbol tables with ``symbols``, from one mapping."""
    if isinstance(source, bytes):
        _check_signature(source[:4096], len(source))
        return _parse(source, symbols)
    try:
        with open(source, "rb") as handle:
            head = handle.read(4096)
            handle.seek(0, 2)
            size = handle.tell()
            _check_signature(head, size)
            # Our own read-only mapping, closed on leaving: the file is never left locked on
            # Windows, and pefile's close() (a full gc.collect() per file) is never needed.
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _parse(mapped, symbols)
    except (OSError, MemoryError) as exc:  # the environment's, never the file's: not cached
        raise FileUnreadable.from_error(exc) from None


def _parse(
    source: bytes | mmap.mmap,
    symbols: bool,
    kept: list[tuple[int, int]] | None = None,
) -> PEImage:
    """Parse with pefile (and the symbol reader); ``source`` stays owned by the caller.

    Only pefile's format error and short reads of the file's own data become
    :class:`PEReadError`: anything else is a bug and propagates.
    """
    import pefile

    try:
        pe = pefile.PE(data=source, fast_load=True)
        facts = _facts(pe)
    except pefile.PEFormatError as exc:
        raise PEReadError(f"not a valid PE image: {exc.value}") from None
    except struct.error as exc:
        raise PEReadError(f"malformed image: {exc}") from None
    if not symbols:
        return PEImage(facts)
    from dataclasses import replace

    from torchguard._binary.pe.mutex import mutex_construction
    from torchguard._binary.pe.openmp import openmp_marks
    from torchguard._binary.pe.symbols import read_symbols

    tables = read_symbols(source, kept)
    marks = openmp_marks(source, tables)
    return PEImage(replace(facts, openmp=marks, mutex=mutex_construction(tables)), tables)


def read_image_stream(
    stream: Readable, size: int, *, symbols: bool = False, budget: int | None = None
) -> PEImage:
    """:func:`read_image` for a forward-only stream (a compressed wheel member).

    Only the headers and the data sections (never code) are kept, in an anonymous mapping
    whose untouched pages cost no memory, and inflating stops after the last of them.
    torch_cpu.dll (243 MB, 199 MB of it code) then needs a fraction of the memory of
    reading the whole member. A table that points into code raises
    :class:`~torchguard._binary.pe.symbols.NotKept`: read the whole member instead.

    ``budget``: the bytes the kept parts may take (see :func:`~torchguard._binary.budget.
    inflate_budget`); more raises :class:`OverBudget` before anything is inflated.
    """
    from torchguard._binary.pe.symbols import kept_ranges

    head = read_exactly(stream, min(size, 1 << 16))
    _check_signature(head[:4096], size)
    found = kept_ranges(head, size)
    ranges = found if found is not None else [(0, size)]  # an unusual layout: keep it all
    kept = sum(stop - start for start, stop in ranges)
    if budget is not None and kept > budget:
        raise OverBudget(over_budget(kept, size, budget))
    try:
        buffer = mmap.mmap(-1, size)
    except (OverflowError, ValueError) as exc:  # a size no address space can hold
        raise PEReadError(f"cannot hold {size} bytes: {exc}") from None
    try:
        buffer[: len(head)] = head
        end = max(stop for _, stop in ranges)
        reached = keep_ranges(stream, buffer, len(head), end, ranges)
        if reached < end:
            raise PEReadError(f"truncated: the data ends at {reached} of {size} bytes")
        return _parse(buffer, symbols, ranges if found is not None else None)
    finally:
        buffer.close()


def _check_signature(head: bytes, size: int) -> None:
    """Reject non-PE data before pefile sees it, with a message a user can act on."""
    if size == 0:
        raise PEReadError("the file is empty (0 bytes)")
    if head[:2] != b"MZ":
        raise PEReadError("not a PE image (no MZ signature)")
    if len(head) < 0x40:
        raise PEReadError(f"truncated: only {size} bytes")
    (e_lfanew,) = struct.unpack_from("<I", head, 0x3C)
    if e_lfanew + 24 > size:
        raise PEReadError(
            f"truncated: the PE header lies beyond the end of the file ({size} bytes)"
        )
    if e_lfanew + 24 > len(head):
        return  # an unusual layout; pefile judges it
    if head[e_lfanew : e_lfanew + 4] != b"PE\0\0":
        raise PEReadError("not a PE image (no PE signature)")
    sections, optional_size = struct.unpack_from("<H12xH", head, e_lfanew + 6)
    table = e_lfanew + 24 + optional_size
    needed = table + 40 * sections
    for index in range(min(sections, (len(head) - table) // 40)):
        raw_size, raw_pointer = struct.unpack_from("<II", head, table + 40 * index + 16)
        if raw_size:
            needed = max(needed, raw_pointer + raw_size)
    if needed > size:
        raise PEReadError(f"truncated: its sections need {needed} bytes, the file has {size}")


def _facts(pe: pefile.PE) -> PEFacts:
    import pefile

    entries = pefile.DIRECTORY_ENTRY
    pe.parse_data_directories(
        directories=[entries["IMAGE_DIRECTORY_ENTRY_IMPORT"]], import_dllnames_only=True
    )
    imports = _unique(_decode(entry.dll) for entry in getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()))
    import_rva, import_size = _directory(pe, entries["IMAGE_DIRECTORY_ENTRY_IMPORT"])
    unreadable = any("import" in warning.lower() for warning in pe.get_warnings())
    if import_rva and not imports and import_size >= 20 and unreadable:
        raise PEReadError("the import directory cannot be read")
    delay = _delay_import_names(pe)
    lowered = {name.lower() for name in imports}
    header = pe.OPTIONAL_HEADER
    return PEFacts(
        machine=int(pe.FILE_HEADER.Machine),
        is_dll=bool(pe.FILE_HEADER.Characteristics & _IMAGE_FILE_DLL),
        imports=imports,
        delay_imports=tuple(name for name in delay if name.lower() not in lowered),
        linker_version=(int(header.MajorLinkerVersion), int(header.MinorLinkerVersion)),
        file_version=_file_version(pe),
    )


def _delay_import_names(pe: pefile.PE) -> tuple[str, ...]:
    """Delay-import DLL names read from the descriptors (pefile would parse every symbol)."""
    import pefile

    index = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]
    rva = _directory(pe, index)[0]
    if not rva:
        return ()
    names: list[str] = []
    for _ in range(_MAX_DESCRIPTORS):
        try:
            raw = pe.get_data(rva, _DELAY_DESCRIPTOR.size)
        except pefile.PEFormatError:
            break
        if len(raw) < _DELAY_DESCRIPTOR.size:
            break
        fields = _DELAY_DESCRIPTOR.unpack(raw)
        if not any(fields):
            break
        attributes, name_rva = fields[0], fields[1]
        if attributes & 1 == 0 and pe.FILE_HEADER.Machine == Machine.X86:
            name_rva -= int(pe.OPTIONAL_HEADER.ImageBase)  # pre-VC6 descriptors hold VAs
        try:
            name = pe.get_string_at_rva(name_rva, _MAX_NAME)
        except (pefile.PEFormatError, struct.error):
            name = b""
        if name:
            names.append(_decode(name))
        rva += _DELAY_DESCRIPTOR.size
    return _unique(names)


def _file_version(pe: pefile.PE) -> tuple[int, int, int, int] | None:
    import pefile

    index = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]
    if not _directory(pe, index)[0]:
        return None
    try:
        pe.parse_data_directories(directories=[index])
        info: Any = getattr(pe, "VS_FIXEDFILEINFO", None)
        if not info:
            return None
        fixed = info[0]
        ms, ls = int(fixed.FileVersionMS), int(fixed.FileVersionLS)
    except (pefile.PEFormatError, struct.error):
        return None  # a damaged version resource: the file's version is unknown
    return (ms >> 16, ms & 0xFFFF, ls >> 16, ls & 0xFFFF)


def _directory(pe: pefile.PE, index: int) -> tuple[int, int]:
    """(RVA, size) of data directory ``index``; (0, 0) when a short header lacks it."""
    directories = pe.OPTIONAL_HEADER.DATA_DIRECTORY
    if index >= len(directories):
        return (0, 0)
    return (int(directories[index].VirtualAddress), int(directories[index].Size))


def _decode(raw: bytes | str) -> str:
    if isinstance(raw, str):
        return raw
    return raw.decode("ascii", "replace")


def _unique(names: Any) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for name in names:
        key = name.lower()
        if key and key not in seen:
            seen[key] = name
    return tuple(seen.values())
