"""page-file-too-small: torch's DLLs would not fit in the commit the system has left.

"[WinError 1455] The paging file is too small for this operation to complete", naming a CUDA
DLL, at ``import torch`` or in each spawned DataLoader worker: every process that imports torch
is charged the writable (copy-on-write) sections of every DLL it maps
(:mod:`~torchguard._binary.pe.commit`), and a writable ``.nv_fatb`` makes that hundreds of MB
per DLL. Live scans only: the commit limit and what is available come from
GlobalMemoryStatusEx.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._binary.cache import host_key
from torchguard._binary.pe.commit import CommitEstimate, DllCommit, dll_commit, mib
from torchguard._binary.pe.sections import HEAD_BYTES, SectionTableError, section_table
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import APISET, KNOWNDLL, LOADED, SYSTEM32
from torchguard._platforms.windows.tree import HostFile
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

#: The DataLoader workers a typical training script starts (override: TORCHGUARD_WORKERS).
TYPICAL_WORKERS = 4
PAGE_FILE_URL = (
    "https://learn.microsoft.com/troubleshoot/windows-client/performance/"
    "how-to-determine-the-appropriate-page-file-size-for-64-bit-versions-of-windows"
)
_SKIP = {SYSTEM32, KNOWNDLL, APISET, LOADED}  # shared with every process, or already mapped


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    commit = context.system.commit
    if commit is None:
        return
    limit, available = commit
    estimate = estimate_commit(context)
    if estimate.per_process == 0:
        return
    workers = _workers(context)
    fits = estimate.processes_that_fit(available)
    if fits >= 1 + workers:
        return
    largest = ", ".join(f"{d.name} {mib(d.writable)}" for d in estimate.largest())
    fatbin = f", {mib(estimate.fatbin)} of it writable .nv_fatb GPU code" if estimate.fatbin else ""
    if fits == 0:
        what = "import torch itself would fail with WinError 1455"
    else:
        what = (
            f"only {fits} process{'es' if fits > 1 else ''} importing torch fit: "
            f"DataLoader(num_workers={workers}) needs {1 + workers} and its workers would fail "
            "with WinError 1455"
        )
    needed = estimate.per_process * (1 + workers) - available
    yield Finding(
        code=Code.PAGE_FILE_TOO_SMALL,
        severity=WARNING,
        message=(
            f"mapping torch's DLLs charges about {mib(estimate.per_process)} of commit per "
            f"process ({largest}{fatbin}); {mib(available)} of the {mib(limit)} commit limit "
            f"is available: {what}"
        ),
        hints=_hints(estimate, needed, fits),
        rank=80,
    )


def estimate_commit(context: CheckContext) -> CommitEstimate:
    """The commit estimate for every DLL ``import torch`` maps outside System32."""
    paths: dict[str, str] = {}
    for load in context.guarded.loads:
        for name, resolution in load.modules.items():
            if resolution.path and resolution.via not in _SKIP:
                paths.setdefault(name.lower(), resolution.path)
    cache = context.cache
    dlls: list[DllCommit] = []
    for name, path in sorted(paths.items()):
        entry = context.system.tree.entry(path)
        identity = host_key(entry.path) if isinstance(entry, HostFile) else None
        cached = cache.get_derived("commit", identity) if cache else None
        if isinstance(cached, list) and len(cached) == 2:
            try:
                dlls.append(DllCommit(name, int(cached[0]), int(cached[1])))
                continue
            except (TypeError, ValueError):
                pass  # a damaged entry is read again
        head = context.system.tree.read_head(path, HEAD_BYTES)
        if head is None:
            continue
        try:
            share = dll_commit(name, section_table(head))
        except SectionTableError:
            continue
        if cache is not None:
            cache.put_derived("commit", identity, [share.writable, share.writable_fatbin])
        dlls.append(share)
    return CommitEstimate(tuple(dlls))


def _workers(context: CheckContext) -> int:
    raw = context.system.interpreter.environ.get("TORCHGUARD_WORKERS", "")
    return int(raw) if raw.isdigit() else TYPICAL_WORKERS


def _hints(estimate: CommitEstimate, needed: int, fits: int) -> tuple[RepairHint, ...]:
    hints = [
        RepairHint(
            "let Windows manage the page file size (System > About > Advanced system settings "
            "> Performance > Advanced > Virtual memory > Automatically manage), or enlarge it "
            f"by at least {mib(max(needed, 0))}; then restart Windows",
            (
                "Get-CimInstance Win32_ComputerSystem | Set-CimInstance -Property "
                "@{AutomaticManagedPagefile=$true}",
            ),
            PAGE_FILE_URL,
        )
    ]
    if fits >= 1:
        workers = max(fits - 1, 0)
        hints.append(
            RepairHint(
                f"or use fewer DataLoader workers: num_workers={workers} fits by this estimate",
                (),
            )
        )
    if estimate.fatbin:
        hints.append(
            RepairHint(
                "or install a torch build whose CUDA DLLs map their GPU code read-only (CUDA 12 "
                "builds): writable .nv_fatb sections are charged in full to every process",
                (),
            )
        )
    return tuple(hints)
