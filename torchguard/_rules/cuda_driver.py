"""cuda-driver-missing, cuda-driver-too-old: the NVIDIA driver a CUDA build of torch needs.

Not import failures: torch imports, then ``torch.cuda.is_available()`` is False with "The
NVIDIA driver on your system is too old (found version 11040)". Hence warnings, with the
driver number to install, read from ``System32\\nvcuda.dll`` without loading it. The minimum
drivers and the CUDA variants of each torch release are data in
:mod:`torchguard._facts.cuda_builds`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._facts.cuda_builds import (
    MINIMUM_DRIVER,
    PREVIOUS_VERSIONS_URL,
    Cuda,
    Driver,
    all_variants,
    driver_version,
    install_command,
    minimum_driver,
    newest_runnable,
    release_of,
)
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.tree import join
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.links import DRIVERS_URL
from torchguard._rules.registry import WINDOWS, rule


@dataclass(frozen=True)
class InstalledDriver:
    """``System32\\nvcuda.dll`` as found: its path and the driver number (None if unreadable)."""

    path: str
    driver: Driver | None
    described: bool = False
    """Offline, described by the user (``--cuda``, ``--gpu``): ``path`` says how, no file."""

    @property
    def file(self) -> str | None:
        return None if self.described else self.path


def find_driver(context: CheckContext) -> InstalledDriver | None:
    """The NVIDIA driver's nvcuda.dll, read as a file (never loaded); None when absent."""
    system32 = context.system.system32
    hit = context.system.tree.lookup(system32, "nvcuda.dll")
    if hit is None:
        return _described_driver(context)
    path = join(system32, hit[0])
    try:
        version = context.facts(path).file_version
    except ImageUnavailable:
        return InstalledDriver(context.system.tree.origin(path), None)
    return InstalledDriver(context.system.tree.origin(path), driver_version(version))


def _described_driver(context: CheckContext) -> InstalledDriver | None:
    """Offline, a driver the user described: ``--cuda X.Y`` (the newest CUDA it supports, so
    at least that version's minimum driver) or an NVIDIA GPU named with ``--gpu`` (a driver of
    unknown version). A live machine without nvcuda.dll has no driver, whatever its GPU."""
    system = context.system
    if system.live:
        return None
    named = [a.name for a in system.display_adapters if a.is_nvidia]
    if system.driver_cuda is not None:
        cuda = system.driver_cuda
        where = f"--cuda {cuda[0]}.{cuda[1]}" + (f", {named[0]}" if named else "")
        return InstalledDriver(where, minimum_driver(cuda), described=True)
    if named:
        return InstalledDriver(f"{named[0]}, named with --gpu", None, described=True)
    return None


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    cuda = parse_cuda(context.torch.cuda)
    if cuda is None:
        return
    required = minimum_driver(cuda)
    installed = find_driver(context)
    torch_name = f"torch {context.torch.version} (CUDA {cuda[0]}.{cuda[1]})"
    if installed is None:
        yield Finding(
            code=Code.CUDA_DRIVER_MISSING,
            severity=WARNING,
            message=(
                f"{torch_name} is a CUDA build but no NVIDIA driver is installed (no "
                "nvcuda.dll in System32): torch imports, CUDA is unavailable"
            ),
            missing="nvcuda.dll",
            hints=_hints(context, required, None),
            rank=70,
        )
        return
    driver = installed.driver
    if driver is None or required is None or driver >= required:
        return
    yield Finding(
        code=Code.CUDA_DRIVER_TOO_OLD,
        severity=WARNING,
        message=(
            f"the NVIDIA driver {format_driver(driver)} is older than {format_driver(required)}"
            f", the minimum for CUDA {cuda[0]}.{cuda[1]} that {torch_name} "
            "uses: torch imports, CUDA is unavailable"
        ),
        missing="nvcuda.dll",
        path=installed.file,
        hints=_hints(context, required, driver),
        rank=70,
    )


def format_driver(driver: Driver) -> str:
    return f"{driver[0]}.{driver[1]:02d}"


def parse_cuda(cuda: str | None) -> Cuda | None:
    """``(12, 4)`` for torch.version.cuda ``"12.4"``; None for a CPU build or nonsense."""
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return (int(parts[0]), int(parts[1]))


def _hints(
    context: CheckContext, required: Driver | None, driver: Driver | None
) -> tuple[RepairHint, ...]:
    wanted = f" {format_driver(required)} or newer" if required else ""
    hints = [RepairHint(f"install the NVIDIA driver{wanted}", (), DRIVERS_URL)]
    version = context.torch.base_version
    release = release_of(version)
    conda = context.hints.conda
    python = context.hints.python_cmd
    best = None
    if driver is not None:
        best = newest_runnable(release.variants if release else all_variants(), driver)
    if best is not None:
        hints.append(
            RepairHint(
                f"or keep this driver and install torch {version} built for CUDA "
                f"{best[0]}.{best[1]}, the newest variant of this release the driver runs",
                (install_command(python, version, best, conda=conda, release=release),),
                PREVIOUS_VERSIONS_URL,
            )
        )
    else:
        hints.append(
            RepairHint(
                f"or install the CPU build of torch {version}",
                (install_command(python, version, None, conda=conda, release=release),),
            )
        )
    return tuple(hints)


__all__ = ["MINIMUM_DRIVER", "driver_version", "find_driver", "minimum_driver", "parse_cuda"]
