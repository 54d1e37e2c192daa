"""The Windows platform: the Windows loader model over a :class:`System`, step by step.

locate: torch and its distributions (RECORD summaries remembered); plan: the folders torch
registers and those ``ensure()`` adds; read: the binaries, through the one facts cache;
resolve: ``import torch`` replayed plain and guarded, then the packages' loads and OpenMP;
check: the Windows rules; report.
"""

from __future__ import annotations

import ntpath
from collections.abc import Mapping

from torchguard._binary.cache import FactsCache
from torchguard._binary.pe.machine import label
from torchguard._facts.vocab import Analysis, Code
from torchguard._platforms.windows import registration
from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.dists import InstalledDist, find_dists
from torchguard._platforms.windows.ecosystem import (
    PackageSimulation,
    discover,
    outcome,
    simulate_packages,
)
from torchguard._platforms.windows.extensions import refine
from torchguard._platforms.windows.linked import RememberedLinks
from torchguard._platforms.windows.loader import LoaderModel
from torchguard._platforms.windows.locate import TorchInstall, companions, locate_torch, related
from torchguard._platforms.windows.openmp import (
    STARTED,
    Candidates,
    OpenMPState,
    analyse,
    candidate_files,
)
from torchguard._platforms.windows.plan import plan_directories
from torchguard._platforms.windows.records import remember_records
from torchguard._platforms.windows.simulate import ImportSimulation, simulate_import
from torchguard._platforms.windows.system import System
from torchguard._platforms.windows.tree import join
from torchguard._platforms.windows.vcruntime import StaleCopy, stale_copies, system_copy, toolset
from torchguard._report.findings import ERROR, Finding
from torchguard._report.report import (
    DistSummary,
    DllDirectory,
    ImportOutcome,
    ModuleRecord,
    PreloadRecord,
    Report,
    TorchSummary,
)
from torchguard._rules import CheckContext, run_rules
from torchguard._rules.hints import HintContext, for_not_found
from torchguard._rules.unseen_dirs import doubt_unseen


class WindowsPlatform:
    """Windows: ``cwd`` is the current folder torch's ``LoadLibraryW`` retry searches."""

    name = "windows"

    def __init__(self, cwd: str | None = None) -> None:
        self.cwd = cwd

    def start(self, system: System, cache: FactsCache | None) -> WindowsAnalysis:
        return WindowsAnalysis(system, cache, self.cwd)


class WindowsAnalysis:
    """One Windows analysis; each step keeps what the next needs."""

    def __init__(self, system: System, cache: FactsCache | None, cwd: str | None) -> None:
        self.system = system
        self.cache = cache
        self.cwd = cwd

    def locate(self) -> Report | None:
        system, cache = self.system, self.cache
        interpreter = system.interpreter
        if system.torch_package_dir is None:
            hints = HintContext(
                python_cmd=system.python_cmd,
                python_version=interpreter.version,
                python_machine=interpreter.machine,
            )
            return Report(
                findings=(torch_not_found(hints),), mode=_mode(system), python=_python(system)
            )
        if cache is not None:  # one file per environment: a warm run parses only its own
            scope = f"windows|{system.torch_package_dir}" if system.live else "windows-offline"
            cache.use_scope(scope)
        self.dists = find_dists(system.tree, interpreter.site_dirs)
        remember_records(system.tree, self.dists, cache)
        self.torch = locate_torch(system.tree, system.torch_package_dir, self.dists)
        return None

    def plan(self) -> None:
        system = self.system
        self.dirs = plan_directories(
            system.tree, system.interpreter, self.torch, companions(self.dists), cwd=self.cwd
        )

    def read(self) -> None:
        self.binaries = Binaries(self.system.tree, self.cache)

    def resolve(self) -> None:
        system, cache, torch, binaries = self.system, self.cache, self.torch, self.binaries
        guarded, unguarded, process, self.dirs = _replay(
            system, torch, self.dirs, binaries, self.cwd
        )
        self.guarded, self.unguarded = guarded, unguarded
        links = RememberedLinks(system.tree, cache, binaries.facts) if cache is not None else None
        found = discover(self.dists, binaries.facts, links)
        if links is not None:
            links.save()
        self.packages: list[PackageSimulation] = refine(
            simulate_packages(process, found, torch_ok=guarded.outcome().ok),
            process,
            torch.version,
            cache,
            binaries.identity,
        )
        candidates = _candidates(system, torch, self.dists, binaries)
        self.openmp = _openmp(system, torch, candidates, binaries, process)
        needed = toolset(guarded, binaries.facts, torch.package_dir)
        self.stale = (
            []
            if "msvcp140.dll" in {k.lower() for k in system.loaded}
            else stale_copies(self.openmp.briefs, needed)
        )  # already loaded: runtime-too-old judges the loaded copy itself
        self.preloads = _preloads(self.openmp, system.interpreter.environ) + _runtime_preloads(
            system, binaries, self.stale, needed
        )

    def check(self) -> list[Finding]:
        system, cache = self.system, self.cache
        context = CheckContext(
            system,
            self.torch,
            self.dirs,
            self.guarded,
            self.unguarded,
            _hints(system, self.torch, self.dists),
            self.binaries.facts,
            self.dists,
            self.packages,
            cache=cache,
            openmp=self.openmp,
            stale_runtimes=self.stale,
            preloads=self.preloads,
        )
        findings = doubt_unseen(run_rules(context), system.tree, system.unseen_dirs)
        if cache is not None:
            cache.save()
        return findings

    def report(self, findings: list[Finding], timings: dict[str, float]) -> Report:
        system, torch = self.system, self.torch
        return Report(
            findings=tuple(findings),
            torch=TorchSummary(torch.version, torch.origin, torch.variant, torch.cuda),
            mode=_mode(system),
            python=_python(system),
            dll_directories=tuple(self.dirs),
            distributions=tuple(DistSummary(d.name, d.version) for d in related(self.dists)),
            import_torch=_aborts(self.openmp, self.guarded.outcome()),
            import_torch_without_torchguard=_aborts(self.openmp, self.unguarded.outcome()),
            modules=_modules(system, self.guarded),
            packages=tuple(outcome(p) for p in self.packages),
            preloads=self.preloads,
            timings=timings,
        )

    def close(self) -> None:
        """The caller owns the system (and its tree): nothing of the run's own to release."""


