"""torch's siblings and extensions: which binaries each package loads, and what its import does.

A distribution is a torch extension when one of its ``.pyd``/``.dll`` files imports one of
torch's own DLLs (``c10.dll``, ``torch_cpu.dll``, ``torch_python.dll`` ...): no list of names.
Every such binary is loaded after ``import torch`` (so torch's DLLs are already modules of the
process) by full path with ``LoadLibraryExW(path, 0, 0x1100)``: ``torch.ops.load_library``
and ``ctypes.CDLL`` use those flags, and so does Python's import of an extension module.

torchvision and torchaudio load what their own loaders load (0.19 / 2.4), as data in
:mod:`torchguard._platforms.windows.siblings`; extensions whose Python code reacts to a failed load
(xformers) are :mod:`torchguard._platforms.windows.extensions`.

Every other binary of an extension that imports torch's DLLs is that package's core.
"""

from __future__ import annotations

import ntpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.image import PEFacts
from torchguard._facts.vocab import Loader, Role
from torchguard._platforms.windows.builds import BuildTarget
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.loader import MISSING, Failure, LoaderModel, LoadResult
from torchguard._platforms.windows.siblings import SIBLINGS, KnownSibling
from torchguard._platforms.windows.tree import PathKey, is_within, join, path_key, same_path
from torchguard._report.report import BLOCKED, FAILS, OK, WARNS, PackageOutcome

#: torch's own libraries: what an extension links against.
_TORCH_DLL = re.compile(r"^(c10|torch)(_[a-z0-9_]+)?\.dll$", re.IGNORECASE)

CORE, OPTIONAL, QUIET = Role.CORE, Role.OPTIONAL, Role.QUIET
CTYPES, IMPORT = Loader.CTYPES, Loader.IMPORT


@dataclass(frozen=True)
class Step:
    """One load a package's import performs (or a feature performs on first use)."""

    path: str
    role: Role
    loader: Loader
    feature: str
    """What fails when this load fails: ``torchvision._C``, ``image``, ``FFmpeg 6`` ..."""
    group: str | None = None
    """Alternatives: the first step of a group that loads wins and the rest are skipped."""
    after: str | None = None
    """A step (path) that must load first; it is part of the same attempt."""
    reaction: str | None = None
    """How the package itself reports a failure of this load it catches
    (``_platforms.windows.extensions``)."""


@dataclass(frozen=True)
class PackagePlan:
    """A sibling or extension and the loads its import performs, in order."""

    dist: InstalledDist
    import_name: str
    steps: tuple[Step, ...]
    dll_dirs: tuple[str, ...] = ()
    """Folders the package passes to ``os.add_dll_directory`` before loading."""
    sibling: bool = False

    @property
    def name(self) -> str:
        return self.dist.name


@dataclass
class StepResult:
    step: Step
    load: LoadResult | None
    """None when the step was not attempted (an alternative already loaded, or blocked)."""

    @property
    def ok(self) -> bool:
        return self.load is not None and self.load.ok


@dataclass
class PackageSimulation:
    """What loading one package's binaries does after ``import torch``."""

    plan: PackagePlan
    blocked: bool = False
    """``import torch`` itself fails, so the package's import never gets this far."""
    results: list[StepResult] = field(default_factory=list)
    built_for: BuildTarget | None = None
    """The torch the package's build metadata names (read only when a load fails)."""

    def failed(self, role: Role) -> list[StepResult]:
        """The failed loads of ``role``; an alternative's only when its whole group failed
        (torchcodec trying FFmpeg 8 before the 6 that is there costs nothing)."""
        return [
            r
            for r in self.results
            if r.step.role == role
            and r.load
            and not r.load.ok
            and (r.step.group is None or self.group_failed(r.step.group))
        ]

    def group_failed(self, group: str) -> bool:
        """Whether no alternative of ``group`` loaded (and at least one was tried)."""
        tried = [r for r in self.results if r.step.group == group and r.load is not None]
        won = any(r.ok and not _has_pair(self.plan, r.step) for r in tried)
        return bool(tried) and not won


def is_torch_dll(name: str) -> bool:
    return bool(_TORCH_DLL.match(name))


def binaries(dist: InstalledDist) -> list[str]:
    """The ``.pyd``/``.dll`` files its RECORD lists (present or not), in RECORD order.

    Every analysis asks this of every installed distribution, so it comes from the RECORD's
    summary (remembered across runs by ``_platforms.windows.records``): most hold no binary.
    """
    return [join(dist.site_dir, relative) for relative in dist.distribution.summary().binaries]


def imports_torch(facts: Callable[[str], PEFacts], path: str) -> bool:
    try:
        found = facts(path)
    except ImageUnavailable:
        return False
    return any(is_torch_dll(name) for name in (*found.imports, *found.delay_imports))


