"""torch's native neighbours on Windows (:data:`torchguard._facts.neighbours.KINDS`), loaded
into a process in one import order, then what they load by name.

Each neighbour's library is loaded as its package loads it: onnxruntime's CUDA provider with
``LOAD_WITH_ALTERED_SEARCH_PATH`` (its own folder, System32, the Windows folders, the current
directory, PATH), ctranslate2's by ``ctypes.CDLL`` from its ``__init__`` (the folder it adds
with ``os.add_dll_directory``). Then each CUDA DLL name kept in its data is loaded with
``LoadLibraryA`` as ctranslate2 does (a module of that name already loaded; python.exe's folder,
``%CUDA_PATH%\\bin`` when set, System32, the Windows folders, the current directory, PATH).
Run on the process ``import torch`` left ("torch first") and on a process without torch
("alone"), the two outcomes say which order works. Pure logic over the loader model.
"""

from __future__ import annotations

import ntpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from torchguard._binary.cache import FactsCache
from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.names import cuda_dll_names
from torchguard._facts.neighbours import KINDS, Kind, windows_cuda_major
from torchguard._facts.onnxruntime_preload import (
    Entry,
    agrees_with_source,
    picks_torch_lib,
    preload_list,
)
from torchguard._facts.vocab import Step
from torchguard._platforms.windows.cudnn import cudnn_version
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.loader import (
    APP_DIR,
    DLL_LOAD_DIR,
    MISSING,
    USER_DIR,
    LoaderModel,
    LoadResult,
    SearchOrder,
    legacy_order,
)
from torchguard._platforms.windows.simulate import ImportSimulation
from torchguard._platforms.windows.system import System
from torchguard._platforms.windows.tree import WinTree, join


@dataclass(frozen=True)
class Neighbour:
    kind: Kind
    version: str
    library: str
    site: str = ""
    """The site folder it is installed in (where the NVIDIA wheels' ``nvidia`` folder lies)."""


@dataclass(frozen=True)
class LateLoad:
    """One name the library loads by name, and where that load lands."""

    name: str
    path: str | None
    """Where it binds (None: found nowhere)."""
    via: Step | None
    winerror: int | None = None
    """The file is found but does not load (what it imports is missing, ...)."""


@dataclass(frozen=True)
class Order:
    """One import order's outcome."""

    load: LoadResult
    late: tuple[LateLoad, ...] = ()

    @property
    def ok(self) -> bool:
        return self.load.ok

    def missing(self) -> list[str]:
        """The DLLs the library's own load did not find (WinError 126), in load order."""
        return list(
            dict.fromkeys(f.leaf for f in self.load.failures if f.kind == MISSING and not f.delay)
        )


@dataclass(frozen=True)
class NeighbourReplay:
    """One neighbour's library loaded after torch and in a process without it."""

    neighbour: Neighbour
    after: Order
    solo: Order
    preloaded: Order | None = None
    """Without torch, after ``onnxruntime.preload_dlls()`` (None: the release has none, or
    none for its provider's CUDA major)."""
    preload_dir: str | None = None
    """The folder that ``preload_dlls()`` takes its files from here: ``torch\\lib`` when the
    release picks torch's (its version says a matching CUDA build), else None (the NVIDIA
    wheels' ``nvidia\\<part>\\bin``)."""
    torch_after_wheels: WheelsFirst | None = None
    """``import torch`` after ``preload_dlls(directory="")`` loaded the NVIDIA wheels' copies
    (None: not replayed, no NVIDIA wheel file to preload)."""


@dataclass(frozen=True)
class WheelsFirst:
    """``onnxruntime.preload_dlls()`` from the NVIDIA wheels, then ``import torch``."""

    simulation: ImportSimulation
    default_too: bool
    """Plain ``preload_dlls()`` takes the wheels too (torch's version does not say a matching
    CUDA build), not only ``directory=""``."""
    torch_cudnn: tuple[int, ...] | None
    """The cuDNN version of ``torch\\lib\\cudnn64_9.dll`` (None: none, or unread)."""
    wheel_cudnn: tuple[int, ...] | None
    """The cuDNN version of ``nvidia\\cudnn\\bin\\cudnn64_9.dll`` (None: none, or unread)."""
    torch_lib: str
    wheel_dir: str
    """``nvidia\\cudnn\\bin`` of the NVIDIA wheel."""
    cuda_major: int
    """The provider's CUDA major: the NVIDIA cuDNN wheel in ``wheel_dir`` is the one built for it
    (``nvidia-cudnn-cu12``, ``nvidia-cudnn-cu13``)."""


