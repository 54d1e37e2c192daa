"""What ``pip install ARGS`` would do to an environment, said by that environment's own pip.

``python -m pip install --dry-run --report - --quiet ARGS`` resolves against what is installed,
with the user's configuration (``PIP_CONFIG_FILE``, ``pip.conf``, index options) as pip would
read it, and installs nothing. Its report (schema 1) lists every distribution it would install
with its metadata and where it comes from; comparing with the installed ones says which are
new, upgraded, downgraded or reinstalled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.pip_watch import RESOLVE_TIMEOUT, Status, run_watched

#: pip options that install somewhere other than the environment's own folders: the overlay
#: would describe the wrong folder, so these are refused rather than guessed.
ELSEWHERE = ("--target", "-t", "--prefix", "--root", "--user")


@dataclass(frozen=True)
class Item:
    """One distribution pip would install."""

    name: str
    version: str
    url: str
    sha256: str | None
    requested: bool
    requires: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return unquote(self.url.rsplit("/", 1)[-1].split("#", 1)[0])

    @property
    def key(self) -> str:
        from torchguard._frontends.env_target import canonical

        return canonical(self.name)

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def pure(self) -> bool:
        """A wheel whose platform tag is ``any``: Python only, no binary to read."""
        if not self.wheel:
            return False
        return self.filename[: -len(".whl")].split("-")[-1].lower() == "any"

    @property
    def local_path(self) -> str | None:
        """The file itself when pip takes it from the disk (``--find-links`` on a folder)."""
        if not self.url.startswith("file:"):
            return None
        from urllib.request import url2pathname

        path = url2pathname(urlparse(self.url).path)
        return path if os.path.isfile(path) else None


@dataclass
class Resolution:
    """pip's answer: the items, and the marker environment it resolved for."""

    items: list[Item]
    environment: dict[str, str] = field(default_factory=dict)


def dry_run_command(python: str, arguments: Sequence[str]) -> list[str]:
    """pip's dry run, which writes nothing into the environment (``-B``: not even pip's own
    bytecode, so a refused install leaves every file as it was)."""
    command = [python, "-B", "-m", "pip", "install", "--dry-run", "--report", "-", "--quiet"]
    return [*command, "--disable-pip-version-check", "--progress-bar", "off", *arguments]


def elsewhere(arguments: Sequence[str]) -> str | None:
    """The first option that installs outside the environment, if any."""
    for argument in arguments:
        option = argument.split("=", 1)[0]
        if option in ELSEWHERE or (option.startswith("-t") and option != "-t" and len(option) > 2):
            return option
    return None


def resolve_in(
    python: str,
    arguments: Sequence[str],
    *,
    timeout: float = RESOLVE_TIMEOUT,
    watch: Status | None = None,
) -> Resolution:
    """Run the target's pip; :class:`PipFailure` with pip's own reasons when it cannot."""
    done = run_watched(dry_run_command(python, arguments), timeout=timeout, status=watch)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-5:]
        raise PipFailure(
            [f"pip cannot resolve `pip install {' '.join(arguments)}`", *errors], "resolution"
        )
    return parse_report(done.stdout)


def parse_report(text: str) -> Resolution:
    """The install list of pip's ``--report`` JSON (schema 1) with each item's metadata."""
    start = text.find("{")
    try:
        report: Any = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("install"), list):
        raise PipFailure(["pip printed no installation report (pip 22.2 or newer is needed)"])
    items: list[Item] = []
    for entry in report["install"]:
        if not isinstance(entry, dict):
            continue
        info = entry.get("download_info") or {}
        metadata = entry.get("metadata") or {}
        archive = info.get("archive_info") or {}
        hashes = archive.get("hashes") or {}
        sha256 = hashes.get("sha256")
        if sha256 is None and str(archive.get("hash", "")).startswith("sha256="):
            sha256 = str(archive["hash"])[len("sha256=") :]
        requires = metadata.get("requires_dist") or []
        items.append(
            Item(
                name=str(metadata.get("name", "")),
                version=str(metadata.get("version", "")),
                url=str(info.get("url", "")),
                sha256=str(sha256) if sha256 else None,
                requested=bool(entry.get("requested")),
                requires=tuple(str(r) for r in requires if isinstance(r, str)),
            )
        )
    environment = report.get("environment")
    markers = (
        {str(k): str(v) for k, v in environment.items()} if isinstance(environment, dict) else {}
    )
    return Resolution(items, markers)
