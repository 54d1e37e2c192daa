"""cuda-driver-missing, cuda-driver-too-old: the NVIDIA driver a CUDA build of torch needs.

Not import failures: torch imports, then ``torch.cuda.is_available()`` is False with "The
NVIDIA driver on your system is too old (found version 11040)". Hence warnings, with the
driver number to install, read from ``System32\\nvcuda.dll`` without loading it.

The minimum Windows driver per CUDA toolkit comes from NVIDIA's release notes (table 3 of the
CUDA 13.2 Update 2 notes, the GA rows); CUDA 13 lists no Windows value, so the r580 family
floor of its minor-version compatibility table is used.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._findings import WARNING, Finding, RepairHint
from torchguard._fs import join
from torchguard._pe import PEReadError
from torchguard._rules.context import CheckContext

DRIVERS_URL = "https://www.nvidia.com/drivers"

#: CUDA (major, minor) -> minimum Windows x86_64 driver (major, minor), GA releases.
MINIMUM_DRIVER: dict[tuple[int, int], tuple[int, int]] = {
    (11, 0): (451, 48),
    (11, 1): (456, 38),
    (11, 2): (460, 82),
    (11, 3): (465, 89),
    (11, 4): (471, 11),
    (11, 5): (496, 4),
    (11, 6): (511, 23),
    (11, 7): (516, 1),
    (11, 8): (520, 6),
    (12, 0): (527, 41),
    (12, 1): (531, 14),
    (12, 2): (536, 25),
    (12, 3): (545, 84),
    (12, 4): (551, 61),
    (12, 5): (555, 85),
    (12, 6): (560, 76),
    (12, 8): (570, 65),
    (12, 9): (576, 2),
    (13, 0): (580, 0),
}

#: download.pytorch.org CUDA variants, oldest first, for "or install a build for older CUDA".
VARIANTS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


def check(context: CheckContext) -> Iterator[Finding]:
    cuda = _parse(context.torch.cuda)
    if cuda is None:
        return
    required = minimum_driver(cuda)
    system32 = context.system.system32
    hit = context.system.tree.lookup(system32, "nvcuda.dll")
    torch_name = f"torch {context.torch.version} (CUDA {cuda[0]}.{cuda[1]})"
    if hit is None:
        yield Finding(
            code="cuda-driver-missing",
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
    try:
        version = context.facts(join(system32, hit[0])).file_version
    except PEReadError:
        return  # assumed or unreadable: no version to judge
    driver = driver_version(version)
    if driver is None or required is None or driver >= required:
        return
    yield Finding(
        code="cuda-driver-too-old",
        severity=WARNING,
        message=(
            f"the NVIDIA driver {driver[0]}.{driver[1]:02d} is older than {required[0]}."
            f"{required[1]:02d}, the minimum for CUDA {cuda[0]}.{cuda[1]} that {torch_name} "
            "uses: torch imports, CUDA is unavailable"
        ),
        missing="nvcuda.dll",
        path=context.system.tree.origin(join(system32, hit[0])),
        hints=_hints(context, required, driver),
        rank=70,
    )


def driver_version(file_version: tuple[int, int, int, int] | None) -> tuple[int, int] | None:
    """NVIDIA's driver number from nvcuda.dll's FileVersion: 32.0.15.6094 -> (560, 94)."""
    if file_version is None or not 10 <= file_version[2] <= 19:
        return None
    merged = (file_version[2] - 10) * 10000 + file_version[3]
    return (merged // 100, merged % 100)


def minimum_driver(cuda: tuple[int, int]) -> tuple[int, int] | None:
    """The minimum driver for a CUDA version; an unlisted minor takes its family's nearest."""
    if cuda in MINIMUM_DRIVER:
        return MINIMUM_DRIVER[cuda]
    below = [v for v in MINIMUM_DRIVER if v[0] == cuda[0] and v < cuda]
    return MINIMUM_DRIVER[max(below)] if below else None


def _parse(cuda: str | None) -> tuple[int, int] | None:
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return (int(parts[0]), int(parts[1]))


def _hints(
    context: CheckContext, required: tuple[int, int] | None, driver: tuple[int, int] | None
) -> tuple[RepairHint, ...]:
    wanted = f" {required[0]}.{required[1]:02d} or newer" if required else ""
    hints = [RepairHint(f"install the NVIDIA driver{wanted}", (), DRIVERS_URL)]
    fitting = [
        variant for variant in VARIANTS if driver is not None and MINIMUM_DRIVER[variant] <= driver
    ]
    pip = context.hints.python_cmd + " -m pip install --force-reinstall torch --index-url "
    if fitting:
        best = fitting[-1]
        index = f"https://download.pytorch.org/whl/cu{best[0]}{best[1]}"
        hints.append(
            RepairHint(
                f"or keep this driver and install torch built for CUDA {best[0]}.{best[1]}",
                (pip + index,),
            )
        )
    else:
        hints.append(
            RepairHint(
                "or install the CPU build of torch", (pip + "https://download.pytorch.org/whl/cpu",)
            )
        )
    return tuple(hints)
