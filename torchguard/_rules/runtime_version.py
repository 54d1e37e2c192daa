"""runtime-too-old: the Visual C++ runtime torch binds to is older than torch's toolset.

An **error** only where the replay proves the failure: a binary whose import table shows
mutexes laid out by the 14.40+ compiler (``_Mtx_lock`` without ``_Mtx_init_in_situ``) bound
to an ``msvcp140.dll`` older than 14.40 fails to initialise (WinError 1114;
:mod:`torchguard._platforms.windows.initialise`), and the predicted ``import torch`` says so. Every
other gap (import tables that cannot decide, an older ``vcruntime140.dll``, an older minor before
the mutex change) is a **warning**: Microsoft supports a runtime only as new as the newest
toolset of any component, but no failure of torch is proven from it. python.org's
``vcruntime140.dll`` beside python.exe (14.38 in CPython 3.11.9) is such a gap: ``std::mutex``
lives in ``msvcp140.dll``, and only another Python build replaces the copy python.exe loads
first.
torch's own DLLs carry no version resource: their linker version stands for the toolset.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator
from enum import Enum

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.mutex import CONSTRUCT, LOCK
from torchguard._facts.vocab import Code, Step
from torchguard._platforms.windows.initialise import MSVCP140, MUTEX_CHANGE, runtime_version
from torchguard._platforms.windows.loader import (
    APP_DIR,
    DLL_LOAD_DIR,
    INIT,
    LOADED,
    SYSTEM32,
    USER_DIR,
    Failure,
    Resolution,
)
from torchguard._platforms.windows.tree import same_path
from torchguard._platforms.windows.vcruntime import MutexEvidence, mutex_evidence
from torchguard._platforms.windows.vcruntime import toolset as built_with
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules import hints as _hints
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule


class _StartUp(Enum):
    """Where a copy came from when it is none of the loader's steps."""

    PYTHON_LOADED = "python_loaded"
    """Already loaded, from python.exe's folder: python.exe's own start-up copy."""


