"""Repair hints that fit the environment: pip or conda, CPU or CUDA build, Python version.

Hints point only at official sources (PyPI, download.pytorch.org, Microsoft, NVIDIA). Never at
DLL download sites: copying a stray DLL into System32 is how most of these problems start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchguard._binary.pe.machine import ARM64, X64, X86, label
from torchguard._platforms.windows.locate import split_local
from torchguard._report.findings import RepairHint
from torchguard._rules.links import INSTALL_TORCH_URL

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
                INSTALL_TORCH_URL,
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
            INSTALL_TORCH_URL,
        ),
    )
