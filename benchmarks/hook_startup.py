"""Start-up cost of the torchguard hook for a process that never imports torch.

Two throwaway site directories are compared in the same run, interleaved:
- baseline: a .pth that only puts torchguard on sys.path;
- hooked:   the same plus the hook's .pth file, exactly as `torchguard hook install` writes it.
torchguard is copied beside them and byte-compiled, as pip does on install (these machines set
PYTHONDONTWRITEBYTECODE, which would otherwise charge a compile to every run).
Each runs `python -S -c "import site; site.addsitedir(D)"` N times, interleaved with a plain
`python -c pass` (the reference every ratio is printed against). The target (issue 22.3): the
median paired difference, the hook's own cost per interpreter start, under 0.5 ms (the `.pth`
line imports the start-up module's cached bytecode; compiling the watcher's source on every
start cost more); and no pefile, packaging or platformdirs import. Exits 1 when it is missed.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchguard._hook import write_hook_files  # noqa: E402

RUNS = 120  # process start-up jitters by a millisecond or two: judge on many paired runs
CODE = "import site, sys; site.addsitedir(sys.argv[1])"
CHECK = (
    "import site, sys; site.addsitedir(sys.argv[1]); "
    "print(sorted(m for m in ('pefile', 'packaging', 'platformdirs') if m in sys.modules), "
    "any(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path))"
)


TARGET = 0.0005  # seconds per interpreter start


def once(site_dir: Path | None) -> float:
    """One interpreter start: the site directory processed, or ``python -c pass`` for None."""
    command = [sys.executable, "-c", "pass"]
    if site_dir is not None:
        command = [sys.executable, "-S", "-c", CODE, str(site_dir)]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        installed = Path(tmp, "installed")
        shutil.copytree(ROOT / "torchguard", installed / "torchguard")
        compileall.compile_dir(installed, quiet=1)
        baseline, hooked = Path(tmp, "baseline"), Path(tmp, "hooked")
        for folder in (baseline, hooked):
            folder.mkdir()
            (folder / "torchguard-src.pth").write_text(f"{installed}\n")
        write_hook_files(hooked)
        check = subprocess.run(
            [sys.executable, "-S", "-c", CHECK, str(hooked)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(5):  # warm the OS caches and the .pyc files
            once(baseline), once(hooked), once(None)
        base_times, hook_times, pass_times = [], [], []
        for _ in range(RUNS):
            base_times.append(once(baseline))
            hook_times.append(once(hooked))
            pass_times.append(once(None))
    base, hook = statistics.median(base_times), statistics.median(hook_times)
    plain = statistics.median(pass_times)
    # Each hooked run is paired with the baseline run just before it, so drift in machine load
    # cancels out; the median of those differences is what is judged.
    difference = statistics.median(h - b for b, h in zip(base_times, hook_times))
    print(f"python -c pass median:         {plain * 1000:.2f} ms")
    print(f"python start, baseline median: {base * 1000:.2f} ms")
    print(f"python start, hooked median:   {hook * 1000:.2f} ms")
    print(f"ratio hooked/baseline: {hook / base:.3f}")
    print(f"median paired difference: {difference * 1000:+.3f} ms per start")
    print(f"hook cost / python -c pass: {difference / plain:.4f}")
    print(f"heavy modules imported, watcher installed: {check}")
    ok = difference < TARGET and check.startswith("[]") and check.endswith("True")
    print("target met" if ok else f"target MISSED (allowed +{TARGET * 1000:.2f} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