def _replay(
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


def _candidates(
    system: System, torch: TorchInstall, dists: list[InstalledDist], binaries: Binaries
) -> Candidates:
    interpreter = system.interpreter
    conda_bin = join(interpreter.prefix, "Library", "bin") if interpreter.is_conda else None
    return candidate_files(binaries, torch.lib_dir, dists, conda_bin)


def _openmp(
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


def _aborts(openmp: OpenMPState, replayed: ImportOutcome) -> ImportOutcome:
    """The replay's outcome, unless an OpenMP runtime already started in this process and
    ``import torch`` starts another: the process then dies (KMP's own check), a proof."""
    started = next((c for c in openmp.conflicts if c.kind == STARTED), None)
    if not replayed.ok or started is None or openmp.masked:
        return replayed
    name = ntpath.basename(started.torch_copy or "")
    return ImportOutcome(False, None, name, abort="OMP: Error #15")


#: ``TORCHGUARD_OPENMP=keep``: ensure() leaves OpenMP runtimes alone.
OPENMP_SWITCH = "TORCHGUARD_OPENMP=keep"


def _preloads(openmp: OpenMPState, environ: Mapping[str, str]) -> tuple[PreloadRecord, ...]:
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


def _runtime_preloads(
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


def _hints(system: System, torch: TorchInstall, dists: list[InstalledDist]) -> HintContext:
    installer = torch.installer()
    names = {d.name for d in dists}
    interpreter = system.interpreter
    return HintContext(
        python_cmd=system.python_cmd,
        torch_version=torch.version,
        cuda=torch.cuda,
        conda=installer == "conda" or (interpreter.is_conda and installer != "pip"),
        python_version=interpreter.version,
        python_machine=interpreter.machine,
        siblings=tuple(n for n in ("torchvision", "torchaudio") if n in names),
    )


def _python(system: System) -> dict[str, str]:
    interpreter = system.interpreter
    return {
        "version": f"{interpreter.version[0]}.{interpreter.version[1]}",
        "executable": interpreter.executable,
        "app_dir": interpreter.app_dir,
        "machine": label(interpreter.machine),
        **({"environment": system.environment} if system.environment else {}),
    }


def _modules(system: System, simulation: ImportSimulation) -> tuple[ModuleRecord, ...]:
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


def torch_not_found(hints: HintContext) -> Finding:
    return Finding(
        code=Code.TORCH_NOT_FOUND,
        severity=ERROR,
        message="torch is not installed where this Python imports packages from",
        hints=for_not_found(hints),
        rank=0,
    )


def _mode(system: System) -> Analysis:
    return Analysis.LIVE if system.live else Analysis.OFFLINE
