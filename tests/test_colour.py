"""Colour on a real pseudo-terminal; none when piped or with NO_COLOR; FORCE_COLOR honoured."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch

from torchguard._frontends.colour import wanted
from torchguard._report.colour import Paint, strip

pty = pytest.importorskip("pty")

RED, MAGENTA, CYAN = "\x1b[1;31m", "\x1b[1;35m", "\x1b[36m"


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    return {**env, "TERM": "xterm-256color", **extra}


def on_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout on a pseudo-terminal; its exit status and what it showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchguard", *args],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) in (0, 1), proc.stderr.read() if proc.stderr else ""
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n")


def piped(args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "torchguard", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return result.stdout


@pytest.fixture
def broken(tmp_path: Path, fake_torch: FakeTorch) -> list[str]:
    return ["scan", "--clean-windows", str(fake_torch.write(tmp_path / "site"))]


def test_terminal_gets_colour_for_error_missing_dll_and_commands(broken: list[str]) -> None:
    status, shown = on_terminal(broken, environ())
    assert status == 1
    assert f"{RED}error[missing-dll]" in shown
    assert f"{MAGENTA}MSVCP140.dll" in shown  # the missing DLL, in the headline
    assert f"chain: c10.dll -> {MAGENTA}MSVCP140.dll" in shown
    assert f"{CYAN}winget install" in shown
    plain = piped(broken, environ())
    assert strip(shown).strip() == plain.strip()  # the same words, only coloured


def test_no_color_on_a_terminal_means_none(broken: list[str]) -> None:
    _, shown = on_terminal(broken, environ(NO_COLOR="1"))
    assert "error[missing-dll]" in shown and "\x1b[" not in shown


def test_piped_output_has_no_colour_unless_forced(broken: list[str]) -> None:
    assert "\x1b[" not in piped(broken, environ())
    forced = piped(broken, environ(FORCE_COLOR="1"))
    assert f"{RED}error[missing-dll]" in forced
    assert "\x1b[" not in piped(broken, environ(FORCE_COLOR="1", NO_COLOR="1"))


def test_json_is_never_coloured(broken: list[str]) -> None:
    _, shown = on_terminal([*broken, "--json"], environ(FORCE_COLOR="1"))
    assert "\x1b[" not in shown


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("env", "stream", "expected"),
    [
        ({}, _Tty(), True),
        ({"TERM": "dumb"}, _Tty(), False),
        ({"NO_COLOR": ""}, _Tty(), True),  # empty NO_COLOR does not count
        ({"FORCE_COLOR": ""}, io.StringIO(), False),
        ({"FORCE_COLOR": "1"}, io.StringIO(), True),
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, _Tty(), False),
    ],
)
@pytest.mark.skipif(sys.platform == "win32", reason="Windows also asks the console")
def test_wanted(env: dict[str, str], stream: io.StringIO, expected: bool) -> None:
    assert wanted(stream, env) is expected


def test_paint_off_is_identity() -> None:
    assert Paint(False).mark("a.dll b.DLL", "b.dll") == "a.dll b.DLL"
    assert Paint(True).mark("a.dll b.DLL", "b.dll") == f"a.dll {MAGENTA}b.DLL\x1b[0m"
