"""How particular extensions really load and react, read from their own Python code.

The generic model (:mod:`torchguard._platforms.windows.ecosystem`) says that an extension binary
which does not load breaks ``import <package>``. That stays an error only where the package's own
code proves it (:mod:`torchguard._facts.import_reach`): an extension module that
``import <package>`` imports unconditionally, or names beside a load call in a module it runs.
One it imports only inside ``try ... except ImportError``, a function or a condition, or never,
is a lost feature (a warning naming the module that imports it). Two more things a package's
own code can change, each believed only after it is found in the installed source:

- **It catches the failure and imports anyway.** xformers' ``_cpp_lib.py`` wraps
  ``torch.ops.load_library(_C)`` in ``except OSError`` -> ``xFormersInvalidLibException``,
  which its module body catches and logs as ``WARNING[XFORMERS]: xFormers can't load C++/CUDA
  extensions. xFormers was built for: ...``; ``import xformers`` succeeds and the features its
  ``UNAVAILABLE_FEATURES_MSG`` names are lost. Kept as data (:data:`CAUGHT`), one entry per
  package, each checked against the installed file's text.
- **It loads a DLL of its own by full path before importing the ``.pyd`` that needs it**
  (``torch.ops.load_library(<pkg>\\X.dll)`` in ``__init__.py``): X.dll is then a module of the
  process and the ``.pyd``'s import binds to it by name, wherever X.dll lies.

Consulted only for packages whose loads failed, so a healthy warm run reads no source.
"""

from __future__ import annotations

import ast
import ntpath
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from torchguard._binary.cache import FactsCache
from torchguard._facts.import_reach import (
    IMPORTED,
    UNREACHED,
    UNREAD,
    Reach,
    Source,
    lost_feature,
    module_sources,
    place,
    reach,
)
from torchguard._platforms.windows.builds import BuildTarget, build_target
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.ecosystem import (
    CORE,
    CTYPES,
    IMPORT,
    OPTIONAL,
    PackageSimulation,
    Step,
    StepResult,
    simulate_packages,
)
from torchguard._platforms.windows.loader import MISSING, LoaderModel
from torchguard._platforms.windows.tree import PathKey, join, path_key

#: Calls that load a DLL by path or name from Python.
_LOAD_CALLS = ("load_library(", "CDLL(", "WinDLL(", "PyDLL(", "LoadLibrary")
_REGISTER = "add_dll_directory("
#: Bounds on the source read for one package (only ever for a failing one).
_MAX_SOURCES, _MAX_SOURCE_BYTES = 400, 2_000_000


@dataclass(frozen=True)
class CaughtFailure:
    """A package that catches the failed load of one of its binaries and imports anyway."""

    binary: str
    """The binary's module name, lower case (``_c`` for ``_C.pyd``)."""
    source: str
    """The site-relative module that catches it."""
    markers: tuple[str, ...]
    """Text the installed source must hold for this to be believed (the catching code)."""
    features: str
    """The module constant naming what is lost."""
    warning: str
    """How the package's warning begins."""
    built_for: str
    """How it goes on when the build metadata names a torch (``{torch}``: ``2.10.0+cu128``)."""


CAUGHT: dict[str, CaughtFailure] = {
    # xformers/_cpp_lib.py (0.0.2x to 0.0.35): _register_extensions() raises
    # xFormersInvalidLibException from the OSError of torch.ops.load_library; the module body
    # catches it and calls logger.warning(f"WARNING[XFORMERS]: {e}\n ...").
    "xformers": CaughtFailure(
        binary="_c",
        source="xformers/_cpp_lib.py",
        markers=("except OSError", "xFormersInvalidLibException", "logger.warning"),
        features="UNAVAILABLE_FEATURES_MSG",
        warning="xFormers can't load C++/CUDA extensions.",
        built_for=" xFormers was built for: PyTorch {torch}",
    ),
}


