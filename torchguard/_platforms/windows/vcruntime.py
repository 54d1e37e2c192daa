"""A package that loads its own old ``msvcp140.dll`` before torch does (PyQt5's ``Qt5\\bin``).

The loader binds every later by-name import of ``msvcp140.dll`` to the copy loaded first. PyQt5
5.15 ships 14.26 beside ``Qt5Core.dll``, which imports it; ``import PyQt5.QtCore`` before
``import torch`` makes torch >= 2.9 (built with the 14.4x toolset, which changed ``std::mutex``)
fail to initialise ``c10.dll`` (WinError 1114). torch first works: Qt then binds to the newer
copy torch loaded. Loading System32's newer copy by full path before that package is imported
has the same effect, which ``ensure()`` can do.
"""

from __future__ import annotations

import ntpath
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.image import PEFacts
from torchguard._platforms.windows.initialise import MSVCP140 as RUNTIME
from torchguard._platforms.windows.initialise import (
    MUTEX_CHANGE,
    may_need_new_mutex,
    needs_new_mutex,
)
from torchguard._platforms.windows.openmp import Brief
from torchguard._platforms.windows.simulate import ImportSimulation
from torchguard._platforms.windows.tree import join, path_key

Facts = Callable[[str], PEFacts]


@dataclass(frozen=True)
class StaleCopy:
    """A distribution's own ``msvcp140.dll``, older than torch's toolset, that it loads."""

    path: str
    dist: str
    version: tuple[int, int, int, int]
    importer: str
    """A binary of the same distribution that imports it by name (what loads it)."""


def toolset(simulation: ImportSimulation, facts: Facts, package_dir: str) -> tuple[int, int] | None:
    """The newest MSVC 14.x linker version among torch's own binaries that load."""
    newest: tuple[int, int] | None = None
    for _, binary in _own_binaries(simulation, facts, package_dir):
        linker = binary.linker_version
        if linker[0] == 14 and (newest is None or linker > newest):
            newest = linker
    return newest


@dataclass(frozen=True)
class MutexEvidence:
    """What torch's own import tables say about the ``std::mutex`` change."""

    proven: str | None
    """A binary proven to fail on an ``msvcp140.dll`` older than 14.40, or None."""
    undecided: str | None
    """A binary whose import table cannot decide (it imports ``_Mtx_init_in_situ`` too)."""


def mutex_evidence(simulation: ImportSimulation, facts: Facts, package_dir: str) -> MutexEvidence:
    """The first of torch's own loaded binaries that proves the need, and the first that
    leaves it undecided (:mod:`torchguard._platforms.windows.initialise`)."""
    proven: str | None = None
    undecided: str | None = None
    for path, binary in _own_binaries(simulation, facts, package_dir):
        if proven is None and needs_new_mutex(binary):
            proven = path
        if undecided is None and may_need_new_mutex(binary):
            undecided = path
    return MutexEvidence(proven, undecided)


def _own_binaries(
    simulation: ImportSimulation, facts: Facts, package_dir: str
) -> Iterator[tuple[str, PEFacts]]:
    """torch's own binaries that load (each once, readable), in load order."""
    seen: set[str] = set()
    below = path_key(package_dir).rstrip("\\") + "\\"  # :func:`is_within`, keyed once
    for load in simulation.loads:
        for name, resolution in load.modules.items():
            path = resolution.path
            if name in seen or path is None or not path_key(path).startswith(below):
                continue
            seen.add(name)
            try:
                yield path, facts(path)
            except ImageUnavailable:
                continue


def too_old(version: tuple[int, ...], needed: tuple[int, int]) -> bool:
    """Whether a 14.x runtime predates the std::mutex change a 14.40+ toolset relies on."""
    return version[0] == 14 and needed >= MUTEX_CHANGE and tuple(version[:2]) < MUTEX_CHANGE


def stale_copies(briefs: Sequence[Brief], needed: tuple[int, int] | None) -> list[StaleCopy]:
    """Each distribution's own too-old ``msvcp140.dll`` that one of its binaries imports."""
    if needed is None:
        return []
    found: list[StaleCopy] = []
    for brief in briefs:
        version = brief.file_version
        if brief.dist is None or ntpath.basename(brief.path).lower() != RUNTIME:
            continue
        if version is None or not too_old(version, needed):
            continue
        importer = _loader(briefs, brief.dist)
        if importer is not None:
            found.append(StaleCopy(brief.path, brief.dist, version, importer))
    return found


def system_copy(
    system32: str,
    facts: Facts,
    stale: Sequence[StaleCopy],
    needed: tuple[int, int] | None,
    loaded: dict[str, str],
) -> str | None:
    """System32's ``msvcp140.dll`` when loading it first prevents every stale copy: none is
    loaded yet, and it is readable, newer than each of them and new enough for torch."""
    if not stale or needed is None or RUNTIME in loaded:
        return None
    path = join(system32, RUNTIME)
    try:
        version = facts(path).file_version
    except ImageUnavailable:
        return None  # assumed, missing or unreadable: nothing known to be newer
    if version is None or too_old(version, needed):
        return None
    if not all(version > copy.version for copy in stale):
        return None
    return path


def _loader(briefs: Sequence[Brief], dist: str) -> str | None:
    """The binary of ``dist`` that imports the runtime and that its other binaries import the
    most: the one importing the package loads (PyQt5-Qt5's ``Qt5Core.dll``, which every Qt
    module imports, not the first of its 20 importers, ``Qt5Bluetooth.dll``)."""
    own = [b for b in briefs if b.dist == dist]
    importers = [b for b in own if RUNTIME in (n.lower() for n in b.imports)]
    if not importers:
        return None
    used = Counter(name.lower() for b in own for name in b.imports)
    return max(importers, key=lambda b: used[ntpath.basename(b.path).lower()]).path
