"""needs-dll-directory: torch's import works only because torchguard registers a folder."""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import MISSING
from torchguard._platforms.windows.tree import path_key
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    unguarded = context.unguarded.outcome()
    if unguarded.ok:
        return
    guarded_modules = {
        name: resolution
        for load in context.guarded.loads
        for name, resolution in load.modules.items()
        if resolution.path
    }
    extra = {path_key(d.path): d for d in context.plan if not d.by_torch}
    seen: set[str] = set()
    for load in context.unguarded.failed():
        for failure in load.final_failures():
            leaf = failure.leaf.lower()
            if failure.kind != MISSING or failure.delay or leaf in seen:
                continue
            resolution = guarded_modules.get(leaf)
            if resolution is None or resolution.path is None:
                continue
            folder = extra.get(path_key(ntpath.dirname(resolution.path)))
            if folder is None:
                continue
            seen.add(leaf)
            yield Finding(
                code=Code.NEEDS_DLL_DIRECTORY,
                severity=WARNING,
                message=(
                    f"torch does not register {folder.path} ({folder.provenance}), where "
                    f"{failure.leaf} lives: a plain `import torch` fails with WinError 126 naming "
                    f"{ntpath.basename(load.root)}; torchguard.ensure() registers the folder"
                ),
                dll=ntpath.basename(load.root),
                missing=failure.leaf,
                chain=failure.chain,
                path=resolution.path,
                hints=(
                    RepairHint(
                        "call torchguard.ensure() before `import torch`, or install the "
                        "environment-wide hook",
                        ("torchguard hook install",),
                    ),
                ),
                rank=40,
            )
