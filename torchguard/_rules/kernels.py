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
    label: str,
    package: str,
    loses: str,
    name: str,
    capability: Capability,
    archs: FatbinArchs,
    *,
    platform: str,
    torch_version: str | None,
    torch_cuda: str | None,
    python_cmd: str,
    installed: str | None = None,
) -> Finding:
    """An extension (``label``: ``xformers 0.0.32``) whose own kernels the GPU cannot run;
    the hint names the release whose read binaries have them (:mod:`extension_archs`)."""
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
            extension_hint(
                package, capability, platform, torch_version, torch_cuda, python_cmd, installed
            ),
        ),
        rank=73,
    )


def extension_hint(
    package: str,
    capability: Capability,
    platform: str,
    torch_version: str | None,
    torch_cuda: str | None,
    python_cmd: str,
    installed: str | None,
) -> RepairHint:
    """The release of ``package`` whose PyPI wheel was read to carry kernels for the GPU (and
    accepts the installed torch), or that none does; a package the data does not cover gets
    the general advice, never a guessed release."""
    from torchguard._facts.bitsandbytes import cuda_tuple
    from torchguard._facts.extension_archs import canonical, known_builds, pick

    arch = f"sm_{capability[0]}{capability[1]}"
    source = f"TORCH_CUDA_ARCH_LIST={capability[0]}.{capability[1]}"
    found = pick(package, platform, capability, torch_version, installed, cuda_tuple(torch_cuda))
    if found is None:
        return RepairHint(
            f"install a {package} build compiled for {arch} (its release notes or wheel "
            f"index name the architectures; a source build takes {source}), or uninstall it "
            "if nothing needs it",
            (),
            CUDA_GPUS_URL,
        )
    dist = canonical(package)
    build = found.build
    if build is not None:
        kernels = arch_names(build.sass) + (
            f" with PTX for {arch_names(build.ptx)}" if build.ptx else ""
        )
        library = (
            f"'s library for CUDA {build.cuda[0]}.{build.cuda[1]}" if build.cuda is not None else ""
        )
        return RepairHint(
            f"install {dist} {build.version}: its {platform} wheel on PyPI ({build.wheel}"
            f"{library}) carries kernels for {kernels}, which run on {arch}"
            + (f", and it requires torch{build.requires_torch}" if build.requires_torch else ""),
            (f"{python_cmd} -m pip install {dist}=={build.version}",),
            CUDA_GPUS_URL,
        )
    known = f"{dist} wheel on PyPI for {platform} (releases {found.releases[-1]} to " + (
        f"{found.releases[0]} read)"
    )
    other = found.other_torch
    cuda = cuda_tuple(torch_cuda)
    where = ""
    if cuda is not None and any(b.cuda for b in known_builds(package, platform)):
        where = f" in the library it loads for CUDA {cuda[0]}.{cuda[1]}"  # bitsandbytes
    if other is None:  # no read release has them, whatever torch it takes
        said = f"no {known} has kernels for {arch}{where}"
    else:
        said = (
            f"no {known} that accepts torch {torch_version} has kernels for {arch}{where}; "
            f"{dist} {other.version} has them but requires torch{other.requires_torch}"
        )
    return RepairHint(
        f"{said}; a source build takes {source}, or uninstall it if nothing needs it",
        (),
        CUDA_GPUS_URL,
    )
