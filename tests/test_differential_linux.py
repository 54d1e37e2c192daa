"""The differential tier on Linux: the same programs with and without torchguard, glibc judging.

One shared scratch environment per session: the real torch 2.13.0+cpu of the Linux tier
(installed once from the machine's wheel files, :func:`conftest.cpu_torch_site`), two venvs of
this Python that import this checkout's torchguard, one of them with ``torchguard hook install``
run in it. Each environment (healthy, healthy with a library found only through
``LD_LIBRARY_PATH``, and the CPU layout's broken families of ``test_linux_layouts.py``) is a
scratch copy of that install; every front door runs the same minimal program there as the
baseline with no torchguard at all (see ``differential.py`` for what each cell must show).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from differential import Outcome, broken_problems, healthy_problems, record, run_bounded
from differential_programs import (
    CLOBBER,
    DIAGNOSE,
    ENSURE,
    PROBE,
    PYTEST_FILE,
    THREADS,
    WORK,
    spawn,
)

pytestmark = [
    pytest.mark.linux,
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the local wheels are cp311"),
]

ROOT = Path(__file__).resolve().parents[1]

PROGRAMS = {
    "work": WORK,
    "ensure": ENSURE + WORK,
    "diagnose": DIAGNOSE + WORK,
    "threads": THREADS + WORK,
    "probe": PROBE,
    "spawn": spawn(),
    "spawn-ensure": spawn(ENSURE),
    "title": CLOBBER + WORK,
    "title-ensure": CLOBBER + ENSURE + WORK,
}


@dataclass(frozen=True)
class Door:
    """A front door (or several together): which venv, which program, against which baseline."""

    name: str
    hooked: bool
    program: str
    """A key of :data:`PROGRAMS`, or ``pytest`` (the program as a test) or ``doctor``."""
    baseline: str
    guards: bool | None
    """In a broken environment: True, it must end with the diagnosis; False, it must behave
    as the baseline; None, either (it cannot read what it needs: a clobbered environ)."""
    options: tuple[str, ...] = ()


DOORS = {
    door.name: door
    for door in (
        Door("ensure()", False, "ensure", "work", True),
        Door("hook", True, "work", "work", True),
        Door("hook + ensure()", True, "ensure", "work", True),
        Door("pytest --torchguard", False, "pytest", "pytest", True, ("--torchguard",)),
        Door("hook + pytest --torchguard", True, "pytest", "pytest", True, ("--torchguard",)),
        Door("doctor", False, "doctor", "work", True),
        Door("hook + doctor", True, "doctor", "work", True),
        Door("diagnose()", False, "diagnose", "work", False),
        Door("hook + find_spec('torch') probe", True, "probe", "probe", False),
        Door("ensure() from 8 threads", False, "threads", "work", True),
        Door("spawn children, ensure() in the parent", False, "spawn-ensure", "spawn", True),
        Door("hook + spawn children", True, "spawn", "spawn", True),
        Door("setproctitle + ensure()", False, "title-ensure", "title", None),
        Door("hook + setproctitle", True, "title", "title", None),
    )
}
"""Every cell's door; its baseline is the plain venv running ``baseline`` (no torchguard)."""


Breaker = Callable[[Path, Path], dict[str, str]]


def _healthy(site: Path, where: Path) -> dict[str, str]:
    return {}


def _libc10_through_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    """A library glibc finds only through ``LD_LIBRARY_PATH`` (a module system, a conda
    prefix): what a clobbered ``/proc/self/environ`` hides from a reader of it."""
    folder = where / "ld-library-path"
    folder.mkdir()
    library = site / "torch" / "lib" / "libc10.so"
    shutil.copyfile(library.resolve(), folder / "libc10.so")
    library.unlink()
    return {"LD_LIBRARY_PATH": str(folder)}


def _broken(name: str) -> Breaker:
    def breaker(site: Path, where: Path) -> dict[str, str]:
        from test_linux_layouts import CPU_SCENARIOS

        return CPU_SCENARIOS[name](site, where)

    return breaker


@dataclass(frozen=True)
class Environment:
    name: str
    healthy: bool
    breaker: Breaker
    doors: tuple[str, ...]


_TITLE_DOORS = ("ensure()", "hook", "setproctitle + ensure()", "hook + setproctitle", "doctor")

ENVIRONMENTS = {
    env.name: env
    for env in (
        Environment("healthy", True, _healthy, tuple(DOORS)),
        Environment(
            "healthy, libc10.so only on LD_LIBRARY_PATH",
            True,
            _libc10_through_ld_library_path,
            _TITLE_DOORS,
        ),
        Environment(
            "broken: truncated libc10.so", False, _broken("truncated libc10.so"), tuple(DOORS)
        ),
        Environment(
            "broken: old libstdc++ first", False, _broken("old libstdc++ first"), tuple(DOORS)
        ),
    )
}

CELLS = [(env.name, door) for env in ENVIRONMENTS.values() for door in env.doors]


@dataclass(frozen=True)
class Venvs:
    plain: Path
    hooked: Path
    programs: Path


