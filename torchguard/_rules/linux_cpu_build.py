"""``cpu-build-on-gpu`` on Linux: a CPU-only torch where an NVIDIA driver or GPU is there."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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
                INSTALL_TORCH_URL,
            ),
        ),
        rank=65,
    )


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from cpu_build_on_gpu(
        context.torch_version, context.cuda, context.gpus, context.hints, context.driver_shown
    )
