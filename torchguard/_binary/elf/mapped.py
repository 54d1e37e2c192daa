"""A file on disk as the ELF readers take it: mapped read-only, opened in one place.

Why one place: what the environment causes (access denied, an I/O error, no memory) must be
told apart from what the file's bytes cause, the same way for every reader of a path
(:func:`~torchguard._binary.elf.read_elf_file`, ``read_fatbin_archs``, ``read_dlopen_stems``).
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Union

from torchguard._binary.elf.layout import Buffer, ElfReadError, ElfUnreadable

PathLike = Union[str, "os.PathLike[str]"]

#: Below this a file is read, not mapped (mmap refuses an empty file); no ELF header fits.
_SMALL = 64


@contextmanager
def mapped_file(path: PathLike) -> Iterator[Buffer]:
    """The file's bytes, mapped read-only and unmapped on leaving (a tiny file: read).

    Raises :class:`ElfReadError` for what is not a regular file (a FIFO would block the
    open), :class:`ElfUnreadable` when it cannot be opened or mapped now. Only the opening
    is guarded: an error of the caller's parse is never taken for the environment's.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ElfReadError("not a regular file")
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < _SMALL:
                data: Buffer = handle.read(_SMALL)
            else:
                data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, MemoryError) as exc:
        raise ElfUnreadable.from_error(exc) from None
    try:
        yield data
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
