"""Which of the folders torch forgets ``ensure()`` really registers: only safe, needed ones.

A folder torch does not register itself is registered only when

1. it lies inside the environment: ``sys.prefix``, ``sys.exec_prefix``, a site folder or the
   user base. A RECORD entry pointing elsewhere (``C:\\Users\\Public\\Downloads``, a folder every
   user can write) never becomes a DLL search folder: that would open a DLL-planting hole;
2. plain ``import torch`` (only torch's own folders) misses a DLL the folder holds: a folder
   nothing needs is never added to the search; and
3. registering it makes no DLL name bind to another copy than plain ``import torch`` binds.
   Registered folders are searched before System32, so the ``msvc-runtime`` wheel's
   ``msvcp140.dll`` 14.34 at a venv's root would otherwise replace System32's 14.44 and create
   the very failure torchguard reports.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterable, Sequence

from torchguard._platforms.windows.loader import MISSING
from torchguard._platforms.windows.simulate import ImportSimulation
from torchguard._platforms.windows.system import Interpreter
from torchguard._platforms.windows.tree import WinTree, is_within, path_key, same_path
from torchguard._report.report import DllDirectory


def environment_roots(interpreter: Interpreter) -> tuple[str, ...]:
    """The folders that belong to this environment."""
    roots = [interpreter.prefix, interpreter.exec_prefix, *interpreter.site_dirs]
    if interpreter.userbase:
        roots.append(interpreter.userbase)
    return tuple(root for root in roots if root and ntpath.isabs(root))


def inside(path: str, roots: Iterable[str]) -> bool:
    return any(same_path(path, root) or is_within(path, root) for root in roots)


def missing_leaves(simulation: ImportSimulation) -> set[str]:
    """Lower-case names of the DLLs the replay cannot find (static imports only)."""
    return {
        failure.leaf.lower()
        for load in simulation.loads
        for failure in load.final_failures()
        if failure.kind == MISSING and not failure.delay
    }


def needed(
    candidates: Sequence[DllDirectory],
    plain: ImportSimulation,
    tree: WinTree,
    interpreter: Interpreter,
) -> list[DllDirectory]:
    """The candidates inside the environment that hold a DLL plain ``import torch`` misses."""
    missing = missing_leaves(plain)
    if not missing:
        return []
    roots = environment_roots(interpreter)
    return [
        folder
        for folder in candidates
        if inside(folder.path, roots) and missing & set(tree.listdir(folder.path))
    ]


def bindings(simulation: ImportSimulation) -> dict[str, str]:
    """Each DLL name the replay binds -> the first copy it binds."""
    bound: dict[str, str] = {}
    for load in simulation.loads:
        for name, resolution in load.modules.items():
            if resolution.path is not None:
                bound.setdefault(name, resolution.path)
    return bound


def rebinding(
    plain: ImportSimulation, guarded: ImportSimulation, extras: Sequence[DllDirectory]
) -> list[DllDirectory]:
    """The extra folders through which a name binds to another copy than plain import's."""
    before = bindings(plain)
    by_folder = {path_key(folder.path): folder for folder in extras}
    culprits: list[DllDirectory] = []
    for name, path in bindings(guarded).items():
        earlier = before.get(name)
        if earlier is None or same_path(earlier, path):
            continue
        folder = by_folder.get(path_key(ntpath.dirname(path)))
        if folder is not None and folder not in culprits:
            culprits.append(folder)
    return culprits
