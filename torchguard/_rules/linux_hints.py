"""Linux repair commands: what pip or conda must be told (the CUDA major, the interpreter,
LD_LIBRARY_PATH, torch's own pins), and which NVIDIA wheel ships a library.

Shared by every Linux rule, so one library gets the same command whichever rule names it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from torchguard._platforms.linux.requirements import TorchRequirements, canonical
from torchguard._report.findings import RepairHint

#: soname prefix -> the NVIDIA wheel (without the -cuNN suffix) that ships it.
NVIDIA_WHEELS: Mapping[str, str] = {
    "libnvJitLink.so": "nvidia-nvjitlink",
    "libcusparse.so": "nvidia-cusparse",
    "libcusparseLt.so": "nvidia-cusparselt",
    "libcublas.so": "nvidia-cublas",
    "libcublasLt.so": "nvidia-cublas",
    "libcudnn": "nvidia-cudnn",
    "libcudart.so": "nvidia-cuda-runtime",
    "libnvrtc": "nvidia-cuda-nvrtc",
    "libcufft.so": "nvidia-cufft",
    "libcurand.so": "nvidia-curand",
    "libcusolver.so": "nvidia-cusolver",
    "libnccl.so": "nvidia-nccl",
    "libcupti.so": "nvidia-cuda-cupti",
    "libnvshmem_host.so": "nvidia-nvshmem",
    "libcufile.so": "nvidia-cufile",
    "libnvToolsExt.so": "nvidia-nvtx",
}


#: NVIDIA wheel -> the ``cuda-toolkit`` extra that installs it. From CUDA 13 these wheels
#: carry no ``-cuNN`` suffix and torch asks for them through ``cuda-toolkit[...]``.
_TOOLKIT_EXTRAS: Mapping[str, str] = {
    "nvidia-cublas": "cublas",
    "nvidia-cuda-runtime": "cudart",
    "nvidia-cufft": "cufft",
    "nvidia-cufile": "cufile",
    "nvidia-cuda-cupti": "cupti",
    "nvidia-curand": "curand",
    "nvidia-cusolver": "cusolver",
    "nvidia-cusparse": "cusparse",
    "nvidia-nvjitlink": "nvjitlink",
    "nvidia-cuda-nvrtc": "nvrtc",
    "nvidia-nvtx": "nvtx",
}


@dataclass(frozen=True)
class LinuxHints:
    """What repair commands must fit: pip or conda, the CUDA major, the interpreter, the
    process's LD_LIBRARY_PATH and torch's own pins."""

    python_cmd: str = "python"
    torch_version: str | None = None
    cuda: str | None = None
    conda: bool = False
    ld_library_path: tuple[str, ...] = ()
    requirements: TorchRequirements | None = None

    @property
    def cuda_major(self) -> str | None:
        return self.cuda.split(".")[0] if self.cuda else None

    def pip(self, *args: str) -> str:
        return f"{self.python_cmd} -m pip " + " ".join(args)

    def spec(self, wheel: str) -> str:
        """``wheel`` as torch pins it (``nvidia-cudnn-cu12==9.10.2.21``, or
        ``'cuda-toolkit[cublas]==13.0.3'`` for CUDA 13), else the bare name."""
        found = self.requirements
        if found is None:
            return wheel
        name = canonical(wheel)
        if name in found.pins:
            return f"{name}=={found.pins[name]}"
        extra = _TOOLKIT_EXTRAS.get(re.sub(r"-cu\d+$", "", name))
        for project, wanted in sorted(found.extras.items()):
            if extra is not None and extra in wanted and project in found.pins:
                return f"'{project}[{extra}]=={found.pins[project]}'"
        return wheel

    def pinned(self, wheel: str) -> str | None:
        """The version torch pins ``wheel`` at (None: unpinned, or unknown)."""
        found = self.requirements
        return None if found is None else found.pins.get(canonical(wheel))

    def without(self, folder: str) -> str:
        """The shell command that drops ``folder`` from LD_LIBRARY_PATH and keeps the rest."""
        target = folder.rstrip("/") or "/"
        rest = [d for d in self.ld_library_path if d and (d.rstrip("/") or "/") != target]
        if not rest:
            return "unset LD_LIBRARY_PATH"
        return "export LD_LIBRARY_PATH=" + shlex.quote(":".join(rest))


def nvidia_wheel(soname: str, cuda_major: str | None) -> str | None:
    """The PyPI distribution that ships ``soname`` for this CUDA major (None: not NVIDIA's).

    Up to CUDA 12 every NVIDIA wheel has a ``-cuNN`` suffix; from CUDA 13 the toolkit's own
    libraries (cuBLAS, cudart, nvJitLink ...) do not, while cuDNN, NCCL, cuSPARSELt and
    NVSHMEM keep it (``nvidia-cudnn-cu13``)."""
    for prefix, project in NVIDIA_WHEELS.items():
        if soname.startswith(prefix):
            major = cuda_major or _soname_major(soname)
            if not major:
                return project
            if project in _TOOLKIT_EXTRAS and major.isdigit() and int(major) >= 13:
                return project
            return f"{project}-cu{major}"
    return None


def drop_commands(hints: LinuxHints, folder: str, via: str) -> tuple[str, ...]:
    """How to take ``folder`` out of the search that found it."""
    if via == "ld.so.cache":
        return (
            f"grep -rl {shlex.quote(folder)} /etc/ld.so.conf /etc/ld.so.conf.d   "
            "# delete that line, then: sudo ldconfig",
        )
    return (hints.without(folder),)


def _soname_major(soname: str) -> str | None:
    match = re.search(r"\.so\.(\d+)", soname)
    return match.group(1) if match else None


def base_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def drop_hints(hints: LinuxHints, path: str, via: str) -> tuple[RepairHint, ...]:
    folder = path.rsplit("/", 1)[0]
    return (
        RepairHint(
            f"Remove {folder} from LD_LIBRARY_PATH (or the ld.so cache) so that the shipped "
            "copy loads",
            drop_commands(hints, folder, via),
        ),
    )


def _absent(hints: LinuxHints) -> list[str]:
    """torch's pinned NVIDIA (and cuda-toolkit) requirements with no distribution installed."""
    found = hints.requirements
    if found is None:
        return []
    return [
        name
        for name in sorted(found.pins)
        if name.startswith(("nvidia-", "cuda-toolkit")) and name not in found.installed
    ]


def _requested_as(hints: LinuxHints, wheel: str) -> str:
    """The project through which torch asks for ``wheel`` (``cuda-toolkit`` for CUDA 13's
    cuBLAS), else the wheel's own canonical name."""
    name = canonical(wheel)
    found = hints.requirements
    if found is None or name in found.pins:
        return name
    extra = _TOOLKIT_EXTRAS.get(re.sub(r"-cu\d+$", "", name))
    for project, wanted in sorted(found.extras.items()):
        if extra is not None and extra in wanted:
            return project
    return name


def _pinned_spec(hints: LinuxHints, name: str) -> str:
    found = hints.requirements
    pin = found.pins.get(name) if found else None
    extras = found.extras.get(name) if found else None
    if pin is None:
        return name
    return f"'{name}[{','.join(extras)}]=={pin}'" if extras else f"{name}=={pin}"


def reinstall(hints: LinuxHints, wheel: str | None) -> tuple[RepairHint, ...]:
    absent = _absent(hints)
    if wheel is not None and len(absent) > 1 and _requested_as(hints, wheel) in absent:
        return (
            RepairHint(
                f"{len(absent)} of the NVIDIA wheels torch pins are not installed (was torch "
                "installed with --no-deps?): install them as torch pins them",
                (hints.pip("install", *(_pinned_spec(hints, name) for name in absent)),),
            ),
        )
    if wheel is not None:
        return (
            RepairHint(
                f"Reinstall {wheel}, the wheel that ships this library",
                (hints.pip("install", "--force-reinstall", hints.spec(wheel)),),
            ),
        )
    version, _, variant = (hints.torch_version or "").partition("+")
    spec = f"torch=={hints.torch_version}" if version else "torch"
    # the build variant kept: torch==2.4.1 alone would fetch PyPI's CUDA build for a +cpu one
    where = ("--index-url", f"https://download.pytorch.org/whl/{variant}") if variant else ()
    return (
        RepairHint(
            "Reinstall torch with its dependencies",
            (hints.pip("install", "--force-reinstall", spec, *where),),
        ),
    )
