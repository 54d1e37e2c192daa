"""The loader model on hand-built trees: search order, skips, failures, chains."""

from __future__ import annotations

from pathlib import Path

import pytest
from pe_builder import I386, build_pe

from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.loader import (
    APISET,
    APP_DIR,
    ARCH,
    CORRUPT,
    DLL_LOAD_DIR,
    KNOWNDLL,
    LOADED,
    MISSING,
    SYSTEM32,
    USER_DIR,
    LoaderModel,
    preload_order,
)
from torchguard._platforms.windows.tree import AssumedFile, MemoryFile, WinTree

LIB = "C:\\site\\torch\\lib"
APP = "C:\\Python"
SYS = "C:\\Windows\\System32"
USER = "C:\\site\\mkl\\Library\\bin"


def make(
    files: dict[str, bytes],
    *,
    system: tuple[str, ...] = ("kernel32.dll",),
    user: tuple[str, ...] = (USER,),
    known: frozenset[str] = frozenset(),
) -> LoaderModel:
    tree = WinTree()
    for path, data in files.items():
        tree.add_file(path, MemoryFile(data, path))
    for name in system:
        tree.add_file(f"{SYS}\\{name}", AssumedFile("test system"))
    return LoaderModel(
        tree=tree,
        facts=Binaries(tree).facts,
        machine=0x8664,
        app_dir=APP,
        system32=SYS,
        user_dirs=user,
        known_dlls=known,
    )


def test_search_order_labels_each_step() -> None:
    model = make(
        {
            f"{LIB}\\a.dll": build_pe(["KERNEL32.dll"]),
            f"{APP}\\vcruntime140.dll": build_pe([]),
            f"{USER}\\mkl.dll": build_pe([]),
        },
        known=frozenset({"ws2_32.dll"}),
    )
    assert model.resolve("A.DLL", LIB).via == DLL_LOAD_DIR
    assert model.resolve("vcruntime140.dll", LIB).via == APP_DIR
    assert model.resolve("mkl.dll", LIB).via == USER_DIR
    assert model.resolve("kernel32.dll", LIB).via == SYSTEM32
    assert model.resolve("WS2_32.dll", LIB).via == KNOWNDLL
    assert model.resolve("api-ms-win-crt-heap-l1-1-0.dll", LIB).via == APISET
    assert model.resolve("ext-ms-win-foo-l1-1-0.dll", LIB).via == APISET
    missing = model.resolve("nothere.dll", LIB)
    assert missing.path is None and missing.via is None


def test_load_dir_beats_app_dir_and_user_dirs() -> None:
    model = make(
        {
            f"{LIB}\\dup.dll": build_pe([]),
            f"{APP}\\dup.dll": build_pe([]),
            f"{USER}\\dup.dll": build_pe([]),
        }
    )
    resolution = model.resolve("dup.dll", LIB)
    assert resolution.path == f"{LIB}\\dup.dll"


def test_wrong_architecture_candidates_are_skipped() -> None:
    model = make({f"{LIB}\\dep.dll": build_pe([], machine=I386), f"{USER}\\dep.dll": build_pe([])})
    resolution = model.resolve("dep.dll", LIB)
    assert resolution.path == f"{USER}\\dep.dll"
    assert resolution.wrong_arch and resolution.wrong_arch[0][0] == f"{LIB}\\dep.dll"


def test_only_wrong_architecture_is_an_arch_failure() -> None:
    model = make(
        {f"{LIB}\\root.dll": build_pe(["dep.dll"]), f"{LIB}\\dep.dll": build_pe([], machine=I386)}
    )
    result = model.load(f"{LIB}\\root.dll")
    assert not result.ok and result.winerror == 193
    assert [(f.kind, f.leaf) for f in result.failures] == [(ARCH, "dep.dll")]


def test_deepest_missing_leaf_and_its_chain() -> None:
    model = make(
        {
            f"{LIB}\\top.dll": build_pe(["mid.dll", "KERNEL32.dll"]),
            f"{LIB}\\mid.dll": build_pe(["low.dll"]),
            f"{LIB}\\low.dll": build_pe(["gone.dll"]),
        }
    )
    result = model.load(f"{LIB}\\top.dll")
    assert result.winerror == 126
    (failure,) = result.failures
    assert failure.kind == MISSING
    assert failure.chain == ("top.dll", "mid.dll", "low.dll", "gone.dll")


