from __future__ import annotations

import pytest

from torchguard._platforms.windows.dists import find_dists
from torchguard._platforms.windows.locate import companions, locate_torch
from torchguard._platforms.windows.plan import plan_directories
from torchguard._platforms.windows.system import Interpreter
from torchguard._platforms.windows.tree import AssumedFile, MemoryFile, WinTree

VENV = "C:\\proj\\.venv"
BASE = "C:\\Python311"
USERBASE = "C:\\Users\\me\\AppData\\Roaming\\Python"
SITE = f"{VENV}\\Lib\\site-packages"


def tree_with(*folders: str) -> WinTree:
    tree = WinTree()
    tree.add_file(f"{SITE}\\torch\\__init__.py", MemoryFile(b"", "init"))
    tree.add_file(f"{SITE}\\torch\\lib\\c10.dll", AssumedFile("t"))
    for folder in folders:
        tree.add_file(f"{folder}\\x.dll", AssumedFile("t"))
    return tree


def interpreter() -> Interpreter:
    return Interpreter(
        version=(3, 11),
        machine=0x8664,
        executable=f"{VENV}\\Scripts\\python.exe",
        prefix=VENV,
        exec_prefix=VENV,
        base_exec_prefix=BASE,
        userbase=USERBASE,
        app_dir=BASE,
        site_dirs=(SITE,),
    )


def plan_for(version: str, *folders: str, cwd: str | None = None) -> list[tuple[str, bool]]:
    tree = tree_with(*folders)
    tree.add_file(f"{SITE}\\torch-{version}.dist-info\\METADATA", MemoryFile(b"Name: torch\n", "m"))
    dists = find_dists(tree, [SITE])
    torch = locate_torch(tree, f"{SITE}\\torch", dists)
    plan = plan_directories(tree, interpreter(), torch, companions(dists), cwd=cwd)
    return [(d.path, d.by_torch) for d in plan]


ALL = (
    f"{VENV}\\Library\\bin",
    f"{BASE}\\Library\\bin",
    f"{USERBASE}\\Library\\bin",
    f"{VENV}\\bin",
)


@pytest.mark.parametrize(
    ("version", "by_torch"),
    [
        ("2.3.0", [True, True, True, False, False]),
        ("2.3.1", [True, True, True, True, False]),
        ("2.7.0", [True, True, True, True, True]),
    ],
)
def test_torch_registers_more_folders_over_time(version: str, by_torch: list[bool]) -> None:
    plan = plan_for(version, *ALL)
    assert [p for p, _ in plan] == [f"{SITE}\\torch\\lib", *ALL]
    assert [b for _, b in plan] == by_torch


def test_missing_folders_and_the_current_directory_are_never_planned() -> None:
    plan = plan_for("2.7.0", f"{VENV}\\bin", cwd=f"{VENV}\\BIN")
    assert [p for p, _ in plan] == [f"{SITE}\\torch\\lib"]


def test_cuda_path_fallback_only_without_cudart() -> None:
    tree = tree_with()
    tree.add_file(
        f"{SITE}\\torch\\version.py", MemoryFile(b"__version__='2.4.1+cu121'\ncuda='12.1'\n", "v")
    )
    toolkit = "D:\\CUDA\\v12.1"
    tree.add_file(f"{toolkit}\\bin\\cudart64_12.dll", AssumedFile("t"))
    env_interp = Interpreter(**{**interpreter().__dict__, "environ": {"CUDA_PATH_V12_1": toolkit}})
    torch = locate_torch(tree, f"{SITE}\\torch", [])
    assert torch.cuda == "12.1" and torch.variant == "cu121"
    plan = plan_directories(tree, env_interp, torch, [])
    assert f"{toolkit}\\bin" in [d.path for d in plan]
    tree.add_file(f"{SITE}\\torch\\lib\\cudart64_12.dll", AssumedFile("t"))
    assert f"{toolkit}\\bin" not in [d.path for d in plan_directories(tree, env_interp, torch, [])]


@pytest.mark.parametrize(
    ("name", "tag", "version"),
    [
        ("_C.cp311-win_amd64.pyd", "cp311", (3, 11)),
        ("_C.cp313t-win_amd64.pyd", "cp313t", (3, 13)),
        ("_C.CP39-WIN_AMD64.PYD", "cp39", (3, 9)),
        ("_C.pyd", None, None),
        ("_C.cp311-win_amd64.dll", None, None),
    ],
)
def test_extension_tags(name: str, tag: str | None, version: tuple[int, int] | None) -> None:
    from torchguard._platforms.windows.locate import extension_tag, tag_version

    assert extension_tag(name) == tag
    assert (tag_version(tag) if tag else None) == version


def test_split_local() -> None:
    from torchguard._platforms.windows.locate import split_local

    assert split_local("2.4.1+cu121") == ("2.4.1", "cu121")
    assert split_local("2.4.1") == ("2.4.1", None)
