"""The Windows platform: the Windows loader model over a :class:`System`, step by step.

locate: torch and its distributions (RECORD summaries remembered); plan: the folders torch
registers and those ``ensure()`` adds; read: the binaries, through the one facts cache;
resolve: ``import torch`` replayed plain and guarded, then the packages' loads and OpenMP;
check: the Windows rules; report.
"""

from __future__ import annotations

from collections.abc import Callable

from torchguard._binary.cache import FactsCache
from torchguard._facts.vocab import Analysis, Code
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
from torchguard._platforms.windows.neighbours import NeighbourReplay, replay_neighbours
from torchguard._platforms.windows.plan import plan_directories
from torchguard._platforms.windows.records import remember_records
from torchguard._platforms.windows.replay import (
    aborts,
    candidates,
    module_records,
    openmp_preloads,
    openmp_state,
    python_summary,
    replay,
    runtime_preloads,
)
from torchguard._platforms.windows.simulate import ImportSimulation, simulate_import
from torchguard._platforms.windows.site_answers import LINKED, SiteAnswers
from torchguard._platforms.windows.system import System
from torchguard._platforms.windows.vcruntime import stale_copies, toolset
from torchguard._report.findings import ERROR, Finding
from torchguard._report.report import DistSummary, Report, TorchSummary
from torchguard._rules import CheckContext, run_rules
from torchguard._rules.hints import HintContext, for_not_found
from torchguard._rules.registry import WINDOWS
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
                findings=(torch_not_found(hints),),
                mode=_mode(system),
                python=python_summary(system),
            )
        if cache is not None:  # one file per environment: a warm run parses only its own
            scope = f"windows|{system.torch_package_dir}" if system.live else "windows-offline"
            cache.use_scope(scope)
        self.dists = find_dists(system.tree, interpreter.site_dirs)
        self.answers = SiteAnswers(system.tree, cache, self.dists)
        remember_records(system.tree, self.dists, cache, self.answers)
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
        guarded, unguarded, process, self.dirs = replay(
            system, torch, self.dirs, binaries, self.cwd
        )
        self.guarded, self.unguarded = guarded, unguarded
        answers = self.answers
        links = RememberedLinks(system.tree, cache, binaries.facts) if cache is not None else None
        found = discover(self.dists, binaries.facts, links, answers.linked)
        if links is not None:
            links.save()
            for site_dir in answers.sites():
                answers.learn(site_dir, LINKED, links.whole(site_dir))
        self.packages: list[PackageSimulation] = refine(
            simulate_packages(process, found, torch_ok=guarded.outcome().ok),
            process,
            torch.version,
            cache,
            binaries.identity,
        )
        files = candidates(system, torch, self.dists, binaries, answers)
        self.openmp = openmp_state(system, torch, files, binaries, process)
        needed = toolset(guarded, binaries.facts, torch.package_dir)
        self.stale = (
            []
            if "msvcp140.dll" in {k.lower() for k in system.loaded}
            else stale_copies(self.openmp.briefs, needed)
        )  # already loaded: runtime-too-old judges the loaded copy itself
        environ = system.interpreter.environ
        self.preloads = openmp_preloads(self.openmp, environ) + runtime_preloads(
            system, binaries, self.stale, needed
        )
        self.neighbours: tuple[NeighbourReplay, ...] = ()
        if guarded.outcome().ok:  # into the process torch's import left, and one without it
            self.neighbours = replay_neighbours(
                system, self.dists, process, cache, binaries.identity, self.cwd, self._importer()
            )

    def _importer(self) -> Callable[[LoaderModel], ImportSimulation]:
        """``import torch`` replayed on a given process, with this analysis' folders."""
        system, torch = self.system, self.torch
        torch_paths = tuple(d.path for d in self.dirs if d.by_torch)

        def run(process: LoaderModel) -> ImportSimulation:
            return simulate_import(
                process,
                torch.lib_dir,
                torch.extensions,
                system.interpreter.path_dirs,
                torch_paths=torch_paths,
                cwd=self.cwd,
                ntfs_order=not system.live,
            )

        return run

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
            neighbours=self.neighbours,
            site_answers=self.answers,
        )
        findings = doubt_unseen(run_rules(context, WINDOWS), system.tree, system.unseen_dirs)
        if cache is not None:
            self.answers.save()
            cache.save()
        return findings

    def report(self, findings: list[Finding], timings: dict[str, float]) -> Report:
        system, torch = self.system, self.torch
        return Report(
            findings=tuple(findings),
            torch=TorchSummary(torch.version, torch.origin, torch.variant, torch.cuda),
            mode=_mode(system),
            python=python_summary(system),
            dll_directories=tuple(self.dirs),
            distributions=tuple(DistSummary(d.name, d.version) for d in related(self.dists)),
            import_torch=aborts(self.openmp, self.guarded.outcome()),
            import_torch_without_torchguard=aborts(self.openmp, self.unguarded.outcome()),
            modules=module_records(system, self.guarded),
            packages=tuple(outcome(p) for p in self.packages),
            preloads=self.preloads,
            timings=timings,
        )

    def close(self) -> None:
        """The caller owns the system (and its tree): nothing of the run's own to release."""


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
