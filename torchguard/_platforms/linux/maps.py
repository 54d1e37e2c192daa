"""Which files a process has mapped, from ``/proc/<pid>/maps``: the objects ld.so has loaded.

ld.so reuses an already-loaded object whose soname matches a NEEDED name, so the model must
start from what is mapped (a ``libstdc++`` or ``libgomp`` brought in by numpy or cv2 before
``import torch``). Each line is ``start-end perms offset dev inode path``; a path may contain
spaces and ends in `` (deleted)`` when the file was removed after mapping.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PATH = "/proc/self/maps"
_DELETED = " (deleted)"


@dataclass(frozen=True)
class MappedFile:
    """One file the process maps (all its mappings merged)."""

    path: str
    device: str
    """``major:minor`` in hex, as the kernel prints it."""
    inode: int
    deleted: bool
    executable: bool
    """Some mapping of it is executable: code, as a loaded shared object has."""


def parse_maps(text: str) -> tuple[MappedFile, ...]:
    """The mapped files in the order they first appear (address order); pseudo-files skipped.

    Lines that do not have the kernel's shape are skipped: the file is the kernel's, and a
    line torchguard cannot read must not stop the rest from being used.
    """
    found: dict[str, MappedFile] = {}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue  # anonymous memory, [heap], [stack], [vdso] ...
        _range, perms, _offset, device, inode, path = fields
        if not inode.isdigit():
            continue
        path = path.rstrip("\n")
        deleted = path.endswith(_DELETED)
        if deleted:
            path = path[: -len(_DELETED)]
        executable = "x" in perms
        known = found.get(path)
        if known is None:
            found[path] = MappedFile(path, device, int(inode), deleted, executable)
        elif executable and not known.executable:
            found[path] = MappedFile(path, known.device, known.inode, known.deleted, True)
    return tuple(found.values())


def read_maps(path: str = DEFAULT_PATH) -> tuple[MappedFile, ...]:
    """:func:`parse_maps` of the running process (or ``path``); empty when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return parse_maps(handle.read())
    except OSError:
        return ()