PYTHON_LOADED = _StartUp.PYTHON_LOADED


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    proven: set[str] = set()
    for load in context.guarded.loads:
        for failure in load.final_failures():
            if failure.kind == INIT and failure.leaf.lower() not in proven:
                proven.add(failure.leaf.lower())
                yield init_finding(context, ntpath.basename(load.root), failure)
    toolset = built_with(context.guarded, context.facts, context.torch.package_dir)
    if toolset is None:
        return
    evidence = mutex_evidence(context.guarded, context.facts, context.torch.package_dir)
    yield from _stale_copies(context, toolset, evidence)
    for root, resolution in _runtime_resolutions(context):
        if resolution.name.lower() in proven:
            continue
        version = runtime_version(context.facts, resolution.path)
        if version is None:
            continue
        if (version[0], version[1] // 10) >= (toolset[0], toolset[1] // 10):
            continue
        yield _gap(context, root, resolution, version, toolset, evidence)


def init_finding(context: CheckContext, root: str, failure: Failure) -> Finding:
    """The error for a proven initialisation failure (also used for torch's siblings)."""
    resolution = Resolution(failure.leaf, failure.path, _via(context, failure))
    toolset = _linker(context, failure.importer)
    importer = failure.chain[-2] if len(failure.chain) > 1 else root
    built = f"{toolset[0]}.{toolset[1]}" if toolset else "14.40+"
    return Finding(
        code=Code.RUNTIME_TOO_OLD,
        severity=ERROR,
        message=(
            f"{failure.leaf.lower()} {failure.detail} {_where(context, resolution)} is older "
            f"than 14.40, and {importer} is built with the Visual C++ {built} toolset and "
            f"locks mutexes the compiler laid out (it imports {LOCK} but not {CONSTRUCT}): "
            f"loading {root} fails with WinError 1114 (its initialisation fails, or it "
            "crashes), because the 14.40 runtime changed std::mutex"
        ),
        dll=root,
        missing=failure.leaf.lower(),
        chain=failure.chain,
        path=_shown_path(context, resolution),
        hints=_repair(context, resolution, toolset or MUTEX_CHANGE),
        rank=35,
    )


def _via(context: CheckContext, failure: Failure) -> Step | None:
    """The step that bound the runtime copy, from the guarded replay's modules."""
    leaf = failure.leaf.lower()
    for load in context.guarded.loads:
        found = load.modules.get(leaf)
        if found is not None and found.path and same_path(found.path, failure.path or ""):
            return found.via
    return None


def _linker(context: CheckContext, path: str | None) -> tuple[int, int] | None:
    try:
        return context.facts(path).linker_version if path else None
    except ImageUnavailable:
        return None


def _runtime_resolutions(context: CheckContext) -> Iterator[tuple[str, Resolution]]:
    """Each VC++ runtime DLL torch binds to, with the first torch binary that needs it."""
    seen: set[str] = set()
    for load in context.guarded.loads:
        for name, resolution in load.modules.items():
            if name in _hints.VC_RUNTIME and name not in seen and resolution.path:
                seen.add(name)
                yield ntpath.basename(load.root), resolution


def _gap(
    context: CheckContext,
    root: str,
    resolution: Resolution,
    version: tuple[int, ...],
    toolset: tuple[int, int],
    evidence: MutexEvidence,
) -> Finding:
    """A warning: older than the toolset, with no failure the replay can prove."""
    name = resolution.name.lower()
    shown = ".".join(map(str, version[:3]))
    why = "no failure of `import torch` is known from this gap"
    if name == MSVCP140 and tuple(version[:2]) < MUTEX_CHANGE and evidence.undecided:
        why = (
            f"{ntpath.basename(evidence.undecided)} constructs its mutexes through the runtime "
            f"(it imports {CONSTRUCT}), so the 14.40 std::mutex change is not proven to break "
            "`import torch`; whether every mutex of torch goes through that constructor is not "
            "in its import tables"
        )
    return Finding(
        code=Code.RUNTIME_TOO_OLD,
        severity=WARNING,
        message=(
            f"{name} {shown} {_where(context, resolution)} is older than the Visual C++ "
            f"{toolset[0]}.{toolset[1]} toolset torch {context.torch.version} was built with: "
            f"Microsoft supports only a runtime at least as new as the toolset, but {why}"
        ),
        dll=root,
        missing=name,
        chain=(root, name),
        path=_shown_path(context, resolution),
        hints=_repair(context, resolution, toolset),
        rank=65,
    )


def _where(context: CheckContext, resolution: Resolution) -> str:
    path = resolution.path or ""
    wording: dict[Step | _StartUp | None, str] = {
        SYSTEM32: "in System32",
        LOADED: f"already loaded into this process from {ntpath.dirname(path)}",
        PYTHON_LOADED: "beside python.exe (loaded by python.exe at start-up)",
        APP_DIR: "beside python.exe",
        USER_DIR: f"in {ntpath.dirname(path)}",
        DLL_LOAD_DIR: "in torch\\lib",
    }
    return wording.get(_source(context, resolution), f"at {path}")


def _shown_path(context: CheckContext, resolution: Resolution) -> str | None:
    path = resolution.path or ""
    return context.system.tree.origin(path) if resolution.via != LOADED else path


def _source(context: CheckContext, resolution: Resolution) -> Step | _StartUp | None:
    """The search step, telling python.exe's own start-up modules from other loaded ones."""
    app_dir = context.system.interpreter.app_dir
    if resolution.via == LOADED and same_path(ntpath.dirname(resolution.path or ""), app_dir):
        return PYTHON_LOADED
    return resolution.via


def _repair(
    context: CheckContext, resolution: Resolution, toolset: tuple[int, int]
) -> tuple[RepairHint, ...]:
    name = resolution.name.lower()
    path = resolution.path or ""
    ctx = context.hints
    redist = RepairHint(
        f"install the latest Microsoft Visual C++ Redistributable ({_hints.redist_cpu(ctx)}), "
        f"{toolset[0]}.{toolset[1] // 10 * 10} or newer",
        (_hints.winget_redist(ctx, "upgrade"), _hints.winget_redist(ctx, "install")),
        _hints.redist_url(ctx),
    )
    source = _source(context, resolution)
    if source == SYSTEM32:
        return (redist,)
    if source == PYTHON_LOADED or (source == APP_DIR and name.startswith("vcruntime140")):
        # Python's own copy (python.org ships vcruntime140*.dll beside python.exe, which
        # loads vcruntime140.dll before anything else): no Redistributable changes it, and
        # python.org publishes no newer installer for some versions (3.11.9 is 3.11's last),
        # so no command is offered.
        return (
            RepairHint(
                f"{name} ({path}) is Python's own copy; only a Python build "
                "that ships a newer copy replaces it (a newer Python version from python.org). "
                "Do not delete or replace Python's own file",
                (),
                "https://www.python.org/downloads/windows/",
            ),
        )
    if source == LOADED:
        return (
            RepairHint(
                f"another package imported before torch loaded this old {name} ({path}): "
                "import torch first (before PyQt5, PySide, onnxruntime ...), or update "
                "that package",
            ),
            redist,
        )
    owner = context.owner_of(path)
    if owner:
        fix = RepairHint(
            f"{path} comes from {owner}; update it so it ships a newer runtime",
            (context.hints.pip("install", "--upgrade", owner.split("==")[0]),),
        )
    else:
        fix = RepairHint(
            f"{path} is found before System32's copy; update whatever put it there, or "
            "remove it so the Redistributable's copy is used",
        )
    return (fix, redist)


def _stale_copies(
    context: CheckContext, toolset: tuple[int, int], evidence: MutexEvidence
) -> Iterator[Finding]:
    """A package ships an older msvcp140.dll and loads it when imported: imported before
    torch, every torch DLL binds to that copy (WinError 1114 where torch's import tables prove
    it). A warning: the order decides."""
    preloaded = any(p.switch.startswith("TORCHGUARD_VCRUNTIME") for p in context.preloads)
    if evidence.proven:
        outcome = "fails to initialise (WinError 1114). torch imported first works"
    else:
        outcome = (
            "may fail to initialise (WinError 1114): its binaries construct their mutexes "
            f"through the runtime (they import {CONSTRUCT}), which that copy supports, but "
            "whether all of them do is not in their import tables. torch imported first works"
        )
    for copy in context.stale_runtimes:
        shown = ".".join(map(str, copy.version[:3]))
        message = (
            f"{copy.dist} ships msvcp140.dll {shown} ({copy.path}) and loads it when imported "
            f"({ntpath.basename(copy.importer)} imports it): imported before torch, torch "
            f"{context.torch.version} (built with the {toolset[0]}.{toolset[1]} toolset) binds "
            f"to that copy and {outcome}"
        )
        hints = [
            RepairHint(f"import torch before {copy.dist} (or call torchguard.ensure() first)"),
            RepairHint(
                f"update {copy.dist} to a release that ships a current runtime",
                (context.hints.pip("install", "--upgrade", copy.dist),),
            ),
        ]
        if preloaded:
            hints.insert(
                0,
                RepairHint(
                    "automatic: torchguard.ensure() loads System32's newer msvcp140.dll first, "
                    f"so {copy.dist} binds to it too (TORCHGUARD_VCRUNTIME=keep turns this off)"
                ),
            )
        yield Finding(
            code=Code.RUNTIME_TOO_OLD,
            severity=WARNING,
            message=message,
            dll="c10.dll",
            missing="msvcp140.dll",
            chain=("c10.dll", "msvcp140.dll"),
            path=copy.path,
            hints=tuple(hints),
            package=copy.dist,
            rank=140,
        )
