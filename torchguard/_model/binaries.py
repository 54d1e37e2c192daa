"""The binaries of one analysis: each read at most once, and every binding judged.

:class:`Binaries` hands the loader model two things:

- **facts** of any file (machine, imported DLL names ...), from the persistent cache when the
  file is unchanged, else read;
- **gaps**: for an import edge (importer -> the copy of a DLL the loader binds to), the
  imported names and ordinals that copy does not export, following export forwarders. Windows
  fails such a load with WinError 127 (a name) or 182 (an ordinal).

A file that has to be read is read once, facts and symbol tables together (a wheel member is
inflated once). Edge verdicts are cached by both files' identities, so a warm analysis reads
no binary at all and the cache stays small (no symbol lists are stored).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from torchguard._binary.budget import inflate_budget, mib
from torchguard._binary.pe.errors import (
    FileUnreadable,
    ImageUnavailable,
    OverBudget,
    PEReadError,
)
from torchguard._binary.pe.image import PEFacts, PEImage, read_image, read_image_stream
from torchguard._binary.pe.symbols import NotKept, Symbol, SymbolTables
from torchguard._model.cache import FactsCache, host_key, member_key
from torchguard._windows.tree import (
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

#: Missing symbols a finding lists by name (the count says how many there are in all).
SHOWN = 8
#: LdrpResolveProcedureAddress follows at most 32 forwarders, then refuses the image.
_MAX_FORWARDS = 32
#: STATUS_INVALID_IMAGE_FORMAT: the loader refuses to bind at all.
_BAD_IMAGE = 193


class Trusted:
    """A DLL whose exports are taken on trust: an API set, or a Windows DLL assumed present."""


TRUSTED = Trusted()

#: How the loader resolves a DLL name for a forwarder: a path, TRUSTED, or None (missing).
ForwardResolver = Callable[[str], Union[str, Trusted, None]]


@dataclass(frozen=True)
class Gap:
    """What an importer takes from a DLL that the copy it binds to does not export."""

    missing: tuple[str, ...]
    """The first few missing symbols, in import order: names, or ``#12`` for ordinals."""
    count: int
    winerror: int
    """127 when the first missing symbol is a name, 182 when it is an ordinal, 193 when the
    loader refuses to bind (see ``bad_image``)."""
    forward_missing: str | None = None
    """A DLL an export forwards to that cannot be found, if that is why."""
    bad_image: str | None = None
    """Why the loader refuses to bind (WinError 193): no export table, a broken forwarder."""
    damaged_exports: str | None = None
    """Why the exporter's export table could be read only in part, when it could not: then
    the missing names may be lost to damage rather than to another build."""


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
        self._identities: dict[PathKey, str | None] = {}

    # -- facts ----------------------------------------------------------------------------
    def facts(self, path: str) -> PEFacts:
        """PE facts of ``path``; raises PEReadError for a file the loader would reject, and
        FileUnreadable for one that could not be read now."""
        key = path_key(path)
        found = self._facts.get(key)
        if found is None:
            found = self._facts[key] = self._cached_facts(path)
        if isinstance(found, ImageUnavailable):
            raise found
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
        key = path_key(path)
        if key not in self._identities:
            self._identities[key] = _identity(self.tree, path)
        return self._identities[key]

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
        edge = self._edge_key(importer, dll, exporter, delay)
        if edge is not None and self.persistent is not None:
            raw = self.persistent.get_edge(edge)
            known, cached = _gap_from(raw)
            if known and self._trail_holds(raw, resolve):
                return cached
        exporter_tables = self._tables(exporter)
        if exporter_tables is None:
            return None  # a damaged file: corrupt-dll says so, there is nothing to compare
        importer_tables = self._tables(importer)
        if importer_tables is None:
            return None
        table = importer_tables.delay_imports if delay else importer_tables.imports
        imported = table.get(dll.lower(), ())
        missing: list[Symbol] = []
        forward_missing: str | None = None
        bad_image: str | None = None
        trail: dict[str, list[str | None]] = {}
        if imported and not exporter_tables.exports.directory:
            missing, bad_image = list(imported), "it has no export table"
            imported = ()
        for symbol in imported:
            verdict = self._exported(exporter_tables, symbol, resolve, 0, trail)
            if verdict is True:
                continue
            if verdict is False:
                missing.append(symbol)
                continue
            # a forwarder into a DLL that cannot be found, or judged through another file
            kind, detail = verdict
            if kind == "missing-dll":
                forward_missing = forward_missing or detail
            if kind == "bad-image" and not missing:
                bad_image = detail  # the loader stops at the first symbol it cannot bind
            if kind != "followed":
                missing.append(symbol)
        result = _gap(missing, forward_missing, bad_image, exporter_tables.exports.damaged)
        consulted = [importer, exporter, *(then[1] for then in trail.values() if then[1])]
        if edge is not None and self.persistent is not None and not self._unread(consulted):
            verdict_record = _gap_to(result)
            if trail:  # forwarders were resolved: the verdict holds while they resolve alike
                verdict_record["trail"] = trail
            self.persistent.put_edge(edge, verdict_record)
        return result

    def _trail_holds(self, raw: Any, resolve: ForwardResolver) -> bool:
        """Whether every forwarder target a cached verdict resolved still resolves alike."""
        trail = raw.get("trail", {}) if isinstance(raw, dict) else {}
        if not isinstance(trail, dict):
            return False
        return all(
            isinstance(then, list) and then == self._record(resolve(dll))
            for dll, then in trail.items()
        )

    def _record(self, where: str | Trusted | None) -> list[str | None]:
        """How a forwarder's DLL resolved, as a cacheable record: [kind, path, identity]."""
        if isinstance(where, Trusted):
            return ["trusted", None, None]
        if where is None:
            return ["missing", None, None]
        return ["file", path_key(where), self.identity(where)]

    def _exported(
        self,
        tables: SymbolTables,
        symbol: Symbol,
        resolve: ForwardResolver,
        depth: int,
        trail: dict[str, list[str | None]],
    ) -> bool | tuple[str, str]:
        """True, False, or (why, detail) when a forwarder decided it; ``trail`` records how
        each forwarder's DLL resolved."""
        if not tables.exports.has(symbol):
            return False
        target = tables.exports.forwarders.get(symbol)
        if target is None:
            return True
        module, dot, name = target.rpartition(b".")  # LdrpParseForwarderDescription: strrchr
        if not dot:
            return ("bad-image", f"an export forwards to {_display(target)}, which names no DLL")
        dll = module.decode("ascii", "replace")
        if "." not in dll:
            dll += ".dll"
        where = resolve(dll)
        trail.setdefault(dll.lower(), self._record(where))
        if isinstance(where, Trusted):
            return True
        if where is None:
            return ("missing-dll", dll)
        if depth >= _MAX_FORWARDS:
            return ("bad-image", f"its exports forward more than {_MAX_FORWARDS} times in a row")
        forwarded_tables = self._tables(where)
        if forwarded_tables is None:
            return ("followed", dll)
        forwarded: Symbol = int(name[1:]) if name[:1] == b"#" and name[1:].isdigit() else name
        verdict = self._exported(forwarded_tables, forwarded, resolve, depth + 1, trail)
        if verdict is False:
            return ("missing-symbol", dll)
        return verdict if isinstance(verdict, tuple) else ("followed", dll)

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

    def _edge_key(self, importer: str, dll: str, exporter: str, delay: bool) -> str | None:
        first, second = self.identity(importer), self.identity(exporter)
        if first is None or second is None:
            return None
        return f"{first}>{dll.lower()}{'~delay' if delay else ''}>{second}"


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


