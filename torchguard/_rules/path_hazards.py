"""glob-unsafe-path: torch's folder path makes its own DLL preload find nothing.

torch preloads ``glob.glob(torch\\lib\\*.dll)``; with ``[`` in the path (``C:\\X\\[Goods]\\venv``)
glob reads the folder as a pattern and returns nothing. A CPU build still imports (its DLLs
are found through the registered folder), but a CUDA build's cuDNN loads its sub-libraries
by bare name at first use, which works only because torch preloaded them: "Could not locate
cudnn_ops_infer64_8.dll" (failure-catalog.md, row 12).
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import glob_unsafe
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    lib_dir = context.torch.lib_dir
    if not glob_unsafe(lib_dir):
        return
    consequence = (
        "cuDNN then cannot find its sub-libraries at the first convolution"
        if context.torch.cuda
        else "a CPU build still imports, but any DLL torch loads lazily by name is not found"
    )
    yield Finding(
        code=Code.GLOB_UNSAFE_PATH,
        severity=WARNING,
        message=(
            f"torch's folder {lib_dir} contains a glob metacharacter ('[', '*' or '?'), so "
            f"torch's DLL preload finds nothing; {consequence}"
        ),
        path=lib_dir,
        hints=(
            RepairHint(
                "move the environment (or the project holding it) to a path without square "
                "brackets, e.g. C:\\envs\\myproject, and reinstall there",
            ),
        ),
        rank=75,
    )
