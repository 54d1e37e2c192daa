"""Repair hints that fit the environment: pip or conda, CPU or CUDA build, Python version.

Hints point only at official sources (PyPI, download.pytorch.org, Microsoft, NVIDIA). Never at
DLL download sites: copying a stray DLL into System32 is how most of these problems start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from torchguard._binary.pe.machine import ARM64, X64, X86, label
from torchguard._facts.cuda_builds import (
    PREVIOUS_VERSIONS_URL,
    install_command,
    release_of,
    variant_tag,
)
from torchguard._platforms.windows.locate import split_local
from torchguard._report.findings import RepairHint

VC_RUNTIME = frozenset(
    {
        "msvcp140.dll",
        "msvcp140_1.dll",
        "msvcp140_2.dll",
        "msvcp140_atomic_wait.dll",
        "msvcp140_codecvt_ids.dll",
        "vcruntime140.dll",
        "vcruntime140_1.dll",
        "vcruntime140_threads.dll",
        "concrt140.dll",
        "vcomp140.dll",
        "vccorlib140.dll",
        "vcamp140.dll",
    }
)
#: Runtime DLLs that only the 14.40+ (Visual Studio 2022 17.10+) redistributable has.
VC_RUNTIME_14_40 = frozenset({"vcruntime140_threads.dll"})
_PYTHON_DLL = re.compile(r"^python(\d)(\d+)(t?)\.dll$")
_CUDA_DLL = re.compile(
    r"^(cudart|cublas|cublaslt|cufft|curand|cusolver|cusparse|cudnn|nvrtc|nvjitlink|cupti|nvtoolsext)",
    re.IGNORECASE,
)


_TORCH_CUDA_DLL = re.compile(r"^(c10|torch)_cuda[a-z0-9_]*\.dll$", re.IGNORECASE)


def is_cuda_dll(name: str) -> bool:
    """A CUDA library, or torch's own CUDA half (``torch_cuda.dll``, ``c10_cuda.dll``)."""
    return bool(_CUDA_DLL.match(name) or _TORCH_CUDA_DLL.match(name))


@dataclass(frozen=True)
class HintContext:
    """What repair commands must fit."""

    python_cmd: str = "python"
    torch_version: str | None = None
    cuda: str | None = None
    conda: bool = False
    python_version: tuple[int, int] | None = None
    python_machine: int = X64
    siblings: tuple[str, ...] = ()
    """torchvision and torchaudio, when installed: a new torch needs their matching release."""

    @property
    def variant(self) -> str | None:
        return split_local(self.torch_version)[1] if self.torch_version else None

    @property
    def index_url(self) -> str | None:
        """The download.pytorch.org index for this build; None for a plain PyPI wheel and for a
        ``+cpu`` build, since PyPI's Windows wheels of torch, torchvision and torchaudio are
        the CPU builds: a fix from PyPI needs no second index (which may be unreachable)."""
        variant = self.variant
        if variant in (None, "cpu"):
            return None
        return f"https://download.pytorch.org/whl/{variant}"

    def pip(self, *args: str) -> str:
        command = f"{self.python_cmd} -m pip " + " ".join(args)
        wants_torch = any(a.startswith(('"torch', "torch")) for a in args)
        if self.index_url and wants_torch and "--index-url" not in args:
            command += f" --index-url {self.index_url}"
        return command

    @property
    def base_version(self) -> str | None:
        return split_local(self.torch_version)[0] if self.torch_version else None


#: torchvision and torchaudio released with each torch a fix points to (their metadata pins it).
MATCHING_RELEASES: dict[str, dict[str, str]] = {
    "2.4.1": {"torchvision": "0.19.1", "torchaudio": "2.4.1"},
}


def install_release(ctx: HintContext, version: str) -> str:
    """Install exactly torch ``version`` and the installed torchvision/torchaudio releases made
    for it, from this build's index (``+cpu``, ``+cu124``): not "the newest", which would also
    move a pinned torchvision."""
    matching = MATCHING_RELEASES.get(version, {})
    siblings = [(name, matching[name]) for name in ctx.siblings if name in matching]
    if ctx.conda:
        pins = " ".join(f"{name}={pin}" for name, pin in siblings)
        return f"conda install pytorch={version}" + (f" {pins}" if pins else "") + " -c pytorch"
    return ctx.pip("install", f"torch=={version}", *(f"{n}=={p}" for n, p in siblings))


def upgrade_torch(ctx: HintContext) -> str:
    """A newer torch, with the torchvision/torchaudio installed beside it upgraded in the same
    command: upgraded alone, torch moves past the release a pinned torchvision was made for."""
    return ctx.pip("install", "--upgrade", "torch", *ctx.siblings)


