"""Which torch to install for a GPU: the newest build that has kernels for it and imports.

"Which torch runs on my GPU?" is answered by build policy (:mod:`.torch_archs`: the
architectures each (release, CUDA variant) build carries), the driver (a variant newer than the
driver's CUDA does not start), the Python (a release without a wheel for it does not install)
and the siblings (torchvision and torchaudio at the releases made for that torch,
:mod:`.companions`). The same choice serves ``check --gpu``, ``doctor`` and the
``cpu-build-on-gpu`` / ``gpu-arch-unsupported`` hints, so they never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchguard._facts.companions import has_python, matching_siblings
from torchguard._facts.cuda_builds import (
    RELEASES,
    Cuda,
    Release,
    install_command,
    minimum_driver,
    variant_tag,
)
from torchguard._facts.gpus import Capability
from torchguard._facts.torch_archs import BuildArchs, build_archs

#: Whether a driver starts a build of this CUDA variant.
Starts = Callable[[Cuda], bool]


@dataclass(frozen=True)
class Pick:
    """One (torch release, CUDA variant) build and the siblings to install with it."""

    release: Release
    version: str
    cuda: Cuda
    siblings: tuple[tuple[str, str], ...]
    archs: BuildArchs
    """The build-policy row the kernels were judged by (a build without one is never picked)."""

    @property
    def label(self) -> str:
        return f"{self.version}+{variant_tag(self.cuda)}"

    @property
    def read_from_binary(self) -> bool:
        """This exact build's fatbin was read (a recorded reading), not stated by scripts."""
        return self.version in self.archs.read

    def provenance(self) -> str:
        return self.archs.provenance(self.version)

    def command(self, python_cmd: str = "python", *, conda: bool = False) -> str:
        return install_command(
            python_cmd,
            self.version,
            self.cuda,
            conda=conda,
            release=self.release,
            siblings=self.siblings,
        )


def driver_starts(driver: tuple[int, int] | None) -> Starts:
    """A Windows driver (``(560, 94)``; None: any driver) starts variants whose minimum it meets."""
    return lambda cuda: driver is None or (minimum_driver(cuda) or (10**6, 0)) <= driver


def cuda_starts(cuda_limit: Cuda | None) -> Starts:
    """A driver whose newest CUDA is ``cuda_limit`` (nvidia-smi's "CUDA Version"; None: any)."""
    return lambda cuda: cuda_limit is None or cuda <= cuda_limit


def pick(
    capabilities: Sequence[Capability],
    *,
    starts: Starts | None = None,
    python: tuple[int, int] | None = None,
    linux: bool = False,
    siblings: tuple[str, ...] = (),
    releases: Sequence[Release] = RELEASES,
) -> Pick | None:
    """The newest build, over ``releases`` (newest first), with kernels for every GPU of
    ``capabilities``, that the driver ``starts`` and that has a wheel for ``python``; its
    newest patch release, with ``siblings`` pinned to their matching releases."""
    for row in sorted(releases, key=lambda r: r.series, reverse=True):
        version = row.releases[-1]
        if python is not None and has_python(version, python, linux=linux) is False:
            continue
        for cuda in sorted(row.variants, reverse=True):
            if starts is not None and not starts(cuda):
                continue
            archs = build_archs(version, cuda)
            if archs is not None and all(archs.runs_on(c) for c in capabilities):
                return Pick(row, version, cuda, matching_siblings(version, siblings), archs)
    return None


def newest_build(
    capability: Capability, driver: tuple[int, int] | None
) -> tuple[Release, Cuda] | None:
    """The newest (release, CUDA variant) with kernels for the GPU whose minimum Windows driver
    ``driver`` meets (any driver when None): the README's table against uv."""
    chosen = pick([capability], starts=driver_starts(driver))
    return (chosen.release, chosen.cuda) if chosen else None


def pick_in(
    release: Release,
    capabilities: Sequence[Capability],
    *,
    starts: Starts | None = None,
    siblings: tuple[tuple[str, str], ...] = (),
    version: str | None = None,
) -> Pick | None:
    """The newest variant of one ``release`` (at ``version``, default its newest patch) with
    kernels for every GPU that the driver starts; ``siblings`` as installed (same release)."""
    target = version or release.releases[-1]
    for cuda in sorted(release.variants, reverse=True):
        if starts is not None and not starts(cuda):
            continue
        archs = build_archs(target, cuda)
        if archs is not None and all(archs.runs_on(c) for c in capabilities):
            return Pick(release, target, cuda, siblings, archs)
    return None


__all__ = ["Pick", "Starts", "cuda_starts", "driver_starts", "newest_build", "pick", "pick_in"]
