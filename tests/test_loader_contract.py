"""Loader-model contracts that mutation testing (mutmut) found unguarded.

Each test pins one behaviour of the replay the rules rely on: where a KnownDLL lives, which
modules are walked, that every failure is collected (not only the first), and what each
failure records.
"""

from __future__ import annotations

from pe_builder import I386, build_pe
from test_loader import APP, LIB, SYS, USER, make

from torchguard._platforms.windows.loader import (
    ARCH,
    CORRUPT,
    KNOWNDLL,
    LOADED,
    MISSING,
    glob_unsafe,
)
from torchguard._platforms.windows.loader import preload_order as order
from torchguard._platforms.windows.tree import MemoryFile


def test_a_known_dll_resolves_to_its_system32_file() -> None:
    model = make({}, known=frozenset({"ws2_32.dll"}))
    resolution = model.resolve("WS2_32.dll", LIB)
    assert (resolution.path, resolution.via) == (f"{SYS}\\ws2_32.dll", KNOWNDLL)


def test_system32_and_known_dlls_are_not_walked() -> None:
    """Their own imports are the OS's business: a real file there is never read."""
    model = make(
        {
            f"{LIB}\\top.dll": build_pe(["os.dll", "known.dll"]),
            f"{SYS}\\os.dll": build_pe(["absent-os-part.dll"]),
            f"{SYS}\\known.dll": build_pe(["absent-known-part.dll"]),
        },
        system=(),
        known=frozenset({"known.dll"}),
    )
    result = model.load(f"{LIB}\\top.dll")
    assert result.ok and result.failures == []


def test_the_root_is_recorded_and_a_loaded_root_is_not_loaded_again() -> None:
    root = f"{LIB}\\top.dll"
    model = make({root: build_pe(["KERNEL32.dll"])})
    first = model.load(root)
    assert (first.modules["top.dll"].path, first.modules["top.dll"].via) == (root, "root")
    again = model.load(root)
    assert list(again.modules) == ["top.dll"] and again.failures == []
    assert (again.modules["top.dll"].path, again.modules["top.dll"].via) == (root, LOADED)


def test_every_failure_is_collected_not_only_the_first() -> None:
    model = make(
        {
            f"{LIB}\\top.dll": build_pe(
                ["bad.dll", "bad2.dll", "x86.dll", "gone1.dll", "gone2.dll"]
            ),
            f"{LIB}\\bad.dll": build_pe(["x.dll"])[:700],
            f"{LIB}\\bad2.dll": b"MZ" + b"\0" * 200,
            f"{LIB}\\x86.dll": build_pe([], machine=I386),
        },
        user=(),
    )
    result = model.load(f"{LIB}\\top.dll")
    kinds = sorted((f.kind, f.leaf) for f in result.failures)
    assert kinds == sorted(
        [
            (ARCH, "x86.dll"),
            (CORRUPT, "bad.dll"),
            (CORRUPT, "bad2.dll"),
            (MISSING, "gone1.dll"),
            (MISSING, "gone2.dll"),
        ]
    )


def test_failures_record_where_and_why() -> None:
    model = make(
        {
            f"{LIB}\\top.dll": build_pe(["bad.dll", "other.dll"]),
            f"{LIB}\\bad.dll": b"MZ" + b"\0" * 200,
            f"{USER}\\other.dll": build_pe([], machine=I386),
        }
    )
    result = model.load(f"{LIB}\\top.dll")
    by_leaf = {f.leaf: f for f in result.failures}
    corrupt = by_leaf["bad.dll"]
    assert corrupt.path == f"{LIB}\\bad.dll" and "PE" in corrupt.detail
    arch = by_leaf["other.dll"]  # only candidate is x86: skipped, so an arch failure there
    assert (arch.kind, arch.path, arch.detail) == (ARCH, f"{USER}\\other.dll", "x86")
    assert "other.dll" in result.modules and result.modules["other.dll"].path is None


def test_a_wrong_machine_root_records_its_path() -> None:
    root = f"{LIB}\\x86.dll"
    model = make({root: build_pe([], machine=I386)})
    (failure,) = model.load(root).failures
    assert (failure.kind, failure.path, failure.detail) == (ARCH, root, "x86")


def test_delay_imports_after_a_present_one_are_still_checked() -> None:
    model = make(
        {
            f"{LIB}\\top.dll": build_pe(["KERNEL32.dll"], ["here.dll", "gone.dll"]),
            f"{LIB}\\here.dll": build_pe([]),
        }
    )
    result = model.load(f"{LIB}\\top.dll")
    assert result.ok
    assert [(f.leaf, f.delay) for f in result.failures] == [("gone.dll", True)]
    assert "gone.dll" not in result.modules and "here.dll" not in result.modules


def test_glob_unsafe_only_for_glob_metacharacters() -> None:
    assert not glob_unsafe("C:\\XX\\torch\\lib")
    assert all(glob_unsafe(f"C:\\a{ch}b\\lib") for ch in "[*?")


def test_preload_skips_dot_names_only() -> None:
    model = make({f"{LIB}\\.hidden.dll": build_pe([]), f"{LIB}\\XX.XX.dll": build_pe([])})
    model.tree.add_file(f"{APP}\\unrelated.dll", MemoryFile(b"", "x"))
    assert order(model.tree, LIB) == [f"{LIB}\\XX.XX.dll"]