class SourceFacts:
    """What one distribution's own files say, kept across runs under its RECORD's identity
    (pip rewrites RECORD whenever it installs the distribution; in a wheel, its METADATA
    member's), so a warm run of an environment with a failing extension reads none of its
    sources again."""

    KIND = "extension-source"

    def __init__(
        self,
        dist: InstalledDist,
        cache: FactsCache | None = None,
        identity: Callable[[str], str | None] | None = None,
    ) -> None:
        self.dist = dist
        self._cache = cache
        self._key: str | None = None
        if cache is not None and identity is not None:  # a wheel's RECORD is made at mount
            paths = (dist.distribution.metadata_path(n) for n in ("RECORD", "METADATA"))
            self._key = next(filter(None, map(identity, paths)), None)
        found = cache.get_derived(self.KIND, self._key) if cache is not None else None
        self._values: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
        self._changed = False
        self._texts: list[str] | None = None
        self._modules: dict[str, str] | None = None

    def get(self, name: str, kind: type, compute: Callable[[], Any]) -> Any:
        """The fact ``name`` (of JSON type ``kind``, or None), computed once per install."""
        value = self._values.get(name, self)
        if value is self or not (value is None or isinstance(value, kind)):
            value = self._values[name] = compute()
            self._changed = True
        return value

    def sources(self) -> list[str]:
        if self._texts is None:
            self._texts = list(self.modules().values())
        return self._texts

    def modules(self) -> dict[str, str]:
        """The package's ``.py`` files its RECORD lists (bounded), by site-relative path."""
        if self._modules is None:
            self._modules = _sources(self.dist)
        return self._modules

    def save(self) -> None:
        if self._changed and self._cache is not None:
            self._cache.put_derived(self.KIND, self._key, self._values)


def refine(
    simulations: Iterable[PackageSimulation],
    process: LoaderModel,
    torch_version: str | None,
    cache: FactsCache | None = None,
    identity: Callable[[str], str | None] | None = None,
) -> list[PackageSimulation]:
    """Each failing package's simulation, corrected by what its own code does."""
    refined: list[PackageSimulation] = []
    for simulation in simulations:
        if simulation.blocked or not _failures(simulation):
            refined.append(simulation)
            continue
        facts = SourceFacts(simulation.plan.dist, cache, identity)
        simulation = _own_dlls_first(simulation, process, facts)
        target = _built_for(facts)
        simulation = _caught(simulation, target, torch_version, facts)
        simulation = _proven_imports(simulation, facts)
        simulation.built_for = target
        facts.save()
        refined.append(simulation)
    return refined


def _built_for(facts: SourceFacts) -> BuildTarget | None:
    dist = facts.dist
    return _target_of(facts.get("built-for", dict, lambda: _target_json(build_target(dist))))


def _target_json(target: BuildTarget | None) -> dict[str, Any] | None:
    return None if target is None else asdict(target)


