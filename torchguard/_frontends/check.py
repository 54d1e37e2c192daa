"""``torchguard check REQUIREMENT...``: will ``pip install`` of these work on Windows?

pip's own resolver picks what ``pip install`` would put into a Windows x64 CPython X.Y
(dependencies included, Windows environment markers, wheels only), downloads the wheels into a
cache reused next time, and the offline scan judges them together. The default machine is a
Windows 10/11 x64 with the current Visual C++ redistributable; ``clean_windows`` drops it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from torchguard._report.report import Report

_NETWORK = re.compile(
    r"NewConnectionError|ConnectTimeout|Could not fetch URL|NameResolutionError|ReadTimeout|"
    r"Failed to establish a new connection|ProxyError|SSLError|Max retries exceeded|"
    r"not a trusted or secure host"
)
_CAUSE = re.compile(
    r"(Failed to establish a new connection: [^'\")]+|\[Errno -?\d+\][^'\")]+|"
    r"Read timed out|SSLError\([^)]*\))"
)


class CheckError(Exception):
    """Requirements pip cannot resolve, or an index it cannot reach (exit status 2)."""


@dataclass
class Check:
    """What was checked, under which assumptions, and the verdict."""

    requirements: tuple[str, ...]
    python: str
    clean_windows: bool
    wheels: tuple[str, ...]
    report: Report
    notes: list[str] = field(default_factory=list)

    @property
    def wheel_names(self) -> list[str]:
        return [os.path.basename(wheel) for wheel in self.wheels]

    def to_dict(self) -> dict[str, object]:
        return {
            "requirements": list(self.requirements),
            "python": self.python,
            "platform": "win_amd64",
            "vc_redist": not self.clean_windows,
            "wheels": self.wheel_names,
        }


def wheel_cache(explicit: str | None = None) -> str:
    """Where downloaded wheels are kept: ``explicit``, ``TORCHGUARD_WHEEL_CACHE``, or the
    platformdirs user cache folder's ``wheels``."""
    if explicit:
        return os.path.abspath(explicit)
    configured = os.environ.get("TORCHGUARD_WHEEL_CACHE")
    if configured:
        return os.path.abspath(configured)
    from platformdirs import user_cache_dir

    return os.path.join(user_cache_dir("torchguard", appauthor=False), "wheels")


def pip_command(
    requirements: Sequence[str], python: str, index_urls: Sequence[str], cache: str
) -> list[str]:
    """The pip download run on a Windows marker environment (``pip_windows``)."""
    command = [sys.executable, "-m", "torchguard._frontends.pip_windows", python, "download"]
    command += ["--only-binary=:all:", "--platform", "win_amd64", "--python-version", python]
    command += ["--implementation", "cp", "--no-cache-dir", "--progress-bar", "off"]
    command += ["-d", cache]
    for number, url in enumerate(index_urls):
        command += ["--index-url" if number == 0 else "--extra-index-url", url]
    return [*command, *requirements]


def resolve(
    requirements: Sequence[str],
    *,
    python: str,
    index_urls: Sequence[str] = (),
    cache: str,
    progress: IO[str] | None = None,
) -> list[str]:
    """The wheels ``pip install`` would install on Windows, downloaded into ``cache``."""
    os.makedirs(cache, exist_ok=True)
    command = pip_command(requirements, python, index_urls, cache)
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise CheckError(f"cannot run pip: {exc}") from None
    lines: list[str] = []
    wheels: list[str] = []
    assert process.stdout is not None
    with process.stdout:
        for raw in process.stdout:
            line = raw.rstrip()
            lines.append(line)
            found = _wheel_of(line)
            if found:
                wheels.append(os.path.abspath(found))  # pip shows it relative to the cwd
            _show(progress, line)
    status = process.wait()
    _show(progress, None)
    if status != 0:
        raise CheckError(pip_reason(lines))
    return list(dict.fromkeys(wheels))


def _wheel_of(line: str) -> str | None:
    text = line.strip()
    for prefix in ("Saved ", "File was already downloaded "):
        if text.startswith(prefix) and text.endswith(".whl"):
            return text[len(prefix) :]
    return None


def _show(progress: IO[str] | None, line: str | None) -> None:
    """One self-overwriting status line on a terminal (cleared with ``None``)."""
    if progress is None:
        return
    if line is None:
        progress.write("\r\x1b[K")
    else:
        text = line.strip()
        if not text.startswith(("Collecting", "Downloading", "File was already", "Saved")):
            return
        progress.write("\r\x1b[K" + text[:110])
    progress.flush()


def pip_reason(lines: Sequence[str]) -> str:
    """pip's reason for failing, in one line."""
    errors = [
        line.split(":", 1)[1].strip()
        for line in lines
        if line.startswith("ERROR:") and not line.startswith("ERROR: Ignored the following")
    ]
    network = [line for line in lines if _NETWORK.search(line)]
    if network and (not errors or "(from versions: none)" in errors[0]):
        indexes = [
            line.split(":", 1)[1].strip()
            for line in lines
            if line.startswith("Looking in indexes:")
        ]
        where = f" {indexes[0]}" if indexes else ""
        if "not a trusted or secure host" in network[-1]:
            return f"pip ignores the package index{where}: not HTTPS and not a trusted host"
        cause = _CAUSE.search(network[-1])
        return f"cannot reach the package index{where}: " + (
            cause.group(1).strip() if cause else _short(network[-1])
        )
    if errors:
        return errors[0]
    tail = [line.strip() for line in lines if line.strip()]
    return tail[-1] if tail else "pip failed without a message"


def _short(line: str) -> str:
    text = line.strip()
    for prefix in ("WARNING:", "ERROR:"):
        text = text.removeprefix(prefix).strip()
    return text if len(text) <= 300 else text[:297] + "..."


def check(
    requirements: Sequence[str],
    *,
    python: str | None = None,
    index_urls: Sequence[str] = (),
    clean_windows: bool = False,
    cache: str | None = None,
    progress: IO[str] | None = None,
) -> Check:
    """Resolve, download and scan ``requirements`` for Windows x64 CPython ``python``."""
    from torchguard._pipeline import analyze
    from torchguard._windows.assumptions import assumed_line, assumed_system32
    from torchguard._windows.system import TargetError, offline_windows

    version = python or f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not re.fullmatch(r"3\.\d{1,2}", version):
        raise CheckError(f"--python {version}: expected a CPython version such as 3.11")
    wheels = resolve(
        requirements,
        python=version,
        index_urls=index_urls,
        cache=wheel_cache(cache),
        progress=progress,
    )
    if not any(os.path.basename(w).lower().startswith("torch-") for w in wheels):
        names = ", ".join(os.path.basename(w) for w in wheels) or "nothing"
        raise CheckError(f"these requirements install no torch (pip resolved {names})")
    if progress is not None:
        progress.write(f"reading {len(wheels)} wheel(s)...")
        progress.flush()
    try:
        system = offline_windows(wheels, assumed_system32=assumed_system32(clean_windows))
        try:
            report = analyze(system)
        finally:
            system.close()
    except TargetError as exc:
        raise CheckError(str(exc)) from None
    finally:
        _show(progress, None)
    notes = [
        f"checked: pip install {' '.join(requirements)} for python.org CPython {version}, "
        f"win_amd64 ({len(wheels)} wheel(s))",
        assumed_line(clean_windows),
    ]
    return Check(tuple(requirements), version, clean_windows, tuple(wheels), report, notes)
