"""The binaries of one analysis: each read at most once, and every binding judged.

:class:`Binaries` hands the loader model two things:

- **facts** of any file (machine, imported DLL names ...), from the persistent cache when the
  file is unchanged, else read;
- **gaps**: for an import edge (importer -> the copy of a DLL the loader binds to), the
  imported names and ordinals that copy does not export, following export forwarders. Windows
  fails such a load with WinError 127 (a name) or 182 (an ordinal).

A file that has to be read is read once, facts and symbol tables together (a wheel member is
inflated once). The judging itself is :mod:`~torchguard._platforms.windows.bindings` (pure);
verdicts are cached by both files' identities (:mod:`~torchguard._platforms.windows.verdicts`), so a
warm analysis reads no binary at all and the cache stays small (no symbol lists are stored).
"""

from __future__ import annotations

from torchguard._binary.budget import inflate_budget, mib
from torchguard._binary.cache import FactsCache, host_key, member_key
from torchguard._binary.pe.errors import (
    FileUnreadable,
    ImageUnavailable,
    OverBudget,
    PEReadError,
)
from torchguard._binary.pe.image import PEFacts, PEImage, read_image, read_image_stream
from torchguard._binary.pe.symbols import NotKept, SymbolTables
from torchguard._platforms.windows.bindings import ForwardResolver, Gap, judge
from torchguard._platforms.windows.tree import (
    ZIP_ERRORS,
    AssumedFile,
    DamagedMember,
    HostFile,
    MemberStream,
    PathKey,
    WinTree,
    ZipMember,
    path_key,
    zip_damage,
)
from torchguard._platforms.windows.verdicts import VerdictCache


def _read(tree: WinTree, path: str) -> PEImage | ImageUnavailable:
    """Read one file of the tree, facts and symbol tables.

    The file's own damage (a format error, a short read, bad zip data) becomes
    :class:`PEReadError`; an ``OSError`` or ``MemoryError`` of the environment while reading
    becomes :class:`FileUnreadable`, which is never cached. Zip errors are caught only around
    zipfile's own calls (:class:`MemberStream`), so an error of the readers themselves
    propagates as the bug it is.
    """
    entry = tree.entry(path)
    if entry is None:
        return PEReadError("the file disappeared while it was being checked")
    if isinstance(entry, AssumedFile):
        return PEReadError(f"{entry.origin} cannot be read")
    try:
        if isinstance(entry, HostFile):
            return read_image(entry.path, symbols=True)
        if isinstance(entry, ZipMember):
            try:
                archive = tree.archive(entry.archive)
            except ZIP_ERRORS as exc:
                if not zip_damage(exc):
                    return FileUnreadable.from_error(exc)
                return PEReadError(f"not a readable zip archive: {exc}")
            try:
                budget = inflate_budget(archive.getinfo(entry.member).compress_size)
            except ZIP_ERRORS as exc:  # the archive changed since it was listed
                return PEReadError(f"not in the archive any more: {exc}")
            try:
                with MemberStream(archive, entry.member) as stream:
                    return read_image_stream(stream, entry.size, symbols=True, budget=budget)
            except NotKept:  # a table in a code section: inflate the whole member
                if entry.size > budget:
                    return OverBudget(
                        f"its tables lie in code, and reading all {mib(entry.size)} of it is "
                        f"more than the {mib(budget)} its size in the archive allows"
                    )
                return read_image(tree.read_entry(entry), symbols=True)
        return read_image(tree.read_entry(entry), symbols=True)
    except ImageUnavailable as exc:
        return exc
    except DamagedMember as exc:  # bad zip data: the file's own damage
        return PEReadError(str(exc))
    except (OSError, MemoryError) as exc:  # the environment's: see FileUnreadable
        return FileUnreadable.from_error(exc)


