"""What a large environment adds to the warm in-process analysis (what every ``import torch``
behind the hook pays).

    python benchmarks/many_dists.py [COUNT...]   (default: 200 1000)

The real torch 2.4.1 Windows wheel unpacked (cached), overlaid with COUNT ordinary pure-Python
distributions (a ``.dist-info`` with METADATA and a 62-row RECORD each, installed an hour ago),
scanned with the persistent cache filled. Each configuration is timed in the same process,
interleaved round by round so that a busy machine slows them alike; the figure is the median
of the faster half of the rounds (``Report.timings["total"]``), and each is compared with the
torch-only analysis measured in the same run. A second figure is the first run after one
``pip install`` into the 200-distribution folder (one new ``.dist-info``): only the new
RECORD is read.
Target: 200 distributions add at most 1 ms to the torch-only analysis. Exits 1 when missed.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gpuwheels import torch_tree  # noqa: E402

ROUNDS = 41
ROWS = 62
AN_HOUR = 3600.0
TARGET_MS = 1.0


def write_dists(folder: Path, count: int, first: int = 0) -> None:
    """``count`` pure-Python distributions as pip installs them, dated an hour ago."""
    folder.mkdir(parents=True, exist_ok=True)
    past = time.time() - AN_HOUR
    for index in range(first, first + count):
        name = f"pkg{index}"
        info = folder / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        rows = [f"{name}/module{j}.py,sha256={'x' * 43},{1000 + j}" for j in range(ROWS - 4)]
        rows += [f"{name}-1.0.dist-info/{part},sha256={'y' * 43},50" for part in ("METADATA",)]
        rows += [f"{name}-1.0.dist-info/{part},," for part in ("INSTALLER", "WHEEL", "RECORD")]
        (info / "RECORD").write_text("\n".join(rows) + "\n")
        for path in (info / "RECORD", info / "METADATA", info):
            os.utime(path, (past, past))
    os.utime(folder, (past, past))


def timings(targets: dict[str, list[str]]) -> dict[str, float]:
    """Seconds of the warm analysis of each configuration (see the module docstring)."""
    import torchguard

    runs: dict[str, list[float]] = {label: [] for label in targets}
    for paths in targets.values():
        for _ in range(3):
            torchguard.scan(paths)  # fills the cache
    for _ in range(ROUNDS):
        for label, paths in targets.items():
            runs[label].append(torchguard.scan(paths).timings["total"])
    return {label: statistics.median(sorted(r)[: len(r) // 2 + 1]) for label, r in runs.items()}


def main() -> int:
    counts = [int(arg) for arg in sys.argv[1:]] or [200, 1000]
    torch = str(torch_tree("2.4.1"))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCHGUARD_CACHE_DIR"] = str(Path(tmp, "cache"))
        os.environ.pop("TORCHGUARD_CACHE", None)
        targets = {"torch only": [torch]}
        for count in counts:
            folder = Path(tmp, f"dists{count}")
            write_dists(folder, count)
            targets[f"+{count} distributions"] = [torch, str(folder)]
        measured = timings(targets)
        after_install = None
        if 200 in counts:
            import torchguard

            folder = Path(tmp, "dists200")
            write_dists(folder, 1, first=200)  # pip install of one more (dated an hour ago)
            after_install = torchguard.scan([torch, str(folder)]).timings["total"]
    base = measured["torch only"]
    print(f"warm in-process analysis, torch 2.4.1 only: {base * 1000:.2f} ms")
    ok = True
    for count in counts:
        total = measured[f"+{count} distributions"]
        added = (total - base) * 1000
        print(
            f"  +{count} distributions: {total * 1000:.2f} ms "
            f"(ratio {total / base:.2f}, {added:+.2f} ms, {added * 1000 / count:.1f} us each)"
        )
        if count == 200 and added > TARGET_MS:
            ok = False
    if after_install is not None:
        print(f"  first run after one more install into the 200: {after_install * 1000:.2f} ms")
    print(f"target: 200 distributions add <= {TARGET_MS:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
