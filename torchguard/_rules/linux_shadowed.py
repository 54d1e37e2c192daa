"""``library-shadowed`` on Linux: a loaded copy that is not the one torch's packages ship. A
warning while everything binds: it loads, but it is another build."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.ldso import (
    SharedObject,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints, drop_commands
from torchguard._rules.registry import LINUX, rule


def shadowed(
    objects: Sequence[SharedObject],
    pinned: Mapping[str, str],
    same_file: Callable[[str, str], bool],
    package: str | None = None,
    owner: Callable[[str], str | None] | None = None,
    hints: LinuxHints | None = None,
) -> Iterator[Finding]:
    """``library-shadowed`` warnings: a loaded soname whose copy is not the shipped one.
    ``owner`` names the distribution whose RECORD lists a path (None: none does)."""
    for obj in objects:
        soname = obj.facts.soname
        shipped = pinned.get(soname or "")
        if shipped is None or same_file(shipped, obj.path):
            continue
        if obj.via == "path":  # a load by full path: torch's CUDA preload from sys.path
            how = (
                "loaded by full path: torch's CUDA preload takes the first match in sys.path, "
                "and it looks in nvidia/<library>/lib before nvidia/cu<major>/lib"
            )
            hint = _leftover_hint(obj.path, owner, hints or LinuxHints())
        else:
            how = f"found through {obj.via}"
            hint = RepairHint(
                f"Remove {obj.path.rsplit('/', 1)[0]} from LD_LIBRARY_PATH (or the cache) "
                "so that the shipped copy loads",
                drop_commands(hints or LinuxHints(), obj.path.rsplit("/", 1)[0], obj.via),
            )
        yield Finding(
            code=Code.LIBRARY_SHADOWED,
            severity=WARNING,
            message=(
                f"{soname} loads from {obj.path} ({how}), not the copy "
                f"torch's packages ship ({shipped}); it binds, but it is another build"
            ),
            dll=soname,
            missing=soname,
            path=obj.path,
            hints=(hint,),
            package=package,
            rank=60,
        )


def _leftover_hint(
    path: str, owner: Callable[[str], str | None] | None, hints: LinuxHints
) -> RepairHint:
    """A copy torch's preload took from another distribution: uninstall that distribution."""
    dist = owner(path) if owner is not None else None
    if dist is None:
        return RepairHint(
            f"Remove {path.rsplit('/', 1)[0]}, which no installed distribution of torch's "
            "CUDA build ships, so that torch preloads the copy its packages pin",
            (),
        )
    name = dist.split(" ", 1)[0]
    return RepairHint(
        f"Uninstall {dist} (left by another CUDA build of torch): torch preloads its copy "
        "instead of the one its packages pin",
        (hints.pip("uninstall", "-y", name),),
    )


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    if context.replay.ok:
        yield from shadowed(
            context.loaded,
            context.pinned,
            context.same_file,
            owner=context.owner,
            hints=context.hints,
        )
