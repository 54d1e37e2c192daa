"""``conflicting-files`` on Linux: a shared object two distributions install. A warning: the
replay judges the copy on disk; this says why it is what it is and what an uninstall does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints, base_name
from torchguard._rules.registry import LINUX, rule


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


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from conflicting_files(context.conflicts, context.hints)
