"""``library-shadowed`` and ``conflicting-files`` on Linux: a loaded copy that is not the one
torch's packages ship, and a file two distributions claim. Warnings: the copy binds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from torchguard._model.ldso import (
    SharedObject,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_hints import LinuxHints, base_name, drop_commands
from torchguard._vocab import Code


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


def conflicting_files(
    conflicts: Mapping[str, tuple[tuple[str, ...], str | None]], hints: LinuxHints
) -> Iterator[Finding]:
    """``conflicting-files`` warnings: path -> (the distributions claiming it, whose bytes).

    A warning: the replay of the load judges whether the copy on disk binds; this says why
    the copy is what it is and what a later uninstall would do."""
    for path, (dists, owner) in sorted(conflicts.items()):
        name = base_name(path)
        whose = f"the file on disk is {owner}'s" if owner else "either may have written it"
        projects = [d.split(" ")[0] for d in dists]
        suffix = f"-cu{hints.cuda_major}" if hints.cuda_major else None
        keep = [p for p in projects if suffix and p.endswith(suffix)]
        drop = [p for p in projects if p not in keep]
        commands = tuple(hints.pip("uninstall", "-y", p) for p in drop if keep)
        commands += tuple(hints.pip("install", "--force-reinstall", p) for p in keep)
        yield Finding(
            code=Code.CONFLICTING_FILES,
            severity=WARNING,
            message=(
                f"{' and '.join(dists)} both install {name} ({path}); {whose}, and "
                "uninstalling either removes it"
            ),
            dll=name,
            missing=name,
            path=path,
            hints=(
                RepairHint(
                    "Keep only the distribution for torch's CUDA major"
                    + (f" (CUDA {hints.cuda_major})" if hints.cuda_major else "")
                    + ", then reinstall it so that its file is the one on disk",
                    commands,
                ),
            ),
            rank=55,
        )