def discover(
    dists: Iterable[InstalledDist],
    facts: Callable[[str], PEFacts],
    linked_of: Callable[[InstalledDist, Callable[[], list[str]]], list[str]] | None = None,
    remembered: Callable[[str], dict[str, list[str]] | None] | None = None,
) -> list[PackagePlan]:
    """torchvision, torchaudio and every distribution whose binaries import torch's DLLs
    (``linked_of``: which of a distribution's binaries do, when remembered elsewhere; it is
    given a way to list them all, which costs a path per binary). ``remembered``: a site
    folder's answers kept whole (``.dist-info`` name -> the binaries importing torch, only
    those with any), or None: its other distributions are not asked at all."""
    plans: list[PackagePlan] = []
    answered: dict[str, dict[str, list[str]] | None] = {}
    listing: list[tuple[InstalledDist, list[str] | None]] = []
    for dist in dists:
        if dist.name == "torch":
            continue
        site = dist.site_dir
        if remembered is not None:
            if site not in answered:
                answered[site] = remembered(site)
            known = answered[site]
            if known is not None:
                found = known.get(dist.distribution.dist_info)
                if found is not None:  # a binary of it imports torch
                    listing.append((dist, found))
                elif dist.name in SIBLINGS and dist.distribution.summary().binaries:
                    listing.append((dist, []))
                continue
        if dist.distribution.summary().binaries:  # most list no binary: skipped first
            listing.append((dist, None))
    for dist, linked in sorted(listing, key=lambda item: item[0].name):
        if linked is None:
            if linked_of is not None:
                linked = linked_of(dist, partial(binaries, dist))
            else:
                linked = [p for p in binaries(dist) if imports_torch(facts, p)]
        known_sibling = SIBLINGS.get(dist.name)
        if known_sibling is not None:
            plan = _sibling(dist, known_sibling, binaries(dist), linked)
        elif linked:
            plan = _extension(dist, linked)
        else:
            continue
        if plan.steps:
            plans.append(plan)
    return plans


def _stem(path: str) -> str:
    """``_C`` for ``...\\_C.cp311-win_amd64.pyd``: the module name Python's finder matches."""
    return ntpath.basename(path).split(".", 1)[0]


def _sibling(
    dist: InstalledDist, known: KnownSibling, paths: list[str], linked: list[str]
) -> PackagePlan:
    """The loads of a sibling whose loader :data:`SIBLINGS` describes, in its order."""
    if known.checks_existence:
        tree = dist.distribution.tree
        paths = [p for p in paths if tree.is_file(p)]
    by_dir: dict[PathKey, dict[str, str]] = {}
    for path in paths:
        if known.extensions_only and not path.lower().endswith(".pyd"):
            continue
        by_dir.setdefault(path_key(ntpath.dirname(path)), {})[_stem(path).lower()] = path
    steps: list[Step] = []
    for load in known.loads:
        folder = by_dir.get(path_key(join(dist.site_dir, *load.folder.split("/"))), {})
        found = folder.get(load.stem)
        if found is None or (load.gate is not None and load.gate not in folder):
            continue
        after = folder.get(load.after) if load.after else None
        steps.append(
            Step(found, load.role, load.loader, load.feature, load.group, after, load.reaction)
        )
    steps += _others(linked, steps, known.others, known.import_name)
    registers = tuple(join(dist.site_dir, *folder.split("/")) for folder in known.registers)
    return PackagePlan(dist, known.import_name, tuple(steps), registers, sibling=True)


def _others(linked: list[str], steps: list[Step], role: Role, package: str) -> list[Step]:
    """Binaries a sibling's loaders do not name: features loaded on demand."""
    known = {path_key(s.path) for s in steps}
    return [
        Step(p, role, CTYPES, f"{package} {_stem(p)}") for p in linked if path_key(p) not in known
    ]


def _extension(dist: InstalledDist, linked: list[str]) -> PackagePlan:
    modules = [_module(dist, p) for p in linked]
    steps = tuple(
        Step(p, CORE, IMPORT if p.lower().endswith(".pyd") else CTYPES, module)
        for p, module in zip(linked, modules)
    )
    return PackagePlan(dist, modules[0].split(".", 1)[0], steps)


def _module(dist: InstalledDist, path: str) -> str:
    """``xformers._C`` for ``site\\xformers\\_C.cp311-win_amd64.pyd``."""
    relative = path[len(dist.site_dir) :] if _under(path, dist.site_dir) else path
    parts = [p for p in relative.replace("/", "\\").split("\\") if p]
    parts[-1] = _stem(parts[-1])
    return ".".join(parts)