def find_neighbours(tree: WinTree, dists: Sequence[InstalledDist]) -> list[Neighbour]:
    """Each installed neighbour's Windows library (the first distribution of its name)."""
    found: list[Neighbour] = []
    for kind in KINDS:
        if not kind.windows:
            continue
        dist = next((d for d in dists if _canonical(d.name) == kind.package), None)
        if dist is None:
            continue
        folder = join(dist.site_dir, *kind.windows[:-1])
        hit = tree.lookup(folder, kind.windows[-1])
        if hit is not None:  # a CPU-only build has no such library
            found.append(Neighbour(kind, dist.version, join(folder, hit[0]), dist.site_dir))
    return found


def late_names(tree: WinTree, neighbour: Neighbour) -> tuple[str, ...]:
    """The CUDA DLL names ``neighbour``'s library keeps to load by name (read from it)."""
    if not neighbour.kind.windows_by_name:
        return ()
    try:
        data = tree.read_bytes(neighbour.library)
    except (OSError, MemoryError, ValueError):
        return ()  # unread: nothing is claimed
    return cuda_dll_names(data)


def replay_order(
    process: LoaderModel,
    neighbour: Neighbour,
    names: Sequence[str],
    path_dirs: Sequence[str],
    environ: Mapping[str, str],
    cwd: str | None = None,
) -> Order:
    """Load ``neighbour``'s library into ``process`` (kept there), then each of ``names``."""
    library = neighbour.library
    if neighbour.kind.windows_altered:
        load = process.load(library, _altered_order(process, library, path_dirs, cwd))
    else:
        package = ntpath.dirname(library)  # its __init__ adds its folder, then CDLLs the DLLs
        guarded = replace(process, user_dirs=(package, *process.user_dirs))
        load = guarded.load(library)
    if not load.ok:
        return Order(load)
    order = by_name_order(process, path_dirs, environ, cwd)
    late = []
    for name in names:
        resolution = process.resolve(name, "", order)
        if resolution.path is None:
            late.append(LateLoad(name, None, None))
            continue
        winerror = None
        if resolution.via != Step.LOADED:
            result = process.load(resolution.path, order)
            winerror = None if result.ok else result.winerror
        late.append(LateLoad(name, resolution.path, resolution.via, winerror))
    return Order(load, tuple(late))


def by_name_order(
    process: LoaderModel,
    path_dirs: Sequence[str],
    environ: Mapping[str, str],
    cwd: str | None = None,
) -> SearchOrder:
    """``LoadLibraryA(name)`` after ctranslate2's ``SetDllDirectoryA(%CUDA_PATH%\\bin)``: the
    standard search, that folder in the current directory's place."""
    cuda_path = environ.get("CUDA_PATH", "").strip()
    if not cuda_path:
        return legacy_order(process, path_dirs, cwd=cwd)
    order = list(legacy_order(process, path_dirs))
    order.insert(1, (join(cuda_path, "bin"), USER_DIR))
    return tuple(order)


def _altered_order(
    process: LoaderModel, library: str, path_dirs: Sequence[str], cwd: str | None
) -> SearchOrder:
    """``LOAD_WITH_ALTERED_SEARCH_PATH``: the library's folder in python.exe's folder's place."""
    legacy = legacy_order(process, path_dirs, cwd=cwd)
    return ((ntpath.dirname(library), DLL_LOAD_DIR), *(s for s in legacy if s[1] != APP_DIR))


def alone(
    process: LoaderModel, loaded: Mapping[str, str], registered: Sequence[str]
) -> LoaderModel:
    """A process like ``process`` that never imported torch: only what was loaded before
    (``loaded``) and the folders registered outside torch (``registered``)."""
    return replace(
        process, loaded={k.lower(): v for k, v in loaded.items()}, user_dirs=tuple(registered)
    )


def _canonical(name: str) -> str:
    return name.replace("_", "-").replace(".", "-").lower()


def replay_neighbours(
    system: System,
    dists: Sequence[InstalledDist],
    process: LoaderModel,
    cache: FactsCache | None,
    identity: Callable[[str], str | None],
    cwd: str | None = None,
    import_torch: Callable[[LoaderModel], ImportSimulation] | None = None,
) -> tuple[NeighbourReplay, ...]:
    """Each installed neighbour replayed on a copy of ``process`` (the guarded ``import
    torch``'s) and on a process without torch; the names read once per file state. With
    ``import_torch`` (torch's import, replayed on a given process), onnxruntime's
    ``preload_dlls()`` from the NVIDIA wheels is also replayed before ``import torch``."""
    found = find_neighbours(system.tree, dists)
    if not found:
        return ()
    interpreter = system.interpreter
    path_dirs, environ = interpreter.path_dirs, interpreter.environ
    torch_dist = next((d for d in dists if _canonical(d.name) == "torch"), None)
    torch_version = torch_dist.version if torch_dist is not None else None
    torch_lib = join(system.torch_package_dir, "lib") if system.torch_package_dir else None
    replays = []
    for neighbour in found:
        key = identity(neighbour.library)
        known = cache.get_derived(_NAMES, key) if cache is not None else None
        if isinstance(known, list) and all(isinstance(n, str) for n in known):
            names: tuple[str, ...] = tuple(known)
        else:
            names = late_names(system.tree, neighbour)
            if cache is not None:
                cache.put_derived(_NAMES, key, list(names))
        after = replace(process, loaded=dict(process.loaded))
        solo = alone(process, system.loaded, system.registered_dirs)
        solo_order = replay_order(solo, neighbour, names, path_dirs, environ, cwd)
        entries, major = preloads(neighbour, process)
        directory = (
            torch_lib
            if entries and torch_lib and picks_torch_lib(neighbour.version, major, torch_version)
            else None
        )
        preloaded = None
        if not solo_order.ok and entries:
            fresh = alone(process, system.loaded, system.registered_dirs)
            preload(fresh, neighbour.site, entries, directory)
            preloaded = replay_order(fresh, neighbour, names, path_dirs, environ, cwd)
        wheels_first = None
        if entries and import_torch is not None and torch_lib is not None:
            wheels_first = torch_after_wheels(
                system,
                process,
                neighbour,
                entries,
                major,
                torch_lib,
                directory is None,
                import_torch,
            )
        replays.append(
            NeighbourReplay(
                neighbour,
                replay_order(after, neighbour, names, path_dirs, environ, cwd),
                solo_order,
                preloaded,
                directory,
                wheels_first,
            )
        )
    return tuple(replays)


