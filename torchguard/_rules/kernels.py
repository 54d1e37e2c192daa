"""How a GPU that torch's CUDA kernels cannot run is worded, on Windows and on Linux alike."""

from __future__ import annotations

from collections.abc import Iterable

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.gpus import Capability, compute_capability


def nvidia_gpus(names: Iterable[str]) -> dict[str, Capability]:
    """NVIDIA GPUs by name with a known compute capability: two cards of one model are one."""
    return {
        name: capability for name in names if (capability := compute_capability(name)) is not None
    }


def arch_names(archs: frozenset[int]) -> str:
    return ", ".join(f"sm_{a}" for a in sorted(archs)) or "no architecture"


def no_kernels_message(
    name: str, capability: Capability, torch_version: str, holder: str, archs: FatbinArchs
) -> str:
    """How a GPU that torch's kernels cannot run is worded (``holder``: whose kernels)."""
    arch = capability[0] * 10 + capability[1]
    return (
        f"the {name} (compute capability {capability[0]}.{capability[1]}, sm_{arch}) "
        f"cannot run torch {torch_version}: {holder} CUDA kernels are built for "
        f"{arch_names(archs.sass)}"
        + (f" with PTX for {arch_names(archs.ptx)}" if archs.ptx else " and carry no PTX")
        + '; CUDA operations fail with "no kernel image is available for execution '
        'on the device"'
    )
