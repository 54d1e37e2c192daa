"""Hints for a DLL found nowhere the Windows loader looks, by what the DLL is: a Visual C++
runtime, Python's own DLL, part of torch, MKL, OpenMP, the NVIDIA driver, a CUDA library."""

from __future__ import annotations

import re
from collections.abc import Callable

from torchguard._facts.cuda_builds import (
    PREVIOUS_VERSIONS_URL,
    install_command,
    release_of,
    variant_tag,
)
from torchguard._report.findings import RepairHint
from torchguard._rules.hints import (
    VC_RUNTIME,
    HintContext,
    install_release,
    is_cuda_dll,
    reinstall_torch,
    upgrade_torch,
    vc_redist,
)
from torchguard._rules.links import DRIVERS_URL

_PYTHON_DLL = re.compile(r"^python(\d)(\d+)(t?)\.dll$")


def _python_dll(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    python = _PYTHON_DLL.match(name.lower())
    wanted = f"{python[1]}.{python[2]}{python[3]}" if python else "?"  # 3.13t: free-threaded
    return (
        RepairHint(
            f"this torch was built for Python {wanted}; install torch with the interpreter "
            "that runs your program, or run it with Python " + wanted,
            (
                ctx.pip("install", "--force-reinstall", "torch"),
                f"py -{wanted} -m pip install torch",
            ),
        ),
    )


def _part_of_torch(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    summary = f"{name} is part of torch itself and is missing: the install is incomplete"
    return (reinstall_torch(ctx, summary),)


def _mkl(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    command = "conda install mkl" if ctx.conda else upgrade_torch(ctx)
    summary = f"{name} comes from Intel MKL, which this torch loads dynamically"
    return (RepairHint(summary, (command,)),)


def _intel_openmp(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    command = (
        "conda install intel-openmp"
        if ctx.conda
        else ctx.pip("install", "--force-reinstall", "--no-deps", "intel-openmp")
    )
    summary = "libiomp5md.dll is Intel OpenMP; pip wheels of torch ship it in torch\\lib"
    return (RepairHint(summary, (command,)),)


def _nvidia_driver(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    cpu_build = ctx.pip(
        "install",
        "--force-reinstall",
        "torch",
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
    )
    return (
        RepairHint(
            "nvcuda.dll is installed by the NVIDIA display driver; install the driver, "
            "or use a CPU build of torch",
            (cpu_build,),
            DRIVERS_URL,
        ),
    )


def _cuda_library(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    if ctx.cuda is None:  # a CPU build has no CUDA DLL to restore: never reinstall it
        return (cuda_torch(ctx, name),)
    summary = (
        f"{name} is a CUDA library this torch build needs; reinstall torch from the "
        "index of its CUDA variant so the CUDA DLLs come with it"
    )
    return (reinstall_torch(ctx, summary),)


def _no_provider(name: str, ctx: HintContext) -> tuple[RepairHint, ...]:
    summary = (
        f"no installed package provides {name}; reinstall torch, and do not copy the DLL from "
        "DLL download sites"
    )
    return (reinstall_torch(ctx, summary),)


#: Whether a case applies: (the DLL name in lower case, whether torch's RECORD lists it).
_Applies = Callable[[str, bool], bool]
_Hints = Callable[[str, HintContext], "tuple[RepairHint, ...]"]

#: The hints for a missing DLL, by the first case that applies (order matters: a torch-owned
#: ``mkl_*.dll`` is torch's incomplete install, not MKL's).
_FOR_MISSING: tuple[tuple[_Applies, _Hints], ...] = (
    (lambda name, owned: name in VC_RUNTIME, lambda name, ctx: (vc_redist(ctx, name.lower()),)),
    (lambda name, owned: name == "libomp140.x86_64.dll", lambda name, ctx: _libomp(ctx)),
    (lambda name, owned: _PYTHON_DLL.match(name) is not None, _python_dll),
    (lambda name, owned: owned, _part_of_torch),
    (lambda name, owned: name.startswith("mkl_"), _mkl),
    (lambda name, owned: name == "libiomp5md.dll", _intel_openmp),
    (lambda name, owned: name == "nvcuda.dll", _nvidia_driver),
    (lambda name, owned: is_cuda_dll(name), _cuda_library),
)


def for_missing(name: str, ctx: HintContext, torch_owned: bool) -> tuple[RepairHint, ...]:
    """Hints for a DLL that cannot be found anywhere the loader looks."""
    lowered = name.lower()
    for applies, hints in _FOR_MISSING:
        if applies(lowered, torch_owned):
            return hints(name, ctx)
    return _no_provider(name, ctx)


def cuda_torch(ctx: HintContext, name: str) -> RepairHint:
    """A CUDA DLL wanted beside a CPU build of torch: reinstalling that build cannot bring it."""
    release = release_of(ctx.base_version or "")
    version = ctx.base_version or "torch"
    head = (
        f"{name} is a CUDA library and this torch ({ctx.torch_version or 'unknown version'}) is "
        "a CPU build, which has none: what needs it was built for a CUDA build of torch"
    )
    if release is None or not release.variants:
        return RepairHint(
            f"{head}; install torch {version} from the CUDA index that fits your driver",
            (),
            PREVIOUS_VERSIONS_URL,
        )
    cuda = release.variants[-1]
    command = install_command(ctx.python_cmd, version, cuda, conda=ctx.conda, release=release)
    return RepairHint(
        f"{head}; install the CUDA {cuda[0]}.{cuda[1]} build of torch {version} (the newest "
        f"this release has; {', '.join(variant_tag(v) for v in release.variants)} "
        "exist, pick one your driver runs)",
        (command,),
        PREVIOUS_VERSIONS_URL,
    )


def _libomp(ctx: HintContext) -> tuple[RepairHint, ...]:
    if ctx.base_version == "2.4.0":
        return (
            RepairHint(
                "torch 2.4.0 for Windows links LLVM OpenMP (libomp140.x86_64.dll), which no "
                "redistributable installs; torch 2.4.1 fixed it (pytorch#131662): install 2.4.1",
                (install_release(ctx, "2.4.1"),),
                "https://github.com/pytorch/pytorch/issues/131662",
            ),
        )
    return (
        RepairHint(
            "libomp140.x86_64.dll is Visual Studio's LLVM OpenMP and is not redistributable; "
            "install a torch build that does not need it, or the Visual Studio Build Tools "
            "'MSVC v143 C++ x64/x86 build tools' component",
            (upgrade_torch(ctx),),
        ),
    )
