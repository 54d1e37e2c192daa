"""smart-app-control: Windows 11's Smart App Control is on, and torch's import will load DLLs
that carry no signature.

With Smart App Control enforcing (``VerifiedAndReputablePolicyState`` = 1), Windows refuses to
load a DLL that is neither signed nor known to Microsoft's reputation service: ``[WinError
4551] An Application Control policy has blocked this file``. torch's own DLLs are unsigned.
Whether the reputation service knows a given file is not visible from here, so this is a
warning naming the unsigned DLLs the replay loads (files under the Windows folders are
catalog-signed and not judged; modules already loaded passed already). Live only.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._binary.pe.signature import HEAD, signature_size
from torchguard._facts.vocab import Code, Step
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

ENFORCING = 1
NAMED = 5
RANK = 60

#: Steps that find Windows' own (catalog-signed) DLLs, or modules already in the process.
_TRUSTED = frozenset({Step.SYSTEM32, Step.KNOWNDLL, Step.APISET, Step.WINDOWS_DIR, Step.LOADED})

URL = "https://support.microsoft.com/topic/what-is-smart-app-control-285ea03d-fa88-4d56-882e-6698afdb7003"


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    if context.system.smart_app_control != ENFORCING:
        return
    unsigned = [path for path in _loaded(context) if _unsigned(context, path)]
    if not unsigned:
        return
    names = [ntpath.basename(p) for p in unsigned]
    shown = ", ".join(names[:NAMED]) + (
        f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    )
    yield Finding(
        code=Code.SMART_APP_CONTROL,
        severity=WARNING,
        message=(
            f"Smart App Control is on, and `import torch` loads {len(names)} DLL(s) with no "
            f"signature ({shown}): unless Microsoft's reputation service knows each file, "
            'Windows refuses it: "[WinError 4551] An Application Control policy has blocked '
            'this file"'
        ),
        path=unsigned[0],
        hints=(
            RepairHint(
                "Smart App Control cannot allow single files: turn it off in Windows Security > "
                "App & browser control > Smart App Control settings (on many Windows 11 "
                "versions it cannot be turned on again without reinstalling Windows), or run "
                "torch under WSL",
                (),
                URL,
            ),
        ),
        rank=RANK,
    )


def _loaded(context: CheckContext) -> list[str]:
    """The DLLs the guarded import maps, in load order, each once."""
    seen: dict[str, str] = {}
    for load in context.guarded.loads:
        for resolution in load.modules.values():
            if resolution.path and resolution.via not in _TRUSTED:
                seen.setdefault(resolution.path.lower(), resolution.path)
    return list(seen.values())


def _unsigned(context: CheckContext, path: str) -> bool:
    head = context.system.tree.read_head(path, HEAD)
    return head is not None and signature_size(head) == 0