def _gap(
    missing: list[Symbol],
    forward_missing: str | None,
    bad_image: str | None,
    damaged_exports: str | None = None,
) -> Gap | None:
    if not missing:
        return None
    by_symbol = 182 if isinstance(missing[0], int) else 127
    return Gap(
        missing=tuple(_display(symbol) for symbol in missing[:SHOWN]),
        count=len(missing),
        winerror=by_symbol if bad_image is None else _BAD_IMAGE,
        forward_missing=forward_missing,
        bad_image=bad_image,
        damaged_exports=damaged_exports,
    )


def _display(symbol: Symbol) -> str:
    if isinstance(symbol, int):
        return f"#{symbol}"
    return symbol.decode("ascii", "replace")


def _gap_to(gap: Gap | None) -> dict[str, object]:
    if gap is None:
        return {"ok": True}
    return {
        "ok": False,
        "missing": list(gap.missing),
        "count": gap.count,
        "winerror": gap.winerror,
        "forward_missing": gap.forward_missing,
        "bad_image": gap.bad_image,
        "damaged_exports": gap.damaged_exports,
    }


def _gap_from(raw: object) -> tuple[bool, Gap | None]:
    """(whether a verdict is cached, the Gap or None for a sound binding); a missing or
    damaged entry is not a verdict."""
    if not isinstance(raw, dict) or raw.get("ok") not in (True, False):
        return False, None
    if raw["ok"] is True:
        return True, None
    missing = raw.get("missing")
    count, winerror, forward = raw.get("count"), raw.get("winerror"), raw.get("forward_missing")
    bad_image, damaged = raw.get("bad_image"), raw.get("damaged_exports")
    if (
        not isinstance(missing, list)
        or not all(isinstance(name, str) for name in missing)
        or not isinstance(count, int)
        or winerror not in (127, 182, _BAD_IMAGE)
        or not (forward is None or isinstance(forward, str))
        or not (bad_image is None or isinstance(bad_image, str))
        or (winerror == _BAD_IMAGE) != (bad_image is not None)
        or not (damaged is None or isinstance(damaged, str))
    ):
        return False, None
    return True, Gap(tuple(missing), count, int(winerror), forward, bad_image, damaged)