def torch_after_wheels(
    system: System,
    process: LoaderModel,
    neighbour: Neighbour,
    entries: Sequence[Entry],
    cuda_major: int,
    torch_lib: str,
    default_too: bool,
    import_torch: Callable[[LoaderModel], ImportSimulation],
) -> WheelsFirst | None:
    """``preload_dlls(directory="")`` in a process without torch, then ``import torch`` in it:
    torch loads its own ``lib`` copies by full path, but their imports by base name bind to
    the modules of those names the preload loaded first (the loader's rule), whatever minor
    those are. None when no file of the list is in the NVIDIA wheels here."""
    tree, site = system.tree, neighbour.site
    if not any(tree.lookup(join(site, *folder), name) for folder, name in entries):
        return None
    fresh = alone(process, system.loaded, system.registered_dirs)
    preload(fresh, site, entries, None)
    # torch's own folders are registered by its __init__; the preloaded modules stay loaded
    simulation = import_torch(replace(fresh, user_dirs=process.user_dirs))
    wheel_dir = join(site, "nvidia", "cudnn", "bin")
    return WheelsFirst(
        simulation,
        default_too,
        cudnn_version(tree, torch_lib),
        cudnn_version(tree, wheel_dir),
        torch_lib,
        wheel_dir,
        cuda_major,
    )


def preloads(neighbour: Neighbour, process: LoaderModel) -> tuple[tuple[Entry, ...], int]:
    """What ``onnxruntime.preload_dlls()`` of this release loads for its provider, and the
    provider's CUDA major (read from its cuBLAS or CUDA runtime import); empty for another
    package, a release without it, a build it skips, or an installed ``__init__.py`` whose
    cuDNN list is not the table's (a release the table does not describe)."""
    if neighbour.kind.module != "onnxruntime":
        return (), 0
    try:
        imports = process.facts(neighbour.library).imports
    except ImageUnavailable:
        return (), 0
    majors = {m for name in imports if (m := windows_cuda_major(name)) is not None}
    if len(majors) != 1:
        return (), 0
    major = majors.pop()
    try:
        source = process.tree.read_bytes(join(neighbour.site, "onnxruntime", "__init__.py"))
    except (OSError, MemoryError, ValueError):
        source = b""  # unread: the release's table stands
    if not agrees_with_source(neighbour.version, major, source.decode("utf-8", "replace")):
        return (), major  # its own file lists other DLLs: not replayed rather than guessed
    return preload_list(neighbour.version, major), major


def preload(
    process: LoaderModel, site: str, entries: Sequence[Entry], directory: str | None
) -> None:
    """``onnxruntime.preload_dlls()`` in a process without torch: each file found in
    ``directory`` (else its NVIDIA wheel folder under ``site``) by full path (``ctypes.CDLL``:
    its folder, python.exe's, the registered folders, System32), in the release's order, then
    each name not loaded that way by name (the same folders, without its own)."""
    by_name = (
        (process.app_dir, APP_DIR),
        *((folder, USER_DIR) for folder in process.user_dirs),
        (process.system32, Step.SYSTEM32),
    )
    loaded = set()
    for parts, name in entries:
        folder = directory if directory else join(site, *parts)
        hit = process.tree.lookup(folder, name)
        if hit is not None and process.load(join(folder, hit[0])).ok:
            loaded.add(name)
    for _, name in entries:
        if name in loaded:
            continue
        resolution = process.resolve(name, "", by_name)
        if resolution.path is not None and resolution.via != Step.LOADED:
            process.load(resolution.path, by_name)


_NAMES = "neighbour-cuda-names"
