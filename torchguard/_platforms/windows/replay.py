"""The Windows process, replayed: ``import torch`` plain and as ``ensure()`` leaves it, the
OpenMP runtimes and the VC++ runtime loaded ahead, and what the report lists of the process.

The Windows platform's resolve step (:mod:`torchguard._frontends.pipeline.windows`) runs these
over the loader model; none of it reads the rules.
"""

from __future__ import annotations

import ntpath
from collections.abc import Mapping

from torchguard._binary.pe.machine import label
from torchguard._platforms.windows import registration
from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.loader import LoaderModel
from torchguard._platforms.windows.locate import TorchInstall
from torchguard._platforms.windows.openmp import (
    STARTED,
    Candidates,
    OpenMPState,
    analyse,
    candidate_files,
)
from torchguard._platforms.windows.simulate import ImportSimulation, simulate_import
from torchguard._platforms.windows.site_answers import SiteAnswers
from torchguard._platforms.windows.system import System
from torchguard._platforms.windows.tree import join
from torchguard._platforms.windows.vcruntime import StaleCopy, system_copy
from torchguard._report.report import DllDirectory, ImportOutcome, ModuleRecord, PreloadRecord


def replay(
    system: System,
    torch: TorchInstall,
    plan: list[DllDirectory],
    binaries: Binaries,
    cwd: str | None = None,
) -> tuple[ImportSimulation, ImportSimulation, LoaderModel, list[DllDirectory]]:
    """``import torch`` replayed plain (only the folders torch registers itself) and after
    ``ensure()``; the guarded process's loader; and the folders that process has.

    ``ensure()`` adds a folder torch forgets only when that is safe and needed
    (:mod:`torchguard._platforms.windows.registration`); without one, both replays are the same.
    """
    interpreter = system.interpreter
    own = [d for d in plan if d.by_torch]
    torch_paths = tuple(d.path for d in own)  # what torch prepends to PATH

    def run(dirs: list[DllDirectory]) -> tuple[ImportSimulation, LoaderModel]:
        process = LoaderModel(
            tree=system.tree,
            facts=binaries.facts,
            machine=interpreter.machine,
            app_dir=interpreter.app_dir,
            system32=system.system32,
            user_dirs=(*(d.path for d in dirs), *system.registered_dirs),
            known_dlls=system.known_dlls,
            loaded={k.lower(): v for k, v in system.loaded.items()},
            bindings=binaries,
        )
        simulation = simulate_import(
            process,
            torch.lib_dir,
            torch.extensions,
            interpreter.path_dirs,
            torch_paths=torch_paths,
            cwd=cwd,
            ntfs_order=not system.live,  # live: the file system's own order, as torch's glob
        )
        return simulation, process

    plain, plain_process = run(own)
    extras = registration.needed(
        [d for d in plan if not d.by_torch], plain, system.tree, interpreter
    )
    while extras:
        guarded, process = run([*own, *extras])
        rebound = registration.rebinding(plain, guarded, extras)
        if not rebound:
            return guarded, plain, process, [*own, *extras]
        extras = [d for d in extras if d not in rebound]
    return plain, plain, plain_process, own


def candidates(
    system: System,
    torch: TorchInstall,
    dists: list[InstalledDist],
    binaries: Binaries,
    answers: SiteAnswers | None = None,
) -> Candidates:
    interpreter = system.interpreter
    conda_bin = join(interpreter.prefix, "Library", "bin") if interpreter.is_conda else None
    return candidate_files(binaries, torch.lib_dir, dists, conda_bin, answers)


def openmp_state(
    system: System,
    torch: TorchInstall,
    files: Candidates,
    binaries: Binaries,
    process: LoaderModel,
) -> OpenMPState:
    """Every OpenMP runtime and user, and which of them abort together (see
    ``_platforms.windows.openmp``)."""
    interpreter = system.interpreter
    return analyse(
        binaries,
        process,
        files,
        torch.lib_dir,
        interpreter.environ,
        started=system.kmp_started,
    )


def aborts(openmp: OpenMPState, replayed: ImportOutcome) -> ImportOutcome:
    """The replay's outcome, unless an OpenMP runtime already started in this process and
    ``import torch`` starts another: the process then dies (KMP's own check), a proof."""
    started = next((c for c in openmp.conflicts if c.kind == STARTED), None)
    if not replayed.ok or started is None or openmp.masked:
        return replayed
    name = ntpath.basename(started.torch_copy or "")
    return ImportOutcome(False, None, name, abort="OMP: Error #15")


#: ``TORCHGUARD_OPENMP=keep``: ensure() leaves OpenMP runtimes alone.
OPENMP_SWITCH = "TORCHGUARD_OPENMP=keep"


def openmp_preloads(openmp: OpenMPState, environ: Mapping[str, str]) -> tuple[PreloadRecord, ...]:
    """MKL's sibling runtime, loaded before torch so torch and MKL share one runtime; never
    when torch would not bind to it cleanly, or when ``TORCHGUARD_OPENMP=keep``."""
    preload = openmp.preload
    if preload is None or preload.gap is not None:
        return ()
    if environ.get("TORCHGUARD_OPENMP", "").strip().lower() == "keep":
        return ()
    reason = (
        "MKL starts this OpenMP runtime by full path; loaded first, torch binds to it as well, "
        "so one runtime runs instead of two (OMP: Error #15)"
    )
    return (PreloadRecord(preload.path, reason, OPENMP_SWITCH),)


#: ``TORCHGUARD_VCRUNTIME=keep``: ensure() loads no VC++ runtime ahead of other packages.
VCRUNTIME_SWITCH = "TORCHGUARD_VCRUNTIME=keep"


def runtime_preloads(
    system: System, binaries: Binaries, stale: list[StaleCopy], needed: tuple[int, int] | None
) -> tuple[PreloadRecord, ...]:
    """System32's msvcp140.dll, loaded before a package that ships an older one is imported,
    so that package binds to the newer copy; only where System32's is really newer."""
    if system.interpreter.environ.get("TORCHGUARD_VCRUNTIME", "").strip().lower() == "keep":
        return ()
    loaded = {k.lower(): v for k, v in system.loaded.items()}
    path = system_copy(system.system32, binaries.facts, stale, needed, loaded)
    if path is None:
        return ()
    packages = ", ".join(sorted({copy.dist for copy in stale}))
    reason = (
        f"{packages} ship an older msvcp140.dll and load it when imported; loaded first, this "
        "newer copy is the one every later import binds to, torch's included"
    )
    return (PreloadRecord(path, reason, VCRUNTIME_SWITCH),)


def python_summary(system: System) -> dict[str, str]:
    interpreter = system.interpreter
    return {
        "version": f"{interpreter.version[0]}.{interpreter.version[1]}",
        "executable": interpreter.executable,
        "app_dir": interpreter.app_dir,
        "machine": label(interpreter.machine),
        **({"environment": system.environment} if system.environment else {}),
    }


def module_records(system: System, simulation: ImportSimulation) -> tuple[ModuleRecord, ...]:
    """Each module the import loads, where from and by which loader step (first seen)."""
    modules: dict[str, ModuleRecord] = {}
    for load in simulation.loads:
        for name, resolution in load.modules.items():
            if name in modules:
                continue
            path = resolution.path
            where = system.tree.origin(path) if path and resolution.via != "apiset" else path
            modules[name] = ModuleRecord(resolution.name, where, resolution.via)
    return tuple(modules.values())
