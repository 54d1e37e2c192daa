"""A resolution that takes long is visible while it runs and stops at a bound, saying what pip
was doing (a stand-in pip that collects two projects, then backtracks forever)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from torchguard._frontends import pip_python, resolve
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.pip_watch import run_watched

SLOW_PIP = """\
import sys, time
print("Collecting torch==2.4.1")
print("Collecting numpy")
print("INFO: pip is looking at multiple versions of numpy to determine which version is compatible")
sys.stdout.flush()
time.sleep(600)
"""


def test_progress_is_reported_and_the_wait_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / "slow_pip.py"
    script.write_text(SLOW_PIP)
    seen: list[tuple[float, int, str]] = []
    started = time.monotonic()
    with pytest.raises(PipFailure) as failure:
        run_watched([sys.executable, str(script)], timeout=3, status=lambda *a: seen.append(a))
    assert time.monotonic() - started < 30
    assert failure.value.kind == "timeout"
    first = failure.value.lines[0]
    assert first.startswith("pip did not finish resolving within 3 s and was stopped")
    assert "2 distribution(s) collected" in first
    assert "last: pip is looking at multiple versions of numpy" in first
    assert any("--resolve-timeout" in line for line in failure.value.lines[1:])
    assert seen and seen[-1][1] == 2 and seen[-1][0] >= 2
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)


def test_resolve_uses_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "slow_pip.py"
    script.write_text(SLOW_PIP)
    stand_in = pip_python.PipInterpreter(sys.executable, str(script))
    monkeypatch.setattr(resolve, "pip_interpreter", lambda: stand_in)
    with pytest.raises(PipFailure) as failure:
        resolve.resolve(["torch"], python="3.11", timeout=2)
    assert "within 2 s" in failure.value.lines[0]


def test_a_quick_pip_keeps_its_output_and_status() -> None:
    done = run_watched(
        [sys.executable, "-c", "import sys; print('Collecting a'); sys.exit(3)"], timeout=60
    )
    assert done.returncode == 3 and done.stdout == "Collecting a"


def test_pip_speaks_utf8_whatever_the_console_code_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Windows a pipe gets the ANSI code page: pip's ``--report -`` then died on sympy
    1.13.1's metadata (seen under Wine). A child told to write cp1252 writes UTF-8 here."""
    monkeypatch.setenv("PYTHONIOENCODING", "cp1252")
    code = "import sys; print(sys.stdout.encoding); print('Ond\\u0159ej \\u2014 ok')"
    done = run_watched([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["utf-8", "Ond\u0159ej \u2014 ok"]
