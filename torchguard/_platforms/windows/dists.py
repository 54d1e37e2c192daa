"""Installed distributions, read through ``importlib.metadata`` from any Windows tree.

``TreeDistribution`` is an ``importlib.metadata.Distribution`` whose files come from a
:class:`~.tree.WinTree`, so the same code reads a live site-packages, a folder copied
from a Windows machine, or wheels overlaid in memory. torch itself is never imported.
"""

from __future__ import annotations

import csv
import hashlib
import io
import ntpath
import re
import sys
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING, NamedTuple

from torchguard._platforms.windows.tree import WinTree, join, path_key

if sys.version_info >= (3, 10):
    from importlib import metadata as importlib_metadata
else:  # pragma: no cover - exercised on Python 3.9 only
    import importlib_metadata

__all__ = [
    "InstalledDist",
    "RecordSummary",
    "TreeDistribution",
    "canonical_name",
    "find_dists",
    "importlib_metadata",
]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_DIST_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info$", re.IGNORECASE)

#: A RECORD row of a binary: ``path.pyd,sha256=...,size`` (a quoted path ends ``.pyd",``).
_BINARY_ROW = re.compile(r"\.(?:pyd|dll)\"?,", re.IGNORECASE)


class RecordSummary(NamedTuple):
    """What every analysis needs of a RECORD: the binaries it lists, and its digest.

    Small and JSON-friendly, so it is remembered across runs (``_platforms.windows.records``) and a
    warm analysis reads no RECORD at all. A named tuple: a warm run builds one per binary
    distribution from the cache, at a quarter of a frozen dataclass's cost.
    """

    binaries: tuple[str, ...] = ()
    """RECORD paths (``/``-separated, site-relative) of its ``.pyd``/``.dll`` files inside the
    site directory, in RECORD order."""
    data_dlls: tuple[str, ...] = ()
    """RECORD paths of DLLs it installs outside the site directory (``../../Library/bin/x.dll``)."""
    digest: str | None = None
    """SHA-1 of the RECORD text when it lists any binary (it holds every file's SHA-256)."""

    @property
    def lists_binaries(self) -> bool:
        return self.digest is not None


def summarise(text: str | None) -> RecordSummary:
    """The :class:`RecordSummary` of a RECORD text. Most RECORDs list no binary and cost one
    regular-expression search; a broken one lists none."""
    if not text or _BINARY_ROW.search(text) is None:
        return RecordSummary()
    rows = [line for line in text.splitlines() if _BINARY_ROW.search(line)]
    try:
        relatives = [row[0] for row in csv.reader(rows) if row and row[0]]
    except csv.Error:  # a broken RECORD is not a torch extension we can check
        relatives = []
    inside = tuple(
        relative
        for relative in relatives
        if relative.lower().endswith((".pyd", ".dll")) and ".." not in relative.split("/")
    )
    digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()
    return RecordSummary(inside, _data_dlls(text), digest)


def _data_dlls(text: str) -> tuple[str, ...]:
    """RECORD paths of DLLs a wheel installs outside site-packages (``../../Library/bin``)."""
    if "../" not in text:
        return ()
    found: list[str] = []
    for line in text.splitlines():
        if "../" not in line or ".dll" not in line.lower():
            continue
        relative = line.rsplit(",", 2)[0].strip('"')
        if ".." in relative.split("/") and relative.lower().endswith(".dll"):
            found.append(relative)
    return tuple(found)


#: PEP 503's runs of separators (what ``packaging.utils.canonicalize_name`` replaces).
_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503 normalisation: ``Intel_OpenMP`` -> ``intel-openmp`` (``packaging``'s rule, without
    importing it: every analysis names every installed distribution)."""
    if "_" in name or "." in name or "--" in name:
        return _SEPARATORS.sub("-", name).lower()
    return name.lower()  # most names: nothing to replace


class TreeDistribution(importlib_metadata.Distribution):
    """An installed distribution whose ``.dist-info`` lives in a :class:`WinTree`."""

    def __init__(self, tree: WinTree, site_dir: str, dist_info: str) -> None:
        self.tree = tree
        self._site_dir = site_dir
        self.dist_info = dist_info
        """The name of its ``.dist-info`` folder, as listed."""
        self._record: tuple[str | None] | None = None
        self._summary: RecordSummary | None = None
        self._later: Callable[[], None] | None = None

    def summary(self) -> RecordSummary:
        """Its RECORD's :class:`RecordSummary`: as remembered (:meth:`remember`, or
        :meth:`remember_later` when first asked), else read."""
        if self._summary is None:
            later, self._later = self._later, None
            if later is not None:
                later()  # gives this distribution (and its folder's) their summaries
            if self._summary is None:
                self._summary = summarise(self.read_text("RECORD"))
        return self._summary

    def remember(self, summary: RecordSummary) -> None:
        """Use ``summary`` (from the persistent cache, for an unchanged RECORD) from now on."""
        self._summary = summary
        self._later = None

    def remember_later(self, lookup: Callable[[], None] | None) -> None:
        """Have ``lookup`` (which calls :meth:`remember`) run when the summary is first asked
        for: a warm run needs few summaries, so most are never looked up."""
        self._later = lookup

    def read_text(self, filename: str) -> str | None:
        """A metadata file's text; RECORD is read once per analysis (several checks parse it)."""
        if filename != "RECORD":
            return self.tree.read_text(self.metadata_path(filename))
        if self._record is None:
            self._record = (self.tree.read_text(self.metadata_path(filename)),)
        return self._record[0]

    def metadata_path(self, filename: str) -> str:
        """The tree path of a file of its ``.dist-info`` folder (``RECORD``, ``METADATA``)."""
        return join(self._site_dir, self.dist_info, filename)

    def locate_file(self, path: str | PureWindowsPath) -> PureWindowsPath:  # type: ignore[override]
        return PureWindowsPath(join(self._site_dir, str(path)))


