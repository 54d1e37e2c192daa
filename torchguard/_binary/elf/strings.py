"""What a binary keeps to ``dlopen`` and ``dlsym`` later by name (cuDNN's dispatcher).

cuDNN 9's ``libcudnn.so.9`` holds its sub-libraries as bare stems (``libcudnn_graph.so``) in
``.rodata`` and formats ``<stem>.<major>.<minor>.<patch>``, ``.<major>.<minor>`` then
``.<major>`` at run time (measured: "Unable to load any of {libcudnn_ops.so.9.10.2,
libcudnn_ops.so.9.10, libcudnn_ops.so.9, libcudnn_ops.so}"); beside them lie the API names
it looks up with ``dlsym`` in each (``cudnnGetVersion``). Each sub-library exports its cuDNN
version as a 4-byte object (``cudnn_graph_version`` = ``0x090A02`` for 9.10.2, read from the
real files). Only ``.rodata`` is scanned when the section table names it, so a cold read of a
small dispatcher costs microseconds; without a section table the whole file is scanned.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass

from torchguard._binary.elf import constants as c
from torchguard._binary.elf.facts import Dynamic
from torchguard._binary.elf.layout import Buffer, ElfReadError, Layout
from torchguard._binary.elf.mapped import PathLike, mapped_file
from torchguard._binary.elf.symbols import _count

#: Symbols scanned for the version word at most (cuDNN's graph library has ~2,600).
MAX_VERSION_SCAN = 1 << 20


@dataclass(frozen=True)
class DlopenFacts:
    """``stems``: bare ``<prefix>*.so`` names; ``lookups``: ``<api>*`` identifiers (what
    the file may ``dlsym``); ``version``: the ``<api>_*_version`` word as ``"9.10.2"``;
    ``names``: exact ``<prefix>*.so.N`` names (nvrtc's builtins)."""

    stems: tuple[str, ...] = ()
    lookups: tuple[str, ...] = ()
    version: str | None = None
    names: tuple[str, ...] = ()


_STEM = re.compile(r"[A-Za-z0-9_]*\.so")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]*")
_EXACT = re.compile(r"[A-Za-z0-9_.+-]*\.so(?:\.[0-9]+)+")

#: Families whose files export a version word worth reading (the scan walks .dynsym).
VERSION_FAMILIES = ("libcudnn",)

#: The longest string taken as a name.
MAX_NAME = 256


def _strings(data: bytes | mmap.mmap, prefix: str, tail: re.Pattern[str]) -> set[str]:
    """NUL-terminated strings in ``data`` that start with ``prefix`` (after a NUL) and whose
    rest matches ``tail`` in full: a ``find`` per hit, so a large ``.rodata`` costs little."""
    found: set[str] = set()
    needle = b"\0" + prefix.encode("ascii")
    at = data.find(needle)
    while at >= 0:
        start = at + 1
        end = data.find(b"\0", start, start + MAX_NAME)
        if end > start:
            text = bytes(data[start:end]).decode("ascii", "replace")
            if tail.fullmatch(text, len(prefix)):
                found.add(text)
        at = data.find(needle, start)
    return found


def api_prefix(family: str) -> str:
    """``libcudnn`` -> ``cudnn``: what the family's API names and version words start with."""
    return family[3:] if family.startswith("lib") else family


def scan_stems(data: bytes | mmap.mmap, prefix: str) -> tuple[str, ...]:
    """The NUL-terminated bare ``<prefix>*.so`` names in ``data``, sorted."""
    return tuple(sorted(_strings(data, prefix, _STEM)))


def scan_lookups(data: bytes | mmap.mmap, api: str) -> tuple[str, ...]:
    """The NUL-terminated ``<api>*`` identifiers in ``data``, sorted."""
    return tuple(sorted(_strings(data, api, _IDENTIFIER)))


def scan_names(data: bytes | mmap.mmap, prefix: str) -> tuple[str, ...]:
    """The NUL-terminated exact ``<prefix>*.so.N[.M...]`` names in ``data``, sorted (what
    nvrtc ``dlopen``s: ``libnvrtc-builtins.so.12.8``)."""
    return tuple(sorted(_strings(data, prefix, _EXACT)))


def version_text(word: int) -> str:
    """cuDNN's ``(major << 16) | (minor << 8) | patch`` as ``"9.10.2"``."""
    return f"{word >> 16}.{(word >> 8) & 0xFF}.{word & 0xFF}"


def _rodata(mapped: Buffer) -> tuple[Layout, Buffer]:
    layout = Layout(mapped)
    sections = layout.sections() or []
    spans = [(o, s) for name, _t, o, s in sections if name == ".rodata"]
    if not spans:
        return layout, mapped
    offset, size = spans[0]
    return layout, mapped[max(offset - 1, 0) : offset + size + 1]


def _version_word(layout: Layout, api: str) -> str | None:
    """The exported 4-byte ``<api>_*_version`` object's value (None: the file has none)."""
    dynamic = Dynamic(layout)
    tags = dynamic.tags
    if c.DT_SYMTAB not in tags or not dynamic.strend:
        return None
    count = min(_count(layout, dynamic), MAX_VERSION_SCAN)
    entry = layout.sym.size
    start = layout.offset(tags[c.DT_SYMTAB], count * entry, "the dynamic symbols")
    prefix, suffix = f"{api}_".encode("ascii"), b"_version"
    for index in range(1, count):
        row = layout.unpack(layout.sym, start + index * entry, "a dynamic symbol")
        if layout.wide:
            name_at, info, _other, shndx, value, size = row
        else:
            name_at, value, size, info, _other, shndx = row
        if info & 0xF != c.STT_OBJECT or size != 4 or shndx == c.SHN_UNDEF:
            continue
        name = layout.string(dynamic.strtab + name_at, dynamic.strend, "a symbol name")
        if name.startswith(prefix) and name.endswith(suffix):
            at = layout.offset(value, 4, name.decode("ascii", "replace"))
            return version_text(layout.unpack(layout.u32, at, "a version word")[0])
    return None


def read_dlopen_facts(path: PathLike, family: str) -> DlopenFacts:
    """:class:`DlopenFacts` of a file of ``family`` (``libcudnn``); raises
    :class:`ElfReadError` when the file cannot be read (its
    :class:`~torchguard._binary.elf.layout.ElfUnreadable` when not now: never cache that)."""
    api = api_prefix(family)
    with mapped_file(path) as mapped:
        if not len(mapped):
            raise ElfReadError("the file is empty")
        layout, data = _rodata(mapped)
        stems = scan_stems(data, family)
        lookups = scan_lookups(data, api)
        version = _version_word(layout, api) if family in VERSION_FAMILIES else None
        return DlopenFacts(stems, lookups, version, scan_names(data, family))


def read_dlopen_stems(path: PathLike, prefix: str) -> tuple[str, ...]:
    """The bare ``<prefix>*.so`` stems in the file's ``.rodata`` (see :func:`read_dlopen_facts`)."""
    return read_dlopen_facts(path, prefix).stems
