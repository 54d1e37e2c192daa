"""locate -> plan -> read -> resolve -> check -> report, on any :class:`System`."""

from __future__ import annotations

import ntpath
import time
from collections.abc import Callable

from torchguard._cache import FactsCache, cache_dir, host_key, member_key
from torchguard._dists import find_dists
from torchguard._findings import ERROR, Finding
from torchguard._fs import ZIP_ERRORS, AssumedFile, HostFile, MemberStream, WinTree, ZipMember
from torchguard._hints import HintContext, for_not_found
from torchguard._loader import LoaderModel
from torchguard._locate import companions, locate_torch, related
from torchguard._machine import label
from torchguard._pe import PEFacts, PEReadError, read_pe, read_pe_stream
from torchguard._plan import plan_directories
from torchguard._report import DistSummary, DllDirectory, ModuleRecord, Report, TorchSummary
from torchguard._rules import CheckContext, run_rules
from torchguard._simulate import simulate_import
from torchguard._system import System


def facts_reader(tree: WinTree, persistent: FactsCache | None = None) -> Callable[[str], PEFacts]:
    """Read PE facts of a tree path once; failures are remembered too.

    With ``persistent``, facts of unchanged files come from the on-disk cache.
    """
    cache: dict[str, PEFacts | PEReadError] = {}

    def facts(path: str) -> PEFacts:
        key = ntpath.normcase(path)
        if key not in cache:
            cache[key] = _cached_read(tree, path, persistent)
        found = cache[key]
        if isinstance(found, PEReadError):
            raise found
        return found

    return facts


def _cached_read(tree: WinTree, path: str, persistent: FactsCache | None) -> PEFacts | PEReadError:
    entry = tree.entry(path)
    if entry is None or isinstance(entry, AssumedFile):
        why = "the file disappeared" if entry is None else f"{entry.origin} has no file to read"
        return PEReadError(why)
    if persistent is None:
        return _read(tree, path)
    key = _identity(tree, path)
    found = persistent.get(key)
    if found is None:
        found = _read(tree, path)
        persistent.put(key, found)
    return found


def _identity(tree: WinTree, path: str) -> str | None:
    entry = tree.entry(path)
    if isinstance(entry, HostFile):
        return host_key(entry.path)
    if isinstance(entry, ZipMember):
        try:
            info = tree.archive(entry.archive).getinfo(entry.member)
        except ZIP_ERRORS:
            return None
        return member_key(entry.archive, entry.member, info.CRC, info.file_size)
    return None


def _read(tree: WinTree, path: str) -> PEFacts | PEReadError:
    entry = tree.entry(path)
    if entry is None:
        return PEReadError("the file disappeared while it was being checked")
    if isinstance(entry, AssumedFile):
        return PEReadError(f"{entry.origin} cannot be read")
    try:
        if isinstance(entry, HostFile):
            return read_pe(entry.path)
        if isinstance(entry, ZipMember):
            try:
                archive = tree.archive(entry.archive)
            except ZIP_ERRORS as exc:
                return PEReadError(f"cannot read the file: {exc}")
            with MemberStream(archive, entry.member) as stream:
                return read_pe_stream(stream, entry.size)  # type: ignore[arg-type]
        return read_pe(tree.read_entry(entry))
    except PEReadError as exc:
        return exc
    except (OSError, MemoryError) as exc:  # I/O and zip damage only: see MemberStream
        return PEReadError(f"cannot read the file: {exc}")


def analyze(system: System, *, cwd: str | None = None) -> Report:
    """The whole analysis; never raises for bad input, which becomes findings."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    interpreter = system.interpreter
    python = {
        "version": f"{interpreter.version[0]}.{interpreter.version[1]}",
        "executable": interpreter.executable,
        "app_dir": interpreter.app_dir,
        "machine": label(interpreter.machine),
    }
    hint_base = HintContext(
        python_cmd=system.python_cmd,
        python_version=interpreter.version,
        python_machine=interpreter.machine,
    )
    if system.torch_package_dir is None:
        return Report(findings=(torch_not_found(hint_base),), mode=_mode(system), python=python)
    dists = find_dists(system.tree, interpreter.site_dirs)
    torch = locate_torch(system.tree, system.torch_package_dir, dists)
    timings["locate"] = time.perf_counter() - start
    plan = plan_directories(system.tree, interpreter, torch, companions(dists), cwd=cwd)
    timings["plan"] = time.perf_counter() - start - sum(timings.values())
    persistent = FactsCache(cache_dir())
    facts = facts_reader(system.tree, persistent)

    def model(dirs: list[DllDirectory]) -> LoaderModel:
        return LoaderModel(
            tree=system.tree,
            facts=facts,
            machine=interpreter.machine,
            app_dir=interpreter.app_dir,
            system32=system.system32,
            user_dirs=tuple(d.path for d in dirs),
            known_dlls=system.known_dlls,
            loaded={k.lower(): v for k, v in system.loaded.items()},
        )

    ntfs = not system.live  # live: the order the file system really lists, as torch's glob
    guarded = simulate_import(
        model(plan), torch.lib_dir, torch.extensions, interpreter.path_dirs, ntfs_order=ntfs
    )
    unguarded = simulate_import(
        model([d for d in plan if d.by_torch]),
        torch.lib_dir,
        torch.extensions,
        interpreter.path_dirs,
        ntfs_order=ntfs,
    )
    timings["resolve"] = time.perf_counter() - start - sum(timings.values())
    installer = torch.installer()
    hints = HintContext(
        python_cmd=system.python_cmd,
        torch_version=torch.version,
        cuda=torch.cuda,
        conda=installer == "conda" or (interpreter.is_conda and installer != "pip"),
        python_version=interpreter.version,
        python_machine=interpreter.machine,
    )
    context = CheckContext(system, torch, plan, guarded, unguarded, hints, facts, dists)
    findings = run_rules(context)
    persistent.save()
    timings["check"] = time.perf_counter() - start - sum(timings.values())
    modules: dict[str, ModuleRecord] = {}
    for load in guarded.loads:
        for name, resolution in load.modules.items():
            if name not in modules:
                path = resolution.path
                modules[name] = ModuleRecord(
                    resolution.name,
                    system.tree.origin(path)
                    if path and resolution.via not in ("apiset",)
                    else path,
                    resolution.via,
                )
    timings["total"] = time.perf_counter() - start
    return Report(
        findings=tuple(findings),
        torch=TorchSummary(torch.version, torch.origin, torch.variant, torch.cuda),
        mode=_mode(system),
        python=python,
        dll_directories=tuple(plan),
        distributions=tuple(DistSummary(d.name, d.version) for d in related(dists)),
        import_torch=guarded.outcome(),
        import_torch_without_torchguard=unguarded.outcome(),
        modules=tuple(modules.values()),
        timings=timings,
    )


def torch_not_found(hints: HintContext) -> Finding:
    return Finding(
        code="torch-not-found",
        severity=ERROR,
        message="torch is not installed where this Python imports packages from",
        hints=for_not_found(hints),
        rank=0,
    )


def _mode(system: System) -> str:
    return "live" if system.live else "offline"
