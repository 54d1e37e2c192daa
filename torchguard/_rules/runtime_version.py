"""runtime-too-old: the Visual C++ runtime torch binds to is older than torch's toolset.

Microsoft supports a runtime only as new as the newest toolset of any component. The 14.40
runtime (Visual Studio 2022 17.10) changed ``std::mutex``; binaries built with 14.40+ fail to
initialise (WinError 1114) or crash on an older ``msvcp140.dll``, typically an old System32
copy, one beside python.exe, or one another package loaded first (PyQt5's ``Qt5\\bin``).
torch's own DLLs carry no version resource: their linker version stands for the toolset.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._binary.pe.errors import PEReadError
from torchguard._model.loader import APP_DIR, DLL_LOAD_DIR, LOADED, SYSTEM32, USER_DIR, Resolution
from torchguard._model.vcruntime import toolset
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules import hints as _hints
from torchguard._rules.context import CheckContext
from torchguard._vocab import Code
from torchguard._windows.tree import same_path

MUTEX_CHANGE = (14, 40)
PYTHON_LOADED = "python_loaded"


def check(context: CheckContext) -> Iterator[Finding]:
    toolset = _toolset(context)
    if toolset is None:
        return
    yield from _stale_copies(context)
    for root, resolution in _runtime_resolutions(context):
        try:
            version = context.facts(resolution.path or "").file_version
        except PEReadError:
            continue  # an assumed or unreadable file: no version to judge
        if version is None or version[0] != 14:
            continue
        if (version[0], version[1] // 10) >= (toolset[0], toolset[1] // 10):
            continue
        yield _finding(context, root, resolution, version, toolset)


def _toolset(context: CheckContext) -> tuple[int, int] | None:
    """The newest MSVC 14.x linker version among torch's own binaries that load."""
    return toolset(context.guarded, context.facts, context.torch.package_dir)


def _runtime_resolutions(context: CheckContext) -> Iterator[tuple[str, Resolution]]:
    """Each VC++ runtime DLL torch binds to, with the first torch binary that needs it."""
    seen: set[str] = set()
    for load in context.guarded.loads:
        for name, resolution in load.modules.items():
            if name in _hints.VC_RUNTIME and name not in seen and resolution.path:
                seen.add(name)
                yield ntpath.basename(load.root), resolution


def _finding(
    context: CheckContext,
    root: str,
    resolution: Resolution,
    version: tuple[int, int, int, int],
    toolset: tuple[int, int],
) -> Finding:
    name = resolution.name.lower()
    path = resolution.path or ""
    shown = ".".join(map(str, version[:3]))
    where = {
        SYSTEM32: "in System32",
        LOADED: f"already loaded into this process from {ntpath.dirname(path)}",
        PYTHON_LOADED: "beside python.exe, which loaded it at start-up",
        APP_DIR: "beside python.exe",
        USER_DIR: f"in {ntpath.dirname(path)}",
        DLL_LOAD_DIR: "in torch\\lib",
    }.get(_source(context, resolution), f"at {path}")
    crash = toolset >= MUTEX_CHANGE and version[:2] < MUTEX_CHANGE
    consequence = (
        "torch fails to initialise (WinError 1114) or crashes, because the 14.40 runtime "
        "changed std::mutex"
        if crash
        else "Microsoft supports only a runtime at least as new as the toolset"
    )
    return Finding(
        code=Code.RUNTIME_TOO_OLD,
        severity=ERROR if crash else WARNING,
        message=(
            f"{name} {shown} {where} is older than the Visual C++ {toolset[0]}.{toolset[1]} "
            f"toolset torch {context.torch.version} was built with: {consequence}"
        ),
        dll=root,
        missing=name,
        chain=(root, name),
        path=context.system.tree.origin(path) if resolution.via != LOADED else path,
        hints=_repair(context, resolution, toolset),
        rank=35 if crash else 65,
    )


def _source(context: CheckContext, resolution: Resolution) -> str:
    """The search step, telling python.exe's own start-up modules from other loaded ones."""
    app_dir = context.system.interpreter.app_dir
    if resolution.via == LOADED and same_path(ntpath.dirname(resolution.path or ""), app_dir):
        return PYTHON_LOADED
    return resolution.via or ""


def _python_version(context: CheckContext) -> str:
    major, minor = context.system.interpreter.version
    return f"{major}.{minor}"


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
    if source == PYTHON_LOADED:
        return (
            RepairHint(
                f"this Python ships {name} {path} and loads it before anything else: install "
                "a current Python build (python.org), whose runtime is newer",
                (f"winget upgrade --id Python.Python.{_python_version(context)} --exact",),
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


def _stale_copies(context: CheckContext) -> Iterator[Finding]:
    """A package ships an older msvcp140.dll and loads it when imported: imported before
    torch, every torch DLL binds to that copy (WinError 1114). A warning: the order decides."""
    toolset = _toolset(context) or MUTEX_CHANGE
    preloaded = any(p.switch.startswith("TORCHGUARD_VCRUNTIME") for p in context.preloads)
    for copy in context.stale_runtimes:
        shown = ".".join(map(str, copy.version[:3]))
        message = (
            f"{copy.dist} ships msvcp140.dll {shown} ({copy.path}) and loads it when imported "
            f"({ntpath.basename(copy.importer)} imports it): imported before torch, torch "
            f"{context.torch.version} (built with the {toolset[0]}.{toolset[1]} toolset) binds "
            "to that copy and fails to initialise (WinError 1114). torch imported first works"
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
