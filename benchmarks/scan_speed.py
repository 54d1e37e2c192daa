"""How fast `torchguard scan` reads a real torch wheel, against naive baselines in the same run.

    python benchmarks/scan_speed.py [WHEEL]   (default: torch 2.4.1 cp311 win_amd64, cached)

Prints medians of several runs of:
- scan of the wheel, read in place (streaming only the sections with the directories);
- baseline: inflating every DLL/PYD member of the wheel (what a naive reader must do first);
- scan of the same wheel unpacked to a folder;
- baseline: `python -c pass` (interpreter start, the floor of any CLI run);
and the ratios. Targets: the wheel scan faster than the naive inflate (ratio < 1), the folder
scan within 15x of a bare interpreter start.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from realwheels import unpack, vc_runtime_dir, wheel  # noqa: E402

RUNS = 5


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def inflate_all(path: Path) -> float:
    start = time.perf_counter()
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith((".dll", ".pyd")):
                archive.read(name)
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else wheel("torch", "2.4.1")
    with tempfile.TemporaryDirectory() as tmp:
        runtime = vc_runtime_dir(Path(tmp, "sys32"))
        tree = unpack(target, Path(tmp, "tree"))
        scan = [sys.executable, "-m", "torchguard", "scan", "--system32", str(runtime)]
        wheel_scan = median([timed([*scan, str(target)]) for _ in range(RUNS)])
        naive = median([inflate_all(target) for _ in range(RUNS)])
        tree_scan = median([timed([*scan, str(tree)]) for _ in range(RUNS)])
        floor = median([timed([sys.executable, "-c", "pass"]) for _ in range(RUNS)])
    print(f"scan of {target.name}: {wheel_scan:.2f} s (median of {RUNS})")
    print(f"baseline, inflating its DLLs only: {naive:.2f} s -> ratio {wheel_scan / naive:.2f}")
    print(f"scan of the unpacked tree: {tree_scan:.3f} s")
    print(f"baseline, python -c pass: {floor:.3f} s -> ratio {tree_scan / floor:.1f}")
    ok = wheel_scan < naive and tree_scan < 15 * floor
    print("targets met" if ok else "targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
