"""The differential tier's harness: the same program with and without a torchguard front door.

A *cell* is one front door (or several together) in one environment. Its run is compared with
the *baseline*: the same program, in the same environment, with no torchguard at all.

- Healthy environment: the same exit status and the same stdout, nothing from torchguard on
  stderr, and no hang (a process tree that stops using CPU for :data:`IDLE_BOUND` seconds, or
  runs past :data:`HANG_BOUND`, is killed and the cell fails with its name).
- Broken environment: a guarding door ends with torchguard's diagnosis (``error[<code>]``)
  instead of the raw error, with the baseline's exit status and stdout (nothing it changes
  makes things worse); a door that must not guard behaves exactly as the baseline.

:data:`ROWS` collects each cell's time against its baseline; ``conftest.py`` prints them as a
table at the end of the session and writes them to :data:`RESULTS`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HANG_BOUND = 120.0
"""The longest any cell may run (seconds)."""
IDLE_BOUND = 30.0
"""A process tree alive this long without using any CPU is deadlocked."""

RESULTS = Path(tempfile.gettempdir()) / "torchguard-differential.md"

_PYTEST_TIME = re.compile(r" in [0-9.]+s( \([0-9:]+\))?$", re.MULTILINE)
_CODE = re.compile(r"error\[([a-z0-9-]+)\]")


@dataclass(frozen=True)
class Outcome:
    """How one run ended. ``status`` is None when it hung and was killed."""

    status: int | None
    stdout: str
    stderr: str
    wall: float
    cpu: float
    """user + sys seconds of the whole process tree (Linux), else 0."""

    @property
    def hung(self) -> bool:
        return self.status is None

    @property
    def text(self) -> str:
        """stdout with what changes from run to run (pytest's timing) taken out."""
        return _PYTEST_TIME.sub("", self.stdout)

    @property
    def diagnosis(self) -> str | None:
        """The first torchguard finding code printed (``error[corrupt-dll]``), or None."""
        found = _CODE.search(self.stderr) or _CODE.search(self.stdout)
        return found.group(1) if found else None

    def last_error(self) -> str:
        """The last line naming an error, the way a user reads a traceback."""
        lines = [line for line in (self.stdout + self.stderr).splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
        return errors[-1] if errors else (lines[-1] if lines else f"exit status {self.status}")

    def describe(self) -> str:
        state = "HUNG (killed)" if self.hung else f"exit {self.status}"
        return (
            f"{state} after {self.wall:.1f} s\n--- stdout\n{self.stdout[-2000:]}"
            f"\n--- stderr\n{self.stderr[-3000:]}"
        )


def _tree_cpu(group: int) -> float | None:
    """CPU seconds used by the live processes of ``group`` and the children they reaped."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    seen = False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            seen = True
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / ticks if seen else None


def _drain(stream: IO[bytes], sink: list[bytes]) -> None:
    while True:
        block = stream.read1(65536)  # type: ignore[attr-defined]
        if not block:
            return
        sink.append(block)


def run_bounded(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    bound: float = HANG_BOUND,
    idle: float = IDLE_BOUND,
) -> Outcome:
    """Run ``argv`` in its own process group; kill the group when it hangs: when it runs past
    ``bound`` seconds, or its processes use no CPU for ``idle`` seconds (a deadlock).

    Output goes through pipes (Windows CPython under Wine cannot start writing to a file)."""
    start = time.monotonic()
    child = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=str(cwd),
        start_new_session=True,
    )
    assert child.stdout is not None and child.stderr is not None
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=_drain, args=(child.stdout, out), daemon=True),
        threading.Thread(target=_drain, args=(child.stderr, err), daemon=True),
    ]
    for reader in readers:
        reader.start()
    status: int | None = None
    cpu = 0.0
    last_cpu, last_change = -1.0, start
    while True:
        pid, wait_status, usage = os.wait4(child.pid, os.WNOHANG)
        now = time.monotonic()
        if pid:
            status = os.waitstatus_to_exitcode(wait_status)
            child.returncode = status
            cpu = usage.ru_utime + usage.ru_stime
            break
        if sys_linux():
            used = _tree_cpu(child.pid)
            if used is not None and used != last_cpu:
                last_cpu, last_change = used, now
        if now - start > bound or now - last_change > idle:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            break
        time.sleep(0.05)
    wall = time.monotonic() - start
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # what the cell left running dies with it
    for reader in readers:
        reader.join(timeout=30)
    child.stdout.close()
    child.stderr.close()
    return Outcome(
        status,
        b"".join(out).decode("utf-8", "replace").replace("\r\n", "\n"),
        b"".join(err).decode("utf-8", "replace").replace("\r\n", "\n"),
        wall,
        cpu,
    )


def sys_linux() -> bool:
    return os.path.isdir("/proc/self")


# -- the checks ------------------------------------------------------------------------------


def healthy_problems(cell: str, baseline: Outcome, guarded: Outcome) -> list[str]:
    """Where a door changed a working program (an empty list when it changed nothing)."""
    if guarded.hung:
        return [f"{cell}: hung (no exit after {guarded.wall:.0f} s)"]
    problems = []
    if guarded.status != baseline.status:
        problems.append(f"{cell}: exit {guarded.status}, without torchguard {baseline.status}")
    if guarded.text != baseline.text:
        problems.append(f"{cell}: stdout {guarded.text!r}, without torchguard {baseline.text!r}")
    said = [line for line in guarded.stderr.splitlines() if "torchguard" in line]
    if said:
        problems.append(f"{cell}: torchguard wrote to stderr: {said[:5]}")
    return problems


def broken_problems(
    cell: str,
    baseline: Outcome,
    guarded: Outcome,
    *,
    guards: bool,
    verdict: str,
    report_replaced: bool = False,
) -> list[str]:
    """Where a door made a failing program worse, or (``guards``) failed to say why.

    ``verdict`` is the code the environment's ``doctor`` gives: every door says the same.
    ``report_replaced``: stdout is the runner's report, which the diagnosis replaces by design
    (``pytest --torchguard`` stops before collecting the test that would fail).
    """
    if guarded.hung:
        return [f"{cell}: hung (no exit after {guarded.wall:.0f} s)"]
    problems = []
    if guarded.status != baseline.status:
        problems.append(f"{cell}: exit {guarded.status}, without torchguard {baseline.status}")
    if guarded.text != baseline.text and not report_replaced:
        problems.append(f"{cell}: stdout {guarded.text!r}, without torchguard {baseline.text!r}")
    if guards and guarded.diagnosis != verdict:
        problems.append(
            f"{cell}: ended with {guarded.last_error()!r}, not torchguard's "
            f"error[{verdict}] (without torchguard: {baseline.last_error()!r})"
        )
    if not guards and guarded.diagnosis not in (None, verdict):
        problems.append(f"{cell}: said error[{guarded.diagnosis}], doctor says {verdict}")
    return problems


# -- the time table --------------------------------------------------------------------------

ROWS: list[dict[str, str]] = []


def record(platform: str, environment: str, door: str, baseline: Outcome, guarded: Outcome) -> None:
    """One row of the time table: the cell's wall and CPU time against its baseline's."""
    state = "hung" if guarded.hung else ("same" if guarded.status == baseline.status else "DIFF")
    ROWS.append(
        {
            "platform": platform,
            "environment": environment,
            "door": door,
            "exit": state,
            "wall": f"{guarded.wall:.2f} s ({guarded.wall - baseline.wall:+.2f})",
            "cpu": (
                f"{guarded.cpu:.2f} s ({guarded.cpu - baseline.cpu:+.2f})"
                if guarded.cpu or baseline.cpu
                else "-"
            ),
        }
    )


def table() -> str:
    """The rows as a Markdown table (extra time against the baseline in parentheses)."""
    lines = [
        "| platform | environment | front door | exit vs without | wall (extra) | CPU (extra) |",
        "|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        lines.append(
            f"| {row['platform']} | {row['environment']} | {row['door']} | {row['exit']} "
            f"| {row['wall']} | {row['cpu']} |"
        )
    return "\n".join(lines)
