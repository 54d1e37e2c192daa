"""How fast, and in how much memory, `torchguard scan` reads a real torch wheel.

    python benchmarks/scan_speed.py [WHEEL]   (default: torch 2.4.1 cp311 win_amd64, cached)

Every measurement is a fresh process, timed and its peak RSS read with wait4; medians of
several runs, baselines measured in the same run:
- scan of the wheel, read in place (streaming only the sections that hold the directories),
  against inflating every DLL/PYD member whole (what reading the wheel naively costs first);
- scan of the same wheel unpacked to a folder, against `python -c pass`;
- the wheel scan with a warm PE-facts cache, against the same scan with the cache off.
Targets: wheel scan time <= 1.25x the naive inflate (both must inflate up to torch_cpu.dll's
import directory, near its end) with peak memory <= 0.3x; folder scan within 15x of a bare
interpreter start; a warm-cache wheel scan at most 0.4x the cold one. Exits 1 when a target
is missed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from realwheels import unpack, vc_runtime_dir, wheel  # noqa: E402

RUNS = 5
#: Byte-code files are written (pip writes them at install; these machines disable it).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["TORCHGUARD_CACHE"] = "off"  # cold reads, unless a measurement says otherwise
INFLATE = (
    "import sys, zipfile\n"
    "with zipfile.ZipFile(sys.argv[1]) as z:\n"
    "    for n in z.namelist():\n"
    "        if n.endswith(('.dll', '.pyd')):\n"
    "            z.read(n)\n"
)


def measure(argv: list[str], env: dict[str, str] = ENV) -> tuple[float, int]:
    """Wall time in seconds and peak RSS in MiB of one process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return time.perf_counter() - start, usage.ru_maxrss // 1024


def medians(argv: list[str], env: dict[str, str] = ENV) -> tuple[float, int]:
    measure(argv, env)  # warm-up: OS caches, .pyc files (as installed), the facts cache if on
    runs = [measure(argv, env) for _ in range(RUNS)]
    return statistics.median(t for t, _ in runs), int(statistics.median(m for _, m in runs))


def main() -> int:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else wheel("torch", "2.4.1")
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        runtime = vc_runtime_dir(Path(tmp, "sys32"))
        tree = unpack(target, Path(tmp, "tree"))
        scan = [python, "-m", "torchguard", "scan", "--system32", str(runtime)]
        wheel_time, wheel_mem = medians([*scan, str(target)])
        naive_time, naive_mem = medians([python, "-c", INFLATE, str(target)])
        tree_time, tree_mem = medians([*scan, str(tree)])
        floor_time, _ = medians([python, "-c", "pass"])
        cached = {**ENV, "TORCHGUARD_CACHE": "on", "TORCHGUARD_CACHE_DIR": str(Path(tmp, "cache"))}
        warm_time, warm_mem = medians([*scan, str(target)], cached)
    print(f"scan of {target.name}: {wheel_time:.2f} s, {wheel_mem} MiB peak (median of {RUNS})")
    print(f"baseline, inflating its DLLs whole: {naive_time:.2f} s, {naive_mem} MiB peak")
    print(f"  ratios: time {wheel_time / naive_time:.2f}, memory {wheel_mem / naive_mem:.2f}")
    print(f"scan of the unpacked tree: {tree_time:.3f} s, {tree_mem} MiB peak")
    print(f"baseline, python -c pass: {floor_time:.3f} s -> ratio {tree_time / floor_time:.1f}")
    print(f"warm-cache scan of the wheel: {warm_time:.2f} s, {warm_mem} MiB peak")
    print(f"  ratio to the cold scan: {warm_time / wheel_time:.2f}")
    ok = (
        warm_time <= 0.4 * wheel_time
        and wheel_time <= 1.25 * naive_time
        and wheel_mem <= 0.3 * naive_mem
        and tree_time <= 15 * floor_time
    )
    print("targets met" if ok else "targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
