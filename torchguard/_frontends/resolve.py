"""What ``pip install`` would put into a Windows CPython (x64 or ARM64), without downloading it.

pip resolves (``pip install --dry-run --report``) under a Windows marker environment
(:mod:`.pip_windows`); its JSON report names every distribution with its URL and hash, so only
the wheels that can hold Windows binaries need downloading afterwards. A pure-Python wheel
(``py3-none-any``) is listed, never fetched.

pip's resolution is remembered for ten minutes (PyPI's index pages say ``max-age=600``, so pip's
own HTTP cache is no fresher), keyed by everything that can change it: the command, the
requirement and constraint files' contents and pip's environment variables.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from torchguard._frontends.pip_python import pip_interpreter
from torchguard._frontends.pip_reasons import PipFailure, explain_failure
from torchguard._frontends.pip_watch import RESOLVE_TIMEOUT, Status, run_watched
from torchguard._frontends.target import Target, parse_target

if TYPE_CHECKING:
    from torchguard._frontends.uv_resolve import Resolver

RESOLUTION_TTL = 600.0


@dataclass(frozen=True)
class Planned:
    """One distribution pip would install: its wheel's name, URL and sha256."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None

    @property
    def source(self) -> bool:
        """A source distribution (pip builds it on the installing machine): nothing to scan;
        ``check`` resolves one only when its source says it compiles nothing."""
        return self.filename.endswith((".tar.gz", ".zip", ".tar.bz2", ".tgz"))

    @property
    def pure(self) -> bool:
        """A ``none-any`` wheel: Python only, nothing the Windows loader would read."""
        tags = self.filename[: -len(".whl")].split("-")[-2:]
        return len(tags) == 2 and tags == ["none", "any"]

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "version": self.version,
            "filename": self.filename,
            "url": self.url,
            "sha256": self.sha256,
        }


def pip_arguments(
    requirements: Sequence[str],
    python: str,
    index_urls: Sequence[str],
    target: str,
    platform: str = "win_amd64",
) -> list[str]:
    """pip's own command line for a dry-run resolution for Windows CPython ``python``
    (``3.11``, or ``3.13t`` free-threaded) on ``platform`` (``win_amd64``, ``win_arm64``)."""
    report = os.path.join(target, "report.json")  # not stdout: pip's reasons go there
    command = ["install", "--dry-run", "--ignore-installed", "--report", report]
    command += ["--only-binary=:all:", *_target(python, platform).pip_options()]
    command += ["--target", os.path.join(target, "site")]
    command += ["--progress-bar", "off"]
    for number, url in enumerate(index_urls):
        command += ["--index-url" if number == 0 else "--extra-index-url", url]
    return [*command, *requirements]


def _target(python: str, platform: str) -> Target:
    chosen = parse_target(python, platform)
    if chosen is None:
        raise PipFailure([f"not a Windows CPython pip resolves for: {python} on {platform}"])
    return chosen


def resolve(
    requirements: Sequence[str],
    *,
    python: str,
    platform: str = "win_amd64",
    index_urls: Sequence[str] = (),
    memo_dir: str | None = None,
    status: IO[str] | None = None,
    timeout: float = RESOLVE_TIMEOUT,
    watch: Status | None = None,
    resolver: Resolver | None = None,
) -> tuple[list[Planned], bool]:
    """The wheels pip would install, and whether a recent resolution was reused.

    Raises :class:`~.pip_reasons.PipFailure` with pip's reasons when pip cannot resolve, or
    when it has not finished within ``timeout`` seconds; ``watch`` sees it working. With a
    ``resolver`` that has uv, uv answers the same question (:mod:`.uv_resolve`), pip where uv
    cannot: ``resolver`` records which one did, and why pip.
    """
    with tempfile.TemporaryDirectory(prefix="torchguard-pip-") as target:
        arguments = pip_arguments(requirements, python, index_urls, target, platform)
        if resolver is not None and resolver.uv is not None:
            answered = _with_uv(
                resolver, requirements, (python, platform), index_urls, memo_dir, timeout, status
            )
            if answered is not None:
                return answered
        key = _memo_key(arguments, requirements, target)
        memo = os.path.join(memo_dir, ".resolutions", key + ".json") if memo_dir else None
        remembered = _remembered(memo)
        if resolver is not None:
            resolver.used.add("pip")
        if remembered is not None:
            return remembered, True
        if status is not None:
            status.write("\r\x1b[Kresolving with pip...")
            status.flush()
        try:
            runner = _target(python, platform).runner_argument()
            command = pip_interpreter().command(runner, arguments)
            done = run_watched(command, timeout=timeout, status=watch)
        finally:
            if status is not None:
                status.write("\r\x1b[K")
                status.flush()
        if done.returncode != 0:
            lines = (done.stdout + "\n" + done.stderr).splitlines()
            raise explain_failure(lines, requirements, index_urls, python, platform)
        try:
            with open(os.path.join(target, "report.json"), encoding="utf-8") as handle:
                planned = parse_report(handle.read())
        except OSError:
            planned = parse_report("")
    if memo is not None:
        _remember(memo, planned)
    return planned, False


