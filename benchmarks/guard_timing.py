"""The guard's share of a warm ``import torch``, timed from inside the import: what
``torch_import.py`` (Linux, a real torch in a venv) and ``torch_import_wine.py`` (Windows
CPython under Wine) both run in fresh processes, and how they read and report it.

Not a benchmark itself: imported by those two scripts, from this folder.
"""

from __future__ import annotations

import statistics

TARGET = 0.010  # seconds: issue 22's target for the guard answered by the verdict memo

#: Run in the guarded interpreter: ``import torch`` with the guard timed inside it (the
#: watcher's ``guard``, which imports torchguard's modules, runs the warm analysis and writes
#: no report); whether the verdict memo answered.
TIMED = """
import sys, time
watcher = next(f for f in sys.meta_path if type(f).__name__ == "TorchImportWatcher")
real, spent = watcher.guard, []
def guard():
    begin = time.perf_counter()
    real()
    spent.append(time.perf_counter() - begin)
watcher.guard = guard
begin = time.perf_counter()
import torch
memo = sys.modules.get("torchguard._binary.memo")
print("TG-TIMES", spent[0], time.perf_counter() - begin, bool(memo and memo.passed))
"""


def read_times(stdout: str, memo: bool | None) -> tuple[float, float] | None:
    """(the guard's seconds, the whole ``import torch``'s) from :data:`TIMED`'s output, None
    without its line; ``memo``: whether the verdict memo must have answered (None: either)."""
    line = next((x for x in stdout.splitlines() if x.startswith("TG-TIMES ")), None)
    if line is None:
        return None
    _, guard, whole, passed = line.split()
    if memo is not None and (passed == "True") != memo:
        raise SystemExit(f"the verdict memo {'missed' if memo else 'answered'} unexpectedly")
    return float(guard), float(whole)


def medians(hits: list[tuple[float, float]], full: list[tuple[float, float]]) -> dict[str, float]:
    """Medians (seconds) of :func:`read_times`'s pairs: ``guard`` (the memo answered), ``full``
    (the memo removed first), ``torch`` (the rest of ``import torch``, all runs)."""
    return {
        "guard": statistics.median(g for g, _ in hits),
        "full": statistics.median(g for g, _ in full),
        "torch": statistics.median(w - g for g, w in hits + full),
    }


def report(what: str, figures: dict[str, float]) -> int:
    """Print :func:`medians`' figures against the rest of ``what`` (the baseline) and the
    target; the exit status: 1 when the target is missed."""
    guard, full, torch = figures["guard"], figures["full"], figures["torch"]
    print(f"{what} without the guard's share, median: {torch * 1000:.1f} ms")
    print(
        f"the guard's warm cost inside import torch, full analysis (no memo), median: "
        f"{full * 1000:.2f} ms ({full / torch:.4f} of the rest of the import)"
    )
    print(
        f"the guard's warm cost inside import torch, answered by the memo, median: "
        f"{guard * 1000:.2f} ms ({guard / torch:.4f} of the rest of the import)"
    )
    ok = guard < TARGET
    print(f"target: under {TARGET * 1000:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1
