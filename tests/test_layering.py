"""The house rules: data flows one way through torchguard's packages.

Each module's imports (module level and inside functions alike) are read with ``ast``; a module
may import its own package and any lower floor, never a higher one. A second platform adds
rooms on the same floors (``_binary/elf``; ``_platforms/linux`` beside ``_platforms/windows``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "torchguard"

# Lowest floor first. A module's room is its first dotted component under torchguard (for
# ``_platforms``, its first two: each platform is a room); a room's floor is its package's.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"_facts", "_version"}),  # vocabulary, neutral data: GPUs, CUDA, torch releases
    frozenset({"_binary"}),  # binary formats: what a file says, and the one facts cache
    frozenset({"_report"}),  # findings, the Report, exceptions and renderers
    frozenset({"_platforms"}),  # each platform: its machine described and its loader model
    frozenset({"_rules"}),  # checks and repair knowledge
    frozenset({"_frontends", "_hook", "_boot", "__init__", "__main__"}),  # the pipeline, doors
)

OS_APIS = {"ctypes", "winreg", "msvcrt", "_winapi"}
FILE_APIS = {"os", "io", "zipfile", "mmap", "pathlib", "shutil", "tempfile"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(dotted: str) -> str:
    parts = dotted.split(".")
    if len(parts) > 2 and parts[1] == "_platforms":
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(room: str) -> int:
    for index, rooms in enumerate(FLOORS):
        if room.split(".")[0] in rooms:
            return index
    raise AssertionError(f"torchguard.{room} is on no floor: add it to FLOORS")


def _imports(path: Path) -> list[str]:
    """Every module named by an import statement, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _dotted(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.append(module)
            if module == "torchguard":  # from torchguard import _x names a module
                names.extend(f"torchguard.{alias.name}" for alias in node.names)
    return names


def _calls_open(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"
        for node in ast.walk(tree)
    )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _dotted(p))
def test_no_import_runs_up_a_floor(path: Path) -> None:
    here = _room(_dotted(path))
    for name in _imports(path):
        if not name.startswith("torchguard.") or name == "torchguard.__version__":
            continue
        there = _room(name)
        if there.startswith("__") and there not in {"__init__", "__main__"}:
            continue  # a dunder attribute of the package, e.g. __all__
        assert _floor(there) <= _floor(here), (
            f"{_dotted(path)} (floor {_floor(here)}) imports {name} (floor {_floor(there)})"
        )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _dotted(p))
def test_nothing_below_the_face_imports_the_face(path: Path) -> None:
    """``from torchguard import __version__`` ran back up; ``_version`` is the ground floor."""
    if path.parent == PACKAGE and path.name in {"__init__.py", "__main__.py"}:
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torchguard" and not node.level:
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            assert private == [alias.name for alias in node.names], (
                f"{_dotted(path)} imports public names from the package face"
            )
            assert "__version__" not in private, f"{_dotted(path)}: use torchguard._version"


def test_binary_formats_import_only_the_vocabulary() -> None:
    for path in (PACKAGE / "_binary").rglob("*.py"):
        for name in _imports(path):
            if name.startswith("torchguard."):
                assert name.startswith(("torchguard._binary", "torchguard._facts.vocab")) or (
                    path.name == "cache.py" and name == "torchguard._version"
                ), f"{_dotted(path)} imports {name}"


PLATFORM_ROOMS = frozenset({"_platforms.windows", "_platforms.linux"})
NEUTRAL_ROOMS = frozenset({"_version", "_facts", "_binary", "_report", "_platforms"})


def _platform_arrows(here: str, names: list[str]) -> list[str]:
    """The rooms a module of room ``here`` must not import among ``names``: a platform room
    never imports another platform's, a neutral room imports no platform room; facts both
    platforms need live in a neutral room (``_facts``), not in one of them."""
    if here in PLATFORM_ROOMS:
        forbidden = PLATFORM_ROOMS - {here}
    elif here in NEUTRAL_ROOMS:
        forbidden = PLATFORM_ROOMS
    else:
        return []
    return [n for n in names if n.startswith("torchguard.") and _room(n) in forbidden]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _dotted(p))
def test_platform_rooms_import_neither_each_other_nor_from_neutral_rooms(path: Path) -> None:
    arrows = _platform_arrows(_room(_dotted(path)), _imports(path))
    assert arrows == [], f"{_dotted(path)} imports {arrows}"


def test_a_planted_platform_arrow_is_caught() -> None:
    """The check can fail: the import the GPU facts' move removed is reported again."""
    planted = ["torchguard._platforms.windows.gpus", "torchguard._facts.gpus"]
    assert _platform_arrows("_platforms.linux", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_facts", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_platforms.windows", planted) == []
    assert _platform_arrows("_rules", planted) == []


def test_only_the_live_module_touches_the_windows_api() -> None:
    live = PACKAGE / "_platforms" / "windows" / "live.py"
    # Linux: glibc's ld.so is asked for its search list, only in a process that overwrote
    # its start-up environment (issue 21)
    loader = PACKAGE / "_platforms" / "linux" / "searchlist.py"
    for path in _modules():
        roots = {name.split(".")[0] for name in _imports(path)}
        if path == loader:
            roots -= {"ctypes"}
        if path != live:
            assert not roots & OS_APIS, f"{_dotted(path)} imports {sorted(roots & OS_APIS)}"
    assert {name.split(".")[0] for name in _imports(live)} & OS_APIS
    assert {name.split(".")[0] for name in _imports(loader)} == {
        "__future__",
        "collections",
        "os",
        "re",
        "typing",
        "ctypes",
        "torchguard",
    }


def test_rules_never_touch_files() -> None:
    """Rules take data; the tree (``_platforms.windows.tree``) and the model read files for them."""
    for path in (PACKAGE / "_rules").rglob("*.py"):
        roots = {name.split(".")[0] for name in _imports(path)}
        assert not roots & FILE_APIS, f"{_dotted(path)} imports {sorted(roots & FILE_APIS)}"
        assert not _calls_open(path), f"{_dotted(path)} opens a file itself"


def test_every_package_folder_is_on_a_floor() -> None:
    rooms = {_room(_dotted(path)) for path in _modules()}
    for room in rooms:
        _floor(room)


# The watcher calls the guard and the guard installs the watcher. Installed ``.pth`` lines of
# earlier releases import ``torchguard._hook.run_guard``, so the guard cannot simply move out.
ALLOWED_CIRCLES = {frozenset({"torchguard._boot", "torchguard._hook"})}


def test_no_module_import_circles() -> None:
    modules = {_dotted(path): path for path in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]  # from pkg import function -> pkg
            # every submodule import runs the package's (lazy) face first: not an arrow
            if imported and imported not in {name, "torchguard"}:
                targets.add(imported)
        graph[name] = targets
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[frozenset[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(frozenset(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert set(circles) <= ALLOWED_CIRCLES, [sorted(c) for c in circles]
