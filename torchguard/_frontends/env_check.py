"""``torchguard check REQ... --env``: what ``pip install REQ`` would do to this environment.

The environment's own pip resolves (:mod:`.env_resolve`, a dry run: nothing installed); the
result is laid over the installed folders without touching them (:mod:`.env_overlay` on Linux,
:mod:`.env_windows` on Windows); torch is judged there by the same offline pipeline of that
platform ``scan`` uses, and compared with the environment as it is, so only what the install
changes is said (:mod:`.env_changes`).
Only the wheels holding binaries are read: a file pip would take from the disk is read in
place, another is downloaded once into ``check``'s wheel cache; a pure-Python wheel is never
fetched (its metadata is in pip's report). When something would break, a safer command is
proposed, and resolved by the same pip before it is shown.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from torchguard._facts.vocab import Code
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.env_changes import (
    Alternative,
    Break,
    Change,
    TorchBuild,
    metadata_breaks,
)
from torchguard._frontends.env_resolve import Item, Resolution
from torchguard._frontends.env_target import Installed, TargetEnv
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.pip_watch import Status
from torchguard._frontends.progress import Progress
from torchguard._report.findings import ERROR, WARNING, Finding
from torchguard._report.report import Report

if TYPE_CHECKING:
    from torchguard._platforms.linux.wheel_files import WheelLayout


@dataclass
class EnvCheck:
    """What ``pip install ARGS`` would change in one environment, and whether it breaks."""

    env: TargetEnv
    arguments: tuple[str, ...]
    changes: list[Change]
    breaks: list[Break]
    before: TorchBuild | None
    after: TorchBuild | None
    report: Report | None = None
    """The analysis of the environment as the install would leave it (None: not scanned)."""
    notes: list[str] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)
    downloaded_bytes: int = 0
    warnings: list[Break] = field(default_factory=list)
    """What the install adds that is said but not refused: a conflict torchguard's own
    ``ensure()`` prevents (see :func:`new_findings`)."""

    @property
    def safe(self) -> bool:
        return not self.breaks

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": 1,
            "safe": self.safe,
            "python": self.env.python,
            "prefix": self.env.prefix,
            "arguments": list(self.arguments),
            "changes": [c.to_dict() for c in self.changes],
            "breaks": [b.to_dict() for b in self.breaks],
            "warnings": [w.to_dict() for w in self.warnings],
            "torch": {
                "before": _build_dict(self.before),
                "after": _build_dict(self.after),
            },
            "import_torch_after": (
                None
                if self.report is None
                else {
                    "ok": not self.report.blockers,
                    "findings": [f.to_dict() for f in self.findings],
                }
            ),
            "alternatives": [a.to_dict() for a in self.alternatives],
            "notes": list(self.notes),
            "downloaded_bytes": self.downloaded_bytes,
        }

    @property
    def findings(self) -> tuple[Finding, ...]:
        return () if self.report is None else self.report.findings


def _build_dict(build: TorchBuild | None) -> dict[str, object] | None:
    return None if build is None else {"version": build.version, "cuda": build.cuda}


def check_env(
    arguments: Sequence[str],
    *,
    python: str | None = None,
    cache: str | None = None,
    progress: IO[str] | None = None,
    resolve_timeout: float | None = None,
    alternatives: bool = True,
) -> EnvCheck:
    """Resolve ``pip install arguments`` with ``python``'s pip and judge the result."""
    from torchguard._frontends.cache_command import wheel_cache
    from torchguard._frontends.env_resolve import elsewhere, resolve_in
    from torchguard._frontends.env_target import probe
    from torchguard._frontends.pip_watch import RESOLVE_TIMEOUT

    target = probe(python or sys.executable)
    if not target.platform.startswith("linux") and target.platform != "win32":
        raise CheckError(
            f"{target.python} runs on {target.platform}: `--env` judges Linux and Windows "
            "environments in this version"
        )
    if target.platform == "win32":
        from torchguard._frontends.env_windows import readable_here

        readable_here(target)
    if target.pip is None:
        raise CheckError(f"{target.python} has no pip: nothing would install there")
    odd = elsewhere(arguments)
    if odd is not None:
        raise CheckError(
            f"{odd} installs outside the environment's own folders, which this check judges"
        )
    if not any(not a.startswith("-") for a in arguments):
        raise CheckError("no requirement given")
    bar = Progress(progress)
    timeout = RESOLVE_TIMEOUT if resolve_timeout is None else resolve_timeout
    bar.show("resolving with the environment's pip...", force=True)
    try:
        resolution = resolve_in(target.python, arguments, timeout=timeout, watch=_watch(bar))
    except PipFailure as exc:
        raise CheckError(exc.lines, exc.kind) from None
    finally:
        bar.clear()
    result = judge(target, tuple(arguments), resolution, wheel_cache(cache), bar)
    if alternatives and result.breaks:
        from torchguard._frontends.env_alternatives import propose

        def attempt(candidate: Sequence[str]) -> list[Break] | str:
            bar.show("judging a safer command...", force=True)
            try:
                again = resolve_in(target.python, candidate, timeout=timeout)
            except PipFailure as exc:
                return exc.lines[-1]
            finally:
                bar.clear()
            return judge(target, tuple(candidate), again, wheel_cache(cache), bar).breaks

        result.alternatives, tried = propose(
            target,
            result.arguments,
            result.breaks,
            result.before,
            resolution,
            wheel_cache(cache),
            attempt,
        )
        result.notes += [f"tried: {line}" for line in tried]
    return result


