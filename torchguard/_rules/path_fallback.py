"""path-fallback: a DLL is found only through torch's legacy ``LoadLibraryW`` retry.

On WinError 126 torch prepends its folders to PATH and retries with ``LoadLibraryW``, whose
standard search order also covers the Windows folder, the current directory and PATH. The
import then works, so this is a warning, never an error: but it binds whatever copy those
folders hold first (an old CUDA toolkit's, another application's runtime), which is how 127
and 1114 errors start, and a DLL found in the current directory is found only when Python
starts there.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._facts.vocab import Code, Step
from torchguard._platforms.windows.loader import CURRENT_DIR, PATH_FALLBACK, WINDOWS_DIR
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

_WHERE = {
    PATH_FALLBACK: "only on PATH ({folder})",
    CURRENT_DIR: "only in the current directory ({folder}), so only when Python starts there",
    WINDOWS_DIR: "only in the Windows folder ({folder})",
}


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    for root, resolutions in context.guarded.fallbacks.items():
        for resolution in resolutions:
            where = _WHERE.get(resolution.via or Step.ROOT)
            if where is None or resolution.path is None:
                continue
            folder = ntpath.dirname(resolution.path)
            yield Finding(
                code=Code.PATH_FALLBACK,
                severity=WARNING,
                message=(
                    f"{resolution.name} is found {where.format(folder=folder)}; torch loads "
                    "it through its legacy PATH retry, which binds whatever copy that search "
                    "finds first"
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
