"""Preload entries ld.so cannot load (``LD_PRELOAD``, ``/etc/ld.so.preload``): it prints an
error and goes on, so this is a ``missing-dll`` warning."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.ldso import (
    IgnoredPreload,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.registry import LINUX, rule


def ignored_preload_findings(ignored: Sequence[IgnoredPreload]) -> Iterator[Finding]:
    """A preload entry ld.so cannot load: it prints an error and goes on without it, so
    ``import torch`` is unaffected; every process started with it prints that line."""
    for item in ignored:
        setting = "LD_PRELOAD" if item.source == "LD_PRELOAD" else f"the file {item.source}"
        yield Finding(
            code=Code.MISSING_DLL,
            severity=WARNING,
            message=(
                f"{setting} names {item.entry}, which ld.so cannot preload ({item.reason}); "
                f'every process prints "{item.message()}" and runs without it'
            ),
            dll=item.entry.rsplit("/", 1)[-1],
            missing=item.entry,
            path=item.entry if "/" in item.entry else None,
            hints=(
                RepairHint(
                    f"drop {item.entry} from {setting} (or install what it names)",
                    ("unset LD_PRELOAD",) if item.source == "LD_PRELOAD" else (),
                ),
            ),
            rank=75,
        )


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from ignored_preload_findings(context.ignored_preloads)
