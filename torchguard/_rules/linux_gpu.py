"""The NVIDIA driver and the GPU on Linux: ``cuda-driver-missing``, ``cuda-driver-too-old``,
``cuda-driver-mismatch``, ``gpu-arch-unsupported``. All warnings: torch imports either way, CUDA
is then unavailable or its kernels do not run.

The driver is the kernel module's version (``/proc/driver/nvidia/version``) or, under WSL2, the
Windows host's (the FileVersion of its DLLs in ``/usr/lib/wsl/drivers``), whose
``libcuda.so.1`` is in ``/usr/lib/wsl/lib``; whether ``libcuda.so.1`` is found at all is
ld.so's answer (cudart ``dlopen``s it by name at the first CUDA call). The minimum drivers are
the Linux column of NVIDIA's table (:mod:`torchguard._facts.cuda_builds`), its Windows column
for a WSL2 host's driver, the GPUs' architectures the table of :mod:`torchguard._facts.gpus`,
torch's kernels the ``.nv_fatbin`` of ``libtorch_cuda.so``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.companions import matching_siblings
from torchguard._facts.cuda_builds import (
    LINUX_FAMILY_FLOOR,
    MINIMUM_DRIVER,
    PREVIOUS_VERSIONS_URL,
    RELEASES,
    Cuda,
    LinuxDriver,
    Release,
    format_linux_driver,
    index_url,
    install_command,
    linux_minimum_driver,
    minimum_driver,
    release_of,
)
from torchguard._facts.gpus import CUDA_GPUS_URL, Capability, compute_capability
from torchguard._facts.torch_archs import carries_kernels
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.gpu_fix import newest_hint, newest_pick
from torchguard._rules.kernels import no_kernels_message
from torchguard._rules.linux_loads import LinuxHints

DRIVERS_URL = "https://www.nvidia.com/drivers"
WSL_LIB_DIR = "/usr/lib/wsl/lib"
WSL_CUDA_URL = "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"

#: CUDA major -> the oldest Windows driver that runs its toolkits through minor-version
#: compatibility (gpu-facts.md section 5, Table 2: 11.x from 452.39 on Windows; 12.x from
#: 12.0 GA's first Windows driver 527.41; 13.x from 580): a WSL2 host's driver is Windows'.
WINDOWS_FAMILY_FLOOR: dict[int, LinuxDriver] = {
    11: (452, 39),
    12: MINIMUM_DRIVER[(12, 0)],
    13: MINIMUM_DRIVER[(13, 0)],
}


@dataclass(frozen=True)
class LinuxDriverFacts:
    """What the machine says about its NVIDIA driver (pure data; read by the pipeline)."""

    driver: LinuxDriver | None = None
    """The driver's version, when known."""
    source: str = ""
    """Where it comes from: ``/proc/driver/nvidia/version``, ``--cuda 12.4`` ..."""
    loaded: bool = False
    """A driver is there: the kernel module, the WSL host's library, or one described offline."""
    wsl_libcuda: str | None = None
    """Under WSL2, ``/usr/lib/wsl/lib/libcuda.so.1`` when the host's driver provides it."""
    libcuda: str | None = None
    """Where ld.so finds ``libcuda.so.1`` (empty: nowhere; None: not asked)."""
    nvidia_pci: bool = False
    """An NVIDIA display controller on the PCI bus (vendor 0x10de, class 0x03)."""
    host: bool = False
    """``driver`` is a WSL2 host's Windows driver: judged by NVIDIA's Windows column."""
    module: str | None = None
    """The kernel module's version as ``/proc/driver/nvidia/version`` prints it."""
    libcuda_version: str | None = None
    """The driver version ``libcuda`` (as ld.so finds it) names: ``libcuda.so.535.104.05``."""
    libcuda_via: str = ""
    """How ld.so finds it: ``LD_LIBRARY_PATH``, ``ld.so.cache``, ``RPATH ...``, ``default``."""
    libcuda_compat: bool = False
    """It lies in a CUDA forward-compatibility folder (``/usr/local/cuda-X.Y/compat``)."""
    gpus: tuple[str, ...] = ()
    """The GPUs the driver lists (or ``--gpu``)."""


def parse_cuda(cuda: str | None) -> Cuda | None:
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return (int(parts[0]), int(parts[1]))


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
    mismatch = _mismatch(name, facts)
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


