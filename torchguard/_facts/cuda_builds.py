"""Which CUDA builds of each torch release exist for Windows, and which one a driver can run.

Kept as data, one row per release series with where it comes from. Every patch release of a
series was published for the same variants. The Windows rows come from PyTorch's "previous
versions" page (pytorch.org/get-started/previous-versions, whose commands are under "Linux and
Windows"), the 2.10 row from PyTorch's wheel-variants announcement, the 2.11 to 2.14 rows from
the release compatibility matrix in pytorch/pytorch's RELEASE.md (stable and experimental CUDA
of each release; for 2.12 to 2.14 its CUDA support matrix names them "for Linux x86 and Windows
builds"). 2.15 drops CUDA 12.6 (issue 23, "2.15 removes cu126") and keeps 2.14's CUDA 13
variants; its PyPI Linux wheel is built for CUDA 13.2 (read from its ``torch/version.py``).
Official conda packages (``-c pytorch -c nvidia``, ``pytorch-cuda=X.Y``) stop after 2.5
(pytorch/pytorch#138506).
"""

from __future__ import annotations

from dataclasses import dataclass

PREVIOUS_VERSIONS_URL = "https://pytorch.org/get-started/previous-versions/"
_PREVIOUS = "pytorch.org/get-started/previous-versions, v{} (Linux and Windows wheels)"
_MATRIX = (
    "pytorch/pytorch RELEASE.md (2026), compatibility matrix row {}: stable + experimental CUDA"
)
_WINDOWS = "; its CUDA support matrix for 2.12-2.14 names 12.6.3, 13.0.2, 13.2.1 for Windows builds"

Cuda = tuple[int, int]
Driver = tuple[int, int]

#: CUDA (major, minor) -> minimum Windows x86_64 driver (major, minor), GA releases: NVIDIA's CUDA
#: toolkit release notes, table 3 (CUDA 13.2 Update 2 edition). CUDA 13 lists no Windows value,
#: so 13.x takes the r580 floor of NVIDIA's minor-version compatibility table.
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
    (13, 1): (580, 0),
    (13, 2): (580, 0),
}


#: Linux driver versions are three numbers (``535.104.05``); compared as tuples.
LinuxDriver = tuple[int, ...]

LINUX_DRIVER_SOURCE = (
    "NVIDIA CUDA Toolkit Release Notes (13.2 Update 2 edition), Table 3 'CUDA Toolkit and "
    "Corresponding Driver Versions', Linux x86_64 column, GA rows; family floors from Table 2 "
    "(minor-version compatibility); "
    "https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html"
)

#: CUDA (major, minor) -> minimum Linux x86_64 driver of that toolkit's GA release
#: (:data:`LINUX_DRIVER_SOURCE`). 11.0's GA is 11.0.2 (11.0.1 was an RC).
LINUX_MINIMUM_DRIVER: dict[tuple[int, int], LinuxDriver] = {
    (11, 0): (450, 51, 5),
    (11, 1): (455, 23),
    (11, 2): (460, 27, 3),
    (11, 3): (465, 19, 1),
    (11, 4): (470, 42, 1),
    (11, 5): (495, 29, 5),
    (11, 6): (510, 39, 1),
    (11, 7): (515, 43, 4),
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
    (13, 1): (590, 44, 1),
    (13, 2): (595, 45, 4),
}

#: CUDA major -> the oldest Linux driver that runs any toolkit of that major through NVIDIA's
#: minor-version compatibility (Table 2: 11.x >= 450.80.02; 12.x >= 525, whose first Linux
#: driver is 12.0 GA's 525.60.13; 13.x >= 580, whose first is 13.0 GA's 580.65.06). Below it
#: the CUDA runtime does not start ("The NVIDIA driver on your system is too old").
LINUX_FAMILY_FLOOR: dict[int, LinuxDriver] = {
    11: (450, 80, 2),
    12: (525, 60, 13),
    13: (580, 65, 6),
}


def linux_minimum_driver(cuda: tuple[int, int]) -> LinuxDriver | None:
    """The Linux driver of ``cuda``'s GA toolkit; an unlisted minor takes its family's nearest
    below (12.7 -> 12.6's); None for a family the table does not know."""
    if cuda in LINUX_MINIMUM_DRIVER:
        return LINUX_MINIMUM_DRIVER[cuda]
    below = [v for v in LINUX_MINIMUM_DRIVER if v[0] == cuda[0] and v < cuda]
    return LINUX_MINIMUM_DRIVER[max(below)] if below else None


def linux_newest_runnable(variants: tuple[Cuda, ...], driver: LinuxDriver) -> Cuda | None:
    """The newest of ``variants`` whose GA Linux driver is at most ``driver``."""
    fitting = [v for v in variants if (linux_minimum_driver(v) or (10**6,)) <= driver]
    return max(fitting) if fitting else None


def format_linux_driver(driver: LinuxDriver) -> str:
    """As NVIDIA prints it: ``535.104.05``, ``570.26``."""
    return ".".join([str(driver[0]), *(f"{n:02d}" for n in driver[1:])])


@dataclass(frozen=True)
class Release:
    """A torch release series and the CUDA variants download.pytorch.org has for Windows."""

    series: tuple[int, int]
    releases: tuple[str, ...]
    variants: tuple[Cuda, ...]
    """Oldest first, as ``cu118`` -> (11, 8)."""
    conda: bool
    """Official conda packages (``pytorch-cuda=X.Y -c pytorch -c nvidia``) exist."""
    source: str


