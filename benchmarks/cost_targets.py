"""Every cost target of issue 22 in one run, each against its baseline measured in that run.

    python benchmarks/cost_targets.py [--no-check] [--hook-runs N] [--torch-runs N]

It runs the measuring functions of the benchmarks that own each figure (see each for how it
measures) and prints one line per target: the figure, its baseline, their ratio, the target
and whether it is met.

- ``real_scale``: the warm in-process analysis at real scale (300 distributions holding
  2,100 binaries, a cache that has seen 50 environments), Windows scanned offline and Linux
  live, against ``python -c pass``; target under 5 ms each;
- ``torch_import``: the guard's warm cost inside a real ``import torch`` (torch's Linux CPU
  wheel in a venv made once under ``~/.cache/torchguard-ci``), answered by the verdict memo,
  against the rest of that import; target under 10 ms (the full warm analysis, the memo
  removed first, is printed beside it);
- ``hook_startup``: the hook's cost per interpreter start, against ``python -c pass``;
  target under 0.5 ms on a 15 ms start (a ratio under 0.033);
- ``scan_speed``: a cold scan of the torch 2.4.1 and torchvision 0.19.1 Windows wheels (the
  real-wheel tier's cache), against inflating their DLLs once; target at most 1.3x;
- ``check_speed`` (needs PyPI and uv; ``--no-check`` leaves it out): ``torchguard check
  --resolver uv`` of the ComfyUI-like file, cold and warm, against uv's own resolution of
  the same question; targets under 30 s cold and 10 s warm.

Exits 1 when a target is missed (or a figure could not be measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import check_speed  # noqa: E402
import guard_timing  # noqa: E402
import hook_startup  # noqa: E402
import real_scale  # noqa: E402
import scan_speed  # noqa: E402
import torch_import  # noqa: E402

Row = tuple[str, str, str, str, str, bool]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def row(name: str, value: str, baseline: str, ratio: float, target: str, ok: bool) -> Row:
    return name, value, baseline, f"{ratio:.3f}", target, ok


def analysis_rows() -> list[Row]:
    saved = {k: os.environ.get(k) for k in ("TORCHGUARD_CACHE_DIR", "TORCHGUARD_CACHE")}
    try:
        figures = real_scale.measure()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    floor = figures["floor"]
    return [
        row(
            f"warm analysis, {label} ({how})",
            ms(figures[label]),
            f"python -c pass {ms(floor)}",
            figures[label] / floor,
            "< 5 ms",
            figures[label] < 0.005,
        )
        for label, how in (("windows", "offline scan"), ("linux", "live"))
    ]


def torch_row(runs: int) -> Row:
    figures = torch_import.measure(runs)
    guard, full, rest = figures["guard"], figures["full"], figures["torch"]
    print(f"(the guard's full warm analysis, memo removed: {ms(full)}, {full / rest:.3f})")
    return row(
        "the guard inside a warm import torch",
        ms(guard),
        f"the rest of import torch {ms(rest)}",
        guard / rest,
        "< 10 ms",
        guard < guard_timing.TARGET,
    )


def hook_row(runs: int) -> Row:
    figures = hook_startup.measure(runs)
    cost, plain = hook_startup.hook_cost(figures)
    installed = figures["check"].startswith("[]") and figures["check"].endswith("True")
    allowed = hook_startup.TARGET / hook_startup.TYPICAL_START
    return row(
        "the hook, per interpreter start",
        ms(cost),
        f"python -c pass {ms(plain)}",
        cost / plain,
        f"ratio < {allowed:.3f}",
        installed and cost / plain < allowed,
    )


def scan_row() -> Row:
    targets = scan_speed.default_wheels()
    with tempfile.TemporaryDirectory() as tmp:
        runtime = scan_speed.vc_runtime_dir(Path(tmp, "sys32"))
        figures = scan_speed.cold_against_inflate(targets, runtime)
    ratio = figures["scan"] / figures["inflate"]
    return row(
        "cold scan, torch + torchvision wheels",
        f"{figures['scan']:.2f} s",
        f"inflating their DLLs {figures['inflate']:.2f} s",
        ratio,
        "ratio <= 1.3",
        ratio <= 1.3,
    )


def check_rows() -> list[Row]:
    figures = check_speed.with_uv()
    if figures is None:
        return [("check --resolver uv", "no uv installed", "-", "-", "-", False)]
    return [
        row(
            f"check --resolver uv, {when}",
            f"{figures[when]:.1f} s",
            f"uv pip compile {figures[f'uv-{when}']:.1f} s",
            figures[when] / figures[f"uv-{when}"],
            f"< {limit:.0f} s",
            figures[when] < limit,
        )
        for when, limit in (("cold", check_speed.COLD_TARGET), ("warm", check_speed.WARM_TARGET))
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-check", action="store_true", help="leave out check (network)")
    parser.add_argument("--hook-runs", type=int, default=hook_startup.RUNS)
    parser.add_argument("--torch-runs", type=int, default=torch_import.RUNS)
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = [*analysis_rows(), torch_row(args.torch_runs), hook_row(args.hook_runs), scan_row()]
    if not args.no_check:
        rows += check_rows()
    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nissue 22 cost targets (load average {load} at the start, {end} at the end)")
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for name, value, baseline, ratio, target, ok in rows:
        cells = (name, value, baseline, ratio, target)
        line = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths))
        print(f"{line}  {'met' if ok else 'MISSED'}")
    missed = [r[0] for r in rows if not r[5]]
    print("all targets met" if not missed else f"missed: {'; '.join(missed)}")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
