"""What a large environment adds to the warm in-process analysis (what every ``import torch``
behind the hook pays).

    python benchmarks/many_dists.py [COUNT...]   (default: 200 1000)

The real torch 2.4.1 Windows wheel unpacked (cached), overlaid with COUNT ordinary pure-Python
distributions (a ``.dist-info`` with METADATA and a 62-row RECORD each, installed an hour ago),
scanned with the persistent cache filled. Each configuration is timed in the same process,
interleaved round by round so that a busy machine slows them alike; the figure is the 10th
percentile of the rounds (``Report.timings["total"]``: a shared machine's bursts and the
garbage collector's pauses land on single rounds), and each is compared with the
torch-only analysis measured in the same run. A second figure is the first run after one
``pip install`` into the 200-distribution folder (one new ``.dist-info``): only the new
RECORD is read. A third is a conda environment whose ``Library\\bin`` holds 400 ordinary
DLLs (a real one holds 300 to 1000), against the same torch outside conda.
Target: 200 distributions add at most 1 ms to the torch-only analysis. Exits 1 when missed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes import KERNEL  # noqa: E402
from gpuwheels import torch_tree  # noqa: E402
from pe_builder import build_pe  # noqa: E402

ROUNDS = 61
ROWS = 62
CONDA_DLLS = 400
AN_HOUR = 3600.0
TARGET_MS = 1.0


def low(runs: list[float]) -> float:
    """The 10th percentile of ``runs``: what a round costs when nothing else interferes."""
    return sorted(runs)[len(runs) // 10]


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
    return {label: low(r) for label, r in runs.items()}


def conda_prefix(folder: Path) -> Path:
    """A conda environment's prefix whose Library\\bin holds :data:`CONDA_DLLS` DLLs."""
    library_bin = folder / "Library" / "bin"
    library_bin.mkdir(parents=True)
    dll = build_pe(list(KERNEL))
    for index in range(CONDA_DLLS):
        (library_bin / f"lib{index}.dll").write_bytes(dll)
    past = time.time() - AN_HOUR
    for path in [*folder.rglob("*"), folder]:
        os.utime(path, (past, past))
    return folder


def conda_timings(torch: str, prefix: Path) -> tuple[float, float]:
    """Seconds of the warm analysis of torch outside conda and in the conda environment."""
    import dataclasses

    from torchguard._binary.cache import user_cache
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.system import offline_windows
    from torchguard._platforms.windows.tree import AssumedFile, join

    runtime = [("the VC++ runtime", ["msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll"])]

    def once(conda: bool) -> float:
        system = offline_windows(
            [torch], python_dir=str(prefix) if conda else None, assumed_system32=runtime
        )
        if conda:  # python.exe's own DLLs, as a conda environment's prefix holds them
            for name in ("python311.dll", "python3.dll", "vcruntime140.dll", "vcruntime140_1.dll"):
                system.tree.add_file(join(system.interpreter.app_dir, name), AssumedFile("python"))
            system.interpreter = dataclasses.replace(system.interpreter, is_conda=True)  # type: ignore[misc]
        try:
            return analyze(system, cache=user_cache()).timings["total"]
        finally:
            system.close()

    runs: dict[bool, list[float]] = {False: [], True: []}
    for conda in (False, True):
        for _ in range(3):
            once(conda)  # fills the cache
    for _ in range(ROUNDS):
        for conda in (False, True):
            runs[conda].append(once(conda))
    return low(runs[False]), low(runs[True])


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
        plain, conda = conda_timings(torch, conda_prefix(Path(tmp, "conda")))
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
    print(
        f"conda environment, {CONDA_DLLS} DLLs in Library\\bin: {conda * 1000:.2f} ms against "
        f"{plain * 1000:.2f} ms outside conda (ratio {conda / plain:.2f})"
    )
    print(f"target: 200 distributions add <= {TARGET_MS:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
