"""The differential tier under Wine: the same programs with and without torchguard, in real
Windows CPython with the real torch, the real Windows loader judging.

The essential few cells of the Linux tier's matrix (``tests/test_differential_linux.py``):
in the e2e tier's healthy torch 2.4.1 install, no door, ``ensure()``, the hook (its ``.pth``
file in the scenario's site-packages, which the harness's ``site.addsitedir`` runs before the
program, as start-up would), hook + ``ensure()`` and the ``find_spec("torch")`` probe; and one
broken runtime case, torch 2.9.1 on Microsoft's ``msvcp140.dll`` 14.34 forced native (c10.dll's
initialiser fails: WinError 998 under Wine, 1114 on Windows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from differential import Outcome, broken_problems, healthy_problems, record, run_bounded
from differential_programs import ENSURE, PROBE, WORK
from realwheels import vc_runtime_dir, wheel
from wine import WINE_START_FAILURE, WineEnv, pinned_wheels, provision_site

from torchguard._hook import write_hook_files

pytestmark = pytest.mark.e2e

BOUND = 600.0
"""The longest a cell may run here (seconds): a loaded 2-core machine took 140 s for one
``import torch`` under Wine (3 s when quiet)."""
IDLE = 60.0
"""A Windows process using no CPU this long is deadlocked (it waits on Wine's server at most
briefly)."""

RUNTIME_TORCH = "2.9.1"
RUNTIME_DEPENDENCIES = (
    "typing_extensions", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
    "pefile", "packaging", "platformdirs",
)  # fmt: skip
NATIVE = "mscoree,mshtml=;msvcp140,vcruntime140,vcruntime140_1=n,b"
OLD_REDIST = "14.34.31931"

#: door -> (program, hooked, guards in a broken environment)
DOORS: dict[str, tuple[str, bool, bool]] = {
    "ensure()": (ENSURE + WORK, False, True),
    "hook": (WORK, True, True),
    "hook + ensure()": (ENSURE + WORK, True, True),
    "hook + find_spec('torch') probe": (PROBE, True, False),
}
BASELINE = {"ensure()": WORK, "hook": WORK, "hook + ensure()": WORK}
BASELINE["hook + find_spec('torch') probe"] = PROBE

HEALTHY = "healthy torch 2.4.1"
RUNTIME = "torch 2.9.1, msvcp140 14.34 forced native"
CELLS = [(HEALTHY, door) for door in DOORS] + [(RUNTIME, "ensure()"), (RUNTIME, "hook")]


def _run(env: WineEnv, code: str, site: Path, variables: dict[str, str]) -> Outcome:
    """``code`` in a fresh Windows process, as :meth:`WineEnv.run` starts it, killed when it
    hangs (a deadlocked Windows process uses no CPU either)."""
    argv, full = env.command(code, site, env=variables)
    for _ in range(3):  # Wine itself may fail to start on a loaded machine: no verdict
        with env.system32_shared():
            outcome = run_bounded(argv, full, env.workdir, bound=BOUND, idle=IDLE)
        if WINE_START_FAILURE not in outcome.stderr:
            break
    return outcome


def _sites(env: WineEnv, name: str, source: Path | None = None) -> tuple[Path, Path]:
    """A scenario copy of the install, and a second one with the hook's start-up files."""
    plain = env.make_scenario_site(f"differential-{name}", source)
    hooked = env.make_scenario_site(f"differential-{name}-hooked", source)
    write_hook_files(hooked)
    return plain, hooked


WARM = "import torchguard\ntorchguard.diagnose()\n"
"""Fills torchguard's facts cache in the prefix, as the Linux cells' first ``doctor`` does."""

_RUNS: dict[str, dict[str, Outcome]] = {}


def _healthy(env: WineEnv) -> dict[str, Outcome]:
    plain, hooked = _sites(env, "healthy")
    _run(env, WARM, plain, {})  # not timed: the cells then time a warm analysis
    outcomes = {"work": _run(env, WORK, plain, {}), "probe": _run(env, PROBE, plain, {})}
    for door, (code, is_hooked, _) in DOORS.items():
        outcomes[door] = _run(env, code, hooked if is_hooked else plain, {})
    return outcomes


@pytest.fixture(scope="module")
def runtime_site(wine_env: WineEnv) -> Path:
    """The runtime tier's torch 2.9.1 install (built once, cached with the e2e tier)."""
    wheels = [wheel("torch", RUNTIME_TORCH), wheel("sympy", "1.14.0")]
    wheels += pinned_wheels(*RUNTIME_DEPENDENCIES)
    return provision_site(wine_env, f"torch{RUNTIME_TORCH}", wheels)


def _runtime(env: WineEnv, source: Path, redist: Path) -> dict[str, Outcome]:
    plain, hooked = _sites(env, "runtime", source)
    variables = {"WINEDLLOVERRIDES": NATIVE}
    with env.replace_system_dll("msvcp140.dll", redist):
        _run(env, WARM, plain, variables)
        return {
            "work": _run(env, WORK, plain, variables),
            "ensure()": _run(env, ENSURE + WORK, plain, variables),
            "hook": _run(env, WORK, hooked, variables),
        }


@pytest.fixture(scope="module")
def wine_runs(
    wine_env: WineEnv, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], dict[str, Outcome]]]:
    def get(name: str) -> dict[str, Outcome]:
        if name not in _RUNS:
            if name == HEALTHY:
                _RUNS[name] = _healthy(wine_env)
            else:
                source: Path = request.getfixturevalue("runtime_site")
                redist = vc_runtime_dir(tmp_path_factory.mktemp("redist"), OLD_REDIST)
                _RUNS[name] = _runtime(wine_env, source, redist / "msvcp140.dll")
        return _RUNS[name]

    yield get
    _RUNS.clear()


@pytest.mark.parametrize(("environment", "door"), CELLS)
def test_a_front_door_changes_nothing_but_the_diagnosis_under_wine(
    environment: str, door: str, wine_runs: Callable[[str], dict[str, Outcome]]
) -> None:
    outcomes = wine_runs(environment)
    baseline = outcomes["probe" if BASELINE[door] is PROBE else "work"]
    guarded = outcomes[door]
    record("Windows (Wine)", environment, door, baseline, guarded)
    cell = f"[Wine | {environment} | {door}]"
    if environment == HEALTHY:
        assert baseline.status == 0, f"{cell} the baseline fails: {baseline.describe()}"
        problems = healthy_problems(cell, baseline, guarded)
    else:
        assert baseline.status, f"{cell} the baseline works: {baseline.describe()}"
        problems = broken_problems(
            cell, baseline, guarded, guards=DOORS[door][2], verdict="runtime-too-old"
        )
    assert problems == [], f"{problems}\n{guarded.describe()}\n--- baseline\n{baseline.describe()}"
