"""What ``neighbour-load-order`` says, and its hint to install the neighbour built for torch's
CUDA: one text for Windows and Linux, so the two platforms' findings read alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from torchguard._facts.neighbours import Kind, pin_for
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint


class Landed(Protocol):
    """A name a neighbour loads at run time and where it lands (either system's record)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str | None: ...


def found_through_torch(late: Sequence[Landed]) -> tuple[list[str], list[str], str]:
    """The names a neighbour's first CUDA call finds only because torch loaded them: the
    names, the copies torch loaded, and what happens in a process without torch."""
    needs = [load.name for load in late]
    copies = [load.path for load in late if load.path]
    return needs, copies, f"its first CUDA call cannot find {', '.join(needs)}"


def order_finding(
    *,
    label: str,
    kind: Kind,
    file: str,
    needs: list[str],
    dirs: list[str],
    when: str,
    library: str,
    hints: tuple[RepairHint, ...],
    rank: int,
) -> Finding:
    """A neighbour finds ``needs`` only because torch loaded them first (from ``dirs``);
    ``when`` says what happens in a process without torch."""
    return Finding(
        code=Code.NEIGHBOUR_LOAD_ORDER,
        severity=WARNING,
        message=(
            f"{label}: {kind.role} ({file}) finds {', '.join(needs)} only because torch "
            f"loaded {'it' if len(needs) == 1 else 'them'} first"
            + (f" (from {', '.join(dirs)})" if dirs else "")
            + f"; in a process that has not imported torch, {when}. Import torch first"
        ),
        missing=needs[0],
        path=library,
        package=kind.package,
        hints=hints,
        rank=rank,
    )


def cuda_pin_hint(
    kind: Kind, torch_major: str, pip: Callable[[str], str]
) -> tuple[RepairHint, ...]:
    """Install the release of ``kind`` built for torch's CUDA major, when one is known;
    ``pip`` turns the requirement into the platform's quoted command."""
    pin = pin_for(kind, int(torch_major))
    if pin is None:
        return ()
    return (
        RepairHint(
            f"install the {kind.package} built for CUDA {torch_major}, like this torch",
            (pip(pin),),
        ),
    )
