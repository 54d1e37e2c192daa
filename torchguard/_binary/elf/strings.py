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
    the file may ``dlsym``); ``version``: the ``<api>_*_version`` word as ``"9.10.2"``."""

    stems: tuple[str, ...] = ()
    lookups: tuple[str, ...] = ()
    version: str | None = None


def _pattern(prefix: str) -> re.Pattern[bytes]:
    stem = re.escape(prefix.encode("ascii"))
    return re.compile(rb"(?<=\0)(" + stem + rb"[A-Za-z0-9_]*\.so)(?=\0)")


def _identifiers(api: str) -> re.Pattern[bytes]:
    return re.compile(rb"(?<=\0)(" + re.escape(api.encode("ascii")) + rb"[A-Za-z0-9_]*)(?=\0)")


def api_prefix(family: str) -> str:
    """``libcudnn`` -> ``cudnn``: what the family's API names and version words start with."""
    return family[3:] if family.startswith("lib") else family


def scan_stems(data: bytes | memoryview | mmap.mmap, prefix: str) -> tuple[str, ...]:
    """The NUL-terminated bare ``<prefix>*.so`` names in ``data``, sorted."""
    found = {m.group(1).decode("ascii") for m in _pattern(prefix).finditer(data)}
    return tuple(sorted(found))


def scan_lookups(data: bytes | memoryview | mmap.mmap, api: str) -> tuple[str, ...]:
    """The NUL-terminated ``<api>*`` identifiers in ``data``, sorted."""
    found = {m.group(1).decode("ascii") for m in _identifiers(api).finditer(data)}
    return tuple(sorted(found))


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
        version = _version_word(layout, api)
        return DlopenFacts(stems, lookups, version)


def read_dlopen_stems(path: PathLike, prefix: str) -> tuple[str, ...]:
    """The bare ``<prefix>*.so`` stems in the file's ``.rodata`` (see :func:`read_dlopen_facts`)."""
    return read_dlopen_facts(path, prefix).stems