class Binaries:
    """Facts and bindings of the binaries of one tree; see the module docstring."""

    def __init__(self, tree: WinTree, persistent: FactsCache | None = None) -> None:
        self.tree = tree
        self.persistent = persistent
        self._facts: dict[PathKey, PEFacts | ImageUnavailable] = {}
        self._symbols: dict[PathKey, SymbolTables | ImageUnavailable] = {}
        self._identities = _Identities(tree)  # shared, not a method of self: no cycle
        self._verdicts = VerdictCache(persistent, self._identities) if persistent else None

    # -- facts ----------------------------------------------------------------------------
    def facts(self, path: str) -> PEFacts:
        """PE facts of ``path``; raises PEReadError for a file the loader would reject, and
        FileUnreadable for one that could not be read now."""
        key = path_key(path)
        found = self._facts.get(key)
        if found is None:
            found = self._facts[key] = self._cached_facts(path)
        if isinstance(found, ImageUnavailable):
            raise _again(found)
        return found

    def _cached_facts(self, path: str) -> PEFacts | ImageUnavailable:
        entry = self.tree.entry(path)
        if entry is None or isinstance(entry, AssumedFile):
            why = "the file disappeared" if entry is None else f"{entry.origin} has no file to read"
            return PEReadError(why)
        identity = self.identity(path)
        if self.persistent is not None:
            cached = self.persistent.get(identity)
            if cached is not None:
                return cached
        found = self._load(path)
        if self.persistent is not None and isinstance(found, (PEFacts, PEReadError)):
            self.persistent.put(identity, found)  # facts and damage only: never a moment's
        return found

    def _load(self, path: str) -> PEFacts | ImageUnavailable:
        """Read ``path`` once, keeping its symbol tables for the bindings judged later."""
        image = _read(self.tree, path)
        key = path_key(path)
        if isinstance(image, ImageUnavailable):
            self._symbols[key] = image
            return image
        if image.symbols is not None:
            self._symbols[key] = image.symbols
        return image.facts

    def identity(self, path: str) -> str | None:
        """What makes a file the same file next time (path, size, time, id; or wheel CRC)."""
        return self._identities(path)

    # -- bindings -------------------------------------------------------------------------
    def checkable(self, path: str | None) -> bool:
        """Whether ``path`` has export data to judge (not an API set or an assumed DLL)."""
        if path is None:
            return False
        entry = self.tree.entry(path)
        return entry is not None and not isinstance(entry, AssumedFile)

    def gap(
        self, importer: str, dll: str, exporter: str, delay: bool, resolve: ForwardResolver
    ) -> Gap | None:
        """What ``importer`` takes from ``dll`` that ``exporter`` (its bound copy) lacks."""
        verdicts = self._verdicts
        key = verdicts.key(importer, dll, exporter, delay) if verdicts is not None else None
        if key is not None and verdicts is not None:
            known, cached = verdicts.get(key, resolve)
            if known:
                return cached
        exporter_tables = self._tables(exporter)
        if exporter_tables is None:
            return None  # a damaged file: corrupt-dll says so, there is nothing to compare
        importer_tables = self._tables(importer)
        if importer_tables is None:
            return None
        table = importer_tables.delay_imports if delay else importer_tables.imports
        imported = table.get(dll.lower(), ())
        result, resolutions = judge(imported, exporter_tables, resolve, self._tables)
        consulted = [importer, exporter, *(w for w in resolutions.values() if isinstance(w, str))]
        if key is not None and verdicts is not None and not self._unread(consulted):
            verdicts.put(key, result, resolutions)
        return result

    def _tables(self, path: str) -> SymbolTables | None:
        key = path_key(path)
        found = self._symbols.get(key)
        if found is None:
            image = _read(self.tree, path)
            found = self._symbols[key] = (
                image if isinstance(image, ImageUnavailable) else image.symbols or PEReadError("")
            )
        return None if isinstance(found, ImageUnavailable) else found

    def _unread(self, paths: list[str]) -> bool:
        """Whether a verdict leaned on a file that could not be read now: not to be cached."""
        return any(isinstance(self._symbols.get(path_key(path)), FileUnreadable) for path in paths)


class _Identities:
    """Each file's identity, taken once per analysis."""

    def __init__(self, tree: WinTree) -> None:
        self.tree = tree
        self.known: dict[PathKey, str | None] = {}

    def __call__(self, path: str) -> str | None:
        key = path_key(path)
        if key not in self.known:
            self.known[key] = _identity(self.tree, path)
        return self.known[key]


def _again(error: ImageUnavailable) -> ImageUnavailable:
    """A copy of a kept error to raise: raising the kept one would tie its traceback's frames
    (and the analysis they hold) to it in a reference cycle that only the garbage collector
    frees, keeping a whole warm run's objects alive until it runs."""
    copy = type(error)(*error.args)
    copy.__dict__.update(error.__dict__)
    return copy


def _identity(tree: WinTree, path: str) -> str | None:
    entry = tree.entry(path)
    if isinstance(entry, HostFile):
        return host_key(entry.path)
    if isinstance(entry, ZipMember):
        try:
            info = tree.archive(entry.archive).getinfo(entry.member)
        except ZIP_ERRORS:
            return None
        return member_key(entry.archive, entry.member, info.CRC, info.file_size)
    return None
