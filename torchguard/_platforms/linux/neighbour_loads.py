"""A neighbour's library loaded into a process, in one import order, then what it loads by name.

The same replay as ``import torch``: :meth:`Ldso.dlopen` of the library (its ``DT_NEEDED``
entries searched and bound as glibc does, reusing what is loaded), then each exact CUDA name in
its ``.rodata`` resolved as its own later ``dlopen`` would be (:meth:`Ldso.late_load`). Run on
the state torch's import left ("torch first") and on a process without torch ("alone"), the two
outcomes say which order works.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchguard._facts.neighbours import LATE_FAMILIES
from torchguard._platforms.linux.late_loads import LateFacts
from torchguard._platforms.linux.ldso import Ldso
from torchguard._platforms.linux.ldso_types import LoadError


@dataclass(frozen=True)
class LateName:
    name: str
    path: str | None
    """Where it lands (None: nowhere)."""
    via: str


@dataclass(frozen=True)
class Order:
    """One import order's outcome."""

    error: LoadError | None
    """Why the library itself does not load (None: it loads)."""
    late: tuple[LateName, ...] = ()
    loaded_from: tuple[tuple[str, str], ...] = ()
    """(soname, path) of what its ``DT_NEEDED`` entries bound to that was already loaded."""


def replay_order(ldso: Ldso, library: str, facts: LateFacts, globals_: Sequence[str] = ()) -> Order:
    """Load ``library`` into ``ldso``'s process (kept there, as the real process keeps it),
    after each of ``globals_`` (full paths) ``RTLD_GLOBAL``, as the package loads them first:
    one that fails is the library's failure."""
    for path in globals_:
        first = ldso.dlopen(path, global_=True)
        if not first.ok:
            return Order(first.error)
    before = {id(o) for o in ldso.objects}
    result = ldso.dlopen(library)
    if not result.ok or result.root is None:
        return Order(result.error)
    root = result.root
    reused = tuple(
        (dep.facts.soname or dep.path, dep.path)
        for dep in root.deps
        if id(dep) in before and dep.facts.soname
    )
    names = sorted(
        {n for family in LATE_FAMILIES for n in facts.dlopen_facts(library, family).names}
    )
    late = []
    for name in names:
        load = ldso.late_load(name, root)
        late.append(LateName(name, load.path, load.via))
    return Order(None, tuple(late), reused)