class InstalledDist(NamedTuple):
    """One distribution found in a site directory, named from its ``.dist-info`` folder.

    A named tuple: every analysis builds one per installed distribution (hundreds), at a
    third of a frozen dataclass's cost."""

    name: str
    version: str
    site_dir: str
    distribution: TreeDistribution

    def file_paths(self) -> list[str]:
        """Absolute Windows paths of the files its RECORD lists (empty if it has none)."""
        return [join(self.site_dir, relative) for relative in self.record_paths()]

    def dll_dirs(self) -> list[str]:
        """Folders holding the DLLs its RECORD lists, in first-seen order.

        ``pip install --target T`` moves a wheel's data files (``Library\\bin\\*.dll`` of mkl
        or intel-openmp) into ``T`` but leaves RECORD saying ``../../Library/bin/...``; a DLL
        missing where RECORD says is looked for at that path below the site directory.
        """
        seen: dict[str, str] = {}
        for relative in self.record_paths():
            if not relative.lower().endswith(".dll"):
                continue
            folder = ntpath.dirname(self.located(relative))
            seen.setdefault(path_key(folder), folder)
        return list(seen.values())

    def located(self, relative: str) -> str:
        """Where a file its RECORD lists is: at the recorded path, else where ``pip install
        --target`` put a ``../`` data file (:func:`moved_path`), else the recorded path."""
        tree = self.distribution.tree
        path = join(self.site_dir, relative)
        if tree.is_file(path):
            return path
        moved = moved_path(self.site_dir, relative)
        return moved if moved is not None and tree.is_file(moved) else path

    def record_paths(self) -> list[str]:
        """The site-relative paths its RECORD lists (empty when it has none or it is broken).

        Parsed here rather than through ``Distribution.files``, which on Python 3.12+ (and
        importlib-metadata 6+) drops entries it cannot find on the *host* file system.
        """
        return [path for path, _ in self.record_rows()]

    def record_rows(self) -> list[tuple[str, str]]:
        """(site-relative path, ``sha256=...`` or "") for each file its RECORD lists."""
        text = self.distribution.read_text("RECORD")
        if not text:
            return []
        try:
            return [
                (row[0], row[1] if len(row) > 1 else "")
                for row in csv.reader(io.StringIO(text))
                if row and row[0]
            ]
        except csv.Error:  # a broken RECORD is a finding elsewhere, not a crash here
            return []

    def installer(self) -> str | None:
        text = self.distribution.read_text("INSTALLER")
        return text.strip() or None if text else None


def moved_path(site_dir: str, relative: str) -> str | None:
    """For a RECORD path that leaves the site directory (``../../Library/bin/x.dll``), where
    ``pip install --target T`` puts it: the rest of the path below ``T``; else None."""
    parts = relative.split("/")
    if ".." not in parts:
        return None
    return join(site_dir, *[p for p in parts if p not in ("..", ".")])


def dists_named(tree: WinTree, site_dir: str, name: str) -> list[InstalledDist]:
    """Every ``*.dist-info`` of ``name`` in one site dir (an interrupted upgrade on Windows
    can leave the old release's beside the new one)."""
    found: list[InstalledDist] = []
    for folder in tree.subdirs(site_dir):
        if folder[:1].lower() != name[:1]:
            continue  # a name's first character is its canonical name's: most are skipped
        match = _DIST_INFO.match(folder)
        if match and canonical_name(match["name"]) == name:
            found.append(
                InstalledDist(
                    name, match["version"], site_dir, TreeDistribution(tree, site_dir, folder)
                )
            )
    return found


def find_dists(tree: WinTree, site_dirs: Iterable[str]) -> list[InstalledDist]:
    """Every ``*.dist-info`` in ``site_dirs``; the first site dir wins for a given name."""
    found: dict[str, InstalledDist] = {}
    for site_dir in site_dirs:
        for folder in tree.subdirs(site_dir):
            if folder[-10:].lower() != ".dist-info":
                continue  # a package's own folder: about half of site-packages
            match = _DIST_INFO.match(folder)
            if not match:
                continue
            name = canonical_name(match["name"])
            if name not in found:
                found[name] = InstalledDist(
                    name, match["version"], site_dir, TreeDistribution(tree, site_dir, folder)
                )
    return list(found.values())
