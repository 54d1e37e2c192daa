"""Cold and warm cost of ``torchguard.ensure()`` on Linux, against ``python -c pass``.

Uses the real-loader tier's torch 2.9.1+cu128 install (``tests/linux_realloader.py``: torch and
its 15 NVIDIA wheels, installed once under ~/.cache). Measured in the same run, interleaved:
- ``python -c pass``: the floor of any Python process on this machine;
- cold: a child process running ``ensure()`` with an empty torchguard cache (every ELF file of
  the closure read, every symbol bound);
- warm: ``ensure()``'s analysis in-process with the cache filled (what every later
  ``import torch`` behind the hook pays): no ELF file is read, no symbol table touched.
Target (issue 17): the warm analysis costs at most 0.6 x ``python -c pass`` (10 ms where Python
starts in ~17 ms), so absolute machine load cancels out. Exits 1 when missed.
"""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from linux_realloader import torch_site  # noqa: E402

RUNS = 15
WARM = """
import statistics, sys, time
from torchguard._frontends.api import _live_linux_report
_live_linux_report()  # fill the cache
times = []
for _ in range({runs}):
    start = time.perf_counter()
    report = _live_linux_report()
    times.append(time.perf_counter() - start)
assert report.import_torch.ok, report.findings
print(statistics.median(times))
"""


def child(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    site = torch_site("2.9.1")
    compileall.compile_dir(ROOT / "torchguard", quiet=1)  # as pip does on install
    with tempfile.TemporaryDirectory() as tmp:
        base_env = {**os.environ, "PYTHONPATH": str(site)}
        for name in ("LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE"):
            base_env.pop(name, None)
        pass_times, cold_times = [], []
        for index in range(3):
            env = {**base_env, "TORCHGUARD_CACHE_DIR": str(Path(tmp, f"cold{index}"))}
            pass_times.append(child("pass", base_env))
            cold_times.append(child("import torchguard; torchguard.ensure()", env))
        warm_env = {**base_env, "TORCHGUARD_CACHE_DIR": str(Path(tmp, "warm"))}
        for _ in range(RUNS):
            pass_times.append(child("pass", base_env))
        warm = subprocess.run(
            [sys.executable, "-c", WARM.format(runs=RUNS)],
            check=True,
            env=warm_env,
            capture_output=True,
            text=True,
        )
        warm_median = float(warm.stdout.strip())
        hooked = [child("import torchguard; torchguard.ensure()", warm_env) for _ in range(5)]
    floor = statistics.median(pass_times)
    cold = statistics.median(cold_times)
    print(f"python -c pass, median:                  {floor * 1000:8.1f} ms")
    print(f"cold ensure() process (empty cache):     {cold * 1000:8.1f} ms")
    print(f"warm ensure() process (import + ensure): {statistics.median(hooked) * 1000:8.1f} ms")
    print(f"warm ensure() analysis, in-process:      {warm_median * 1000:8.1f} ms")
    ratio = warm_median / floor
    print(f"warm analysis / python -c pass:          {ratio:8.2f} (target <= 0.60)")
    ok = ratio <= 0.6
    print("target met" if ok else "target MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
