"""gpu-arch-unsupported for an extension: its own CUDA kernels lack the machine's GPU.

xformers, flash-attn, SageAttention, bitsandbytes, onnxruntime-gpu and torchvision/torchaudio's
CUDA ops are compiled by their own builds, for their own architecture lists, separately from
torch: a torch that runs on an RTX 5090 (sm_120) does not make an xformers built for sm_80 to
sm_90 run there. Each such package's binaries (``.pyd``/``.dll`` its RECORD lists, on disk) are
read for their fatbin (:mod:`torchguard._binary.fatbin`), inside a wheel from the member's
stream, headers only, as torch's own ``torch_cuda.dll`` is; a package whose binaries together
carry no SASS or PTX the GPU runs is a warning naming the package, what stops working, and the
PyPI release whose read binaries have the kernels (:mod:`torchguard._facts.extension_archs`).
A package whose binaries hold no fatbin at all (a CPU build, or kernels compiled at run time)
is not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from torchguard._binary.cache import host_key, member_key
from torchguard._binary.fatbin import FatbinArchs, FatbinError, read_dll_archs
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.member_fatbin import member_archs
from torchguard._platforms.windows.tree import ZIP_ERRORS, HostFile, WinTree, ZipMember, join
from torchguard._report.findings import Finding
from torchguard._rules.context import CheckContext
from torchguard._rules.kernels import extension_finding, extension_losses, nvidia_gpus
from torchguard._rules.registry import WINDOWS, rule

_BINARY_SUFFIXES = (".pyd", ".dll")


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    gpus = nvidia_gpus(
        adapter.name for adapter in context.system.display_adapters if adapter.is_nvidia
    )
    if not gpus:
        return
    for dist in context.dists:
        loses = extension_losses(dist.name)
        if loses is None:
            continue
        archs = _dist_archs(context, dist)
        if archs is None:
            continue
        for name, capability in gpus.items():
            if not archs.runs_on(capability):
                yield extension_finding(
                    f"{dist.name} {dist.version}",
                    dist.name,
                    loses,
                    name,
                    capability,
                    archs,
                    platform="windows",
                    torch_version=context.torch.version,
                    torch_cuda=context.torch.cuda,
                    python_cmd=context.hints.python_cmd,
                    installed=dist.version,
                )


def _dist_archs(context: CheckContext, dist: InstalledDist) -> FatbinArchs | None:
    """The union of the architectures in the package's binaries on disk; None when none of
    them holds a fatbin (or none can be read)."""
    tree = context.system.tree
    sass: set[int] = set()
    ptx: set[int] = set()
    found = False
    loaded = _bitsandbytes_library(context, dist)
    for relative in dist.record_paths():
        if not relative.lower().endswith(_BINARY_SUFFIXES):
            continue
        name = relative.rsplit("/", 1)[-1].lower()
        if loaded is not None and name.startswith("libbitsandbytes_cuda") and name != loaded:
            continue  # another CUDA version's library: never loaded under this torch
        entry = tree.entry(join(dist.site_dir, relative))
        if isinstance(entry, HostFile):
            archs = _cached_read(context, host_key(entry.path), partial(read_dll_archs, entry.path))
        elif isinstance(entry, ZipMember):  # a wheel scanned offline: the member's stream
            archs = _cached_read(
                context, _member_identity(tree, entry), partial(member_archs, tree, entry)
            )
        else:
            continue
        if archs is None or not (archs.sass or archs.ptx):
            continue
        found = True
        sass.update(archs.sass)
        ptx.update(archs.ptx)
    return FatbinArchs(frozenset(sass), frozenset(ptx), 0, 0) if found else None


def _bitsandbytes_library(context: CheckContext, dist: InstalledDist) -> str | None:
    """The one ``libbitsandbytes_cudaXY.dll`` bitsandbytes loads for torch's CUDA version
    (:func:`torchguard._facts.bitsandbytes.chosen`), lower-cased; None when the package is
    not bitsandbytes or torch's CUDA is unknown (then every library counts)."""
    if dist.name.lower() != "bitsandbytes":
        return None
    from torchguard._facts.bitsandbytes import FALLBACK_MARK, binary_name, chosen, cuda_tuple
    from torchguard._facts.bitsandbytes import shipped as shipped_versions

    cuda = cuda_tuple(context.torch.cuda)
    if cuda is None:
        return None
    names = [relative.rsplit("/", 1)[-1] for relative in dist.record_paths()]
    tree = context.system.tree
    source = tree.read_text(join(dist.site_dir, "bitsandbytes", "cextension.py"))
    fallback = None if source is None else FALLBACK_MARK in source
    present = set(shipped_versions(names, "windows"))
    if fallback is None and cuda not in present:
        return None  # its fallback policy unread: doubt judges every library together
    picked = chosen(cuda, present, fallback=fallback)
    # none loads: bitsandbytes-binary-missing says so, and no library's kernels are judged
    return binary_name(picked, "windows").lower() if picked is not None else "-"


def _member_identity(tree: WinTree, entry: ZipMember) -> str | None:
    """The cache identity of a wheel member (archive state, name, CRC); None if unreadable."""
    try:
        info = tree.archive(entry.archive).getinfo(entry.member)
    except (KeyError, *ZIP_ERRORS):
        return None
    return member_key(entry.archive, entry.member, info.CRC, info.file_size)


def _cached_read(
    context: CheckContext, identity: str | None, read: Callable[[], FatbinArchs | None]
) -> FatbinArchs | None:
    """One binary's architectures, kept in the facts cache by file (or member) state as
    torch's are."""
    cache = context.cache if identity is not None else None
    raw = cache.get_derived("fatbin", identity) if cache and identity else None
    if isinstance(raw, list) and len(raw) == 2:
        try:
            return FatbinArchs(
                frozenset(int(a) for a in raw[0]), frozenset(int(a) for a in raw[1]), 0, 0
            )
        except (TypeError, ValueError):
            pass  # a damaged entry: read the file again
    try:
        archs = read()
    except FatbinError:
        return None
    if cache is not None and identity is not None:
        value = [sorted(archs.sass), sorted(archs.ptx)] if archs else [[], []]
        cache.put_derived("fatbin", identity, value)
    return archs
