"""Replay what ``import torch`` does on Windows, on top of the loader model.

torch preloads every ``torch\\lib\\*.dll`` in glob order with ``LoadLibraryExW(..., 0x1100)``
and raises on the first failure, naming that DLL ("Error loading "...\\fbgemm.dll" or one of its
dependencies"). On WinError 126 it first retries once with legacy ``LoadLibraryW`` after
prepending its folders to PATH: the standard search order (python.exe's folder, System32, the
Windows folder, the current directory, then PATH), without ``os.add_dll_directory`` folders.
When that retry loads, the first attempt's failure never reaches the user: the retry is what
the replay keeps. Then Python imports ``torch\\_C*.pyd`` with the same flags as the preload.
Unlike torch, the replay does not stop at the first failure, so every problem is found in one
run.
"""

from __future__ import annotations

import ntpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from torchguard._platforms.windows.loader import (
    MISSING,
    LoaderModel,
    LoadResult,
    Resolution,
    legacy_order,
    preload_order,
)
from torchguard._report.report import ImportOutcome


@dataclass
class ImportSimulation:
    """Every load torch's import performs, in order, and which needed the PATH fallback."""

    loads: list[LoadResult] = field(default_factory=list)
    fallbacks: dict[str, list[Resolution]] = field(default_factory=dict)

    def failed(self) -> list[LoadResult]:
        return [load for load in self.loads if not load.ok and load.root not in self.fallbacks]

    def outcome(self) -> ImportOutcome:
        """What the real ``import torch`` reports: the first failing load, as torch names it."""
        failed = self.failed()
        if not failed:
            return ImportOutcome(True)
        first = failed[0]
        return ImportOutcome(False, first.winerror, ntpath.basename(first.root))


def simulate_import(
    model: LoaderModel,
    lib_dir: str,
    extensions: Sequence[str],
    path_dirs: Sequence[str] = (),
    *,
    torch_paths: Sequence[str] = (),
    cwd: str | None = None,
    ntfs_order: bool = True,
) -> ImportSimulation:
    """Replay torch's preload loop, its PATH retry, then the ``_C`` extension import.

    ``path_dirs``: the process's PATH; ``torch_paths``: the folders torch prepends to it
    before the retry; ``cwd``: the current directory (None when unknown, offline).
    """
    simulation = ImportSimulation()
    legacy = legacy_order(model, (*torch_paths, *path_dirs), cwd=cwd)
    for root in preload_order(model.tree, lib_dir, ntfs=ntfs_order):
        result = model.load(root)
        if not result.ok and result.winerror == 126:
            retry = model.load(root, legacy)
            if retry.ok:
                simulation.fallbacks[root] = _found_by_retry(result, retry)
                result = retry  # torch never reports the first attempt
            else:
                result.retry = retry
        simulation.loads.append(result)
    for extension in extensions:
        simulation.loads.append(model.load(extension))
    return simulation


def _found_by_retry(first: LoadResult, retry: LoadResult) -> list[Resolution]:
    """Where the retry found each DLL the first attempt missed."""
    found: list[Resolution] = []
    for failure in first.failures:
        if failure.kind != MISSING or failure.delay:
            continue
        resolution = retry.modules.get(failure.leaf.lower())
        if resolution is not None and resolution.path is not None and resolution not in found:
            found.append(resolution)
    return found
