"""gpu-arch-unsupported: the machine's NVIDIA GPU is not among the architectures torch ships.

"CUDA error: no kernel image is available for execution on the device": torch imports, sees
the GPU, and fails at the first kernel. Judged without loading anything: the GPU from the
display adapter's name (registry, live scans; ``gpus=`` offline), torch's kernels from the
``.nv_fatb`` section of ``torch_cuda.dll`` (SASS per architecture, PTX the driver can
JIT-compile for newer GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._binary.cache import host_key, member_key
from torchguard._binary.fatbin import FatbinArchs, FatbinError, read_dll_archs
from torchguard._facts.companions import matching_siblings
from torchguard._facts.cuda_builds import (
    PREVIOUS_VERSIONS_URL,
    Cuda,
    Release,
    install_command,
    minimum_driver,
    release_of,
)
from torchguard._facts.gpu_pick import driver_starts
from torchguard._facts.gpus import (
    CUDA_GPUS_URL,
    FIRST_CUDA,
    Capability,
    compute_capability,
    cuda_can_build,
)
from torchguard._facts.torch_archs import BuildArchs, build_archs, carries_kernels
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.member_fatbin import member_archs
from torchguard._platforms.windows.tree import ZIP_ERRORS, HostFile, WinTree, ZipMember
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.cpu_build import installed_siblings
from torchguard._rules.cuda_driver import find_driver, parse_cuda
from torchguard._rules.gpu_fix import candidate_releases, newest_hint, newest_pick, older_note
from torchguard._rules.kernels import arch_names, no_kernels_message
from torchguard._rules.registry import WINDOWS, rule

#: torch's own kernels: torch_cuda.dll (torch >= 1.13), torch_cuda_cu.dll before.
KERNEL_DLLS = ("torch_cuda.dll", "torch_cuda_cu.dll")


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    cuda = parse_cuda(context.torch.cuda)
    if cuda is None:
        return
    gpus = {  # by name: two cards of one model are one finding
        adapter.name: capability
        for adapter in context.system.display_adapters
        if adapter.is_nvidia and (capability := compute_capability(adapter.name)) is not None
    }
    if not gpus:
        return
    archs = _torch_archs(context)
    if archs is None:
        if _kernels_in_wheel(context):
            yield from _by_cuda_version(context, cuda, gpus)
        return
    for name, capability in gpus.items():
        if archs.runs_on(capability):
            continue
        yield Finding(
            code=Code.GPU_ARCH_UNSUPPORTED,
            severity=WARNING,
            message=no_kernels_message(name, capability, context.torch.version, "its", archs),
            hints=_hints(context, cuda, capability),
            rank=72,
        )


def _kernels_in_wheel(context: CheckContext) -> bool:
    """torch's kernel DLL is a member of a wheel (not read in place), not absent or damaged."""
    tree = context.system.tree
    for name in KERNEL_DLLS:
        hit = tree.lookup(context.torch.lib_dir, name)
        if hit is not None and isinstance(hit[1], ZipMember):
            return True
    return False


def _by_cuda_version(
    context: CheckContext, cuda: Cuda, gpus: dict[str, Capability]
) -> Iterator[Finding]:
    """torch's kernel DLL not readable in place (inside a wheel): the architectures PyTorch
    built this (release, CUDA variant) for, from the table; for a build the table does not
    know, a CUDA release that cannot compile the GPU's architecture built no kernels for it."""
    row = build_archs(context.torch.version, cuda)
    for name, capability in gpus.items():
        if row is not None:
            if not row.runs_on(capability):
                yield _policy_finding(context, cuda, name, capability, row)
            continue
        if cuda_can_build(cuda, capability):
            continue
        arch = capability[0] * 10 + capability[1]
        first = FIRST_CUDA.get(arch)
        since = (
            f"; CUDA {first[0]}.{first[1]} is the first that compiles sm_{arch}"
            if first and first > cuda
            else f"; CUDA {cuda[0]}.{cuda[1]} no longer compiles sm_{arch}"
        )
        yield Finding(
            code=Code.GPU_ARCH_UNSUPPORTED,
            severity=WARNING,
            message=(
                f"the {name} (compute capability {capability[0]}.{capability[1]}) cannot run "
                f"torch {context.torch.version}: no kernels for sm_{arch} in a CUDA "
                f"{cuda[0]}.{cuda[1]} build{since}; "
                + (
                    "unless torch carries PTX the driver can compile for it, "
                    if first and first > cuda
                    else ""
                )
                + 'CUDA operations fail with "no kernel image is available for execution on '
                'the device"'
            ),
            hints=_hints(context, cuda, capability),
            rank=72,
        )


def _policy_finding(
    context: CheckContext, cuda: Cuda, name: str, capability: Capability, row: BuildArchs
) -> Finding:
    """No kernels for the GPU in this build by PyTorch's build policy (the table's row)."""
    arch = capability[0] * 10 + capability[1]
    message = (
        f"the {name} (compute capability {capability[0]}.{capability[1]}, sm_{arch}) cannot "
        f"run torch {context.torch.version}: no kernels for sm_{arch} in its CUDA "
        f"{cuda[0]}.{cuda[1]} build, which PyTorch built for {arch_names(row.sass)}"
        + (f" with PTX for {arch_names(row.ptx)}" if row.ptx else " and no PTX")
        + f" ({row.provenance(context.torch.version)}); CUDA operations fail with "
        + '"no kernel image is available '
        'for execution on the device"'
    )
    return Finding(
        code=Code.GPU_ARCH_UNSUPPORTED,
        severity=WARNING,
        message=message,
        hints=_hints(context, cuda, capability),
        rank=72,
    )


