"""Which CUDA build of torch also serves its native neighbours: a neighbour built for CUDA 12
(ctranslate2 4.x loads ``cublas64_12.dll`` by name) finds its cuBLAS in a CUDA 12 torch's
folder, never in a CUDA 13 one's, so a CPU build's advice prefers the variant of that major.
The major is read from the names the neighbour findings carry, never from a package name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torchguard._facts.cuda_builds import Cuda
from torchguard._facts.neighbours import library_cuda_major
from torchguard._facts.vocab import Code
from torchguard._report.findings import Finding

_NEIGHBOUR_CODES = (Code.MISSING_DLL, Code.NEIGHBOUR_LOAD_ORDER)


@dataclass(frozen=True)
class Need:
    """A neighbour's CUDA major, with the package and library name that say so."""

    major: int
    package: str
    name: str


def neighbour_need(findings: Iterable[Finding]) -> Need | None:
    """The one CUDA major the neighbour findings' libraries ask for; None when none does or
    they ask for several (no torch build serves them all)."""
    needs = [
        Need(major, f.package, f.missing)
        for f in findings
        if f.package and f.missing and f.code in _NEIGHBOUR_CODES
        if (major := library_cuda_major(f.missing)) is not None
    ]
    return needs[0] if len({n.major for n in needs}) == 1 else None


def prefer_neighbour(
    variants: tuple[Cuda, ...],
    best: Cuda,
    need: Need | None,
    pick: Callable[[tuple[Cuda, ...]], Cuda | None],
) -> tuple[Cuda, str]:
    """``best``, or the variant ``pick`` chooses among those of the neighbour's CUDA major
    (``variants`` are already the ones the GPU has kernels for), with the words that say why."""
    if need is None:
        return best, ""
    serves = f"{need.package}'s {need.name}"
    if best[0] == need.major:
        return best, f", which also serves {serves}"
    chosen = pick(tuple(v for v in variants if v[0] == need.major))
    if chosen is not None:
        return chosen, f", which also serves {serves}"
    return best, f" ({need.package} needs CUDA {need.major}: {need.name}; no CUDA " + (
        f"{need.major} build of this release fits here)"
    )
