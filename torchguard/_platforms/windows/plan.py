"""Plan the DLL directories to register, each with its provenance.

First the directories the installed torch version registers itself (its list changed across
releases: failure-catalog.md section 2), then the ones it forgets: ``userbase\\Library\\bin``
before 2.3.1, ``sys.exec_prefix\\bin`` before 2.7, and the DLL folders of installed companion
distributions (mkl or intel-openmp installed with ``--target``, ``nvidia-*`` wheels ...).
Never PATH, never the current directory, never a relative or missing path: registering a
directory must not open a DLL-planting hole.
"""

from __future__ import annotations

import ntpath
from collections.abc import Sequence

from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.locate import TorchInstall
from torchguard._platforms.windows.system import Interpreter
from torchguard._platforms.windows.tree import WinTree, join, path_key
from torchguard._report.report import DllDirectory


def _release(version: str) -> tuple[int, ...]:
    """``(2, 4, 1)`` for ``2.4.1+cu121``; ``()`` when the version cannot be parsed."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:
        return ()


class _Planner:
    """Collects directories, dropping duplicates, relative, missing and current-directory paths."""

    def __init__(self, tree: WinTree, cwd: str | None) -> None:
        self.tree = tree
        self.cwd = path_key(cwd) if cwd else None
        self.planned: list[DllDirectory] = []

    def add(self, path: str | None, provenance: str, by_torch: bool) -> None:
        if not path or not ntpath.isabs(path) or not ntpath.splitdrive(path)[0]:
            return
        path = ntpath.normpath(path)
        key = path_key(path)
        if key == self.cwd or any(path_key(d.path) == key for d in self.planned):
            return
        if self.tree.is_dir(path):
            self.planned.append(DllDirectory(path, provenance, by_torch))


def plan_directories(
    tree: WinTree,
    interpreter: Interpreter,
    torch: TorchInstall,
    companion_dists: Sequence[InstalledDist],
    *,
    cwd: str | None = None,
) -> list[DllDirectory]:
    """The directories ``ensure()`` registers, torch's own first."""
    version = _release(torch.version)
    plan = _Planner(tree, cwd)
    plan.add(torch.lib_dir, "torch\\lib (registered by torch)", True)
    plan.add(
        join(interpreter.exec_prefix, "Library", "bin"),
        "sys.exec_prefix\\Library\\bin (registered by torch; conda, mkl and intel-openmp wheels)",
        True,
    )
    if interpreter.in_venv:
        plan.add(
            join(interpreter.base_exec_prefix, "Library", "bin"),
            "sys.base_exec_prefix\\Library\\bin (registered by torch in a venv)",
            True,
        )
    if interpreter.userbase:
        plan.add(
            join(interpreter.userbase, "Library", "bin"),
            "user base Library\\bin (pip --user installs of mkl, intel-openmp)"
            + (" (registered by torch)" if version >= (2, 3, 1) else "; torch < 2.3.1 forgets it"),
            version >= (2, 3, 1),
        )
    plan.add(
        join(interpreter.exec_prefix, "bin"),
        "sys.exec_prefix\\bin (intel-pti and similar wheels)"
        + (" (registered by torch)" if version >= (2, 7) else "; torch < 2.7 forgets it"),
        version >= (2, 7),
    )
    _cuda_fallbacks(plan, interpreter, torch)
    for dist in companion_dists:
        for folder in dist.dll_dirs():
            plan.add(folder, f"DLL folder of the installed {dist.name} {dist.version}", False)
    return plan.planned


def _cuda_fallbacks(plan: _Planner, interpreter: Interpreter, torch: TorchInstall) -> None:
    """torch's own NVTX and CUDA_PATH fallbacks, taken only when its folders lack the DLLs."""
    env = {k.upper(): v for k, v in interpreter.environ.items()}
    names = {name for d in plan.planned for name in plan.tree.names(d.path)}
    program_files = env.get("PROGRAMFILES", "C:\\Program Files")
    if "nvtoolsext64_1.dll" not in names:
        base = env.get("NVTOOLSEXT_PATH") or join(program_files, "NVIDIA Corporation", "NvToolsExt")
        plan.add(join(base, "bin", "x64"), "NVTX folder (registered by torch)", True)
    if torch.cuda and not any(n.startswith("cudart64") and n.endswith(".dll") for n in names):
        major_minor = "_".join(torch.cuda.split(".")[:2])
        base = env.get(f"CUDA_PATH_V{major_minor}") or join(
            program_files, "NVIDIA GPU Computing Toolkit", "CUDA", f"v{torch.cuda}"
        )
        plan.add(
            join(base, "bin"), f"CUDA {torch.cuda} toolkit bin (torch's CUDA_PATH fallback)", True
        )
