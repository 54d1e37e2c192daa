"""Which Python runs pip for ``torchguard check``.

This interpreter if it has pip; otherwise (an environment made by ``uv``, or ``pipx``-like
tools, has none) the first Python on PATH or the environment's base interpreter that has one:
pip only resolves for a Windows CPython X.Y, so any pip will do. :mod:`.pip_windows` is run as
a file, so the other Python needs no torchguard.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec

from torchguard._frontends.pip_reasons import PipFailure

PIP_TIMEOUT = 3600.0
"""The longest one pip run may take: a slow link still downloads torch's 2.5 GB wheel."""


@dataclass(frozen=True)
class PipInterpreter:
    """A Python with pip and the file that makes its pip resolve for Windows."""

    python: str
    runner: str

    def command(self, python_version: str, arguments: Sequence[str]) -> list[str]:
        """The command line that runs pip ``arguments`` for Windows CPython ``python_version``."""
        return [self.python, self.runner, python_version, *arguments]

    def run(
        self, python_version: str, arguments: Sequence[str]
    ) -> subprocess.CompletedProcess[str]:
        """pip ``arguments`` for Windows CPython ``python_version``, within :data:`PIP_TIMEOUT`.

        pip's own socket timeout bounds a stalled connection, not a resolver that backtracks
        for hours or a download that trickles: past the bound pip is stopped and this says so.
        """
        try:
            return subprocess.run(
                [self.python, self.runner, python_version, *arguments],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=PIP_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise PipFailure(
                [
                    f"pip did not finish within {PIP_TIMEOUT / 60:.0f} minutes and was stopped "
                    f"(pip {' '.join(arguments[:1])})",
                    "pin the versions you mean (e.g. torch==2.4.1) so the resolver has less to "
                    "try, or check the connection to the index",
                ],
                "pip",
            ) from None
        except OSError as exc:
            raise PipFailure([f"cannot run pip: {exc}"], "pip") from None


def _runner() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip_windows.py")


def _has_pip(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import pip._internal"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def candidates() -> list[str]:
    """Other Pythons that may have pip: the base interpreter, then python3/python on PATH."""
    found: list[str] = []
    base = getattr(sys, "_base_executable", None)
    if base and os.path.isfile(base):
        found.append(base)
    for name in ("python3", "python", "py"):
        path = shutil.which(name)
        if path:
            found.append(path)
    mine = os.path.realpath(sys.executable)
    unique: list[str] = []
    for path in found:
        if os.path.realpath(path) != mine and path not in unique:
            unique.append(path)
    return unique


def pip_interpreter() -> PipInterpreter:
    """A Python whose pip can resolve; :class:`PipFailure` naming what to do when none has."""
    if find_spec("pip") is not None:
        return PipInterpreter(sys.executable, _runner())
    for python in candidates():
        if _has_pip(python):
            return PipInterpreter(python, _runner())
    raise PipFailure(
        [
            f"{sys.executable} has no pip, and no other Python on PATH has one; "
            "torchguard check needs pip's resolver",
            "add pip to this environment: `uv pip install pip` (an environment made by uv) "
            f"or `{sys.executable} -m ensurepip`",
        ]
    )
