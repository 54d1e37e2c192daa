"""gpu-arch-unsupported for an extension: its own CUDA kernels lack the machine's GPU.

xformers, flash-attn, SageAttention, bitsandbytes, onnxruntime-gpu and torchvision/torchaudio's
CUDA ops are compiled by their own builds, for their own architecture lists, separately from
torch: a torch that runs on an RTX 5090 (sm_120) does not make an xformers built for sm_80 to
sm_90 run there. Each such package's binaries (``.pyd``/``.dll`` its RECORD lists, on disk) are
read for their fatbin (:mod:`torchguard._binary.fatbin`); a package whose binaries together
carry no SASS or PTX the GPU runs is a warning naming the package and what stops working.
A package whose binaries hold no fatbin at all (a CPU build, or kernels compiled at run time)
is not judged.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._binary.fatbin import FatbinArchs, FatbinError, read_dll_archs
from torchguard._facts.gpus import CUDA_GPUS_URL, Capability
from torchguard._model.cache import host_key
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.kernels import arch_names, nvidia_gpus
from torchguard._vocab import Code
from torchguard._windows.dists import InstalledDist, canonical_name
from torchguard._windows.tree import HostFile, join

#: Canonical distribution name -> what stops working without kernels for the GPU.
CUDA_EXTENSIONS: dict[str, str] = {
    "xformers": "its memory-efficient attention and other CUDA operators",
    "flash-attn": "flash attention (flash_attn_func and the modules built on it)",
    "sageattention": "SageAttention's quantized attention kernels",
    "bitsandbytes": "8-bit and 4-bit quantized layers and optimizers",
    "onnxruntime-gpu": "the CUDA execution provider (sessions fall back to the CPU or fail)",
    "torchvision": "its CUDA operators (nms, roi_align, deform_conv2d)",
    "torchaudio": "its CUDA operators (rnnt_loss, forced_align)",
}
_BINARY_SUFFIXES = (".pyd", ".dll")


def check(context: CheckContext) -> Iterator[Finding]:
    gpus = nvidia_gpus(
        adapter.name for adapter in context.system.display_adapters if adapter.is_nvidia
    )
    if not gpus:
        return
    for dist in context.dists:
        loses = CUDA_EXTENSIONS.get(canonical_name(dist.name))
        if loses is None:
            continue
        archs = _dist_archs(context, dist)
        if archs is None:
            continue
        for name, capability in gpus.items():
            if not archs.runs_on(capability):
                yield _finding(dist, loses, name, capability, archs)


def _finding(
    dist: InstalledDist, loses: str, name: str, capability: Capability, archs: FatbinArchs
) -> Finding:
    arch = f"sm_{capability[0]}{capability[1]}"
    return Finding(
        code=Code.GPU_ARCH_UNSUPPORTED,
        severity=WARNING,
        message=(
            f"the {name} ({arch}) cannot run {dist.name} {dist.version}'s own CUDA kernels: "
            f"they are built for {arch_names(archs.sass)}"
            + (f" with PTX for {arch_names(archs.ptx)}" if archs.ptx else " and carry no PTX")
            + f'; {loses} fail with "no kernel image is available for execution on the '
            'device" even where torch itself runs'
        ),
        hints=(
            RepairHint(
                f"install a {dist.name} build compiled for {arch} (its release notes or wheel "
                f"index name the architectures; a source build takes TORCH_CUDA_ARCH_LIST="
                f"{capability[0]}.{capability[1]}), or uninstall it if nothing needs it",
                (),
                CUDA_GPUS_URL,
            ),
        ),
        rank=73,
    )


def _dist_archs(context: CheckContext, dist: InstalledDist) -> FatbinArchs | None:
    """The union of the architectures in the package's binaries on disk; None when none of
    them holds a fatbin (or none can be read)."""
    tree = context.system.tree
    sass: set[int] = set()
    ptx: set[int] = set()
    found = False
    for relative in dist.record_paths():
        if not relative.lower().endswith(_BINARY_SUFFIXES):
            continue
        entry = tree.entry(join(dist.site_dir, relative))
        if not isinstance(entry, HostFile):
            continue
        archs = _cached_read(context, entry.path)
        if archs is None or not (archs.sass or archs.ptx):
            continue
        found = True
        sass.update(archs.sass)
        ptx.update(archs.ptx)
    return FatbinArchs(frozenset(sass), frozenset(ptx), 0, 0) if found else None


def _cached_read(context: CheckContext, path: str) -> FatbinArchs | None:
    """One binary's architectures, kept in the facts cache by file state as torch's are."""
    cache = context.cache
    identity = host_key(path)
    raw = cache.get_derived("fatbin", identity) if cache else None
    if isinstance(raw, list) and len(raw) == 2:
        try:
            return FatbinArchs(
                frozenset(int(a) for a in raw[0]), frozenset(int(a) for a in raw[1]), 0, 0
            )
        except (TypeError, ValueError):
            pass  # a damaged entry: read the file again
    try:
        archs = read_dll_archs(path)
    except FatbinError:
        return None
    if cache is not None:
        value = [sorted(archs.sass), sorted(archs.ptx)] if archs else [[], []]
        cache.put_derived("fatbin", identity, value)
    return archs
