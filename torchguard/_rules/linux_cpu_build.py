"""``cpu-build-on-gpu`` on Linux: a CPU-only torch where an NVIDIA driver or GPU is there."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.links import INSTALL_TORCH_URL
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.neighbour_cuda import Need, neighbour_need
from torchguard._rules.neighbours import neighbour_findings
from torchguard._rules.registry import LINUX, rule


def cpu_build_on_gpu(
    torch_version: str,
    cuda: str | None,
    gpus: Sequence[str],
    hints: LinuxHints,
    driver: str | None = None,
    siblings: Callable[[], tuple[tuple[str, str], ...]] = tuple,
    python: tuple[int, int] | None = None,
    need: Need | None = None,
) -> Iterator[Finding]:
    """``cpu-build-on-gpu``: a CPU-only torch where the NVIDIA driver lists a GPU, or where a
    driver is there at all (``driver`` names it; under WSL2 the host's ``libcuda.so.1``). A
    warning: torch imports, ``torch.cuda.is_available()`` is False. For a GPU whose
    architecture is known, the fix is a build with kernels for it (PyPI's Linux wheel is the
    release's default CUDA variant, which may have none: 2.15.0's has no sm_61). ``need``: the
    CUDA major torch's neighbours load by name, preferred among the builds with kernels."""
    if cuda is not None or not (gpus or driver):
        return
    base = torch_version.split("+")[0]
    shown = ", ".join(gpus) if gpus else driver
    found = _gpu_builds(base, gpus, hints, siblings, python, need)
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
    need: Need | None = None,
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
    serves = ""
    if own is not None and release is not None and need is not None:
        same = pick_in(
            release,
            capabilities,
            starts=lambda cuda: cuda[0] == need.major,
            siblings=installed,
            version=base,
        )
        which = f"{need.package}'s {need.name}"
        if same is not None:
            own, serves = same, f" (it also serves {which})"
        else:
            serves = f" ({need.package} needs CUDA {need.major}: {need.name}; no CUDA {need.major} "
            serves += f"build of this release has {arch} kernels)"
    if own is not None:
        found.append(
            RepairHint(
                f"Install torch {base} built for CUDA {own.cuda[0]}.{own.cuda[1]}, the newest "
                f"variant of this release with {arch} kernels"
                + (f" and CUDA {own.cuda[0]}" if serves.startswith(" (it") else "")
                + serves,
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
        _neighbour_need(context) if context.cuda is None and context.gpus else None,
    )


def _neighbour_need(context: LinuxContext) -> Need | None:
    """The CUDA major torch's native neighbours here need, from their own findings."""
    return neighbour_need(
        f
        for each in context.neighbours
        for f in neighbour_findings(
            each.neighbour.kind,
            each.neighbour.version,
            each.neighbour.library,
            each.after,
            each.solo,
            context.hints,
            each.objects,
        )
    )
