"""``gpu-arch-unsupported`` on Linux: a named GPU whose architecture the kernels in
``libtorch_cuda.so``'s ``.nv_fatbin`` cannot run (the GPUs' architectures: the table of
:mod:`torchguard._facts.gpus`). A warning: torch imports, its kernels do not run there."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.companions import matching_siblings
from torchguard._facts.cuda_builds import (
    LINUX_FAMILY_FLOOR,
    PREVIOUS_VERSIONS_URL,
    Cuda,
    LinuxDriver,
    Release,
    format_linux_driver,
    install_command,
    linux_minimum_driver,
    release_of,
)
from torchguard._facts.gpus import CUDA_GPUS_URL, Capability, compute_capability
from torchguard._facts.torch_archs import carries_kernels
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.gpu_fix import candidate_releases, newest_hint, newest_pick, older_note
from torchguard._rules.kernels import no_kernels_message
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_driver_facts import parse_cuda
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.registry import LINUX, rule


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
        if (row is release and variant == cuda) or not carries_kernels(
            row.releases[-1], variant, capability
        ):
            return False
        need = LINUX_FAMILY_FLOOR.get(variant[0]) or linux_minimum_driver(variant)
        return on is None or need is None or need <= on

    rows = candidate_releases(release, python, linux=True)
    choice = _first_fit(rows, lambda row, v: fits(row, v, driver))
    new_driver = False
    if choice is None and driver is not None:  # none runs on this driver: a newer one first
        choice = _first_fit(rows, lambda row, v: fits(row, v, None))
        new_driver = True
    arch = f"sm_{capability[0]}{capability[1]}"
    if choice is None:
        for_python = f" and Python {python[0]}.{python[1]}" if python else ""
        return (
            RepairHint(
                f"no torch build torchguard knows of has {arch} kernels for this driver"
                f"{for_python}; see which CUDA versions support the GPU",
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
        f"carries {arch} kernels{note}{older_note(row, release)}",
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


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    if context.driver is not None:
        yield from gpu_arch_findings(
            context.torch_version,
            context.cuda,
            context.gpus,
            context.torch_archs,
            context.driver.driver,
            context.hints,
            context.siblings,
            context.python,
        )
