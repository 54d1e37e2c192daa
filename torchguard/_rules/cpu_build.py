"""cpu-build-on-gpu: a CPU build of torch on a machine with an NVIDIA driver.

The answer to "torch.cuda.is_available() is False": the torch wheel on PyPI for Windows is the
CPU build, the CUDA builds live on download.pytorch.org, one index per CUDA version. Which one
fits is decided by the driver (read from ``System32\\nvcuda.dll`` as a file, never loaded) and
by the variants this torch release was published for (:mod:`torchguard._facts.cuda_builds`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from torchguard._facts.companions import matching_siblings
from torchguard._facts.cuda_builds import (
    PREVIOUS_VERSIONS_URL,
    RELEASES,
    Cuda,
    Driver,
    Release,
    install_command,
    minimum_driver,
    newest_runnable,
    release_of,
)
from torchguard._facts.gpu_pick import driver_starts
from torchguard._facts.gpus import Capability, compute_capability
from torchguard._facts.torch_archs import carries_kernels
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.cuda_driver import find_driver, format_driver
from torchguard._rules.gpu_fix import candidate_releases, newest_hint, newest_pick
from torchguard._rules.links import DRIVERS_URL
from torchguard._rules.neighbour_cuda import Need, neighbour_need, prefer_neighbour
from torchguard._rules.registry import WINDOWS, rule
from torchguard._rules.windows_neighbours import neighbour_findings

#: Local version tags of builds for other accelerators: not CPU builds, not judged here.
_CPU_TAGS = (None, "cpu")


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    torch = context.torch
    if torch.cuda is not None or torch.variant not in _CPU_TAGS:
        return
    installed = find_driver(context)
    if installed is None:
        return
    version = torch.base_version
    release = release_of(version)
    newer = release is None and _newer_than_table(version)
    row = RELEASES[-1] if newer else release
    if row is None:
        return  # older than any CUDA build torchguard knows: no command to give
    driver = installed.driver
    python = context.hints.python_cmd
    conda = context.hints.conda
    capabilities = _named_capabilities(context)
    runs_gpu = [v for v in row.variants if _runs(row, v, capabilities)]
    if capabilities and not runs_gpu:
        named = ", ".join(a.name for a in context.system.display_adapters if a.is_nvidia)
        yield _no_build_for_gpu(context, version, named, installed.file, capabilities)
        return
    variants = tuple(runs_gpu)
    best = newest_runnable(variants, driver) if driver else variants[-1]
    shown = f"driver {format_driver(driver)}" if driver else "an NVIDIA driver"
    table_note = (
        f" (torchguard's table ends at {row.series[0]}.{row.series[1]}; the variants shown "
        "are that release's)"
        if newer
        else ""
    )
    hints: list[RepairHint] = []
    if best is not None:
        newest_cuda = best
        best, serves = prefer_neighbour(variants, best, _neighbour_need(context), _pick(driver))
        need = minimum_driver(best)
        which = "CUDA" if best == newest_cuda else f"CUDA {best[0]}"
        why = (
            f"the newest {which} variant torch {version} was published for that driver "
            f"{format_driver(driver)} runs"
            if driver
            else f"the newest {which} variant of torch {version}; it needs driver "
            f"{format_driver(need) if need else 'a recent'} or newer"
        )
        hints.append(
            RepairHint(
                f"install the CUDA {best[0]}.{best[1]} build of torch {version}{serves}: {why}"
                + table_note,
                (
                    install_command(
                        python,
                        version,
                        best,
                        conda=conda,
                        release=release,
                        siblings=installed_siblings(context),
                    ),
                ),
                PREVIOUS_VERSIONS_URL,
            )
        )
    elif driver is not None:
        oldest = variants[0]
        need = minimum_driver(oldest)
        wanted = f" {format_driver(need)} or newer" if need else ""
        hints.append(
            RepairHint(
                f"driver {format_driver(driver)} is too old for every CUDA "
                f"build of torch {version}: install the NVIDIA driver{wanted}, then the CUDA "
                f"{oldest[0]}.{oldest[1]} build (or a newer one the driver supports)" + table_note,
                (install_command(python, version, oldest, conda=conda, release=release),),
                DRIVERS_URL,
            )
        )
    if capabilities:  # and the newest build for the GPU, as `check --gpu` answers
        siblings = tuple(name for name, _ in installed_siblings(context))
        newest = newest_hint(
            newest_pick(
                capabilities,
                driver_starts(driver),
                python=context.hints.python_version,
                siblings=siblings,
            ),
            capabilities,
            python,
            conda=conda,
            shown=(version, f"cu{best[0]}{best[1]}") if best else None,
        )
        hints += [newest] if newest is not None else []
    yield Finding(
        code=Code.CPU_BUILD_ON_GPU,
        severity=WARNING,
        message=(
            f"torch {torch.version} is a CPU build but this machine has {shown} "
            f"({installed.path}): torch imports, torch.cuda.is_available() is False"
        ),
        path=installed.file,
        hints=tuple(hints),
        rank=75,
    )


def _neighbour_need(context: CheckContext) -> Need | None:
    """The CUDA major torch's native neighbours here need, from their own findings."""
    return neighbour_need(
        f for replay in context.neighbours for f in neighbour_findings(replay, context.hints)
    )


