"""The NVIDIA driver a CUDA build of torch needs on Linux: ``cuda-driver-missing`` and
``cuda-driver-too-old``. Warnings: torch imports either way, CUDA is then unavailable.

The minimum drivers are the Linux column of NVIDIA's table
(:mod:`torchguard._facts.cuda_builds`), its Windows column for a WSL2 host's driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from torchguard._facts.cuda_builds import (
    LINUX_FAMILY_FLOOR,
    MINIMUM_DRIVER,
    PREVIOUS_VERSIONS_URL,
    Cuda,
    LinuxDriver,
    format_linux_driver,
    index_url,
    install_command,
    linux_minimum_driver,
    minimum_driver,
    release_of,
)
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.links import DRIVERS_URL
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_driver_facts import (
    WSL_CUDA_URL,
    WSL_LIB_DIR,
    LinuxDriverFacts,
    parse_cuda,
)
from torchguard._rules.linux_driver_mismatch import driver_mismatch
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.registry import LINUX, rule

#: CUDA major -> the oldest Windows driver that runs its toolkits through minor-version
#: compatibility (gpu-facts.md section 5, Table 2: 11.x from 452.39 on Windows; 12.x from
#: 12.0 GA's first Windows driver 527.41; 13.x from 580): a WSL2 host's driver is Windows'.
WINDOWS_FAMILY_FLOOR: dict[int, LinuxDriver] = {
    11: (452, 39),
    12: MINIMUM_DRIVER[(12, 0)],
    13: MINIMUM_DRIVER[(13, 0)],
}


def driver_findings(
    torch_version: str, cuda: str | None, facts: LinuxDriverFacts, hints: LinuxHints
) -> Iterator[Finding]:
    """The driver a CUDA build of torch needs, against the one the machine has."""
    wanted = parse_cuda(cuda)
    if wanted is None:
        return
    name = f"torch {torch_version} (CUDA {wanted[0]}.{wanted[1]})"
    minimum = _windows_minimum if facts.host else linux_minimum_driver
    required = minimum(wanted)
    if not facts.loaded:
        if facts.nvidia_pci:
            yield _missing(
                f"{name} is a CUDA build and an NVIDIA GPU is on the PCI bus, but no NVIDIA "
                "kernel driver is loaded (no /proc/driver/nvidia/version): torch imports, "
                "CUDA is unavailable",
                "libcuda.so.1",
                _driver_hints(torch_version, required, hints, minimum),
            )
        return
    if facts.libcuda == "":
        yield _libcuda_unreachable(name, facts)
        return
    mismatch = driver_mismatch(name, facts)
    if mismatch is not None:
        yield mismatch
    driver = facts.driver
    if driver is None or required is None or driver >= required:
        return
    floor = (WINDOWS_FAMILY_FLOOR if facts.host else LINUX_FAMILY_FLOOR).get(wanted[0])
    shown = format_linux_driver(driver)
    compatible = floor is not None and driver >= floor
    if compatible:
        assert floor is not None
        effect = (
            f"CUDA {wanted[0]}.x runs on drivers from {format_linux_driver(floor)} through "
            "NVIDIA's minor-version compatibility, without the newer driver's features (no "
            "PTX JIT compilation: kernels shipped only as PTX fail)"
        )
    else:
        effect = (
            'torch imports, CUDA is unavailable ("The NVIDIA driver on your system is too old")'
        )
    yield Finding(
        code=Code.CUDA_DRIVER_TOO_OLD,
        severity=WARNING,
        message=(
            f"the NVIDIA driver {shown} ({facts.source}) is older than "
            f"{format_linux_driver(required)}, the {'Windows' if facts.host else 'Linux'} "
            f"minimum for CUDA {wanted[0]}.{wanted[1]} that {name} uses: {effect}"
        ),
        missing="libcuda.so.1",
        hints=_driver_hints(
            torch_version, required, hints, minimum, driver, cpu=not compatible, host=facts.host
        ),
        rank=70,
    )


def _windows_minimum(cuda: Cuda) -> LinuxDriver | None:
    """NVIDIA's Windows minimum for ``cuda`` (a WSL2 host's driver is a Windows driver)."""
    return minimum_driver(cuda)


def _missing(message: str, missing: str, hints: tuple[RepairHint, ...]) -> Finding:
    return Finding(
        code=Code.CUDA_DRIVER_MISSING,
        severity=WARNING,
        message=message,
        missing=missing,
        hints=hints,
        rank=70,
    )


def _libcuda_unreachable(name: str, facts: LinuxDriverFacts) -> Finding:
    """A driver is there but ld.so finds no ``libcuda.so.1``: cudart's dlopen fails."""
    if facts.wsl_libcuda is not None:
        return _missing(
            f"{name} is a CUDA build and the Windows host's NVIDIA driver provides "
            f"{facts.wsl_libcuda}, but ld.so does not search {WSL_LIB_DIR} (not in "
            'ld.so.cache, LD_LIBRARY_PATH or the default folders): dlopen("libcuda.so.1") '
            "fails at the first CUDA call, torch imports, CUDA is unavailable",
            "libcuda.so.1",
            (
                RepairHint(
                    f"Let ld.so find the host driver: list {WSL_LIB_DIR} in "
                    "/etc/ld.so.conf.d/ld.wsl.conf and rebuild the cache (ldconfig's "
                    '"libcuda.so.1 is not a symbolic link" message is harmless), or put it '
                    "on LD_LIBRARY_PATH; never install a Linux NVIDIA driver inside WSL",
                    (
                        f"echo {WSL_LIB_DIR} | sudo tee /etc/ld.so.conf.d/ld.wsl.conf",
                        "sudo ldconfig",
                    ),
                    WSL_CUDA_URL,
                ),
            ),
        )
    return _missing(
        f"{name} is a CUDA build and the NVIDIA kernel driver is loaded ({facts.source}), but "
        "its library libcuda.so.1 is found nowhere ld.so looks (ld.so.cache, LD_LIBRARY_PATH, "
        "the default folders; a container started without the driver's libraries): "
        'dlopen("libcuda.so.1") fails at the first CUDA call, torch imports, CUDA is '
        "unavailable",
        "libcuda.so.1",
        (
            RepairHint(
                "Install the driver's user-space libraries matching the kernel module (in a "
                "container: start it with the NVIDIA Container Toolkit, e.g. docker run "
                "--gpus all), then rebuild the cache",
                ("sudo ldconfig",),
            ),
        ),
    )


