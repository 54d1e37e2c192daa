"""``cpu-build-on-gpu`` on Linux: a CPU-only torch where an NVIDIA driver or GPU is there."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.links import INSTALL_TORCH_URL
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.registry import LINUX, rule


def cpu_build_on_gpu(
    torch_version: str,
    cuda: str | None,
    gpus: Sequence[str],
    hints: LinuxHints,
    driver: str | None = None,
    siblings: Callable[[], tuple[tuple[str, str], ...]] = tuple,
    python: tuple[int, int] | None = None,
) -> Iterator[Finding]:
    """``cpu-build-on-gpu``: a CPU-only torch where the NVIDIA driver lists a GPU, or where a
    driver is there at all (``driver`` names it; under WSL2 the host's ``libcuda.so.1``). A
    warning: torch imports, ``torch.cuda.is_available()`` is False. For a GPU whose
    architecture is known, the fix is a build with kernels for it (PyPI's Linux wheel is the
    release's default CUDA variant, which may have none: 2.15.0's has no sm_61)."""
    if cuda is not None or not (gpus or driver):
        return
    base = torch_version.split("+")[0]
    shown = ", ".join(gpus) if gpus else driver
    found = _gpu_builds(base, gpus, hints, siblings, python)
    yield Finding(
        code=Code.CPU_BUILD_ON_GPU,
        severity=WARNING,
        message=(
            f"torch {torch_version} is a CPU-only build, and this machine has "
            f"{shown}: torch imports, but CUDA is unavailable"
        ),
        hints=found
        or (
            RepairHint(
                "Install a CUDA build of torch (the PyPI wheel for Linux is one)",
                (hints.pip("install", "--force-reinstall", f"torch=={base}"),),
                INSTALL_TORCH_URL,
            ),
        ),
        rank=65,
    )


def _gpu_builds(
    base: str,
    gpus: Sequence[str],
    hints: LinuxHints,
    siblings: Callable[[], tuple[tuple[str, str], ...]],
    python: tuple[int, int] | None,
) -> tuple[RepairHint, ...]:
    """The CUDA build of this release with kernels for every named GPU, and the newest build
    for them (as ``check --gpu`` answers); empty when no GPU's architecture is known."""
    from torchguard._facts.cuda_builds import PREVIOUS_VERSIONS_URL, release_of
    from torchguard._facts.gpu_pick import pick_in
    from torchguard._facts.gpus import compute_capability
    from torchguard._rules.gpu_fix import newest_hint, newest_pick

    capabilities = sorted({c for g in gpus if (c := compute_capability(g)) is not None})
    if not capabilities:
        return ()
    installed = siblings()
    names = tuple(name for name, _ in installed)
    found: list[RepairHint] = []
    release = release_of(base)
    own = pick_in(release, capabilities, siblings=installed, version=base) if release else None
    arch = ", ".join(f"sm_{c[0]}{c[1]}" for c in capabilities)
    if own is not None:
        found.append(
            RepairHint(
                f"Install torch {base} built for CUDA {own.cuda[0]}.{own.cuda[1]}, the newest "
                f"variant of this release with {arch} kernels",
                (own.command(hints.python_cmd, conda=hints.conda),),
                PREVIOUS_VERSIONS_URL,
            )
        )
    newest = newest_hint(
        newest_pick(capabilities, lambda _: True, python=python, linux=True, siblings=names),
        capabilities,
        hints.python_cmd,
        conda=hints.conda,
        shown=(own.version, f"cu{own.cuda[0]}{own.cuda[1]}") if own else None,
    )
    if newest is not None:
        found.append(newest)
    return tuple(found)


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from cpu_build_on_gpu(
        context.torch_version,
        context.cuda,
        context.gpus,
        context.hints,
        context.driver_shown,
        context.siblings,
        context.python,
    )
