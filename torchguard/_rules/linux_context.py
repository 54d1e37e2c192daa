"""Everything a Linux rule may look at: the ld.so replay and the facts read for it, once.

The pipeline reads files (RECORDs, ``.nv_fatbin`` sections, the driver, ``WHEEL`` tags,
bitsandbytes' folder) and runs the loader model (torch's neighbours replayed after it and
without it); rules only look at what it read. A fact the pipeline had no reason to read stays
empty: the driver of a CPU build, the late loads of an import that fails.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.bitsandbytes import Install
from torchguard._facts.wheel_tags import Interpreter
from torchguard._platforms.linux.late_loads import Late
from torchguard._platforms.linux.ldso import IgnoredPreload, LateLoad, LoadError, SharedObject
from torchguard._platforms.linux.neighbour_loads import Order
from torchguard._platforms.linux.neighbours import Neighbour
from torchguard._platforms.linux.simulate import LinuxImport
from torchguard._report.findings import Finding
from torchguard._rules.linux_driver_facts import LinuxDriverFacts
from torchguard._rules.linux_hints import LinuxHints


def _same_path(a: str, b: str) -> bool:
    return a == b


@dataclass(frozen=True)
class ExtensionLoad:
    """A package binary that links torch and failed to load into the process torch left."""

    package: str
    path: str
    error: LoadError


@dataclass(frozen=True)
class WheelTags:
    """Each distribution in the real site folders as (name, version, ``WHEEL`` text)."""

    interpreter: Interpreter
    """The interpreter their tags must fit."""
    rows: tuple[tuple[str, str, str | None], ...]


@dataclass(frozen=True)
class Bitsandbytes:
    """The bitsandbytes Python would import, against a CUDA build of torch."""

    install: Install
    cuda: tuple[int, int]
    """torch's CUDA version."""
    override: str | None
    """``BNB_CUDA_VERSION`` (live only)."""


@dataclass(frozen=True)
class NeighbourReplay:
    """One native neighbour's library loaded after torch and in a process without it."""

    neighbour: Neighbour
    after: Order
    solo: Order
    objects: tuple[SharedObject, ...]
    """The process's objects once ``after`` ran (what a failure's hints may name)."""


@dataclass(frozen=True)
class LinuxContext:
    replay: LinuxImport
    """``import torch`` replayed on the ld.so model."""
    hints: LinuxHints
    torch_version: str
    cuda: str | None = None
    objects: Sequence[SharedObject] = ()
    """Every object the process holds after the replay (the interpreter's included)."""
    ignored_preloads: Sequence[IgnoredPreload] = ()
    conflicts: Mapping[str, tuple[tuple[str, ...], str | None]] = field(default_factory=dict)
    """Shared object path -> (the distributions that claim it, whose bytes are on disk)."""
    gpus: tuple[str, ...] = ()
    python: tuple[int, int] | None = None
    """The interpreter's version, for builds that must have its wheels."""
    siblings: Callable[[], tuple[tuple[str, str], ...]] = tuple
    """torchvision and torchaudio installed beside torch (read only for a finding)."""
    driver_shown: str | None = None
    """The driver as the CPU-build warning names it (None: no driver)."""
    driver: LinuxDriverFacts | None = None
    """The machine's NVIDIA driver (None: torch is no CUDA build, so not asked)."""
    torch_archs: FatbinArchs | None = None
    """``libtorch_cuda.so``'s kernels (None: unread, absent, or no named GPU to judge)."""
    extension_archs: Mapping[str, FatbinArchs] = field(default_factory=dict)
    """Package -> the union of its binaries' kernels (packages with kernels of their own)."""
    loaded: Sequence[SharedObject] = ()
    """What ``import torch`` loaded (the process's earlier objects left out)."""
    pinned: Mapping[str, str] = field(default_factory=dict)
    """soname -> the copy torch's NVIDIA wheels ship (empty unless torch imports)."""
    same_file: Callable[[str, str], bool] = _same_path
    owner: Callable[[str], str | None] | None = None
    """The distribution whose RECORD lists a path (None: none does)."""
    late: Sequence[Late] = ()
    """Libraries loaded by name at first use (empty unless torch imports)."""
    driver_load: LateLoad | None = None
    """Where CUDA's ``dlopen("libcuda.so.1")`` lands (None: not asked, or no such load)."""
    driver_lacks: Sequence[str] = ()
    """The driver entry points that library lacks."""
    pins: Sequence[tuple[str, str, str | None]] = ()
    """torch's neighbours from metadata: (name, version, torch requirement)."""
    extension_loads: Sequence[ExtensionLoad] = ()
    claim: Callable[[Finding, str, str], Finding] | None = None
    """An extension's failed load as its package's consequence (None: as it is)."""
    used: Sequence[SharedObject] = ()
    """What torch and its extensions loaded, and what those use: checked for unread objects."""
    python_cmd: str = "python3"
    """The interpreter's file name, as a repair's pip command names it."""
    wheel_tags: WheelTags | None = None
    """None: not read (offline, the Python is inferred from torch's own tag)."""
    bitsandbytes: Bitsandbytes | None = None
    """None: no bitsandbytes installed, or torch is no CUDA build."""
    neighbours: Sequence[NeighbourReplay] = ()
    """torch's native neighbours replayed (empty unless torch imports)."""
