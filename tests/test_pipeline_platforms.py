"""One pipeline, platforms as values (issue 26): both platforms implement one interface, a
third (a planted fake) runs through the same steps, and folder states are remembered only
once they are old enough to trust."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchguard._frontends.pipeline import STEPS, Analysis, Platform, run
from torchguard._frontends.pipeline.linux import LinuxAnalysis, LinuxPlatform
from torchguard._frontends.pipeline.windows import WindowsAnalysis, WindowsPlatform
from torchguard._platforms.linux.cached import once_per_state
from torchguard._report.findings import WARNING, Finding
from torchguard._report.report import Report

ANALYSIS_METHODS = ("locate", "plan", "read", "resolve", "check", "report", "close")


@pytest.mark.parametrize(
    ("platform", "analysis"),
    [(WindowsPlatform(), WindowsAnalysis), (LinuxPlatform(), LinuxAnalysis)],
    ids=["windows", "linux"],
)
def test_both_platforms_implement_the_one_interface(platform: object, analysis: type) -> None:
    assert isinstance(platform, Platform)
    start = inspect.signature(platform.start)  # type: ignore[attr-defined]
    assert list(start.parameters) == ["system", "cache"]
    for name in ANALYSIS_METHODS:
        mine = inspect.signature(getattr(analysis, name))
        theirs = inspect.signature(getattr(Analysis, name))
        assert list(mine.parameters) == list(theirs.parameters), name
    assert {WindowsPlatform().name, LinuxPlatform().name} == {"windows", "linux"}


class _FakeAnalysis:
    """A third platform's analysis that records the order the pipeline calls it in."""

    def __init__(self, calls: list[str], torch: bool) -> None:
        self.calls = calls
        self.torch = torch

    def locate(self) -> Report | None:
        self.calls.append("locate")
        return None if self.torch else Report(findings=())

    def plan(self) -> None:
        self.calls.append("plan")

    def read(self) -> None:
        self.calls.append("read")

    def resolve(self) -> None:
        self.calls.append("resolve")

    def check(self) -> list[Finding]:
        self.calls.append("check")
        return [Finding(code="fake-rule", severity=WARNING, message=f"after {self.calls[:-1]}")]

    def report(self, findings: list[Finding], timings: dict[str, float]) -> Report:
        self.calls.append("report")
        return Report(findings=tuple(findings), timings=timings)

    def close(self) -> None:
        self.calls.append("close")


class _FakePlatform:
    name = "fake"

    def __init__(self, torch: bool = True) -> None:
        self.calls: list[str] = []
        self.torch = torch
        self.started: list[tuple[object, object]] = []

    def start(self, system: str, cache: dict[str, str] | None) -> _FakeAnalysis:
        self.started.append((system, cache))
        return _FakeAnalysis(self.calls, self.torch)


def test_a_planted_third_platform_runs_through_the_one_pipeline() -> None:
    fake = _FakePlatform()
    assert isinstance(fake, Platform)
    report = run(fake, "a fake system", {"k": "v"})
    assert fake.started == [("a fake system", {"k": "v"})]
    assert fake.calls == [*STEPS, "report", "close"]
    assert [f.code for f in report.findings] == ["fake-rule"]
    assert report.findings[0].message == "after ['locate', 'plan', 'read', 'resolve']"
    assert list(report.timings) == [*STEPS, "total"]
    assert report.timings["total"] >= sum(report.timings[s] for s in STEPS) - 1e-9


def test_a_missing_torch_ends_the_run_and_still_closes_it() -> None:
    fake = _FakePlatform(torch=False)
    report = run(fake, "system", None)
    assert fake.calls == ["locate", "close"] and report.findings == ()


def test_a_failing_step_still_closes_the_run() -> None:
    fake = _FakePlatform()

    class Broken(_FakeAnalysis):
        def resolve(self) -> None:
            raise RuntimeError("model fault")

    fake.start = lambda system, cache: Broken(fake.calls, True)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        run(fake, "system", None)
    assert fake.calls == ["locate", "plan", "read", "close"]


def test_the_pipeline_module_imports_no_platform() -> None:
    """A Linux run loads no Windows module and the reverse: a platform is imported only by
    the entry point that names it."""
    code = (
        "import sys, torchguard._frontends.pipeline as p\n"
        "print(sorted(m for m in sys.modules if m.startswith('torchguard._platforms')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _age(path: Path, seconds: float = 3600.0) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def test_a_folder_state_is_remembered_only_once_it_is_old_enough(tmp_path: Path) -> None:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    stored: dict[str, list[str]] = {}
    reads: list[int] = []

    def read() -> list[str]:
        reads.append(1)
        return sorted(os.listdir(folder))

    def once() -> list[str] | None:
        return once_per_state(str(folder), stored.get, read, stored.__setitem__)

    assert once() == [] and len(reads) == 1 and stored == {}  # changed just now: not kept
    assert once() == [] and len(reads) == 2
    _age(folder)
    assert once() == [] and len(reads) == 3 and len(stored) == 1
    assert once() == [] and len(reads) == 3  # warm: the state is unchanged, nothing listed
    (folder / "new.dist-info").mkdir()  # an install changes the state
    _age(folder)
    assert once() == ["new.dist-info"] and len(reads) == 4


def test_a_scratch_or_missing_folder_is_never_stored(tmp_path: Path) -> None:
    folder = tmp_path / "scratch"
    folder.mkdir()
    _age(folder)
    stored: dict[str, int] = {}
    found = once_per_state(str(folder), stored.get, lambda: 7, stored.__setitem__, temporary=True)
    assert found == 7 and stored == {}
    gone = once_per_state(str(tmp_path / "absent"), stored.get, lambda: 8, stored.__setitem__)
    assert gone is None and stored == {}
