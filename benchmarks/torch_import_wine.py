"""What the hook adds to a warm ``import torch`` on Windows, measured in Wine.

    python benchmarks/torch_import_wine.py [--runs N]

A real Windows CPython 3.11 with torch 2.4.1 (CPU), the Wine tier's cached prefix
(``tests/e2e/wine.py``: ``~/.cache/torchguard-e2e``), the hook's ``.pth`` written into a
copy of its site-packages as ``torchguard hook install`` writes it. As
``benchmarks/torch_import.py`` does on Linux: in fresh processes, the time the watcher's guard
takes inside ``import torch``, timed around its call, against the rest of that same
``import torch`` (the baseline), two figures with their runs interleaved: the guard answered
by the verdict memo, and the full warm path (the memo removed first: importing torchguard's
analysis, the warm analysis, registering, writing the memo again). Wine's loader, file system
and ctypes are not Windows': the ratios say what the memo saves here, not a Windows figure.
Target (issue 22): the memo's figure under 10 ms. Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import wine  # noqa: E402 (the Wine tier's provisioning, from the test folder)
from guard_timing import TIMED, medians, read_times, report  # noqa: E402

RUNS = 5


def timed(env: wine.WineEnv, site: Path, cache: Path, memo: bool) -> tuple[float, float]:
    """(the guard's seconds, the whole ``import torch``'s) in one fresh Windows process
    (:data:`guard_timing.TIMED`); ``memo``: whether the verdict memo must have answered."""
    variables = {"TORCHGUARD_CACHE_DIR": env.to_windows(cache)}
    result = env.run(TIMED, site, env=variables)
    times = read_times(result.stdout, memo)
    if times is None:
        raise SystemExit(f"no timing (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return times


def measure(runs: int = RUNS) -> dict[str, float]:
    """Medians over ``runs`` fresh processes each (seconds): ``guard`` (the memo answered),
    ``full`` (the memo removed first), ``torch`` (the rest of ``import torch``, all runs)."""
    from torchguard._binary.memo import FOLDER
    from torchguard._hook import write_hook_files

    env = wine.provision(ROOT)
    try:
        site = env.make_scenario_site("bench-memo")
        write_hook_files(site)
        long_ago = time.time() - 3600
        for folder, _, _ in os.walk(site):
            os.utime(folder, (long_ago, long_ago))  # the copy's folders are new
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp, "cache")
            timed(env, site, cache, memo=False)  # fills the facts cache, writes the memo
            hits: list[tuple[float, float]] = []
            full: list[tuple[float, float]] = []
            for _ in range(runs):
                hits.append(timed(env, site, cache, memo=True))
                for path in (cache / FOLDER).glob("*.memo"):
                    path.unlink()
                full.append(timed(env, site, cache, memo=False))  # writes the memo again
    finally:
        env.stop()
        env.discard_scenarios()
    return medians(hits, full)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    return report("Wine: import torch 2.4.1+cpu", measure(parser.parse_args().runs))


if __name__ == "__main__":
    sys.exit(main())