COMPAT_URL = "https://docs.nvidia.com/deploy/cuda-compatibility/"
#: GPUs NVIDIA's forward compatibility does not support (it is for data-centre GPUs).
_CONSUMER = ("geforce", "titan")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _mismatch(name: str, facts: LinuxDriverFacts) -> Finding | None:
    """``libcuda`` (user space) of another driver version than the kernel module: CUDA's
    initialisation refuses the pair (error 803), or (a forward-compatibility ``libcuda``
    newer than the module, on a GPU that feature does not support) error 804."""
    module, found, path = facts.module, facts.libcuda_version, facts.libcuda
    if module is None or found is None or not path or facts.host:
        return None
    lib, kernel = _numbers(found), _numbers(module)
    if lib == kernel:
        return None
    via = {"default": "the default folders", "loaded": "already loaded"}.get(
        facts.libcuda_via, facts.libcuda_via
    )
    where = f"{path} (found through {via})" if via else path
    folder = path.rsplit("/", 1)[0]
    if facts.libcuda_compat and lib > kernel:
        consumer = [g for g in facts.gpus if any(c in g.lower() for c in _CONSUMER)]
        if not consumer:
            return None  # forward compatibility, as NVIDIA intends it on data-centre GPUs
        effect = (
            f"{name}'s CUDA initialisation fails with \"CUDA error 804: forward compatibility "
            f'was attempted on non supported HW" on the {consumer[0]}'
        )
        why = "NVIDIA's forward-compatibility libcuda runs only on data-centre GPUs"
    else:
        effect = (
            f"{name}'s CUDA initialisation fails with \"CUDA error 803: system has unsupported "
            'display driver / cuda driver combination"'
        )
        why = (
            "a forward-compatibility libcuda older than the driver it runs on"
            if facts.libcuda_compat
            else (
                "the driver was upgraded and the old kernel module is still loaded (nvidia-smi: "
                '"Driver/library version mismatch")'
                if lib > kernel
                else "a driver library left from another driver version"
            )
        )
    return Finding(
        code=Code.CUDA_DRIVER_MISMATCH,
        severity=WARNING,
        message=(
            f"libcuda.so.1, which cudart loads at the first CUDA call, is {where}, driver "
            f"{found}, but the NVIDIA kernel module is {module}: {why}. torch imports, then "
            f"{effect} and torch.cuda.is_available() is False"
        ),
        missing="libcuda.so.1",
        path=path,
        hints=_mismatch_hints(facts, folder, lib > kernel),
        rank=70,
    )


