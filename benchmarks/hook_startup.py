"""Start-up cost of the torchguard hook for a process that never imports torch.

Two throwaway site directories are compared in the same run, interleaved:
- baseline: a .pth that only puts torchguard on sys.path;
- hooked:   the same plus the hook's .pth file, exactly as `torchguard hook install` writes it.
torchguard is copied beside them and byte-compiled, as pip does on install (these machines set
PYTHONDONTWRITEBYTECODE, which would otherwise charge a compile to every run).
A third, the hooked files with the `.pth` line before this release (`import
_torchguard_hook`, a search of `sys.path`), is measured alongside for comparison.
Each runs `python -S -c "import site; site.addsitedir(D)"` N times, interleaved with a plain
`python -c pass` (the reference every ratio is printed against). Two paired differences are
printed: of the whole process's wall time, and of the time `site.addsitedir(D)` takes inside
the process (all the hook adds to a start is done there: reading its `.pth` file and running
its line). On a machine shared with other jobs the first jitters by milliseconds (a time
slice), the second by microseconds. The target (issue 22.3): the hook's own cost per
interpreter start, the median paired difference inside the process, under 0.5 ms on a 15 ms
start, judged as its share of `python -c pass` measured in the same run (the `.pth`
line runs the start-up module's cached bytecode by its path; compiling the watcher's source
on every start cost more); and no pefile, packaging or platformdirs import. Exits 1 when it
is missed.
"""

from __future__ import annotations

import compileall
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchguard._hook import hook_files, pth_line, write_hook_files  # noqa: E402

RUNS = 120  # process start-up jitters by a millisecond or two: judge on many paired runs
CODE = (
    "import time; start = time.perf_counter(); import site, sys; site.addsitedir(sys.argv[1]); "
    "print(time.perf_counter() - start)"
)
CHECK = (
    "import site, sys; site.addsitedir(sys.argv[1]); "
    "print(sorted(m for m in ('pefile', 'packaging', 'platformdirs') if m in sys.modules), "
    "any(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path))"
)


TARGET = 0.0005  # seconds per interpreter start ...
TYPICAL_START = 0.015  # ... of this long: judged as a share of the same run's python -c pass


def once(site_dir: Path | None) -> tuple[float, float]:
    """One interpreter start, or ``python -c pass`` for None: (its wall time, the time the
    site directory took inside it)."""
    command = [sys.executable, "-c", "pass"]
    if site_dir is not None:
        command = [sys.executable, "-S", "-c", CODE, str(site_dir)]
    start = time.perf_counter()
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    return wall, float(result.stdout) if site_dir is not None else 0.0


def measure(runs: int = RUNS) -> dict[str, Any]:
    """The paired runs: each start's (wall, site folder) times per variant, ``python -c
    pass``'s wall times, and what the hooked start imported (``check``)."""
    with tempfile.TemporaryDirectory() as tmp:
        installed = Path(tmp, "installed")
        shutil.copytree(ROOT / "torchguard", installed / "torchguard")
        compileall.compile_dir(installed, quiet=1)
        baseline, hooked = Path(tmp, "baseline"), Path(tmp, "hooked")
        for folder in (baseline, hooked):
            folder.mkdir()
            (folder / "torchguard-src.pth").write_text(f"{installed}\n")
        write_hook_files(hooked)
        imported = Path(tmp, "imported")  # the line before: an import searching sys.path
        shutil.copytree(hooked, imported)
        hook_files(imported)[0].write_text(pth_line())
        check = subprocess.run(
            [sys.executable, "-S", "-c", CHECK, str(hooked)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(5):  # warm the OS caches and the .pyc files
            once(baseline), once(hooked), once(imported), once(None)
        base_runs, hook_runs, import_runs, pass_times = [], [], [], []
        for _ in range(runs):
            base_runs.append(once(baseline))
            hook_runs.append(once(hooked))
            import_runs.append(once(imported))
            pass_times.append(once(None)[0])
    return {
        "base": base_runs,
        "hook": hook_runs,
        "import": import_runs,
        "pass": pass_times,
        "check": check,
    }


def hook_cost(figures: dict[str, Any]) -> tuple[float, float]:
    """(the hook's cost per start: the median paired difference of the site folder's time
    inside the process, ``python -c pass``'s median), in seconds."""
    pairs = zip(figures["base"], figures["hook"])
    return statistics.median(h[1] - b[1] for b, h in pairs), statistics.median(figures["pass"])


def main() -> int:
    figures = measure()
    base_runs, hook_runs, import_runs = figures["base"], figures["hook"], figures["import"]
    check = str(figures["check"])
    base_times, hook_times = [run[0] for run in base_runs], [run[0] for run in hook_runs]
    base, hook = statistics.median(base_times), statistics.median(hook_times)
    difference, plain = hook_cost(figures)
    # Each hooked run is paired with the baseline run just before it, so drift in machine load
    # cancels out; the median of those differences is what is judged.
    wall = statistics.median(h - b for b, h in zip(base_times, hook_times))
    print(f"python -c pass median:         {plain * 1000:.2f} ms")
    print(f"python start, baseline median: {base * 1000:.2f} ms")
    print(f"python start, hooked median:   {hook * 1000:.2f} ms")
    print(f"ratio hooked/baseline: {hook / base:.3f}")
    print(f"median paired difference, whole process: {wall * 1000:+.3f} ms per start")
    print(f"median paired difference, site directory: {difference * 1000:+.3f} ms per start")
    before = statistics.median(h[1] - b[1] for b, h in zip(base_runs, import_runs))
    print(f"  the line before (import _torchguard_hook): {before * 1000:+.3f} ms per start")
    share = difference / plain
    print(f"hook cost / python -c pass: {share:.4f} (on a 15 ms start: {share * 15:.3f} ms)")
    print(f"heavy modules imported, watcher installed: {check}")
    allowed = TARGET / TYPICAL_START
    ok = share < allowed and check.startswith("[]") and check.endswith("True")
    print("target met" if ok else f"target MISSED (allowed {allowed:.4f} of python -c pass)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