def _watch(bar: Progress) -> Status:
    def show(elapsed: float, collected: int, step: str) -> None:
        bar.show(f"resolving with pip: {elapsed:.0f} s, {collected} collected, now: {step}")

    return show


def judge(
    target: TargetEnv,
    arguments: tuple[str, ...],
    resolution: Resolution,
    cache: str,
    bar: Progress,
) -> EnvCheck:
    """Lay ``resolution`` over ``target`` and compare it with the environment as it is."""
    from torchguard._frontends.env_changes import (
        classify,
        installed_build,
        nvidia_notes,
        replaced_dists,
        wheel_build,
    )

    items = resolution.items
    changes = classify(target, items)
    before = installed_build(target)
    result = EnvCheck(target, arguments, changes, [], before, before)
    if not items:
        result.notes.append("pip would install nothing: every requirement is already met")
        return result
    sources = [i for i in items if not i.wheel]
    binary = [i for i in items if i.wheel and not i.pure]
    pure = [i for i in items if i.pure]
    result.notes += [
        f"{i.name} {i.version} would be built from its source ({i.filename}): what it compiles "
        "is not read"
        for i in sources
    ]
    paths = _wheel_paths(binary, cache, target, bar, result)
    torch = next((i for i in items if i.key == "torch"), None)
    if torch is not None:
        result.after = wheel_build(torch.version, paths.get(torch.key))
    result.breaks += metadata_breaks(target, resolution, result.after)
    result.notes += nvidia_notes(target, items)
    if not binary and before is not None:
        result.notes.append(
            "only pure-Python wheels change: torch's binaries stay as they are (not read again)"
        )
        return result
    replaced = replaced_dists(target, items)
    bar.show("reading the environment as it is and as it would be...", force=True)
    wheels = [paths[i.key] for i in binary]
    try:
        if target.platform == "win32":
            from torchguard._frontends.env_windows import assumed_note, scan_both

            now, later = scan_both(target, replaced, wheels, pure)
            result.notes.append(assumed_note())
        else:
            now, later = _scan_both(target, replaced, wheels, pure)
    finally:
        bar.clear()
    result.report = later
    if later is not None:
        breaks, warnings = new_findings(now, later)
        result.breaks += breaks
        result.warnings += warnings
    return result


def _wheel_paths(
    binary: Sequence[Item], cache: str, target: TargetEnv, bar: Progress, result: EnvCheck
) -> dict[str, str]:
    """Each binary wheel's file: in place when pip reads it from the disk, else downloaded
    into the wheel cache (reused there next time)."""
    from torchguard._frontends.download import fetch
    from torchguard._frontends.resolve import Planned

    paths = {i.key: path for i in binary if (path := i.local_path) is not None}
    remote = [i for i in binary if i.key not in paths]
    if remote:
        planned = [Planned(i.name, i.version, i.filename, i.url, i.sha256) for i in remote]
        try:
            fetched = fetch(planned, cache, f"{target.version[0]}.{target.version[1]}", bar)
        except PipFailure as exc:
            raise CheckError(exc.lines, exc.kind) from None
        result.downloaded_bytes = fetched.downloaded_bytes
        paths.update({i.key: path for i, path in zip(remote, fetched.paths)})
    return paths


