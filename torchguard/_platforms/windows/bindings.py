"""Judge one binding: what an importer takes from a DLL that the copy it binds to lacks.

Pure: symbol tables in, a :class:`Gap` out. Export forwarders are followed the way
``LdrpResolveProcedureAddress`` does (last-dot split, ``#ordinal``, at most 32 hops); how each
forwarder's DLL resolved is returned too, so a cached verdict can be checked against a later
resolution (see :mod:`torchguard._platforms.windows.verdicts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Union

from torchguard._binary.pe.symbols import Symbol, SymbolTables

#: Missing symbols a finding lists by name (the count says how many there are in all).
SHOWN = 8
#: LdrpResolveProcedureAddress follows at most 32 forwarders, then refuses the image.
_MAX_FORWARDS = 32
#: STATUS_INVALID_IMAGE_FORMAT: the loader refuses to bind at all.
BAD_IMAGE = 193


class Trusted:
    """A DLL whose exports are taken on trust: an API set, or a Windows DLL assumed present."""


TRUSTED = Trusted()

#: How the loader resolves a DLL name for a forwarder: a path, TRUSTED, or None (missing).
ForwardResolver = Callable[[str], Union[str, Trusted, None]]
#: The symbol tables of a file the judge is sent to by a forwarder; None when unreadable.
TablesOf = Callable[[str], Union[SymbolTables, None]]
#: Each forwarder's DLL (lower case) and where it resolved.
Resolutions = dict[str, Union[str, Trusted, None]]


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


class Lookup(Enum):
    """How one imported symbol fares in the copy the loader binds to."""

    FOUND = "found"
    """Exported there, or forwarded to a DLL whose exports are trusted or cannot be read."""
    ABSENT = "absent"
    """Not exported: WinError 127 (a name) or 182 (an ordinal)."""
    FORWARD_DLL_MISSING = "forward-dll-missing"
    """Forwarded into a DLL the loader cannot find."""
    FORWARD_SYMBOL_MISSING = "forward-symbol-missing"
    """Forwarded into a DLL that does not export it."""
    BAD_IMAGE = "bad-image"
    """The loader refuses to bind: a forwarder that names no DLL, or too many hops."""


@dataclass(frozen=True)
class Verdict:
    lookup: Lookup
    detail: str | None = None
    """The DLL a forwarder led to, or why the image is refused."""


_FOUND = Verdict(Lookup.FOUND)
_ABSENT = Verdict(Lookup.ABSENT)


def judge(
    imported: Sequence[Symbol],
    exporter: SymbolTables,
    resolve: ForwardResolver,
    tables_of: TablesOf,
) -> tuple[Gap | None, Resolutions]:
    """The symbols of ``imported`` that ``exporter`` does not provide, and the forwarders'
    resolutions the verdict depends on."""
    resolutions: Resolutions = {}
    missing: list[Symbol] = []
    forward_missing: str | None = None
    bad_image: str | None = None
    if imported and not exporter.exports.directory:
        missing, bad_image = list(imported), "it has no export table"
        imported = ()
    for symbol in imported:
        verdict = _lookup(exporter, symbol, resolve, tables_of, 0, resolutions)
        if verdict.lookup is Lookup.FOUND:
            continue
        if verdict.lookup is Lookup.FORWARD_DLL_MISSING:
            forward_missing = forward_missing or verdict.detail
        if verdict.lookup is Lookup.BAD_IMAGE and not missing:
            bad_image = verdict.detail  # the loader stops at the first symbol it cannot bind
        missing.append(symbol)
    return _gap(missing, forward_missing, bad_image, exporter.exports.damaged), resolutions


def _lookup(
    tables: SymbolTables,
    symbol: Symbol,
    resolve: ForwardResolver,
    tables_of: TablesOf,
    depth: int,
    resolutions: Resolutions,
) -> Verdict:
    if not tables.exports.has(symbol):
        return _ABSENT
    target = tables.exports.forwarders.get(symbol)
    if target is None:
        return _FOUND
    module, dot, name = target.rpartition(b".")  # LdrpParseForwarderDescription: strrchr
    if not dot:
        return Verdict(
            Lookup.BAD_IMAGE, f"an export forwards to {display(target)}, which names no DLL"
        )
    dll = module.decode("ascii", "replace")
    if "." not in dll:
        dll += ".dll"
    where = resolve(dll)
    resolutions.setdefault(dll.lower(), where)
    if isinstance(where, Trusted):
        return _FOUND
    if where is None:
        return Verdict(Lookup.FORWARD_DLL_MISSING, dll)
    if depth >= _MAX_FORWARDS:
        return Verdict(
            Lookup.BAD_IMAGE, f"its exports forward more than {_MAX_FORWARDS} times in a row"
        )
    forwarded_tables = tables_of(where)
    if forwarded_tables is None:
        return _FOUND  # a damaged file: corrupt-dll speaks for it
    forwarded: Symbol = int(name[1:]) if name[:1] == b"#" and name[1:].isdigit() else name
    verdict = _lookup(forwarded_tables, forwarded, resolve, tables_of, depth + 1, resolutions)
    if verdict.lookup is Lookup.ABSENT:
        return Verdict(Lookup.FORWARD_SYMBOL_MISSING, dll)
    return verdict


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
        missing=tuple(display(symbol) for symbol in missing[:SHOWN]),
        count=len(missing),
        winerror=by_symbol if bad_image is None else BAD_IMAGE,
        forward_missing=forward_missing,
        bad_image=bad_image,
        damaged_exports=damaged_exports,
    )


def display(symbol: Symbol | bytes) -> str:
    if isinstance(symbol, int):
        return f"#{symbol}"
    return symbol.decode("ascii", "replace")
