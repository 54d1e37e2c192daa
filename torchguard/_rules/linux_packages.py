"""Linux warnings from metadata: a package built for another torch (``package-mismatch``) and
a CPU-only torch on a machine with an NVIDIA driver (``cpu-build-on-gpu``)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_hints import LinuxHints
from torchguard._vocab import Code

_BUILD_TORCH = re.compile(r"torch(\d+)\.(\d+)")


def package_mismatch(
    pins: Sequence[tuple[str, str, str | None]], torch_version: str, hints: LinuxHints
) -> Iterator[Finding]:
    """``package-mismatch`` warnings from metadata: (name, version, torch requirement).

    A warning: ``import torch`` works. The binary replay stands next to it; a pair that binds
    can still fail when its operators register (torchvision 0.23.0 in torch 2.9.1 binds every
    symbol, then segfaults: measured), which no loader model sees."""
    base, _, local = torch_version.partition("+")
    release = tuple(base.split(".")[:2])
    for name, version, requires in pins:
        problem = None
        if requires and requires.startswith("=="):
            pinned = requires[2:]
            pinned_base, _, pinned_local = pinned.partition("+")
            if pinned_base != base or (pinned_local and local and pinned_local != local):
                problem = f"pins torch=={pinned}"
        tag = _BUILD_TORCH.search(version.partition("+")[2])
        if tag and (tag.group(1), tag.group(2)) != release:
            problem = f"is a build for torch {tag.group(1)}.{tag.group(2)} ({version})"
        variant = version.partition("+")[2]
        paired = name in ("torchvision", "torchaudio")
        if problem is None and paired and variant.startswith("cu") and local != variant:
            problem = f"is the {variant} build"
        if problem is None:
            continue
        yield Finding(
            code=Code.PACKAGE_MISMATCH,
            severity=WARNING,
            message=(
                f"{name} {version} {problem}, but torch {torch_version} is installed: its "
                "binaries may fail to bind (undefined symbol: _ZN3c10...) or bind and then "
                "crash when their operators register"
            ),
            missing=f"{name}=={version}",
            hints=(
                RepairHint(
                    f"Install the {name} release built for torch {base}"
                    + (" (its wheel tag names torch and cxx11abi)" if tag else ""),
                    (
                        hints.pip(
                            "install",
                            "--force-reinstall",
                            "--no-deps",
                            f"<{name} for torch {base}>",
                        ),
                    ),
                ),
            ),
            package=name.replace("-", "_"),
            rank=70,
        )


def cpu_build_on_gpu(
    torch_version: str,
    cuda: str | None,
    gpus: Sequence[str],
    hints: LinuxHints,
    driver: str | None = None,
) -> Iterator[Finding]:
    """``cpu-build-on-gpu``: a CPU-only torch where the NVIDIA driver lists a GPU, or where a
    driver is there at all (``driver`` names it; under WSL2 the host's ``libcuda.so.1``). A
    warning: torch imports, ``torch.cuda.is_available()`` is False."""
    if cuda is not None or not (gpus or driver):
        return
    base = torch_version.split("+")[0]
    shown = ", ".join(gpus) if gpus else driver
    yield Finding(
        code=Code.CPU_BUILD_ON_GPU,
        severity=WARNING,
        message=(
            f"torch {torch_version} is a CPU-only build, and this machine has "
            f"{shown}: torch imports, but CUDA is unavailable"
        ),
        hints=(
            RepairHint(
                "Install a CUDA build of torch (the PyPI wheel for Linux is one)",
                (hints.pip("install", "--force-reinstall", f"torch=={base}"),),
                "https://pytorch.org/get-started/locally/",
            ),
        ),
        rank=65,
    )
