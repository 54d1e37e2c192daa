"""The house rules: data flows one way through torchguard's packages.

Each module's imports (module level and inside functions alike) are read with ``ast``; a module
may import its own package and any lower floor, never a higher one. Each platform is a room
under ``_platforms/`` (``linux`` beside ``windows``): a platform room never imports another's,
and the neutral rooms (``_facts``, ``_binary``, ``_report``) import none. The top of the
package holds only the public face, the boot files, the version and rooms: at most 12 entries.
Each rule is a function of names, and a planted violation shows it can fail.
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


def _upward(here: str, names: list[str]) -> list[str]:
    """The imports among ``names`` that a module of room ``here`` makes to a higher floor."""
    found = []
    for name in names:
        if not name.startswith("torchguard.") or name == "torchguard.__version__":
            continue
        there = _room(name)
        if there.startswith("__") and there not in {"__init__", "__main__"}:
            continue  # a dunder attribute of the package, e.g. __all__
        if _floor(there) > _floor(here):
            found.append(name)
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _dotted(p))
def test_no_import_runs_up_a_floor(path: Path) -> None:
    here = _room(_dotted(path))
    upward = _upward(here, _imports(path))
    assert upward == [], f"{_dotted(path)} (floor {_floor(here)}) imports {upward}"


def test_a_planted_upward_import_is_caught() -> None:
    """The report's renderer once asked the Windows console for colour (now the front
    doors' ``_frontends.colour``): that arrow runs up from the report to a platform."""
    planted = ["torchguard._platforms.windows.live", "torchguard._binary.demangle"]
    assert _upward("_report", planted) == ["torchguard._platforms.windows.live"]
    assert _upward("_binary", ["torchguard._report.report"]) == ["torchguard._report.report"]
    assert _upward("_rules", ["torchguard._frontends.pipeline"]) == [
        "torchguard._frontends.pipeline"
    ]
    assert _upward("_frontends", planted) == []


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
                    path.name in ("cache.py", "memo.py")  # files stamped with the version
                    and name == "torchguard._version"
                ), f"{_dotted(path)} imports {name}"


#: Each folder under ``torchguard/_platforms/`` is one platform's room (a third platform is
#: one more folder); the neutral rooms serve every platform.
NEUTRAL_ROOMS = frozenset({"_version", "_facts", "_binary", "_report", "_platforms"})


def _is_platform(room: str) -> bool:
    return room.startswith("_platforms.")


def test_the_platform_rooms_are_windows_and_linux() -> None:
    found = {_room(_dotted(path)) for path in _modules()}
    assert {room for room in found if _is_platform(room)} == {
        "_platforms.windows",
        "_platforms.linux",
    }


def _platform_arrows(here: str, names: list[str]) -> list[str]:
    """The rooms a module of room ``here`` must not import among ``names``: a platform room
    never imports another platform's, a neutral room imports no platform room; facts both
    platforms need live in a neutral room (``_facts``), not in one of them."""
    if not _is_platform(here) and here not in NEUTRAL_ROOMS:
        return []
    return [
        n
        for n in names
        if n.startswith("torchguard.") and _is_platform(_room(n)) and _room(n) != here
    ]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _dotted(p))
def test_platform_rooms_import_neither_each_other_nor_from_neutral_rooms(path: Path) -> None:
    arrows = _platform_arrows(_room(_dotted(path)), _imports(path))
    assert arrows == [], f"{_dotted(path)} imports {arrows}"


def test_a_planted_platform_arrow_is_caught() -> None:
    """The check can fail: the import the GPU facts' move removed is reported again."""
    planted = ["torchguard._platforms.windows.gpus", "torchguard._facts.gpus"]
    assert _platform_arrows("_platforms.linux", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_facts", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_report", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_platforms.windows", ["torchguard._platforms.linux.ldso"]) == [
        "torchguard._platforms.linux.ldso"
    ]
    assert _platform_arrows("_platforms.windows", planted) == []
    assert _platform_arrows("_platforms.rocm", planted) == ["torchguard._platforms.windows.gpus"]
    assert _platform_arrows("_rules", planted) == []


def test_only_the_live_module_touches_the_windows_api() -> None:
    live = PACKAGE / "_platforms" / "windows" / "live.py"
    # Linux: glibc's ld.so is asked for its search list, only in a process that overwrote
    # its start-up environment (issue 21)
    loader = PACKAGE / "_platforms" / "linux" / "searchlist.py"
    # the verdict memo's Windows seam: what a hooked import torch reads without the analysis
    seam = PACKAGE / "_binary" / "winapi.py"
    for path in _modules():
        roots = {name.split(".")[0] for name in _imports(path)}
        if path == loader:
            roots -= {"ctypes"}
        if path not in (live, seam):
            assert not roots & OS_APIS, f"{_dotted(path)} imports {sorted(roots & OS_APIS)}"
    assert {name.split(".")[0] for name in _imports(live)} & OS_APIS
    assert {name.split(".")[0] for name in _imports(seam)} - {"typing"} == {  # typing: checkers
        "ctypes",
        "os",
        "sys",
        "winreg",
    }
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


#: What may stand at the top of the package: the public face, ``python -m torchguard``, the
#: start-up watcher (``_boot``: the ``.start`` file's target) and the guard it calls (``_hook``:
#: installed boot copies of earlier releases import ``torchguard._hook.run_guard``), the
#: version and the typing marker. Everything else lives in a room.
TOP_FILES = frozenset(
    {"__init__.py", "__main__.py", "_boot.py", "_hook.py", "_version.py", "py.typed"}
)
MAX_TOP_ENTRIES = 12


def _top_level_faults(entries: list[str], folders: set[str]) -> list[str]:
    """What is wrong with a package top level of ``entries`` (``folders``: those that are
    folders): a loose module, a folder on no floor, or more than :data:`MAX_TOP_ENTRIES`."""
    faults = [e for e in entries if e not in folders and e not in TOP_FILES]
    for folder in sorted(folders):
        if not any(folder in rooms for rooms in FLOORS):
            faults.append(f"{folder}/ is on no floor")
    if len(entries) > MAX_TOP_ENTRIES:
        faults.append(f"{len(entries)} entries, at most {MAX_TOP_ENTRIES}")
    return faults


def _top_level() -> tuple[list[str], set[str]]:
    entries = sorted(
        p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")
    )
    return entries, {e for e in entries if (PACKAGE / e).is_dir()}


def test_the_top_level_holds_only_the_face_the_boot_files_and_rooms() -> None:
    entries, folders = _top_level()
    assert _top_level_faults(entries, folders) == [], entries


def test_a_planted_top_level_module_or_room_is_caught() -> None:
    entries, folders = _top_level()
    assert _top_level_faults([*entries, "_api.py"], folders)[0] == "_api.py"
    assert "_model/ is on no floor" in _top_level_faults([*entries, "_model"], {*folders, "_model"})
    crowded = [*entries, *(f"_room{i}" for i in range(MAX_TOP_ENTRIES - len(entries) + 1))]
    assert _top_level_faults(crowded, {*folders, *crowded} - TOP_FILES) == [
        f"_room{i}/ is on no floor" for i in range(MAX_TOP_ENTRIES - len(entries) + 1)
    ] + [f"{MAX_TOP_ENTRIES + 1} entries, at most {MAX_TOP_ENTRIES}"]


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
