"""``glob.glob`` answered from one listing per folder and run.

torch's preload searches every ``sys.path`` entry for each CUDA library
(``<entry>/nvidia/<folder>/lib/<pattern>``): with 16 libraries and 8 entries that is about
260 ``glob`` calls, each listing or probing folders anew. :class:`ListingGlob` lists a folder
at most once per analysis and walks from the top, so a folder that does not exist is known
from its parent's listing: the file-system calls follow the folders that exist, not the
number of patterns. Results are those of ``glob.glob`` (directory order, hidden names only
for a pattern starting with a dot, a folder needed where a path continues).
"""

from __future__ import annotations

import fnmatch
import os
import re

_MAGIC = re.compile(r"[*?[]")

Listing = tuple[tuple[str, bool], ...]
"""A folder's (name, is a directory) pairs, in directory order."""


def has_magic(text: str) -> bool:
    return _MAGIC.search(text) is not None


class ListingGlob:
    """``glob.glob`` (no ``**``) over folder listings taken once; see the module docstring."""

    def __init__(self, roots: tuple[str, ...] = ()) -> None:
        self.roots = tuple(dict.fromkeys(roots))
        """Folders below which a folder is looked up in its parent's listing first (the
        ``sys.path`` entries): one listing of an entry answers for every folder it lacks."""
        self._listings: dict[str, Listing | None] = {}
        self.listed = 0
        """How many folders were listed (a seam for tests: it follows existing folders)."""

    def __call__(self, pattern: str) -> list[str]:
        return self._glob(pattern, dirs_only=False)

    def _glob(self, pattern: str, dirs_only: bool) -> list[str]:
        folder, name = os.path.split(pattern)
        if not has_magic(pattern):
            return [pattern] if self._exists(pattern, dirs_only) else []
        if not name:  # a trailing separator: only directories match
            return [p + os.sep for p in self._glob(folder, dirs_only=True)]
        parents = self._glob(folder, dirs_only=True) if has_magic(folder) else [folder]
        found: list[str] = []
        for parent in parents:
            if has_magic(name):
                hidden = name.startswith(".")
                for entry, is_dir in self._listing(parent) or ():
                    if dirs_only and not is_dir:
                        continue
                    if (hidden or not entry.startswith(".")) and fnmatch.fnmatchcase(entry, name):
                        found.append(os.path.join(parent, entry))
            elif self._exists(os.path.join(parent, name), dirs_only):
                found.append(os.path.join(parent, name))
        return found

    def _exists(self, path: str, dirs_only: bool) -> bool:
        """Whether ``path`` exists (a directory, for ``dirs_only``), from its parent's
        listing when that was taken (a path with ``..`` or ``.`` is asked directly)."""
        folder, name = os.path.split(path)
        if name in ("", ".", "..") or folder not in self._listings:
            return os.path.isdir(path) if dirs_only else os.path.lexists(path)
        for entry, is_dir in self._listings[folder] or ():
            if entry == name:
                return is_dir or not dirs_only
        return False

    def _listing(self, folder: str) -> Listing | None:
        if folder in self._listings:
            return self._listings[folder]
        parent, name = os.path.split(folder)
        if name not in ("", ".", "..") and self._below_root(parent):
            self._listing(parent)
            if not self._exists(folder, dirs_only=True):  # its parent says it is not there
                self._listings[folder] = None
                return None
        listing = self._listings[folder] = _list(folder or os.curdir)
        self.listed += 1
        return listing

    def _below_root(self, path: str) -> bool:
        """Whether ``path`` is a root or inside one."""
        for root in self.roots:
            if not root:
                if not os.path.isabs(path):
                    return True
            elif path == root or path.startswith(root.rstrip(os.sep) + os.sep):
                return True
        return False


def _list(folder: str) -> Listing | None:
    try:
        with os.scandir(folder) as entries:
            return tuple((e.name, _is_dir(e)) for e in entries)
    except OSError:
        return None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
