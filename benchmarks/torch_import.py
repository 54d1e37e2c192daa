"""What the hook adds to a warm ``import torch``, in a venv with a real torch installed.

    python benchmarks/torch_import.py [--runs N]

The venv holds the Linux CPU wheel of torch (:data:`TORCH`, found through pip's usual
sources: ``PIP_FIND_LINKS`` on CI machines, else the index) and its dependencies; it is made
once under ``~/.cache/torchguard-ci`` (keyed by torch's version and the interpreter), and
torchguard is this checkout, put on its path by a ``.pth`` file and byte-compiled, as pip
does. ``torchguard hook install`` writes the start-up files there, as a user would.

Measured in fresh processes of that venv, the guard on (strict, the default) and its cache
warm (filled by one guarded run first, whose JSON report must say ``import torch`` works):
the time the guard takes inside ``import torch``, timed around the watcher's call, against
the rest of that same ``import torch`` (the baseline; a paired wall-clock difference of two
whole imports would drown milliseconds in the import's own jitter). Two figures, runs
interleaved: the guard answered by the verdict memo (the environment unchanged since the
last clean analysis: ``torchguard._binary.memo``), and the full warm path (the memo removed
first: importing torchguard's analysis, the warm analysis, writing the memo again). What the
``.pth`` line costs every start is ``benchmarks/hook_startup.py``'s. Target (issue 22): the
memo's figure under 10 ms. Exits 1 when missed.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from guard_timing import TIMED, medians, read_times, report

ROOT = Path(__file__).resolve().parents[1]
TORCH = "2.13.0+cpu"
RUNS = 9
RACY = 2.0  # seconds: torchguard._binary.state.RACY
CACHE = Path(os.environ.get("TORCHGUARD_CI_CACHE", Path.home() / ".cache" / "torchguard-ci"))


def venv() -> Path:
    """The venv's python: torch and torchguard's dependencies installed once, this checkout
    on its path, the hook installed."""
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    folder = CACHE / f"bench-torch-{TORCH}-{tag}"
    python = folder / "bin" / "python"
    done = folder / "torchguard-bench.done"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # the machine's config caps torch
    if not done.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
        needs = [r for r in metadata.requires("torch-import-guard") or [] if "extra ==" not in r]
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"torch=={TORCH}", "numpy", *needs], check=True, env=env)
        done.write_text(f"torch {TORCH}\n")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "torchguard-checkout.pth").write_text(f"{ROOT}\n")
    compileall.compile_dir(ROOT / "torchguard", quiet=1)  # as pip does on install
    subprocess.run([str(python), "-m", "torchguard", "hook", "install"], check=True, env=env)
    return python


def timed(python: Path, env: dict[str, str], memo: bool | None = None) -> tuple[float, float]:
    """(the guard's seconds, the whole ``import torch``'s) in one fresh process of the venv
    (:data:`guard_timing.TIMED`); ``memo``: whether the verdict memo must have answered (None:
    either)."""
    done = subprocess.run(
        [str(python), "-c", TIMED], check=True, env=env, capture_output=True, text=True
    )
    times = read_times(done.stdout, memo)
    if times is None:
        raise SystemExit(f"no timing:\n{done.stdout[-3000:]}")
    return times


def forget(cache: Path) -> None:
    """Remove the verdict memos: the next guarded run analyses in full."""
    for memo in cache.glob("memo-v*/*.memo"):
        memo.unlink()


def measure(runs: int = RUNS) -> dict[str, float]:
    """Medians over ``runs`` fresh processes each (seconds): ``guard``, the guard's warm cost
    inside ``import torch`` answered by the verdict memo; ``full``, the same with the memo
    removed first (the warm analysis); ``torch``, the rest of ``import torch`` (the
    baseline, over all runs)."""
    python = venv()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHGUARD", "PYTHON"))}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp, "cache")
        guarded = {**base, "TORCHGUARD_CACHE_DIR": str(cache)}
        report = Path(tmp, "report.json")
        timed(python, {**guarded, "TORCHGUARD_REPORT": str(report)})  # fills the cache
        verdict = json.loads(report.read_text())
        if not verdict["import_torch"]["ok"]:
            raise SystemExit(f"the guard says import torch fails here: {verdict['findings']}")
        time.sleep(RACY)  # the hook install's files: a memo needs states older than this
        timed(python, guarded)  # OS caches, bytecode; writes the memo
        full: list[tuple[float, float]] = []
        hits: list[tuple[float, float]] = []
        for _ in range(runs):
            hits.append(timed(python, guarded, memo=True))
            forget(cache)
            full.append(timed(python, guarded, memo=False))  # writes the memo again
    return medians(hits, full)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    return report(f"import torch {TORCH}", measure(parser.parse_args().runs))


if __name__ == "__main__":
    sys.exit(main())