def _target_of(value: dict[str, Any] | None) -> BuildTarget | None:
    if value is None:
        return None
    try:
        cuda = value["cuda"]
        return BuildTarget(
            str(value["torch"]),
            (int(cuda[0]), int(cuda[1])) if cuda else None,
            int(value["cuda_major"]) if value["cuda_major"] is not None else None,
            str(value["source"]),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return None  # a damaged cache entry: as if the metadata named none


def _failures(simulation: PackageSimulation) -> bool:
    return any(r.load is not None and not r.load.ok for r in simulation.results)


# -- a DLL of the package's own, loaded by its Python code before the .pyd -------------------


def _own_dlls_first(
    simulation: PackageSimulation, process: LoaderModel, facts: SourceFacts
) -> PackageSimulation:
    """Replay a ``.pyd`` whose own DLL its package's code loads or registers first.

    Per own DLL the ``.pyd`` misses: named beside a load call -> loaded by full path before the
    ``.pyd``; its folder named beside ``os.add_dll_directory`` -> that folder registered; the
    code loads or registers DLLs in a way not tied to it -> not provable either way, a warning.
    """
    plan = simulation.plan
    tree = plan.dist.distribution.tree
    missing: dict[PathKey, list[str]] = {}  # failing .pyd -> what it misses (nothing else)
    for result in simulation.results:
        if result.load is None or result.load.ok or result.step.loader != IMPORT:
            continue
        if all(f.kind == MISSING for f in result.load.failures):
            missing[path_key(result.step.path)] = [f.leaf.lower() for f in result.load.failures]
    if not missing:
        return simulation
    dlls = facts.get("own-dlls", list, lambda: _own_dlls(plan.dist))
    owned = {
        ntpath.basename(path).lower(): path
        for path in (join(plan.dist.site_dir, str(relative)) for relative in dlls)
        if tree.is_file(path)
    }
    wanted = {
        pyd: leaves for pyd, leaves in missing.items() if all(leaf in owned for leaf in leaves)
    }
    if not wanted:
        return simulation

    def loads_by_name(leaf: str) -> bool:
        return bool(facts.get(f"loads:{leaf}", bool, lambda: _loads_by_name(facts.sources(), leaf)))

    def registers(folder: str) -> bool:
        name = ntpath.basename(folder).lower()
        compute = lambda: _registers_folder(facts.sources(), folder)  # noqa: E731
        return bool(facts.get(f"registers:{name}", bool, compute))

    def loads_dlls() -> bool:
        return bool(facts.get("loads-dlls", bool, lambda: _loads_dlls(facts.sources())))

    registered = [
        ntpath.dirname(owned[leaf])
        for leaves in wanted.values()
        for leaf in leaves
        if registers(ntpath.dirname(owned[leaf]))
    ]
    steps: list[Step] = []
    for step in plan.steps:
        leaves = wanted.get(path_key(step.path), [])
        first: str | None = None
        unsure: list[str] = []
        for leaf in leaves:
            if ntpath.dirname(owned[leaf]) in registered:
                continue
            if loads_by_name(leaf):
                if all(path_key(s.path) != path_key(owned[leaf]) for s in steps):
                    steps.append(Step(owned[leaf], step.role, CTYPES, step.feature))
                first = first or owned[leaf]
            elif loads_dlls():
                unsure.append(leaf)
        if unsure:  # the package's code may well load it: a warning, never an error
            step = replace(
                step,
                role=OPTIONAL,
                feature=f"{step.feature} unless its own code loads {unsure[0]} first",
                reaction=(
                    f"may fail: {ntpath.basename(step.path)} needs {unsure[0]}, a DLL of "
                    f"{plan.name}'s own that the loader finds only if {plan.name}'s code loads "
                    "or registers it first (its code loads DLLs, not visibly this one)"
                ),
            )
        # the import comes after the preload, which raises first when it fails
        steps.append(replace(step, after=step.after or first))
    dirs = tuple(dict.fromkeys((*plan.dll_dirs, *registered)))
    changed = replace(plan, steps=tuple(steps), dll_dirs=dirs)
    if changed == plan:
        return simulation
    (resimulated,) = simulate_packages(process, [changed], torch_ok=True)
    return resimulated


def _own_dlls(dist: InstalledDist) -> list[str]:
    """The site-relative paths of the DLLs its RECORD lists."""
    return [r for r in dist.record_paths() if r.lower().endswith(".dll") and ".." not in r]


def _sources(dist: InstalledDist) -> dict[str, str]:
    """The text of the package's ``.py`` files its RECORD lists (bounded), by relative path."""
    tree = dist.distribution.tree
    texts: dict[str, str] = {}
    for relative in dist.record_paths():
        if not relative.endswith(".py") or ".." in relative.split("/"):
            continue
        text = tree.read_text(join(dist.site_dir, relative))
        if text is not None and len(text) <= _MAX_SOURCE_BYTES:
            texts[relative] = text
        if len(texts) >= _MAX_SOURCES:
            break
    return texts


def _loads_dlls(sources: list[str]) -> bool:
    return any(
        call.lower() in text.lower() for text in sources for call in (*_LOAD_CALLS, _REGISTER)
    )


def _registers_folder(sources: list[str], folder: str) -> bool:
    """Whether a module calls ``os.add_dll_directory`` and names ``folder`` (in quotes)."""
    name = ntpath.basename(folder).lower()
    for text in sources:
        lowered = text.lower()
        if _REGISTER.lower() in lowered and (f'"{name}"' in lowered or f"'{name}'" in lowered):
            return True
    return False


def _loads_by_name(sources: list[str], dll: str) -> bool:
    """Whether a module names ``dll`` (file name, or its stem in quotes) and loads DLLs."""
    stem = dll.rsplit(".", 1)[0]
    for text in sources:
        lowered = text.lower()
        named = dll in lowered or f'"{stem}"' in lowered or f"'{stem}'" in lowered
        if named and any(call.lower() in lowered for call in _LOAD_CALLS):
            return True
    return False


# -- a failure the package catches ------------------------------------------------------------


def _caught(
    simulation: PackageSimulation,
    target: BuildTarget | None,
    torch_version: str | None,
    facts: SourceFacts,
) -> PackageSimulation:
    plan = simulation.plan
    known = CAUGHT.get(plan.name)
    if known is None:
        return simulation
    failing = [
        r
        for r in simulation.results
        if r.load is not None
        and not r.load.ok
        and r.step.role == CORE
        and ntpath.basename(r.step.path).split(".", 1)[0].lower() == known.binary
    ]
    if not failing:
        return simulation
    found = facts.get("caught", list, lambda: _catches(plan.dist, known))
    if not found:
        return simulation  # this version's code does not catch it: the generic model holds
    lost = " ".join(str(found[0]).split())
    built = known.built_for.format(torch=target.label[len("torch ") :]) if target else ""
    have = f" (you have {torch_version})" if target and torch_version else ""
    reaction = f'succeeds, with the logged warning "{known.warning}{built}{have}"'
    what = lost.removesuffix(" won't be available.").removesuffix(" won't be available")
    feature = f"its C++/CUDA operators ({what})" if what and what != lost else "its C++ operators"
    if lost:
        reaction += f": {lost}"
    results = [
        StepResult(replace(r.step, role=OPTIONAL, feature=feature, reaction=reaction), r.load)
        if any(r is f for f in failing)
        else r
        for r in simulation.results
    ]
    steps = tuple(r.step for r in results) + plan.steps[len(results) :]
    return replace(simulation, plan=replace(plan, steps=steps), results=results)


def _catches(dist: InstalledDist, known: CaughtFailure) -> list[str] | None:
    """``[what is lost]`` when the installed source holds the catching code, else None."""
    text = dist.distribution.tree.read_text(join(dist.site_dir, known.source))
    if text is None or not all(marker in text for marker in known.markers):
        return None
    return [_constant(text, known.features) or ""]


def _constant(source: str, name: str) -> str | None:
    """The string a module assigns to ``name`` at its top level (read, never executed)."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in module.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
    return None


# -- what ``import <package>`` really imports ---------------------------------------------------


def _proven_imports(simulation: PackageSimulation, facts: SourceFacts) -> PackageSimulation:
    """Each extension module whose failed load is still said to break ``import <package>``,
    kept so only where the package's code proves that ``import <package>`` loads it."""
    plan = simulation.plan
    if plan.sibling:
        # torchvision / torchaudio: their loaders are data (_platforms.windows.siblings)
        return simulation
    failing = [
        r
        for r in simulation.results
        if r.load is not None and not r.load.ok and r.step.role == CORE and r.step.loader == IMPORT
    ]
    if not failing:
        return simulation
    found: list[tuple[Reach | None, dict[str, Source]]] = []

    def package_place(module: str) -> list[str]:
        if not found:
            sources = module_sources(facts.modules())
            found.append((reach(plan.import_name, sources), sources))
        return place(found[0][0], module, found[0][1])

    changed: dict[int, Step] = {}
    for result in failing:
        module = result.step.feature

        def compute(module: str = module) -> list[str]:
            return package_place(module)

        where = facts.get(f"reach:{module}", list, compute)
        step = _optional_step(result, plan.import_name, where)
        if step is not None:
            changed[id(result)] = step
    if not changed:
        return simulation
    results = [
        StepResult(changed[id(r)], r.load) if id(r) in changed else r for r in simulation.results
    ]
    steps = tuple(r.step for r in results) + plan.steps[len(results) :]
    return replace(simulation, plan=replace(plan, steps=steps), results=results)


def _optional_step(result: StepResult, package: str, where: list[str]) -> Step | None:
    """The failing step as a lost feature, or None when it stays what breaks the import."""
    step = result.step
    module = step.feature
    feature = lost_feature(package, module, where)
    if feature is None:
        return None
    winerror = result.load.winerror if result.load is not None else None
    stem = module.rsplit(".", 1)[-1]
    error = f'"DLL load failed while importing {stem}" (WinError {winerror})'
    kind = where[0] if where else UNREAD
    if kind == IMPORTED:
        how = where[2] or f"though nothing `import {package}` runs imports {where[1]}"
        reaction = (
            f"succeeds; {where[1]} imports {module} {how}, so what it provides is unavailable "
            f"({error})"
        )
    elif kind == UNREACHED:
        reaction = f"succeeds; importing {module} itself fails ({error})"
    else:
        reaction = (
            f"may fail: {module} does not load ({error}); whether `import {package}` imports "
            "it is not in any source torchguard could read"
        )
    return replace(step, role=OPTIONAL, feature=feature, reaction=reaction)