RELEASES: tuple[Release, ...] = (
    Release((1, 13), ("1.13.0", "1.13.1"), ((11, 6), (11, 7)), True, _PREVIOUS.format("1.13.1")),
    Release((2, 0), ("2.0.0", "2.0.1"), ((11, 7), (11, 8)), True, _PREVIOUS.format("2.0.1")),
    Release(
        (2, 1), ("2.1.0", "2.1.1", "2.1.2"), ((11, 8), (12, 1)), True, _PREVIOUS.format("2.1.2")
    ),
    Release(
        (2, 2), ("2.2.0", "2.2.1", "2.2.2"), ((11, 8), (12, 1)), True, _PREVIOUS.format("2.2.2")
    ),
    Release((2, 3), ("2.3.0", "2.3.1"), ((11, 8), (12, 1)), True, _PREVIOUS.format("2.3.1")),
    Release(
        (2, 4), ("2.4.0", "2.4.1"), ((11, 8), (12, 1), (12, 4)), True, _PREVIOUS.format("2.4.1")
    ),
    Release(
        (2, 5), ("2.5.0", "2.5.1"), ((11, 8), (12, 1), (12, 4)), True, _PREVIOUS.format("2.5.1")
    ),
    Release((2, 6), ("2.6.0",), ((11, 8), (12, 4), (12, 6)), False, _PREVIOUS.format("2.6.0")),
    Release(
        (2, 7), ("2.7.0", "2.7.1"), ((11, 8), (12, 6), (12, 8)), False, _PREVIOUS.format("2.7.1")
    ),
    Release((2, 8), ("2.8.0",), ((12, 6), (12, 8), (12, 9)), False, _PREVIOUS.format("2.8.0")),
    Release(
        (2, 9), ("2.9.0", "2.9.1"), ((12, 6), (12, 8), (13, 0)), False, _PREVIOUS.format("2.9.1")
    ),
    Release(
        (2, 10),
        ("2.10.0",),
        ((12, 6), (12, 8), (13, 0)),
        False,
        "dev-discuss.pytorch.org 'Wheel variants for PyTorch release 2.10 published': "
        "CUDA 12.6, 12.8 and 13.0 for Windows x86",
    ),
    Release((2, 11), ("2.11.0",), ((12, 6), (12, 8), (13, 0)), False, _MATRIX.format("2.11")),
    Release(
        (2, 12),
        ("2.12.0", "2.12.1"),
        ((12, 6), (13, 0), (13, 2)),
        False,
        _MATRIX.format("2.12") + _WINDOWS,
    ),
    Release(
        (2, 13), ("2.13.0",), ((12, 6), (13, 0), (13, 2)), False, _MATRIX.format("2.13") + _WINDOWS
    ),
    Release(
        (2, 14),
        ("2.14.0", "2.14.1"),
        ((12, 6), (13, 0), (13, 2)),
        False,
        _MATRIX.format("2.14") + _WINDOWS,
    ),
    Release(
        (2, 15),
        ("2.15.0",),
        ((13, 0), (13, 2)),
        False,
        "2.14's CUDA 13 variants without 12.6 (issue 23); PyPI's 2.15.0 Linux wheel: CUDA 13.2",
    ),
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


def release_of(version: str) -> Release | None:
    """The row for a torch version (``2.4.1``, ``2.4.1+cpu``); None when not in the table."""
    parts = version.partition("+")[0].split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    series = (int(parts[0]), int(parts[1]))
    return next((row for row in RELEASES if row.series == series), None)


def all_variants() -> tuple[Cuda, ...]:
    """Every CUDA variant any release in the table was published for, oldest first."""
    return tuple(sorted({v for row in RELEASES for v in row.variants}))


def newest_runnable(variants: tuple[Cuda, ...], driver: Driver) -> Cuda | None:
    """The newest of ``variants`` whose minimum Windows driver is at most ``driver``."""
    fitting = [v for v in variants if (minimum_driver(v) or (10**6, 0)) <= driver]
    return max(fitting) if fitting else None


def variant_tag(cuda: Cuda) -> str:
    return f"cu{cuda[0]}{cuda[1]}"


def index_url(cuda: Cuda | None) -> str:
    tag = variant_tag(cuda) if cuda else "cpu"
    return f"https://download.pytorch.org/whl/{tag}"


def install_command(
    python_cmd: str,
    version: str,
    cuda: Cuda | None,
    *,
    conda: bool,
    release: Release | None,
    siblings: tuple[tuple[str, str], ...] = (),
) -> str:
    """The command that installs torch ``version`` built for ``cuda`` (None: the CPU build),
    with ``siblings`` ((``torchvision``, ``0.19.1``), ...) pinned in the same command: they
    come from the same index, and a torch changed alone would leave them mismatched.

    conda only where official conda packages of that release exist (up to 2.5); a conda
    environment with a newer torch installs it with pip, as PyTorch's own instructions say.
    """
    pin = f"=={version}" if version[:1].isdigit() else ""
    others = "".join(f" {name}=={sibling}" for name, sibling in siblings)
    if conda and release is not None and release.conda:
        if cuda is None:
            return f"conda install pytorch{pin}{others} cpuonly -c pytorch"
        return (
            f"conda install pytorch{pin}{others} pytorch-cuda={cuda[0]}.{cuda[1]} "
            "-c pytorch -c nvidia"
        )
    return (
        f"{python_cmd} -m pip install --force-reinstall torch{pin}{others} "
        f"--index-url {index_url(cuda)}"
    )


__all__ = [
    "LINUX_FAMILY_FLOOR",
    "LINUX_MINIMUM_DRIVER",
    "PREVIOUS_VERSIONS_URL",
    "RELEASES",
    "Release",
    "all_variants",
    "format_linux_driver",
    "install_command",
    "linux_minimum_driver",
    "linux_newest_runnable",
    "newest_runnable",
    "release_of",
]
