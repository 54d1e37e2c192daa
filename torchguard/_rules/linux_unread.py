"""``unreadable-dll`` on Linux: objects torchguard could not read. ld.so may map them fine, so
this is a warning: nothing is proven, and nothing below them was checked."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.ldso import (
    SharedObject,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import base_name
from torchguard._rules.registry import LINUX, rule


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


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from unread_findings(context.used)
