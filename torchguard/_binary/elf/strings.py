"""Library names a binary keeps as strings to ``dlopen`` later (cuDNN 9's dispatcher).

cuDNN 9's ``libcudnn.so.9`` holds its sub-libraries as bare stems (``libcudnn_graph.so``) in
``.rodata`` and appends its own major at run time (measured: it tries ``.so.9.10.2``, ``.so.9.10``
then ``.so.9``). Only ``.rodata`` is scanned when the section table names it, so a cold read of a
small dispatcher costs microseconds; without a section table the whole file is scanned.
"""

from __future__ import annotations

import mmap
import re

from torchguard._binary.elf.layout import ElfReadError, Layout
from torchguard._binary.elf.mapped import PathLike, mapped_file


def _pattern(prefix: str) -> re.Pattern[bytes]:
    stem = re.escape(prefix.encode("ascii"))
    return re.compile(rb"(?<=\0)(" + stem + rb"[A-Za-z0-9_]*\.so)(?=\0)")


def scan_stems(data: bytes | memoryview | mmap.mmap, prefix: str) -> tuple[str, ...]:
    """The NUL-terminated bare ``<prefix>*.so`` names in ``data``, sorted."""
    found = {m.group(1).decode("ascii") for m in _pattern(prefix).finditer(data)}
    return tuple(sorted(found))


def read_dlopen_stems(path: PathLike, prefix: str) -> tuple[str, ...]:
    """The bare ``<prefix>*.so`` stems in the file's ``.rodata`` (the whole file without
    section headers); raises :class:`ElfReadError` when the file cannot be read (its
    :class:`~torchguard._binary.elf.layout.ElfUnreadable` when not now: never cache that)."""
    with mapped_file(path) as mapped:
        if not len(mapped):
            raise ElfReadError("the file is empty")
        sections = Layout(mapped).sections() or []
        spans = [(o, s) for name, _t, o, s in sections if name == ".rodata"]
        if not spans:
            return scan_stems(mapped, prefix)
        offset, size = spans[0]
        return scan_stems(mapped[max(offset - 1, 0) : offset + size + 1], prefix)