def _with_uv(
    resolver: Resolver,
    requirements: Sequence[str],
    target: tuple[str, str],
    index_urls: Sequence[str],
    memo_dir: str | None,
    timeout: float,
    status: IO[str] | None,
) -> tuple[list[Planned], bool] | None:
    """uv's answer (remembered as pip's is), or None with the reason pip answers instead."""
    from torchguard._frontends.uv_resolve import UvFallback, resolve_with_uv

    python, platform = target
    words = [*requirements, f"--torchguard-resolver=uv {python} {platform}", *index_urls]
    key = _memo_key(words, requirements, "<none>")
    memo = os.path.join(memo_dir, ".resolutions", key + ".json") if memo_dir else None
    remembered = _remembered(memo)
    if remembered is not None:
        resolver.used.add("uv")
        return remembered, True
    if status is not None:
        status.write("\r\x1b[Kresolving with uv...")
        status.flush()
    try:
        locked = resolve_with_uv(resolver, requirements, python, platform, index_urls, timeout)
    except UvFallback as exc:
        line = f"note: resolved by pip, not uv: {exc}"
        if line not in resolver.notes:
            resolver.notes.append(line)
        return None
    finally:
        if status is not None:
            status.write("\r\x1b[K")
            status.flush()
    resolver.used.add("uv")
    planned = [Planned(*row) for row in locked]
    if memo is not None:
        _remember(memo, planned)
    return planned, False


def parse_report(text: str) -> list[Planned]:
    """The install list of pip's ``--report`` JSON (schema 1)."""
    start = text.find("{")
    try:
        report = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("install"), list):
        raise PipFailure(["pip printed no installation report (pip 22.2 or newer is needed)"])
    planned: list[Planned] = []
    for item in report["install"]:
        info = item.get("download_info") or {}
        metadata = item.get("metadata") or {}
        url = str(info.get("url", ""))
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
        from urllib.parse import unquote

        planned.append(
            Planned(
                name=str(metadata.get("name", "")),
                version=str(metadata.get("version", "")),
                filename=unquote(filename),
                url=url,
                sha256=hashes.get("sha256"),
            )
        )
    return planned


def _memo_key(arguments: Sequence[str], requirements: Sequence[str], target: str) -> str:
    """What pip's answer depends on: its arguments, the files they name, pip's settings."""
    digest = hashlib.sha256()
    for argument in arguments:
        digest.update(argument.replace(target, "<target>").encode() + b"\0")
    digest.update(b"pip-report-1")
    files = [r for r in requirements if os.path.isfile(r)]
    files += [v for k, v in os.environ.items() if k in ("PIP_CONSTRAINT", "PIP_REQUIREMENT")]
    for path in files:
        for name in path.split():
            try:
                with open(name, "rb") as handle:
                    digest.update(handle.read())
            except OSError:
                digest.update(b"<unreadable>")
    for name, value in sorted(os.environ.items()):
        if name.startswith("PIP_") or name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
            digest.update(f"{name}={value}\0".encode())
    digest.update(os.getcwd().encode())  # relative paths in requirement files
    return digest.hexdigest()[:32]


def _remembered(memo: str | None) -> list[Planned] | None:
    if memo is None:
        return None
    try:
        if time.time() - os.stat(memo).st_mtime > RESOLUTION_TTL:
            return None
        with open(memo, encoding="utf-8") as handle:
            rows = json.load(handle)
        return [
            Planned(**{k: row[k] for k in ("name", "version", "filename", "url", "sha256")})
            for row in rows
        ]
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent, stale or damaged: resolve again


def _remember(memo: str, planned: Sequence[Planned]) -> None:
    try:
        os.makedirs(os.path.dirname(memo), exist_ok=True)
        temporary = f"{memo}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump([p.to_dict() for p in planned], handle)
        os.replace(temporary, memo)
    except OSError:
        pass  # a read-only cache only costs the next run a resolution


def valid_python(version: str) -> bool:
    """``3.11``, or a free-threaded ``3.13t`` (3.13 and later)."""
    return parse_target(version) is not None


def running_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"
