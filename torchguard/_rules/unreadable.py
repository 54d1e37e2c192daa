"""unreadable-dll: a binary of the closure that could not be read now, or within budget.

An ``OSError`` or ``MemoryError`` while reading (a virus scanner holding the file, a sharing
violation, access denied, a OneDrive file that is online-only) says nothing about the file:
the loader may map it fine. So this is a warning that names the real error (WinError 5 or 32
is not 193) and says what was left unchecked; it is never cached, and never "reinstall".
A file that would cost more memory than its size allows (a deflate bomb, an import table that
names one long string a quarter million times) is not read either, and said so.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import LoadResult, Unread
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

#: ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION.
_DENIED, _SHARING, _LOCK = 5, 32, 33


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    seen: set[str] = set()
    for root, unread in _unread(context):
        key = unread.path.lower()
        if key in seen:
            continue
        seen.add(key)
        yield Finding(
            code=Code.UNREADABLE_DLL,
            severity=WARNING,
            message=_message(unread),
            dll=root,
            missing=unread.leaf,
            chain=unread.chain,
            path=context.system.tree.origin(unread.path),
            hints=_budget_hints() if unread.over_budget else _hints(unread.detail),
            rank=70,
        )


def _unread(context: CheckContext) -> Iterator[tuple[str, Unread]]:
    loads: list[LoadResult] = []
    for load in context.guarded.loads:
        loads.append(load)
        if load.retry is not None:
            loads.append(load.retry)
    for package in context.packages:
        loads.extend(result.load for result in package.results if result.load is not None)
    for load in loads:
        for unread in load.unread:
            yield ntpath.basename(load.root), unread


def _message(unread: Unread) -> str:
    if unread.over_budget:
        return (
            f"{unread.leaf} was not read: {unread.detail}. Nothing about it (or what it "
            "imports) was checked"
        )
    return (
        f"{unread.leaf} could not be read: {unread.detail}. This is not damage and the "
        "Windows loader may well load it, but nothing about it (or what it imports) was checked"
    )


def _budget_hints() -> tuple[RepairHint, ...]:
    return (
        RepairHint(
            "no build writes such a file: check where it came from, and reinstall its package "
            "from its official index if it is not what you expect"
        ),
    )


def _hints(detail: str) -> tuple[RepairHint, ...]:
    retry = RepairHint("run the check again: a file held for a moment is read next time")
    if f"WinError {_SHARING}" in detail or f"WinError {_LOCK}" in detail:
        return (
            RepairHint(
                "another program holds the file open (often a virus scanner scanning it "
                "right after an install, or a second Python process updating packages)"
            ),
            retry,
        )
    if f"WinError {_DENIED}" in detail or "ermission denied" in detail:
        return (
            RepairHint(
                "access is denied: a virus scanner may be quarantining it, or the file belongs "
                "to another user; check the file's permissions and the scanner's log"
            ),
            retry,
        )
    if "out of memory" in detail:
        return (RepairHint("close other programs to free memory, then check again"),)
    return (
        RepairHint(
            "if the environment lives in a OneDrive (or other cloud-synced) folder, mark it "
            '"Always keep on this device" so its DLLs are on disk'
        ),
        retry,
    )