def _pick(driver: Driver | None) -> Callable[[tuple[Cuda, ...]], Cuda | None]:
    """The newest of some variants that ``driver`` runs (any, without a driver)."""

    def pick(variants: tuple[Cuda, ...]) -> Cuda | None:
        if driver is not None:
            return newest_runnable(variants, driver)
        return variants[-1] if variants else None

    return pick


def installed_siblings(context: CheckContext) -> tuple[tuple[str, str], ...]:
    """torchvision and torchaudio as installed beside this torch (made for this release): a
    command that changes torch's build keeps them, pinned, in the same command."""
    return tuple(
        (name, dist.version.partition("+")[0])
        for name in ("torchvision", "torchaudio")
        for dist in context.dists
        if dist.name.lower() == name
    )


def _named_capabilities(context: CheckContext) -> list[Capability]:
    """Compute capabilities of the machine's NVIDIA GPUs whose model is known."""
    found = [
        compute_capability(adapter.name)
        for adapter in context.system.display_adapters
        if adapter.is_nvidia
    ]
    return sorted({c for c in found if c is not None})


def _runs(row: Release, variant: Cuda, capabilities: list[Capability]) -> bool:
    """That release's build for ``variant`` has kernels for every named GPU (build policy)."""
    return all(carries_kernels(row.releases[-1], variant, c) for c in capabilities)


def _no_build_for_gpu(
    context: CheckContext,
    version: str,
    shown: str,
    path: str | None,
    capabilities: list[Capability],
) -> Finding:
    """No CUDA build of this release has kernels for the GPU: the first newer release one
    has, else (the GPU is older than every build since) the newest release that has one."""
    arch = ", ".join(f"sm_{c[0]}{c[1]}" for c in capabilities)
    release = release_of(version)
    series = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    found = next(
        (
            (row, max(fit))
            for row in candidate_releases(release, context.hints.python_version)
            if row is not release
            and (fit := [v for v in row.variants if _runs(row, v, capabilities)])
        ),
        None,
    )
    hints: tuple[RepairHint, ...] = ()
    names = tuple(name for name, _ in installed_siblings(context))
    if found is not None:
        row, variant = found
        target = row.releases[-1]
        which = "first" if row.series > series else "newest"
        hints = (
            RepairHint(
                f"torch {row.series[0]}.{row.series[1]} is the {which} release with a CUDA build "
                f"for {arch} (CUDA {variant[0]}.{variant[1]})",
                (
                    install_command(
                        context.hints.python_cmd,
                        target,
                        variant,
                        conda=context.hints.conda,
                        release=row,
                        siblings=matching_siblings(target, names),
                    ),
                ),
                PREVIOUS_VERSIONS_URL,
            ),
        )
        installed = find_driver(context)
        newest = newest_hint(
            newest_pick(
                capabilities,
                driver_starts(installed.driver if installed else None),
                python=context.hints.python_version,
                siblings=names,
            ),
            capabilities,
            context.hints.python_cmd,
            conda=context.hints.conda,
            shown=(target, f"cu{variant[0]}{variant[1]}"),
        )
        hints += (newest,) if newest is not None else ()
    return Finding(
        code=Code.CPU_BUILD_ON_GPU,
        severity=WARNING,
        message=(
            f"torch {context.torch.version} is a CPU build and no CUDA build of torch {version} "
            f"runs on {shown} ({arch}): torch imports, torch.cuda.is_available() is False"
        ),
        path=path,
        hints=hints,
        rank=75,
    )


def _newer_than_table(version: str) -> bool:
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return False
    return (int(parts[0]), int(parts[1])) > RELEASES[-1].series
