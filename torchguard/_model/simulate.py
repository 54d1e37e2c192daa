"""Replay what ``import torch`` does on Windows, on top of the loader model.

torch preloads every ``torch\\lib\\*.dll`` in glob order with ``LoadLibraryExW(..., 0x1100)``
and raises on the first failure, naming that DLL ("Error loading "...\\fbgemm.dll" or one of its
dependencies"). On WinError 126 it first retries once with legacy ``LoadLibraryW`` after
prepending its folders to PATH, which also searches python.exe's folder, System32 and PATH.
Then Python imports ``torch\\_C*.pyd`` with the same flags. Unlike torch, the replay does not
stop at the first failure, so every problem is found in one run.
"""

from __future__ import annotations

import ntpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from torchguard._model.loader import (
    APP_DIR,
    MISSING,
    PATH_FALLBACK,
    SYSTEM32,
    LoaderModel,
    LoadResult,
    Resolution,
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
    ntfs_order: bool = True,
) -> ImportSimulation:
    """Replay torch's preload loop, its PATH fallback, then the ``_C`` extension import."""
    simulation = ImportSimulation()
    for root in preload_order(model.tree, lib_dir, ntfs=ntfs_order):
        result = model.load(root)
        if not result.ok and result.winerror == 126:
            found = _path_fallback(model, result, path_dirs)
            if found is not None:
                for resolution in found:
                    if resolution.path:
                        model.loaded.setdefault(resolution.name.lower(), resolution.path)
                retry = model.load(root)
                if retry.ok:
                    simulation.fallbacks[root] = found
                else:
                    result.retry = retry
        simulation.loads.append(result)
    for extension in extensions:
        simulation.loads.append(model.load(extension))
    return simulation


def _path_fallback(
    model: LoaderModel, result: LoadResult, path_dirs: Sequence[str]
) -> list[Resolution] | None:
    """Where legacy ``LoadLibraryW`` finds each missing DLL, or None if one stays missing."""
    folders = [(model.app_dir, APP_DIR), (model.system32, SYSTEM32)]
    folders += [(folder, PATH_FALLBACK) for folder in (*model.user_dirs, *path_dirs)]
    found: list[Resolution] = []
    for failure in result.failures:
        if failure.delay:
            continue
        if failure.kind != MISSING:
            return None
        hit = next(
            (
                Resolution(failure.leaf, ntpath.join(folder, entry[0]), via)
                for folder, via in folders
                if (entry := model.tree.lookup(folder, failure.leaf))
            ),
            None,
        )
        if hit is None:
            return None
        found.append(hit)
    return found
