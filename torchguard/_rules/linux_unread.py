"""What ld.so may load anyway: objects torchguard could not read (``unreadable-dll``) and
preload entries ld.so skips with a message (``missing-dll``). Warnings: nothing is proven."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torchguard._model.ldso import (
    IgnoredPreload,
    SharedObject,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_hints import base_name
from torchguard._vocab import Code


def unread_findings(objects: Sequence[SharedObject]) -> Iterator[Finding]:
    """``unreadable-dll`` warnings: loaded objects whose facts are unknown (not read now, or
    refused only by torchguard's reader). glibc may map them fine, so nothing is proven, and
    nothing below them was checked."""
    for obj in objects:
        if not obj.unread:
            continue
        name = base_name(obj.path)
        yield Finding(
            code=Code.UNREADABLE_DLL,
            severity=WARNING,
            message=(
                f"{name} could not be checked: {obj.unread}. This is not proof of damage and "
                "ld.so may well load it, but nothing about it (what it needs, its symbols) "
                "was checked"
            ),
            dll=name,
            missing=name,
            path=obj.path,
            hints=(
                RepairHint(
                    "check that the file can be read by this user (permissions, a network or "
                    "cloud file system) and run the check again; if it stays unreadable, "
                    "reinstall the package that owns it"
                ),
            ),
            rank=70,
        )


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
