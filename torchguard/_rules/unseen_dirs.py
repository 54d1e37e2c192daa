"""A DLL found nowhere torchguard can see may sit in a folder the program registered unseen.

``missing-dll`` is a proof only when every folder Windows searches is known. Folders
registered with ``os.add_dll_directory`` before torchguard's observer ran cannot be read
(:mod:`torchguard._platforms.windows.user_dirs`); when the missing DLL is in one that may be
registered, the error becomes a warning that says what was assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.tree import WinTree, join
from torchguard._report.findings import WARNING, Finding


def doubt_unseen(
    findings: Sequence[Finding], tree: WinTree, folders: Sequence[str]
) -> list[Finding]:
    """``findings``, with each ``missing-dll`` error whose DLL is in one of ``folders`` made a
    warning."""
    result: list[Finding] = []
    for finding in findings:
        holder = _holder(finding, tree, folders) if folders else None
        if holder is not None:
            finding = replace(
                finding,
                severity=WARNING,
                message=(
                    f"{finding.message}. Not certain: {finding.missing} is in {holder}, a "
                    "folder this process loaded modules from; folders registered with "
                    "os.add_dll_directory before torchguard ran cannot be read, so torchguard "
                    f"assumed it is not registered. If it is, Windows finds {finding.missing} "
                    "there and import torch works"
                ),
                rank=finding.rank + 40,
            )
        result.append(finding)
    result.sort(key=Finding.sort_key)
    return result


def _holder(finding: Finding, tree: WinTree, folders: Sequence[str]) -> str | None:
    if not finding.is_error or finding.code != Code.MISSING_DLL or not finding.missing:
        return None
    return next((f for f in folders if tree.is_file(join(f, finding.missing))), None)
