"""The binding judge on its own: symbol tables in, a Gap out, forwarders followed."""

from __future__ import annotations

from torchguard._binary.pe.symbols import Exports, Symbol, SymbolTables
from torchguard._platforms.windows.bindings import TRUSTED, Trusted, judge


def tables(
    names: tuple[bytes, ...] | list[bytes] = (),
    forwarders: dict[Symbol, bytes] | None = None,
    *,
    ordinals: frozenset[int] = frozenset(),
    directory: bool = True,
) -> SymbolTables:
    exported = frozenset([*names, *(k for k in (forwarders or {}) if isinstance(k, bytes))])
    return SymbolTables(
        imports={},
        delay_imports={},
        exports=Exports(exported, ordinals, forwarders or {}, directory=directory),
    )


def nowhere(dll: str) -> str | Trusted | None:
    return None


def test_everything_exported_is_no_gap() -> None:
    gap, resolutions = judge([b"a", b"b"], tables([b"a", b"b"]), nowhere, lambda path: None)
    assert gap is None and resolutions == {}


def test_missing_names_and_ordinals_give_127_and_182() -> None:
    gap, _ = judge([b"a", b"gone"], tables([b"a"]), nowhere, lambda path: None)
    assert gap is not None and (gap.missing, gap.count, gap.winerror) == (("gone",), 1, 127)
    gap, _ = judge([7, b"gone"], tables([b"a"]), nowhere, lambda path: None)
    assert gap is not None and (gap.missing, gap.winerror) == (("#7", "gone"), 182)


def test_no_export_table_is_a_refused_binding() -> None:
    gap, _ = judge([b"a"], tables([], directory=False), nowhere, lambda path: None)
    assert gap is not None and gap.winerror == 193 and gap.bad_image == "it has no export table"


def test_forwarders_are_followed_and_their_resolutions_returned() -> None:
    exporter = tables(forwarders={b"f": b"target.g", b"h": b"api-ms-win-x.h"})
    target = tables([b"g"])

    def resolve(dll: str) -> str | Trusted | None:
        return TRUSTED if dll.startswith("api-ms") else "C:\\t\\target.dll"

    gap, resolutions = judge([b"f", b"h"], exporter, resolve, lambda path: target)
    assert gap is None
    assert resolutions == {"target.dll": "C:\\t\\target.dll", "api-ms-win-x.dll": TRUSTED}


def test_a_forwarder_into_a_missing_dll_or_symbol_is_missing() -> None:
    exporter = tables(forwarders={b"f": b"lost.g"})
    gap, resolutions = judge([b"f"], exporter, nowhere, lambda path: None)
    assert gap is not None and gap.forward_missing == "lost.dll" and gap.winerror == 127
    assert resolutions == {"lost.dll": None}
    gap, _ = judge([b"f"], exporter, lambda dll: "C:\\lost.dll", lambda path: tables([b"x"]))
    assert gap is not None and gap.missing == ("f",) and gap.forward_missing is None


def test_a_forwarder_naming_no_dll_and_a_forwarding_loop_are_refused() -> None:
    gap, _ = judge([b"f"], tables(forwarders={b"f": b"nodot"}), nowhere, lambda path: None)
    assert gap is not None and gap.winerror == 193 and "names no DLL" in (gap.bad_image or "")
    loop = tables(forwarders={b"f": b"self.f"})
    gap, _ = judge([b"f"], loop, lambda dll: "C:\\self.dll", lambda path: loop)
    assert gap is not None and gap.winerror == 193 and "32 times" in (gap.bad_image or "")


def test_an_ordinal_forwarder_is_followed_by_ordinal() -> None:
    exporter = tables(forwarders={b"f": b"target.#5"})
    only_five = tables([], ordinals=frozenset({5}))
    gap, _ = judge([b"f"], exporter, lambda dll: "C:\\target.dll", lambda path: only_five)
    assert gap is None
