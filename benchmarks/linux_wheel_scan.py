"""Cold and warm ``torchguard scan`` of a real manylinux torch wheel, time and peak memory.

    python benchmarks/linux_wheel_scan.py [WHEEL...]
    (default: torch 2.9.1 cp311 manylinux_2_28_x86_64, cached by tests/elf_realfiles.py, over
    a folder holding only its 15 NVIDIA wheels as the real-loader tier installs them, so that
    the import replays through ``_C`` and every torch member is read)

Every measurement is a fresh process, timed, its peak RSS read with wait4; medians of RUNS,
with the baseline measured in the same run:
- baseline: inflating the wheel's shared-object members whole once (what reading them
  naively costs at least, with no disk written);
- cold: ``torchguard scan WHEEL`` with an empty torchguard cache (every ELF member read, every
  symbol bound);
- warm: the same scan again with that cache filled: facts and binding verdicts of wheel
  members are keyed by the members' content, so no member should be inflated.
Targets: cold scan <= 1.5x the inflate + 0.3 s; warm scan <= 0.25x the inflate; peak memory
<= 0.5x the largest shared object (what holding one member whole would cost). Exits 1 when a
target is missed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
INFLATE = (
    "import sys, zipfile\n"
    "for path in sys.argv[1:]:\n"
    "    with zipfile.ZipFile(path) as z:\n"
    "        for n in z.namelist():\n"
    "            if n.endswith('.so') or '.so.' in n.rsplit('/', 1)[-1]:\n"
    "                with z.open(n) as member:\n"
    "                    while member.read(1 << 20):\n"
    "                        pass\n"
)


def default_targets() -> list[str]:
    """The torch wheel, and one wheel of its 15 NVIDIA libraries as the real-loader tier
    installs them (stored, not deflated: built once, cached by version in the benchmarks' own
    cache folder, ``TORCHGUARD_BENCH_CACHE``, not among the test caches: it is 4.3 GB)."""
    from elf_realfiles import TORCH, wheel
    from linux_realloader import torch_site

    cache = Path(
        os.environ.get("TORCHGUARD_BENCH_CACHE", Path.home() / ".cache" / "torchguard-bench")
    )
    cache.mkdir(parents=True, exist_ok=True)
    nvidia = cache / "nvidia_libs-2.9.1-py3-none-manylinux2014_x86_64.whl"
    if not nvidia.is_file():
        site = torch_site("2.9.1")
        partial = nvidia.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:
            for entry in sorted(site.iterdir()):
                if entry.name == "nvidia" or entry.name.startswith("nvidia_"):
                    for file in sorted(entry.rglob("*")):
                        if file.is_file():
                            archive.write(file, str(file.relative_to(site)))
        partial.rename(nvidia)
    return [str(wheel(*TORCH)), str(nvidia)]


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall time in seconds and peak RSS in MiB of one process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return time.perf_counter() - start, usage.ru_maxrss // 1024


def median(runs: list[tuple[float, int]]) -> tuple[float, int]:
    return statistics.median(t for t, _ in runs), int(statistics.median(m for _, m in runs))


def main() -> int:
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    inflate, cold, warm = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        targets = [str(Path(arg)) for arg in sys.argv[1:]] or default_targets()
        wheels = [t for t in targets if t.endswith(".whl")]
        scan = [python, "-m", "torchguard", "scan", "--json", *targets]
        for index in range(RUNS):  # interleaved, so machine load falls on all alike
            inflate.append(measure([python, "-c", INFLATE, *wheels], env))
            cache = {**env, "TORCHGUARD_CACHE": "on", "TORCHGUARD_CACHE_DIR": f"{tmp}/c{index}"}
            cold.append(measure(scan, cache))
            warm.append(measure(scan, cache))
    largest = 0
    for path in wheels:
        with zipfile.ZipFile(path) as archive:
            sizes = [i.file_size for i in archive.infolist() if ".so" in i.filename]
            largest = max([largest, *sizes])
    base_time, base_mem = median(inflate)
    cold_time, cold_mem = median(cold)
    warm_time, warm_mem = median(warm)
    names = " + ".join(Path(t).name for t in targets)
    print(f"scan of {names} (medians of {RUNS} fresh processes)")
    print(f"baseline, inflating the .so members once: {base_time:.2f} s, {base_mem} MiB peak")
    print(
        f"cold scan: {cold_time:.2f} s, {cold_mem} MiB peak; ratios: time "
        f"{cold_time / base_time:.2f}, memory {cold_mem / (largest >> 20):.2f} of the largest "
        f"shared object ({largest >> 20} MiB)"
    )
    print(
        f"warm scan: {warm_time:.2f} s, {warm_mem} MiB peak; ratios: time "
        f"{warm_time / base_time:.2f} of the inflate, {warm_time / cold_time:.2f} of the cold scan"
    )
    ok = (
        cold_time <= 1.5 * base_time + 0.3
        and max(cold_mem, warm_mem) <= 0.5 * (largest >> 20)
        and warm_time <= 0.25 * base_time
    )
    print("targets met" if ok else "targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
