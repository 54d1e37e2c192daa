"""The newest build for the machine's GPU, as a repair hint.

``gpu-arch-unsupported`` and ``cpu-build-on-gpu`` first propose the smallest change (another
variant of the installed release, or the first newer release with kernels for the GPU); this
hint adds what ``torchguard check --gpu`` answers for the same GPU, driver and Python
(:func:`torchguard._facts.gpu_pick.pick`), with torchvision and torchaudio pinned at the
releases made for it, so ``doctor`` and ``check`` never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchguard._facts.companions import has_python
from torchguard._facts.cuda_builds import PREVIOUS_VERSIONS_URL, RELEASES, Release
from torchguard._facts.gpu_pick import Pick, Starts, pick
from torchguard._facts.gpus import Capability
from torchguard._report.findings import RepairHint


def candidate_releases(
    release: Release | None, python: tuple[int, int] | None, *, linux: bool = False
) -> list[Release]:
    """Where the smallest fix looks, in order: the installed ``release``, then newer releases
    (oldest first), then older ones (newest first: a GPU the newest releases dropped runs on
    the last release built for it); none without a wheel for ``python``. An unknown release:
    all of them, newest first."""
    if release is None:
        ordered = sorted(RELEASES, key=lambda r: r.series, reverse=True)
    else:
        newer = sorted((r for r in RELEASES if r.series > release.series), key=lambda r: r.series)
        older = sorted(
            (r for r in RELEASES if r.series < release.series),
            key=lambda r: r.series,
            reverse=True,
        )
        ordered = [release, *newer, *older]
    return [
        row
        for row in ordered
        if python is None or has_python(row.releases[-1], python, linux=linux) is not False
    ]


def older_note(row: Release, release: Release | None) -> str:
    """What the hint adds when it goes back to an older release: why."""
    if release is None or row.series >= release.series:
        return ""
    return f"; no build of torch {release.series[0]}.{release.series[1]} or newer has them"


def newest_pick(
    capabilities: Sequence[Capability],
    starts: Starts,
    *,
    python: tuple[int, int] | None = None,
    linux: bool = False,
    siblings: Sequence[str] = (),
) -> Pick | None:
    return pick(capabilities, starts=starts, python=python, linux=linux, siblings=tuple(siblings))


def newest_hint(
    chosen: Pick | None,
    capabilities: Sequence[Capability],
    python_cmd: str,
    *,
    conda: bool = False,
    shown: tuple[str, str] | None = None,
) -> RepairHint | None:
    """ "or the newest torch for sm_61: ..." for ``chosen``; None when there is none or it is
    the build ``shown`` (version, CUDA tag) the first hint already proposes."""
    if chosen is None:
        return None
    if shown is not None and (chosen.version, f"cu{chosen.cuda[0]}{chosen.cuda[1]}") == shown:
        return None
    arch = ", ".join(f"sm_{c[0]}{c[1]}" for c in capabilities)
    pinned = "".join(f", {name} {release}" for name, release in chosen.siblings)
    return RepairHint(
        f"or the newest torch for {arch} (what `torchguard check --gpu` answers): "
        f"{chosen.version}{pinned} built for CUDA {chosen.cuda[0]}.{chosen.cuda[1]} "
        f"(its kernels {chosen.provenance()})",
        (chosen.command(python_cmd, conda=conda),),
        PREVIOUS_VERSIONS_URL,
    )


__all__ = ["candidate_releases", "newest_hint", "newest_pick", "older_note"]