def _make_venv(where: Path) -> Path:
    """A venv of this Python (no pip) importing this checkout's torchguard and, through the
    test runner's site-packages, pytest and torchguard's dependencies (its ``.pth`` files are
    not run there: a hook in the runner's environment cannot leak in)."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    import sysconfig

    runner = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "torchguard-checkout.pth").write_text(f"{ROOT}\n{runner}\n")
    return python


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Venvs:
    root = tmp_path_factory.mktemp("differential")
    plain = _make_venv(root / "plain")
    hooked = _make_venv(root / "hooked")
    done = subprocess.run(
        [str(hooked), "-m", "torchguard", "hook", "install"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    programs = root / "programs"
    programs.mkdir()
    for name, source in PROGRAMS.items():
        (programs / f"{name}.py").write_text(source)
    (programs / "test_work.py").write_text(PYTEST_FILE)
    (programs / "pytest.ini").write_text("[pytest]\n")
    return Venvs(plain, hooked, programs)


def _clean_env() -> dict[str, str]:
    """The runner's environment without what would steer the children: each run gets the
    same one, with and without torchguard. Bytecode is written (into the scratch install):
    only the first run compiles torch's modules."""
    dropped = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    return {
        key: value
        for key, value in os.environ.items()
        if key not in dropped and not key.startswith(("TORCHGUARD", "PYTEST"))
    }


@dataclass
class EnvironmentRun:
    outcomes: dict[str, Outcome]
    """Door or baseline name -> how it ended."""
    verdict: str | None
    """The blocking code ``doctor --json`` gives (None when import torch works)."""


_RUNS: dict[str, EnvironmentRun] = {}


def _argv(venvs: Venvs, hooked: bool, program: str, options: tuple[str, ...]) -> list[str]:
    python = str(venvs.hooked if hooked else venvs.plain)
    if program == "pytest":
        return [python, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *options,
                "test_work.py"]  # fmt: skip
    if program == "doctor":
        return [python, "-m", "torchguard", "doctor", "--json"]
    return [python, f"{program}.py"]


def _doctor_verdict(outcome: Outcome) -> tuple[bool, str | None]:
    """(import torch works, the first blocking code) from ``doctor --json``."""
    report = json.loads(outcome.stdout)
    errors = [
        f["code"] for f in report["findings"] if f["severity"] == "error" and f["package"] is None
    ]
    predicted = report["import_torch"] or {}  # None when torch was not found
    return bool(predicted.get("ok")), errors[0] if errors else None


def _run_environment(env: Environment, base: Path, venvs: Venvs, where: Path) -> EnvironmentRun:
    from linux_realloader import scratch_site

    site = scratch_site(base, where)
    extra = env.breaker(site, where)
    variables = {**_clean_env(), "PYTHONPATH": str(site), **extra}
    variables["TORCHGUARD_CACHE_DIR"] = str(where / "torchguard-cache")
    doors = [DOORS[name] for name in env.doors]
    baselines = sorted({door.baseline for door in doors} | {"work"})

    def run(hooked: bool, program: str, options: tuple[str, ...] = ()) -> Outcome:
        return run_bounded(_argv(venvs, hooked, program, options), variables, venvs.programs)

    run(False, "work")  # first and alone, not timed: compiles the copy's modules once
    outcomes = {"doctor": run(False, "doctor")}  # warms torchguard's cache for the others
    jobs = [(name, False, name, ()) for name in baselines]
    jobs += [(d.name, d.hooked, d.program, d.options) for d in doors if d.name != "doctor"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run, *rest) for name, *rest in jobs}
        outcomes.update({name: future.result() for name, future in futures.items()})
    verdict = None if env.healthy else _doctor_verdict(outcomes["doctor"])[1]
    return EnvironmentRun(outcomes, verdict)


@pytest.fixture(scope="module")
def environment_runs(
    cpu_torch_site: Path, venvs: Venvs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], EnvironmentRun]]:
    def get(name: str) -> EnvironmentRun:
        if name not in _RUNS:
            where = tmp_path_factory.mktemp("env")
            _RUNS[name] = _run_environment(ENVIRONMENTS[name], cpu_torch_site, venvs, where)
        return _RUNS[name]

    yield get
    _RUNS.clear()


@pytest.mark.parametrize(("environment", "door"), CELLS)
def test_a_front_door_changes_nothing_but_the_diagnosis(
    environment: str, door: str, environment_runs: Callable[[str], EnvironmentRun]
) -> None:
    env = ENVIRONMENTS[environment]
    run = environment_runs(environment)
    spec = DOORS[door]
    baseline = run.outcomes[spec.baseline]
    guarded = run.outcomes[door]
    record("Linux", environment, door, baseline, guarded)
    cell = f"[Linux | {environment} | {door}]"
    if env.healthy or spec.baseline == "probe":  # the probe never imports torch
        assert baseline.status == 0, f"{cell} the baseline fails: {baseline.describe()}"
    else:
        assert baseline.status, f"{cell} the baseline works: {baseline.describe()}"
    if spec.program == "doctor":
        assert not guarded.hung, f"{cell} hung"
        works, code = _doctor_verdict(guarded)
        plain = _doctor_verdict(run.outcomes["doctor"])
        assert (works, code) == plain, f"{cell} says {(works, code)}, doctor alone {plain}"
        assert works is env.healthy and (guarded.status == 0) is env.healthy, guarded.describe()
        assert env.healthy or code is not None, guarded.describe()
        return
    if env.healthy:
        problems = healthy_problems(cell, baseline, guarded)
    else:
        assert run.verdict is not None
        if spec.guards is None:
            problems = broken_problems(
                cell, baseline, guarded, guards=False, verdict=guarded.diagnosis or run.verdict
            )
        else:
            problems = broken_problems(
                cell,
                baseline,
                guarded,
                guards=spec.guards,
                verdict=run.verdict,
                report_replaced=spec.program == "pytest",
            )
    assert problems == [], f"{problems}\n{guarded.describe()}\n--- baseline\n{baseline.describe()}"
