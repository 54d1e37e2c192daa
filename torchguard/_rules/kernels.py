"""How a GPU that torch's CUDA kernels cannot run is worded, on Windows and on Linux alike."""

from __future__ import annotations

import re
from collections.abc import Iterable

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.gpus import CUDA_GPUS_URL, Capability, compute_capability
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint

#: Canonical distribution name -> what stops working without kernels for the GPU.
EXTENSION_LOSSES: dict[str, str] = {
    "xformers": "its memory-efficient attention and other CUDA operators",
    "flash-attn": "flash attention (flash_attn_func and the modules built on it)",
    "sageattention": "SageAttention's quantized attention kernels",
    "bitsandbytes": "8-bit and 4-bit quantized layers and optimizers",
    "onnxruntime-gpu": "the CUDA execution provider (sessions fall back to the CPU or fail)",
    "torchvision": "its CUDA operators (nms, roi_align, deform_conv2d)",
    "torchaudio": "its CUDA operators (rnnt_loss, forced_align)",
}
#: Import names (Linux finds extensions by the torch they link) of the same packages.
_IMPORT_NAMES = {"flash-attn-2-cuda": "flash-attn", "flash-attn-3": "flash-attn"}


def extension_losses(name: str) -> str | None:
    """What stops working in the CUDA extension ``name`` (a distribution or import name);
    None for a package not known to carry its own kernels."""
    canonical = re.sub(r"[-_.]+", "-", name).lower()
    return EXTENSION_LOSSES.get(_IMPORT_NAMES.get(canonical, canonical))


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


def extension_finding(
    label: str, package: str, loses: str, name: str, capability: Capability, archs: FatbinArchs
) -> Finding:
    """An extension (``label``: ``xformers 0.0.32``) whose own kernels the GPU cannot run."""
    arch = f"sm_{capability[0]}{capability[1]}"
    return Finding(
        code=Code.GPU_ARCH_UNSUPPORTED,
        severity=WARNING,
        message=(
            f"the {name} ({arch}) cannot run {label}'s own CUDA kernels: "
            f"they are built for {arch_names(archs.sass)}"
            + (f" with PTX for {arch_names(archs.ptx)}" if archs.ptx else " and carry no PTX")
            + f'; {loses} fail with "no kernel image is available for execution on the '
            'device" even where torch itself runs'
        ),
        hints=(
            RepairHint(
                f"install a {package} build compiled for {arch} (its release notes or wheel "
                f"index name the architectures; a source build takes TORCH_CUDA_ARCH_LIST="
                f"{capability[0]}.{capability[1]}), or uninstall it if nothing needs it",
                (),
                CUDA_GPUS_URL,
            ),
        ),
        rank=73,
    )
