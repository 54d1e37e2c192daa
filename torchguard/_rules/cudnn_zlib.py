"""cudnn-zlib-missing: a cuDNN that loads zlibwapi.dll by name, and no zlibwapi.dll to find.

cuDNN 8.3 to 9.1 on Windows need zlib's ``zlibwapi.dll`` (NVIDIA's install guides; cuDNN 9.2
links zlib statically, conda-forge/cudnn-feedstock 3a22463). The real cuDNN 8.9.4 DLLs do not
import it: the small dispatcher ``cudnn64_8.dll`` names it and loads it at run time, so
``import torch`` works and the first convolution fails with "Could not locate zlibwapi.dll.
Please make sure it is in your library path!". torch's CUDA wheels bundle it in ``torch\\lib``
(copied from the build machine's System32). Judged on the cuDNN present: only a dispatcher
whose bytes name ``zlibwapi.dll`` counts.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.tree import join
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.hints import reinstall_torch
from torchguard._rules.registry import WINDOWS, rule

ZLIB = "zlibwapi.dll"
DISPATCHERS = ("cudnn64_8.dll", "cudnn64_9.dll")
_MAX_DISPATCHER = 16 << 20  # the dispatchers are small (0.3 MB); never read a big file whole


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    tree = context.system.tree
    lib = context.torch.lib_dir
    dispatcher = next((d for d in DISPATCHERS if tree.lookup(lib, d) is not None), None)
    if dispatcher is None or not _names_zlib(context, join(lib, dispatcher)):
        return
    if _findable(context):
        return
    yield Finding(
        code=Code.CUDNN_ZLIB_MISSING,
        severity=WARNING,
        message=(
            f"torch's cuDNN ({dispatcher}) loads {ZLIB} by name when it first runs, and no "
            f"{ZLIB} is in torch\\lib, beside python.exe, in System32 or on PATH: import torch "
            'works, the first convolution fails with "Could not locate zlibwapi.dll"'
        ),
        missing=ZLIB,
        path=tree.origin(join(lib, dispatcher)),
        hints=(
            reinstall_torch(
                context.hints,
                f"torch's CUDA wheels ship {ZLIB} in torch\\lib; reinstall torch so it comes back",
            ),
            RepairHint(
                "do not copy zlibwapi.dll from DLL download sites; builds with cuDNN 9.2 or "
                "newer do not need it (torch 2.7's CUDA 12.6 and 12.8 builds use cuDNN 9.5 and "
                "9.7)",
                (),
                "https://docs.nvidia.com/deeplearning/cudnn/installation/latest/windows.html",
            ),
        ),
        rank=74,
    )


def _names_zlib(context: CheckContext, path: str) -> bool:
    entry = context.system.tree.entry(path)
    size = getattr(entry, "size", None)
    if size is not None and size > _MAX_DISPATCHER:
        return False
    try:
        data = context.system.tree.read_bytes(path)
    except OSError:
        return False
    return len(data) <= _MAX_DISPATCHER and ZLIB.encode() in data.lower()


def _findable(context: CheckContext) -> bool:
    """Where a plain LoadLibrary("zlibwapi.dll") looks, plus every registered DLL folder."""
    system = context.system
    if ZLIB in {name.lower() for name in system.loaded}:
        return True
    folders = [
        context.torch.lib_dir,  # torch preloads every torch\lib\*.dll, so it is loaded by then
        system.interpreter.app_dir,
        system.system32,
        *(d.path for d in context.plan),
        *system.interpreter.path_dirs,
    ]
    return any(system.tree.lookup(folder, ZLIB) is not None for folder in folders)