def _driver_hints(
    torch_version: str,
    required: LinuxDriver | None,
    hints: LinuxHints,
    minimum: Callable[[Cuda], LinuxDriver | None],
    driver: LinuxDriver | None = None,
    *,
    cpu: bool = True,
    host: bool = False,
) -> tuple[RepairHint, ...]:
    """The driver to install, else this release for a CUDA the driver runs, else (when CUDA
    cannot start at all: ``cpu``) its CPU build."""
    wanted = f" {format_linux_driver(required)} or newer" if required else ""
    if host:
        install = RepairHint(
            f"Install the NVIDIA driver{wanted} on Windows: under WSL2 the driver is the "
            "Windows host's (never install a Linux NVIDIA driver inside WSL)",
            (),
            WSL_CUDA_URL,
        )
    else:
        install = RepairHint(f"Install the NVIDIA driver{wanted}", (), DRIVERS_URL)
    found = [install]
    base = torch_version.split("+")[0]
    release = release_of(base)
    best = None
    if driver is not None and release is not None:
        fitting = [v for v in release.variants if (minimum(v) or (10**6,)) <= driver]
        best = max(fitting) if fitting else None
    if best is not None:
        found.append(
            RepairHint(
                f"or keep this driver and install torch {base} built for CUDA "
                f"{best[0]}.{best[1]}, the newest variant of this release it runs",
                (
                    install_command(
                        hints.python_cmd, base, best, conda=hints.conda, release=release
                    ),
                ),
                PREVIOUS_VERSIONS_URL,
            )
        )
    elif cpu:
        found.append(
            RepairHint(
                f"or install the CPU build of torch {base}",
                (
                    hints.pip(
                        "install",
                        "--force-reinstall",
                        f"torch=={base}",
                        "--index-url",
                        index_url(None),
                    ),
                ),
            )
        )
    return tuple(found)


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    if context.driver is not None:
        yield from driver_findings(
            context.torch_version, context.cuda, context.driver, context.hints
        )
