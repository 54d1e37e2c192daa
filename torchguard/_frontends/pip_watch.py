"""pip's resolution, watched: what it is doing, for how long, and a bound on the wait.

pip resolving a long requirement file can backtrack for an hour on one core while the user sees
one still line. Its output is read as it comes ("Collecting numpy==1.26.4", "pip is looking at
multiple versions of ..."), so the status line shows the elapsed time, how many distributions
pip has collected and what it does now; past the bound pip is stopped and the message says what
it was doing and what to try.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torchguard._frontends.pip_reasons import PipFailure

RESOLVE_TIMEOUT = 900.0
"""Seconds pip may take to resolve before it is stopped (``check --resolve-timeout``)."""

Status = Callable[[float, int, str], None]
"""Called about once a second: seconds elapsed, distributions collected, pip's last step."""

_STEPS = ("Collecting ", "Downloading ", "Processing ", "Obtaining ", "Cloning ", "Building ")


@dataclass
class Watched:
    """What pip printed so far, as it came."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    collected: int = 0
    step: str = "starting pip"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, line: str, into: list[str]) -> None:
        text = line.rstrip("\n")
        with self.lock:
            into.append(text)
            stripped = text.strip()
            if stripped.startswith("Collecting "):
                self.collected += 1
            if stripped.startswith(_STEPS) or "pip is looking at multiple versions" in stripped:
                self.step = stripped.replace("INFO: ", "")


def run_watched(
    command: Sequence[str], *, timeout: float, status: Status | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` (pip, run by :mod:`.pip_python`'s interpreter) within ``timeout`` seconds."""
    # its lines as they are printed, in UTF-8: on Windows a pipe otherwise gets the ANSI code
    # page, and pip's ``--report -`` dies on a character it lacks (sympy's metadata has "ř")
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
    try:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=environment,
        )
    except OSError as exc:
        raise PipFailure([f"cannot run pip: {exc}"], "pip") from None
    seen = Watched()
    readers = [
        threading.Thread(target=_read, args=(stream, seen, into), daemon=True)
        for stream, into in ((process.stdout, seen.stdout), (process.stderr, seen.stderr))
    ]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    try:
        while True:
            try:
                process.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - started
            if status is not None:
                with seen.lock:
                    status(elapsed, seen.collected, seen.step)
            if elapsed > timeout:
                process.kill()
                process.wait()
                raise PipFailure(_gave_up(timeout, seen), "timeout") from None
    except BaseException:
        if process.poll() is None:  # Ctrl-C: pip goes with us
            process.kill()
            process.wait()
        raise
    for reader in readers:
        reader.join(10)
    with seen.lock:
        out, err = "\n".join(seen.stdout), "\n".join(seen.stderr)
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)


def _read(stream: object, seen: Watched, into: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        seen.take(line, into)


def _gave_up(timeout: float, seen: Watched) -> list[str]:
    with seen.lock:
        collected, step = seen.collected, seen.step
    return [
        f"pip did not finish resolving within {timeout:.0f} s and was stopped "
        f"({collected} distribution(s) collected; last: {step})",
        "pin the versions you mean (torch==2.4.1 rather than torch) so pip has fewer to try, "
        "or give it longer: --resolve-timeout SECONDS",
        "or pin the whole set with a faster resolver, then check that: uv pip compile "
        "requirements.txt --python-platform windows --python-version X.Y -o pinned.txt; "
        "torchguard check -- -r pinned.txt",
    ]