def simulate_packages(
    model: LoaderModel, plans: Iterable[PackagePlan], *, torch_ok: bool
) -> list[PackageSimulation]:
    """Replay each package's loads on its own copy of the process after ``import torch``.

    Each package starts from the same state (torch imported), so one package's outcome never
    depends on which other package a program happens to import first.
    """
    simulations: list[PackageSimulation] = []
    for plan in plans:
        simulation = PackageSimulation(plan, blocked=not torch_ok)
        if not torch_ok:
            simulation.results = [StepResult(step, None) for step in plan.steps]
            simulations.append(simulation)
            continue
        process = replace(
            model,
            loaded=dict(model.loaded),
            user_dirs=(*model.user_dirs, *plan.dll_dirs),
        )
        loaded_groups: set[str] = set()
        failed_paths: set[PathKey] = set()
        for step in plan.steps:
            skipped = step.group is not None and step.group in loaded_groups
            if skipped or (step.after and path_key(step.after) in failed_paths):
                if not skipped:  # its attempt failed before it: so does what comes after it
                    failed_paths.add(path_key(step.path))
                simulation.results.append(StepResult(step, None))
                continue
            load = _load(process, step.path, plan.import_name)
            simulation.results.append(StepResult(step, load))
            if not load.ok:
                failed_paths.add(path_key(step.path))
            elif step.group is not None and not _has_pair(plan, step):  # its attempt is over
                loaded_groups.add(step.group)
        simulations.append(simulation)
    return simulations


def _load(process: LoaderModel, path: str, importer: str) -> LoadResult:
    """``process.load(path)``; a binary its RECORD lists but the folder lacks is WinError 126."""
    if process.tree.is_file(path):
        return process.load(path)
    name = ntpath.basename(path)
    return LoadResult(path, [Failure(MISSING, name, (importer, name))])


def _under(path: str, folder: str) -> bool:
    return is_within(path, folder)


def _has_pair(plan: PackagePlan, step: Step) -> bool:
    """Whether another step of the group waits for ``step`` (its attempt is not over yet)."""
    return any(s.after and same_path(s.after, step.path) for s in plan.steps)


def outcome(simulation: PackageSimulation) -> PackageOutcome:
    """What ``import <package>`` does, worded as the package's own failure reads."""
    plan = simulation.plan
    status, message, winerror, dll = OK, "succeeds", None, None
    if simulation.blocked:
        status, message = BLOCKED, "import torch fails first"
    else:
        core, optional = simulation.failed(CORE), simulation.failed(OPTIONAL)
        failed = core or optional
        first = failed[0] if failed else None
        if first is not None and first.load is not None:
            winerror, dll = first.load.winerror, ntpath.basename(first.step.path)
            if core:
                status, message = FAILS, _core_message(first.step, dll, winerror)
            else:
                status, message = WARNS, _optional_message(first.step, dll, winerror)
    return PackageOutcome(
        plan.name,
        plan.dist.version,
        plan.import_name,
        status,
        message,
        winerror,
        dll,
        () if simulation.blocked else _unavailable(simulation),
    )


def _core_message(step: Step, dll: str, winerror: int | None) -> str:
    if step.reaction is not None:
        return step.reaction
    if step.feature == "torchvision._C":
        return (
            'fails: RuntimeError "operator torchvision::nms does not exist" (torchvision '
            f"hides why {dll} did not load: WinError {winerror})"
        )
    if step.loader == IMPORT:
        module = step.feature.rsplit(".", 1)[-1]
        return f'fails: "DLL load failed while importing {module}" (WinError {winerror})'
    kind = "FileNotFoundError" if winerror == 126 else "OSError"
    return f"fails: {kind}: {_ctypes_error(dll, winerror)}"


def _optional_message(step: Step, dll: str, winerror: int | None) -> str:
    if step.reaction is not None:
        return step.reaction
    if step.feature == "torchvision.io image":
        return (
            'succeeds with UserWarning "Failed to load image Python extension: '
            f'{_ctypes_error(dll, winerror)}"; decode_jpeg, read_image ... fail when used'
        )
    return f"succeeds; {step.feature} fails when first used ({_ctypes_error(dll, winerror)})"


def _ctypes_error(dll: str, winerror: int | None) -> str:
    """How ``ctypes.CDLL`` (under ``torch.ops.load_library``) words a failed load."""
    if winerror == 126:
        return f"Could not find module '...\\{dll}' (or one of its dependencies)"
    return f"[WinError {winerror}] loading '...\\{dll}'"


def _unavailable(simulation: PackageSimulation) -> tuple[str, ...]:
    """Features that will not work, beyond what the outcome's message says."""
    notes: list[str] = []
    groups: list[str] = []
    for result in simulation.results:
        step, load = result.step, result.load
        if step.group is not None:
            if step.role == CORE:
                continue  # the import itself fails: the outcome says so
            if step.group not in groups and simulation.group_failed(step.group):
                groups.append(step.group)
                tried = [r for r in simulation.results if r.step.group == step.group and r.load]
                missing = next(
                    (f.leaf for r in tried if r.load for f in r.load.failures if not f.delay), "?"
                )
                versions = ", ".join(dict.fromkeys(r.step.feature for r in tried))
                notes.append(
                    f"{versions}: none loads (first: {missing}); the backend is unavailable and "
                    "the package says so only when it is used"
                )
            continue
        if step.role != CORE and load is not None and not load.ok:
            notes.append(f"{step.feature} ({ntpath.basename(step.path)}: WinError {load.winerror})")
    return tuple(notes)
