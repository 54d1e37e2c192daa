"""``glob.glob`` answered from one listing per folder and run.

torch's preload searches every ``sys.path`` entry for each CUDA library
(``<entry>/nvidia/<folder>/lib/<pattern>``): with 16 libraries and 8 entries that is about
260 ``glob`` calls, each listing or probing folders anew. :class:`ListingGlob` lists a folder
at most once per analysis and walks from the top, so a folder that does not exist is known
from its parent's listing (or, for a ``sys.path`` entry's own folders, from one ``stat``:
an entry such as site-packages holds a thousand names, and only ``nvidia`` and ``torch`` are
asked for): the file-system calls follow the folders that exist, not the number of
patterns. Results are those of ``glob.glob`` (directory order, hidden names only
for a pattern starting with a dot, a folder needed where a path continues).
"""

from __future__ import annotations

import fnmatch
import os
import re

from torchguard._binary.state import watch

_MAGIC = re.compile(r"[*?[]")

Listing = dict[str, "os.DirEntry[str]"]
"""A folder's entries by name, in directory order: a name is looked up at once (a
site-packages folder holds a thousand), and whether an entry is a directory is asked only
of the entries a pattern reaches."""


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
        self.probed = 0
        """How many of the entries' own folders were asked for by a ``stat`` (a seam for
        tests: it follows the names asked for, never the entries' sizes)."""

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
                for entry, item in (self._listing(parent) or {}).items():
                    if entry.startswith(".") and not hidden:
                        continue
                    if fnmatch.fnmatchcase(entry, name) and (not dirs_only or _is_dir(item)):
                        found.append(os.path.join(parent, entry))
            elif self._exists(os.path.join(parent, name), dirs_only):
                found.append(os.path.join(parent, name))
        return found

    def _exists(self, path: str, dirs_only: bool) -> bool:
        """Whether ``path`` exists (a directory, for ``dirs_only``), from its parent's
        listing when that was taken (a path with ``..`` or ``.`` is asked directly)."""
        folder, name = os.path.split(path)
        if name in ("", ".", "..") or folder not in self._listings:
            watch(path)
            return os.path.isdir(path) if dirs_only else os.path.lexists(path)
        item = (self._listings[folder] or {}).get(name)
        return item is not None and (not dirs_only or _is_dir(item))

    def _listing(self, folder: str) -> Listing | None:
        if folder in self._listings:
            return self._listings[folder]
        parent, name = os.path.split(folder)
        if name not in ("", ".", "..") and self._below_root(parent):
            if self._is_root(parent):  # a sys.path entry (a thousand names): one stat
                watch(folder)
                there = os.path.isdir(folder)
                self.probed += 1
            else:
                self._listing(parent)
                there = self._exists(folder, dirs_only=True)  # from its parent's listing
            if not there:
                self._listings[folder] = None
                return None
        listing = self._listings[folder] = _list(folder or os.curdir)
        self.listed += 1
        return listing

    def _is_root(self, path: str) -> bool:
        return any(path == root or (path == "" and not root) for root in self.roots)

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
    watch(folder)
    try:
        with os.scandir(folder) as entries:
            return {entry.name: entry for entry in entries}
    except OSError:
        return None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