def _mismatch_hints(facts: LinuxDriverFacts, folder: str, newer: bool) -> tuple[RepairHint, ...]:
    """Drop the folder that puts the foreign libcuda first, else reboot (an upgrade), else
    remove the stray copy."""
    if facts.libcuda_via == "LD_LIBRARY_PATH":
        return (
            RepairHint(
                f"Drop {folder} from LD_LIBRARY_PATH before Python starts, so that the "
                "driver's own libcuda (the kernel module's version) loads",
                ("unset LD_LIBRARY_PATH",),
                COMPAT_URL,
            ),
        )
    if facts.libcuda_compat:
        return (
            RepairHint(
                f"Take {folder} out of the loader's configuration (the /etc/ld.so.conf.d entry "
                "that lists it; or remove the cuda-compat package), then rebuild the cache",
                (f"grep -rl {folder} /etc/ld.so.conf.d", "sudo ldconfig"),
                COMPAT_URL,
            ),
        )
    if newer:
        return (
            RepairHint(
                "Reboot, so that the kernel module of the installed driver loads (or unload "
                "and reload the NVIDIA modules with nothing using the GPU)",
                (
                    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia",
                    "sudo modprobe nvidia",
                ),
                DRIVERS_URL,
            ),
        )
    return (
        RepairHint(
            f"Remove the stray {facts.libcuda} or reinstall the driver's user-space libraries "
            f"at the kernel module's version {facts.module}, then rebuild the cache",
            ("sudo ldconfig",),
            DRIVERS_URL,
        ),
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
                DRIVERS_URL,
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


def gpu_arch_findings(
    torch_version: str,
    cuda: str | None,
    gpus: tuple[str, ...],
    archs: FatbinArchs | None,
    driver: LinuxDriver | None,
    hints: LinuxHints,
    siblings: Callable[[], tuple[tuple[str, str], ...]] = tuple,
    python: tuple[int, int] | None = None,
) -> Iterator[Finding]:
    """Each named GPU whose architecture ``libtorch_cuda.so``'s kernels cannot run;
    ``siblings`` gives the installed torchvision/torchaudio (read only for a finding)."""
    wanted = parse_cuda(cuda)
    if wanted is None or archs is None or not (archs.sass or archs.ptx):
        return
    named = {g: c for g in gpus if (c := compute_capability(g)) is not None}
    for name, capability in named.items():
        if archs.runs_on(capability):
            continue
        yield Finding(
            code=Code.GPU_ARCH_UNSUPPORTED,
            severity=WARNING,
            message=no_kernels_message(
                name, capability, torch_version, "libtorch_cuda.so's", archs
            ),
            hints=_arch_hints(torch_version, wanted, capability, driver, hints, siblings(), python),
            rank=72,
        )


def _arch_hints(
    torch_version: str,
    cuda: Cuda,
    capability: Capability,
    driver: LinuxDriver | None,
    hints: LinuxHints,
    installed: tuple[tuple[str, str], ...] = (),
    python: tuple[int, int] | None = None,
) -> tuple[RepairHint, ...]:
    base = torch_version.split("+")[0]
    release = release_of(base)

    def fits(row: Release, variant: Cuda, on: LinuxDriver | None) -> bool:
        """Has kernels for the GPU (PyTorch's build policy for that release and variant) and
        starts on driver ``on`` (minor-version compatibility counts: a variant that only lacks
        PTX JIT still runs the SASS it ships)."""
        if variant == cuda or not carries_kernels(row.releases[-1], variant, capability):
            return False
        need = LINUX_FAMILY_FLOOR.get(variant[0]) or linux_minimum_driver(variant)
        return on is None or need is None or need <= on

    rows = [release] if release is not None else []
    rows += [row for row in RELEASES if release is None or row.series > release.series]
    choice = _first_fit(rows, lambda row, v: fits(row, v, driver))
    new_driver = False
    if choice is None and driver is not None:  # none runs on this driver: a newer one first
        choice = _first_fit(rows, lambda row, v: fits(row, v, None))
        new_driver = True
    arch = f"sm_{capability[0]}{capability[1]}"
    if choice is None:
        return (
            RepairHint(
                f"no torch build torchguard knows of has {arch} kernels for this driver; see "
                "which CUDA versions support the GPU",
                (),
                CUDA_GPUS_URL,
            ),
        )
    row, variant = choice
    target = base if row is release else row.releases[-1]
    need = linux_minimum_driver(variant)
    floor = LINUX_FAMILY_FLOOR.get(variant[0])
    note = ""
    if new_driver and floor is not None:
        note = f", after installing NVIDIA driver {format_linux_driver(floor)} or newer"
    elif need and (driver is None or driver < need):
        note = f" (its full feature set needs NVIDIA driver {format_linux_driver(need)} or newer)"
    names = tuple(name for name, _ in installed)
    first = RepairHint(
        f"Install torch {target} built for CUDA {variant[0]}.{variant[1]}, a build that "
        f"carries {arch} kernels{note}",
        (
            install_command(
                hints.python_cmd,
                target,
                variant,
                conda=hints.conda,
                release=row,
                siblings=installed if target == base else matching_siblings(target, names),
            ),
        ),
        PREVIOUS_VERSIONS_URL,
    )
    newest = newest_hint(
        newest_pick(
            [capability],
            _linux_starts(None if new_driver else driver),
            python=python,
            linux=True,
            siblings=names,
        ),
        [capability],
        hints.python_cmd,
        conda=hints.conda,
        shown=(target, f"cu{variant[0]}{variant[1]}"),
    )
    return (first,) if newest is None else (first, newest)


def _linux_starts(on: LinuxDriver | None) -> Callable[[Cuda], bool]:
    """Driver ``on`` (None: any) starts a variant whose family floor it meets (as ``fits``)."""

    def starts(variant: Cuda) -> bool:
        need = LINUX_FAMILY_FLOOR.get(variant[0]) or linux_minimum_driver(variant)
        return on is None or need is None or need <= on

    return starts


def _first_fit(
    rows: list[Release], fits: Callable[[Release, Cuda], bool]
) -> tuple[Release, Cuda] | None:
    """The first release (this one, then newer) with a fitting variant, and its newest."""
    for row in rows:
        fitting = [v for v in row.variants if fits(row, v)]
        if fitting:
            return row, max(fitting)
    return None
