"""What a Linux machine says about its NVIDIA driver, as the driver rules read it.

The driver is the kernel module's version (``/proc/driver/nvidia/version``) or, under WSL2, the
Windows host's (the FileVersion of its DLLs in ``/usr/lib/wsl/drivers``), whose
``libcuda.so.1`` is in ``/usr/lib/wsl/lib``; whether ``libcuda.so.1`` is found at all is
ld.so's answer (cudart ``dlopen``s it by name at the first CUDA call).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchguard._facts.cuda_builds import (
    Cuda,
    LinuxDriver,
)

WSL_LIB_DIR = "/usr/lib/wsl/lib"
WSL_CUDA_URL = "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"


@dataclass(frozen=True)
class LinuxDriverFacts:
    """What the machine says about its NVIDIA driver (pure data; read by the pipeline)."""

    driver: LinuxDriver | None = None
    """The driver's version, when known."""
    source: str = ""
    """Where it comes from: ``/proc/driver/nvidia/version``, ``--cuda 12.4`` ..."""
    loaded: bool = False
    """A driver is there: the kernel module, the WSL host's library, or one described offline."""
    wsl_libcuda: str | None = None
    """Under WSL2, ``/usr/lib/wsl/lib/libcuda.so.1`` when the host's driver provides it."""
    libcuda: str | None = None
    """Where ld.so finds ``libcuda.so.1`` (empty: nowhere; None: not asked)."""
    nvidia_pci: bool = False
    """An NVIDIA display controller on the PCI bus (vendor 0x10de, class 0x03)."""
    host: bool = False
    """``driver`` is a WSL2 host's Windows driver: judged by NVIDIA's Windows column."""
    module: str | None = None
    """The kernel module's version as ``/proc/driver/nvidia/version`` prints it."""
    libcuda_version: str | None = None
    """The driver version ``libcuda`` (as ld.so finds it) names: ``libcuda.so.535.104.05``."""
    libcuda_via: str = ""
    """How ld.so finds it: ``LD_LIBRARY_PATH``, ``ld.so.cache``, ``RPATH ...``, ``default``."""
    libcuda_compat: bool = False
    """It lies in a CUDA forward-compatibility folder (``/usr/local/cuda-X.Y/compat``)."""
    gpus: tuple[str, ...] = ()
    """The GPUs the driver lists (or ``--gpu``)."""


def parse_cuda(cuda: str | None) -> Cuda | None:
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return (int(parts[0]), int(parts[1]))