def _torch_archs(context: CheckContext) -> FatbinArchs | None:
    """The union of the architectures in torch's kernel DLLs; None if none can be read."""
    tree = context.system.tree
    cache = context.cache
    sass: set[int] = set()
    ptx: set[int] = set()
    found = False
    for name in KERNEL_DLLS:
        hit = tree.lookup(context.torch.lib_dir, name)
        if hit is None:
            continue
        entry = hit[1]
        if isinstance(entry, HostFile):
            identity = host_key(entry.path)
        elif isinstance(entry, ZipMember):  # a wheel checked offline: its stream, headers only
            identity = _member_identity(tree, entry)
        else:
            continue
        archs = _cached_archs(cache.get_derived("fatbin", identity) if cache else None)
        if archs is None:
            try:
                if isinstance(entry, HostFile):
                    archs = read_dll_archs(entry.path)
                else:
                    archs = member_archs(tree, entry)
            except FatbinError:
                continue  # a damaged or unreadable DLL: nothing to judge the GPU against
            if cache is not None:
                value = [sorted(archs.sass), sorted(archs.ptx)] if archs else [[], []]
                cache.put_derived("fatbin", identity, value)
        if archs is None or not (archs.sass or archs.ptx):
            continue
        found = True
        sass.update(archs.sass)
        ptx.update(archs.ptx)
    if not found:
        return None
    return FatbinArchs(frozenset(sass), frozenset(ptx), 0, 0)


def _member_identity(tree: WinTree, entry: ZipMember) -> str | None:
    """The cache identity of a wheel member (archive state, name, CRC); None if unreadable."""
    try:
        info = tree.archive(entry.archive).getinfo(entry.member)
    except (KeyError, *ZIP_ERRORS):
        return None
    return member_key(entry.archive, entry.member, info.CRC, info.file_size)


def _cached_archs(raw: object) -> FatbinArchs | None:
    """The architectures a cache entry holds, or None when it is absent or damaged."""
    if not isinstance(raw, list) or len(raw) != 2:
        return None
    try:
        return FatbinArchs(
            frozenset(int(a) for a in raw[0]), frozenset(int(a) for a in raw[1]), 0, 0
        )
    except (TypeError, ValueError):
        return None


def _hints(context: CheckContext, cuda: Cuda, capability: Capability) -> tuple[RepairHint, ...]:
    installed = find_driver(context)
    driver = installed.driver if installed else None
    version = context.torch.base_version
    release = release_of(version)

    python = context.hints.python_version

    def fits(row: Release, variant: Cuda) -> bool:
        """Kernels for the GPU in that build (PyTorch's build policy, not just what the CUDA
        version could compile) and a driver that starts it."""
        if (row is release and variant == cuda) or not carries_kernels(
            row.releases[-1], variant, capability
        ):
            return False
        need = minimum_driver(variant)
        return driver is None or need is None or need <= driver

    choice: tuple[Release, Cuda] | None = None
    for row in candidate_releases(release, python):
        fitting = [v for v in row.variants if fits(row, v)]
        if fitting:
            choice = (row, max(fitting))
            break
    arch = f"sm_{capability[0]}{capability[1]}"
    if choice is None:
        for_python = f" and Python {python[0]}.{python[1]}" if python else ""
        return (
            RepairHint(
                f"no torch build torchguard knows of has {arch} kernels for this driver"
                f"{for_python}; see which CUDA versions support the GPU and install a matching "
                "torch build",
                (),
                CUDA_GPUS_URL,
            ),
        )
    row, variant = choice
    target = version if row is release else row.releases[-1]
    need = minimum_driver(variant)
    driver_note = (
        f" (it needs NVIDIA driver {need[0]}.{need[1]:02d} or newer)"
        if need and driver is None
        else ""
    )
    pinned = installed_siblings(context)
    names = tuple(name for name, _ in pinned)
    first = RepairHint(
        f"install torch {target} built for CUDA {variant[0]}.{variant[1]}, a build that "
        f"carries {arch} kernels{driver_note}{older_note(row, release)}",
        (
            install_command(
                context.hints.python_cmd,
                target,
                variant,
                conda=context.hints.conda,
                release=row,
                siblings=pinned if target == version else matching_siblings(target, names),
            ),
        ),
        PREVIOUS_VERSIONS_URL,
    )
    newest = newest_hint(
        newest_pick(
            [capability],
            driver_starts(driver),
            python=context.hints.python_version,
            siblings=names,
        ),
        [capability],
        context.hints.python_cmd,
        conda=context.hints.conda,
        shown=(target, f"cu{variant[0]}{variant[1]}"),
    )
    return (first,) if newest is None else (first, newest)
