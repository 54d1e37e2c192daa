"""The direct question: which torch to install for this GPU, driver and Python.

``torchguard check torch torchvision --gpu NAME [--cuda X.Y] --python 3.11`` answers with the
newest build that has a wheel for the Python, that the driver starts and whose kernels (SASS
for the GPU's architecture, or PTX the driver compiles) cover every named GPU, as one pip
command with torchvision and torchaudio pinned at the releases made for it
(:func:`torchguard._facts.gpu_pick.pick`). ``doctor`` says the same for the machine's GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchguard._facts.cuda_builds import RELEASES, index_url, variant_tag
from torchguard._facts.gpu_pick import Pick, Starts, cuda_starts, pick
from torchguard._facts.gpus import Capability, compute_capability
from torchguard._facts.torch_archs import carries_kernels
from torchguard._rules.kernels import arch_names

SIBLINGS = ("torchvision", "torchaudio")


@dataclass(frozen=True)
class GpuAnswer:
    """The answer and the lines that say it."""

    lines: tuple[str, ...]
    pick: Pick | None
    command: str | None
    unknown: tuple[str, ...] = ()
    """GPU names whose architecture torchguard does not know (not judged)."""
    capabilities: tuple[Capability, ...] = ()
    not_verified: str | None = None
    """Why the command may not install on the target as given (a free-threaded Python:
    download.pytorch.org's wheels for that ABI were not checked); None when nothing is known
    against it. The text lines carry the same words."""

    def to_dict(self) -> dict[str, object]:
        chosen = self.pick
        return {
            "torch": chosen.version if chosen else None,
            "cuda": f"{chosen.cuda[0]}.{chosen.cuda[1]}" if chosen else None,
            "index_url": index_url(chosen.cuda) if chosen else None,
            "siblings": dict(chosen.siblings) if chosen else {},
            "command": self.command,
            "kernels_source": chosen.provenance() if chosen else None,
            "read_from_binary": chosen.read_from_binary if chosen else False,
            "unknown_gpus": list(self.unknown),
            "not_verified": self.not_verified,
        }


def _arch(capability: Capability) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def _newer_without(chosen: Pick, capabilities: Sequence[Capability], starts: Starts) -> str:
    """The newer builds left out and why: no kernels for the GPU, or too new for the driver."""
    no_kernels: list[str] = []
    no_driver: list[str] = []
    for row in RELEASES:
        if row.series < chosen.release.series:
            continue
        version = row.releases[-1]
        for cuda in row.variants:
            if (row.series, cuda) <= (chosen.release.series, chosen.cuda):
                continue
            label = f"{version}+{variant_tag(cuda)}"
            if not all(carries_kernels(version, cuda, c) for c in capabilities):
                no_kernels.append(label)
            elif not starts(cuda):
                no_driver.append(label)
    parts = []
    if no_kernels:
        parts.append(f"no kernels for it in {', '.join(no_kernels[-4:])}")
    if no_driver:
        parts.append(f"too new for the driver: {', '.join(no_driver[-4:])}")
    return f" (newer builds: {'; '.join(parts)})" if parts else ""


def answer(
    gpus: Sequence[str],
    cuda: tuple[int, int] | None,
    python: tuple[int, int] | None,
    wanted: Sequence[str],
    python_cmd: str = "python",
    *,
    linux: bool = False,
) -> GpuAnswer | None:
    """The build to install for ``gpus`` (names) under a driver for ``cuda`` (None: any) and
    CPython ``python``, with the ``wanted`` siblings (torchvision, torchaudio) pinned; None
    when no GPU was named."""
    if not gpus:
        return None
    known = {name: c for name in gpus if (c := compute_capability(name)) is not None}
    unknown = tuple(name for name in gpus if name not in known)
    lines = [
        f"answer: torchguard does not know the architecture of {name}; name it as NVIDIA "
        "lists it (developer.nvidia.com/cuda-gpus)"
        for name in unknown
    ]
    if not known:
        return GpuAnswer(tuple(lines), None, None, unknown)
    capabilities = sorted(set(known.values()))
    starts = cuda_starts(cuda)
    siblings = tuple(name for name in SIBLINGS if name in {w.lower() for w in wanted})
    chosen = pick(capabilities, starts=starts, python=python, linux=linux, siblings=siblings)
    shown = ", ".join(f"{name} ({_arch(c)})" for name, c in known.items())
    under = "".join(
        [
            f" with Python {python[0]}.{python[1]}" if python else "",
            f" and a driver for CUDA {cuda[0]}.{cuda[1]}" if cuda else "",
        ]
    )
    if chosen is None:
        lines.append(
            f"answer: no torch build torchguard knows of runs on {shown}{under}: none has "
            "kernels for it that this driver starts"
            + (" (a newer NVIDIA driver widens the choice)" if cuda else "")
        )
        return GpuAnswer(tuple(lines), None, None, unknown)
    command = chosen.command(python_cmd)
    archs = chosen.archs
    kernels = f"SASS {arch_names(archs.sass)}" + (
        f", PTX {arch_names(archs.ptx)}" if archs.ptx else ""
    )
    pinned = "".join(f", {name} {release}" for name, release in chosen.siblings)
    lines.append(
        f"answer: the newest torch for {shown}{under} is {chosen.version}{pinned}, built for "
        f"CUDA {chosen.cuda[0]}.{chosen.cuda[1]} ({kernels}: {chosen.provenance()})"
        + _newer_without(chosen, capabilities, starts)
    )
    lines.append(f"  {command}")
    return GpuAnswer(tuple(lines), chosen, command, unknown, tuple(capabilities))


__all__ = ["GpuAnswer", "answer"]
