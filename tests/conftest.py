from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakes import FakeTorch, system32


@pytest.fixture
def fake_torch() -> FakeTorch:
    return FakeTorch()


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    """A --system32 folder holding the VC++ runtime DLLs python.org Python lacks."""
    return system32(tmp_path / "sys32")


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets an empty PE-facts cache, never the user's."""
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _no_forced_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text assertions read plain output even where CI sets FORCE_COLOR."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture(autouse=True)
def _fresh_ensure() -> Iterator[None]:
    from torchguard._frontends import api as _api

    _api._reset_for_tests()
    yield
    _api._reset_for_tests()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the binaries really read from now on (not taken from the cache)."""
    from torchguard._platforms.windows import binaries as _binaries

    seen: list[str] = []
    real = _binaries._read

    def counting(tree: object, path: str) -> object:
        seen.append(path.rsplit("\\", 1)[-1])
        return real(tree, path)  # type: ignore[arg-type]

    monkeypatch.setattr(_binaries, "_read", counting)
    return seen


@pytest.fixture(scope="session")
def cpu_torch_site() -> Iterator[Path]:
    """The Linux tier's real torch 2.13.0+cpu, installed once per session from the machine's
    wheel files (``linux_realloader.session_site``) for every module that needs it."""
    from linux_realloader import CPU, session_site

    with session_site(CPU) as site:
        yield site


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Record the healthy-install matrix's size and the differential tier's times when they ran."""
    matrix = sys.modules.get("test_healthy_matrix")
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])]
    if matrix is not None and any("test_healthy_matrix.py::" in r.nodeid for r in reports):
        terminalreporter.write_line(matrix.summary())
    differential = sys.modules.get("differential")
    if differential is not None and differential.ROWS:
        text = differential.table()
        differential.RESULTS.write_text(text + "\n", encoding="utf-8")
        terminalreporter.write_sep(
            "-", f"differential tier: with vs without torchguard (also in {differential.RESULTS})"
        )
        terminalreporter.write_line(text)


@pytest.fixture(autouse=True)
def _pip_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check`` asks pip in the tests, whose fakes stand in for pip, even where uv is
    installed; the tests of uv's resolver (tests/test_uv_resolve.py) ask for it by name."""
    monkeypatch.setenv("TORCHGUARD_RESOLVER", "pip")
