"""How fast, and in how much memory, `torchguard scan` reads real torch wheels.

    python benchmarks/scan_speed.py [WHEEL...]
    (default: torch 2.4.1 and torchvision 0.19.1, cp311 win_amd64, cached)

Every scan checks symbols (every imported name against the exports of the copy it binds to).
Every measurement is a fresh process, timed and its peak RSS read with wait4; medians of
several runs, baselines measured in the same run:
- a cold scan of the wheels, read in place (streaming only their data sections), against
  inflating every DLL/PYD member whole once (what reading the wheels naively costs first);
- a scan of the torch wheel unpacked to a folder, against `python -c pass`;
- a warm rescan (the PE-facts and binding-verdict cache filled), whole process, against the
  cold scan and against `python -c pass`;
- a warm analysis in-process (``Report.timings["total"]``: locate to report, the wheels
  already opened).
Targets: cold scan <= 1.5x the naive inflate + 0.3 s, with peak memory <= 0.3x (issue 7);
a cold folder scan within 20x of a bare interpreter start (it was 15x before every symbol
table was read: torch_cpu.dll's 57,772 exports cost about 45 ms); warm rescan under 0.5 s;
warm in-process analysis under 10 ms. Exits 1 when a target is missed.
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
    "for path in sys.argv[1:]:\n"
    "    with zipfile.ZipFile(path) as z:\n"
    "        for n in z.namelist():\n"
    "            if n.endswith(('.dll', '.pyd')):\n"
    "                z.read(n)\n"
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


IN_PROCESS = (
    "import json, statistics, sys, torchguard\n"
    "args = sys.argv[2:]\n"
    "for _ in range(2):\n"
    "    torchguard.scan(args, system32=[sys.argv[1]])  # fills the cache\n"
    "totals = [torchguard.scan(args, system32=[sys.argv[1]]).timings['total'] for _ in range(9)]\n"
    "print(json.dumps(statistics.median(totals)))\n"
)


def default_wheels() -> list[Path]:
    """torch 2.4.1 and torchvision 0.19.1, cp311 win_amd64 (cached by the real-wheel tier)."""
    return [wheel("torch", "2.4.1"), wheel("torchvision", "0.19.1")]


def cold_against_inflate(targets: list[Path], runtime: Path) -> dict[str, float]:
    """A cold scan of ``targets`` read in place, and its floor (inflating their DLLs whole
    once), each the median of :data:`RUNS` fresh processes: seconds and MiB peak."""
    python = sys.executable
    scan = [python, "-m", "torchguard", "scan", "--system32", str(runtime)]
    wheel_time, wheel_mem = medians([*scan, *map(str, targets)])
    naive_time, naive_mem = medians([python, "-c", INFLATE, *map(str, targets)])
    return {
        "scan": wheel_time,
        "scan-mib": wheel_mem,
        "inflate": naive_time,
        "inflate-mib": naive_mem,
    }


def main() -> int:
    targets = [Path(arg) for arg in sys.argv[1:]] or default_wheels()
    names = " + ".join(target.name for target in targets)
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        runtime = vc_runtime_dir(Path(tmp, "sys32"))
        tree = unpack(targets[0], Path(tmp, "tree"))
        scan = [python, "-m", "torchguard", "scan", "--system32", str(runtime)]
        cold = cold_against_inflate(targets, runtime)
        wheel_time, wheel_mem = cold["scan"], int(cold["scan-mib"])
        naive_time, naive_mem = cold["inflate"], int(cold["inflate-mib"])
        tree_time, tree_mem = medians([*scan, str(tree)])
        floor_time, _ = medians([python, "-c", "pass"])
        cached = {**ENV, "TORCHGUARD_CACHE": "on", "TORCHGUARD_CACHE_DIR": str(Path(tmp, "cache"))}
        warm_time, warm_mem = medians([*scan, *map(str, targets)], cached)
        analysis = float(
            subprocess.run(
                [python, "-c", IN_PROCESS, str(runtime), *map(str, targets)],
                env=cached,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    print(f"cold scan of {names}: {wheel_time:.2f} s, {wheel_mem} MiB peak (median of {RUNS})")
    print(f"baseline, inflating their DLLs whole once: {naive_time:.2f} s, {naive_mem} MiB peak")
    print(f"  ratios: time {wheel_time / naive_time:.2f}, memory {wheel_mem / naive_mem:.2f}")
    print(f"scan of the unpacked torch tree: {tree_time:.3f} s, {tree_mem} MiB peak")
    print(f"baseline, python -c pass: {floor_time:.3f} s -> ratio {tree_time / floor_time:.1f}")
    print(f"warm rescan, whole process: {warm_time:.3f} s, {warm_mem} MiB peak")
    print(
        f"  ratios: {warm_time / wheel_time:.2f} of the cold scan, "
        f"{warm_time / floor_time:.1f}x python -c pass"
    )
    print(f"warm analysis in-process: {analysis * 1000:.1f} ms")
    ok = (
        wheel_time <= 1.5 * naive_time + 0.3
        and wheel_mem <= 0.3 * naive_mem
        and tree_time <= 20 * floor_time
        and warm_time < 0.5
        and analysis < 0.010
    )
    print("targets met" if ok else "targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