def _scan_both(
    target: TargetEnv, replaced: list[Installed], wheels: list[str], pure: list[Item]
) -> tuple[Report | None, Report | None]:
    import zipfile

    from torchguard._facts.internal import guarded
    from torchguard._frontends.env_overlay import build_overlay
    from torchguard._platforms.windows.system import TargetError

    def run() -> tuple[Report | None, Report | None]:
        now = _scan(list(target.folders), None)
        with tempfile.TemporaryDirectory(prefix="torchguard-env-") as scratch:
            try:
                overlay = build_overlay(scratch, target.folders, replaced, wheels, pure)
            except (OSError, zipfile.BadZipFile) as exc:
                raise CheckError(f"cannot lay out the wheels pip would install: {exc}") from None
            later = _scan(overlay.folders, overlay.layout)
            if later is not None:
                later = _real_paths(later, dict(zip(overlay.folders, target.folders)))
        return now, later

    return guarded("check --env", run, (TargetError, CheckError))


def _scan(folders: list[str], layout: WheelLayout | None) -> Report | None:
    from torchguard._frontends.pipeline import analyze_linux, linux_cache
    from torchguard._platforms.linux.system import offline_linux

    if not any(os.path.isfile(os.path.join(f, "torch", "__init__.py")) for f in folders):
        return None
    system = offline_linux(folders, wheels=layout)
    return analyze_linux(system, cache=linux_cache())


def _real_paths(report: Report, mirrors: dict[str, str]) -> Report:
    """The overlay's scratch folders named as the environment's own in every message."""
    import dataclasses

    def real(text: str | None) -> str | None:
        if text is None:
            return None
        for mirror, folder in mirrors.items():
            text = text.replace(mirror, folder)
        return text

    findings = tuple(
        dataclasses.replace(f, message=real(f.message) or "", path=real(f.path))
        for f in report.findings
    )
    return dataclasses.replace(report, findings=findings)


def _key(finding: Finding) -> tuple[str, str, str]:
    return (str(finding.code), finding.package or "", finding.missing or "")


PREVENTED = (
    "Not refused: import torch itself works, and torchguard.ensure() prevents this by loading "
    "{path} before torch, which then binds to it: one runtime runs. Without ensure(), plain "
    "`import torch` followed by MKL's first threaded call starts both: run `torchguard hook "
    "install` in this environment (ensure() before every import torch), or set "
    "MKL_THREADING_LAYER=SEQUENTIAL"
)
"""Why an OpenMP conflict ``ensure()`` preloads away is a warning of the install, not a break."""


def _prevented(finding: Finding, report: Report) -> str | None:
    """The file ``ensure()`` preloads to prevent ``finding`` (an MKL sibling runtime); None
    when nothing of torchguard's prevents it."""
    if finding.code != Code.OPENMP_CONFLICT or finding.severity != WARNING or not finding.path:
        return None
    for preload in report.preloads:
        if preload.error is None and preload.path == finding.path:
            return preload.path
    return None


def new_findings(now: Report | None, later: Report) -> tuple[list[Break], list[Break]]:
    """The errors and warnings the install would add (the ones there today are not its):
    (breaks, warnings). An error is a proof that an import fails; a warning breaks too, except
    an OpenMP conflict that torchguard's own preload prevents (``import torch`` works and,
    after ``ensure()``, MKL's threaded calls do too): said, not refused."""
    had = {_key(f) for f in now.findings} if now is not None else set()
    found: list[Break] = []
    said: list[Break] = []
    for finding in later.findings:
        if finding.severity not in (ERROR, WARNING) or _key(finding) in had:
            continue
        prevented = _prevented(finding, later)
        if prevented is not None:
            message = f"{finding.message}. {PREVENTED.format(path=prevented)}"
            said.append(Break(str(finding.code), message))
            continue
        subject = f"import {finding.package}" if finding.package else "import torch"
        level = f"{subject} would fail" if finding.severity == ERROR else "warning"
        found.append(Break(str(finding.code), f"{level}: {finding.message}"))
    return found, said
