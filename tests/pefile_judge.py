"""pefile as the independent judge of our symbol reader: both readers' views, comparable.

pefile cuts names at 512 bytes, so our names are cut the same way before comparing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pefile

from torchguard._binary.pe.symbols import Symbol, SymbolTables

_CUT = 512  # pefile's longest name


def _cut(symbol: Symbol) -> Symbol:
    return symbol if isinstance(symbol, int) else symbol[:_CUT]


def parsed(data: bytes) -> pefile.PE:
    """pefile's parse of the export, import and delay-import directories, export caps lifted
    (lift ``pefile.MAX_IMPORT_SYMBOLS`` too for a large import table)."""
    pe = pefile.PE(
        data=data, fast_load=True, max_symbol_exports=1 << 17, max_repeated_symbol=1 << 17
    )
    entries = pefile.DIRECTORY_ENTRY
    pe.parse_data_directories(
        directories=[
            entries["IMAGE_DIRECTORY_ENTRY_EXPORT"],
            entries["IMAGE_DIRECTORY_ENTRY_IMPORT"],
            entries["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
        ]
    )
    return pe


def pefile_view(data: bytes) -> dict[str, object]:
    """What pefile reads, caps lifted, in the shape :func:`our_view` gives."""
    pe = parsed(data)
    names: set[bytes] = set()
    ordinals: set[int] = set()
    forwarders: dict[Symbol, bytes] = {}
    export = getattr(pe, "DIRECTORY_ENTRY_EXPORT", None)
    for symbol in export.symbols if export is not None else ():
        ordinals.add(symbol.ordinal)
        if symbol.name:
            names.add(symbol.name)
        if symbol.forwarder:
            forwarders[symbol.ordinal] = symbol.forwarder
            if symbol.name:
                forwarders[symbol.name] = symbol.forwarder

    def by_dll(entries: Iterable[Any]) -> dict[str, tuple[Symbol, ...]]:
        found: dict[str, tuple[Symbol, ...]] = {}
        for entry in entries:
            dll = entry.dll.decode("ascii", "replace").lower()
            found[dll] = found.get(dll, ()) + tuple(
                s.ordinal if s.import_by_ordinal else s.name for s in entry.imports
            )
        return found

    return {
        "names": names,
        "ordinals": ordinals,
        "forwarders": forwarders,
        "imports": by_dll(getattr(pe, "DIRECTORY_ENTRY_IMPORT", ())),
        "delay_imports": by_dll(getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", ())),
        "damaged": None,
    }


def our_view(tables: SymbolTables) -> dict[str, object]:
    exports = tables.exports

    def cut_all(table: Mapping[str, tuple[Symbol, ...]]) -> dict[str, tuple[Symbol, ...]]:
        return {dll: tuple(map(_cut, symbols)) for dll, symbols in table.items()}

    return {
        "names": {name[:_CUT] for name in exports.names},
        "ordinals": set(exports.ordinals),
        "forwarders": {_cut(key): target for key, target in exports.forwarders.items()},
        "imports": cut_all(tables.imports),
        "delay_imports": cut_all(tables.delay_imports),
        "damaged": exports.damaged,
    }