def reinstall_torch(ctx: HintContext, summary: str) -> RepairHint:
    version = f"={ctx.base_version}" if ctx.base_version else ""
    if ctx.conda:
        return RepairHint(summary, (f"conda install --force-reinstall pytorch{version}",))
    pin = f"torch={version}" if version else "torch"
    return RepairHint(
        summary, (ctx.pip("install", "--force-reinstall", "--no-deps", "--no-cache-dir", pin),)
    )


def redist_cpu(ctx: HintContext) -> str:
    """The VC++ redistributable's CPU the running Python needs: x86, x64 or arm64."""
    cpus: dict[int, str] = {X86: "x86", ARM64: "arm64"}
    return cpus.get(ctx.python_machine, "x64")


def redist_url(ctx: HintContext) -> str:
    return f"https://aka.ms/vs/17/release/vc_redist.{redist_cpu(ctx)}.exe"


def winget_redist(ctx: HintContext, verb: str) -> str:
    return f"winget {verb} --id Microsoft.VCRedist.2015+.{redist_cpu(ctx)} --exact"


def vc_redist(ctx: HintContext, name: str) -> RepairHint:
    newer = name in VC_RUNTIME_14_40
    summary = (
        f"{name} ships with the Microsoft Visual C++ 2015-2022 Redistributable "
        f"({redist_cpu(ctx)})"
        + (", version 14.40 or newer" if newer else "")
        + "; install or update it"
    )
    commands = [winget_redist(ctx, "install")]
    if newer:
        commands.append(winget_redist(ctx, "upgrade"))
    if ctx.conda:
        commands.append("conda install -c conda-forge vc14_runtime")
    return RepairHint(summary, tuple(commands), redist_url(ctx))


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
            "https://www.nvidia.com/drivers",
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


def for_corrupt(name: str, ctx: HintContext, owner: str | None) -> tuple[RepairHint, ...]:
    """``owner`` is the distribution whose RECORD lists the file (``torch``, ``mkl==2021.4.0``)."""
    summary = (
        f"{name} is damaged (an interrupted download or unpack, a full disk, or an antivirus); "
        "reinstall it without the pip cache"
    )
    if owner is None or owner.split("==")[0] == "torch":
        return (reinstall_torch(ctx, summary),)
    return (
        RepairHint(
            summary,
            (ctx.pip("install", "--force-reinstall", "--no-deps", "--no-cache-dir", owner),),
        ),
    )


#: Where PyTorch publishes its CPU-only Windows ARM64 builds: PyPI's torch wheels for Windows
#: are all win_amd64 (checked through torch 2.15.0), none win_arm64 and none win32.
ARM64_INDEX = "https://download.pytorch.org/whl/cpu"


def for_arch(name: str, ctx: HintContext, machine: str) -> tuple[RepairHint, ...]:
    """Fixes for a DLL of another CPU, fitting the CPU of the Python that runs."""
    version = "{}.{}".format(*ctx.python_version) if ctx.python_version else "3.12"
    python = label(ctx.python_machine)
    x64_python = (
        f"winget install --id Python.Python.{version} --exact --architecture x64",
        f"py -{version}-64 -m pip install --force-reinstall torch",
    )
    if ctx.python_machine == X86:
        return (
            RepairHint(
                f"{name} is built for {machine}, and this Python is 32-bit (x86): torch has no "
                "32-bit Windows builds; install 64-bit (x64) Python from python.org",
                x64_python,
                "https://www.python.org/downloads/windows/",
            ),
        )
    if ctx.python_machine == ARM64:
        return (
            RepairHint(
                f"{name} is built for {machine}, but this Python is ARM64: PyPI has no Windows "
                "ARM64 build of torch; PyTorch's own index has CPU-only ARM64 builds",
                (
                    f"{ctx.python_cmd} -m pip install --force-reinstall torch --index-url "
                    f"{ARM64_INDEX}",
                ),
                "https://pytorch.org/get-started/locally/",
            ),
            RepairHint(
                "or use an x64 Python, which Windows on ARM runs emulated, with PyPI's x64 torch",
                x64_python,
                "https://www.python.org/downloads/windows/",
            ),
        )
    return (
        RepairHint(
            f"{name} is built for {machine}, not for this 64-bit {python} Python; torch needs "
            f"64-bit ({python}) Python from python.org and {python} DLLs",
            (
                f"winget install --id Python.Python.{version} --exact",
                f"py -{version}-64 -m pip install --force-reinstall torch",
            ),
            "https://www.python.org/downloads/windows/",
        ),
    )


def for_not_found(ctx: HintContext) -> tuple[RepairHint, ...]:
    return (
        RepairHint(
            "install torch into the environment of the Python that runs your program",
            (f"{ctx.python_cmd} -m pip install torch",),
            "https://pytorch.org/get-started/locally/",
        ),
    )