def test_corrupt_dependency_fails_with_193() -> None:
    model = make(
        {f"{LIB}\\top.dll": build_pe(["bad.dll"]), f"{LIB}\\bad.dll": build_pe(["x.dll"])[:700]}
    )
    result = model.load(f"{LIB}\\top.dll")
    assert result.winerror == 193
    assert result.failures[0].kind == CORRUPT and result.failures[0].leaf == "bad.dll"


def test_missing_delay_import_is_not_a_load_failure() -> None:
    model = make({f"{LIB}\\top.dll": build_pe(["KERNEL32.dll"], ["nvcuda.dll"])})
    result = model.load(f"{LIB}\\top.dll")
    assert result.ok
    assert [(f.leaf, f.delay) for f in result.failures] == [("nvcuda.dll", True)]


def test_loaded_module_wins_and_successful_loads_are_remembered() -> None:
    model = make(
        {
            f"{LIB}\\first.dll": build_pe(["dep.dll"]),
            f"{LIB}\\dep.dll": build_pe([]),
            f"{LIB}\\second.dll": build_pe(["dep.dll"]),
        }
    )
    model.loaded["msvcp140.dll"] = "C:\\Qt\\bin\\msvcp140.dll"
    assert model.resolve("MSVCP140.dll", LIB).path == "C:\\Qt\\bin\\msvcp140.dll"
    assert model.load(f"{LIB}\\first.dll").ok
    assert model.resolve("dep.dll", "C:\\elsewhere").via == LOADED


def test_a_failed_load_leaves_nothing_loaded() -> None:
    model = make({f"{LIB}\\a.dll": build_pe(["b.dll"]), f"{LIB}\\b.dll": build_pe(["gone.dll"])})
    assert not model.load(f"{LIB}\\a.dll").ok
    assert "b.dll" not in model.loaded


def test_system_dlls_are_not_walked_into() -> None:
    tree_files = {f"{LIB}\\a.dll": build_pe(["kernel32.dll"])}
    model = make(tree_files)
    result = model.load(f"{LIB}\\a.dll")
    assert result.ok and result.modules["kernel32.dll"].via == SYSTEM32


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (
            ["torch_cpu.dll", "torch.dll", "c10.dll", "C10_cuda.dll"],
            ["c10.dll", "C10_cuda.dll", "torch.dll", "torch_cpu.dll"],
        ),
        (["torcha.dll", "torch_b.dll"], ["torcha.dll", "torch_b.dll"]),
    ],
)
def test_preload_order_is_ntfs_order(names: list[str], expected: list[str]) -> None:
    tree = WinTree()
    for name in names:
        tree.add_file(f"{LIB}\\{name}", MemoryFile(b"", name))
    tree.add_file(f"{LIB}\\notes.txt", MemoryFile(b"", "notes"))
    assert [p.rsplit("\\", 1)[1] for p in preload_order(tree, LIB)] == expected


def test_unlistable_host_folder_is_asked_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Microsoft Store Python's folder may deny listing while its files stay readable."""
    import os

    from torchguard._platforms.windows.tree import HostFile

    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "vcruntime140_1.dll").write_bytes(b"x")
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.path.samefile(path, folder):
            raise PermissionError(13, "Access is denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    tree = WinTree()
    tree.mount_host_dir("C:\\Python", str(folder))
    assert tree.listdir("C:\\Python") == {}
    hit = tree.lookup("C:\\Python", "vcruntime140_1.dll")  # Windows ignores case; Linux not
    assert hit is not None and isinstance(hit[1], HostFile)
    assert tree.lookup("C:\\Python", "msvcp140.dll") is None
    asked: list[str] = []
    monkeypatch.setattr(os.path, "isfile", lambda path: asked.append(path) or False)
    (tmp_path / "plain-file").write_text("x")
    tree.mount_host_dir("C:\\Missing", str(tmp_path / "no-such-folder"))
    tree.mount_host_dir("C:\\NotAFolder", str(tmp_path / "plain-file"))
    assert tree.lookup("C:\\Missing", "x.dll") is None
    assert tree.lookup("C:\\NotAFolder", "x.dll") is None
    assert asked == []  # only a folder that denies listing is asked file by file
