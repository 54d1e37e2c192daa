"""path-fallback: a DLL is found only through torch's legacy PATH retry.

On WinError 126 torch prepends its folders to PATH and retries with ``LoadLibraryW``, which
searches PATH. The import then works, but binds whatever copy PATH holds first (an old CUDA
toolkit's, another application's runtime), which is how 127 and 1114 errors start.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._model.loader import PATH_FALLBACK
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._vocab import Code


def check(context: CheckContext) -> Iterator[Finding]:
    for root, resolutions in context.guarded.fallbacks.items():
        for resolution in resolutions:
            if resolution.via != PATH_FALLBACK or resolution.path is None:
                continue
            folder = ntpath.dirname(resolution.path)
            yield Finding(
                code=Code.PATH_FALLBACK,
                severity=WARNING,
                message=(
                    f"{resolution.name} is found only on PATH ({folder}); torch loads it through "
                    "its legacy PATH fallback, which binds whatever copy PATH lists first"
                ),
                dll=ntpath.basename(root),
                missing=resolution.name,
                chain=(ntpath.basename(root), resolution.name),
                path=resolution.path,
                hints=(
                    RepairHint(
                        f"install {resolution.name} where the loader looks without PATH (its "
                        "package, or the Visual C++ Redistributable for runtime DLLs) instead of "
                        "relying on PATH",
                    ),
                ),
                rank=45,
            )
