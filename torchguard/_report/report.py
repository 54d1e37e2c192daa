"""The Report: everything one analysis concluded, with text and JSON renderings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torchguard._facts.vocab import Analysis, PackageStatus, Step
from torchguard._report.colour import PLAIN, Paint
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TorchSummary:
    version: str
    location: str
    variant: str | None = None
    cuda: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "location": self.location,
            "variant": self.variant,
            "cuda": self.cuda,
        }


@dataclass(frozen=True)
class DistSummary:
    """An installed distribution that matters to torch (torchvision, mkl, nvidia-* ...)."""

    name: str
    version: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


@dataclass(frozen=True)
class DllDirectory:
    """A directory to register with ``os.add_dll_directory`` and why."""

    path: str
    provenance: str
    by_torch: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "provenance": self.provenance,
            "registered_by": "torch" if self.by_torch else "torchguard",
        }


@dataclass(frozen=True)
class ImportOutcome:
    """What ``import torch`` is predicted to do: succeed, or fail naming ``dll``."""

    ok: bool
    winerror: int | None = None
    dll: str | None = None
    abort: str | None = None
    """Not an exception: the process dies with this message (``OMP: Error #15``)."""

    def describe(self) -> str:
        """How torch's own error reads, minus the localised wording."""
        if self.ok:
            return "succeeds"
        if self.abort:
            return f"aborts the process: {self.abort} (no Python traceback)"
        if self.winerror is None:  # Linux: the object whose load fails
            return f"fails loading {self.dll}"
        if self.dll and self.dll.lower().endswith(".pyd"):
            module = self.dll.split(".", 1)[0]
            return f'fails: "DLL load failed while importing {module}" (WinError {self.winerror})'
        return f'fails: [WinError {self.winerror}] Error loading "...\\{self.dll}"'

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "winerror": self.winerror,
            "dll": self.dll.lower() if self.dll else None,
            "abort": self.abort,
        }


OK = PackageStatus.OK
WARNS = PackageStatus.WARNS
FAILS = PackageStatus.FAILS
BLOCKED = PackageStatus.BLOCKED


@dataclass(frozen=True)
class PackageOutcome:
    """What ``import <package>`` of a torch sibling or extension does after ``import torch``.

    ``status``: ``ok``, ``warns`` (imports, with a warning or a feature lost), ``fails``
    (naming ``dll``, the binary that does not load, and its WinError) or ``blocked`` (``import
    torch`` fails first). ``unavailable``: optional features that will not work.
    """

    name: str
    version: str
    import_name: str
    status: PackageStatus
    message: str
    winerror: int | None = None
    dll: str | None = None
    unavailable: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in (OK, WARNS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "import": self.import_name,
            "ok": self.ok,
            "status": self.status,
            "winerror": self.winerror,
            "dll": self.dll.lower() if self.dll else None,
            "message": self.message,
            "unavailable": list(self.unavailable),
        }


@dataclass(frozen=True)
class ModuleRecord:
    """One DLL of the resolved graph: where it was found and through which search step."""

    name: str
    path: str | None
    via: Step | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name.lower(), "path": self.path, "via": self.via}


@dataclass(frozen=True)
class PreloadRecord:
    """A DLL ``ensure()`` loads by full path before ``import torch``, and why."""

    path: str
    reason: str
    switch: str
    """The environment setting that turns it off (``TORCHGUARD_OPENMP=keep`` ...)."""
    done: bool = False
    """Whether it was loaded (``ensure()``); False in a scan or a diagnosis."""
    error: str | None = None
    """Why loading it failed, when it did (the process is left as it was)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "switch": self.switch,
            "done": self.done,
            "error": self.error,
        }

    def describe(self) -> str:
        if self.error is not None:
            return f"could not preload {self.path}: {self.error}"
        verb = "preloaded" if self.done else "ensure() preloads"
        return f"{verb} {self.path} before torch: {self.reason} (off: {self.switch})"


@dataclass(frozen=True)
class Report:
    """The result of ``ensure()``, ``diagnose()`` or ``scan()``."""

    findings: tuple[Finding, ...] = ()
    torch: TorchSummary | None = None
    mode: Analysis = Analysis.OFFLINE
    python: dict[str, Any] = field(default_factory=dict)
    dll_directories: tuple[DllDirectory, ...] = ()
    import_torch: ImportOutcome | None = None
    import_torch_without_torchguard: ImportOutcome | None = None
    modules: tuple[ModuleRecord, ...] = ()
    distributions: tuple[DistSummary, ...] = ()
    packages: tuple[PackageOutcome, ...] = ()
    """torch's siblings and extensions: what importing each does after ``import torch``."""
    preloads: tuple[PreloadRecord, ...] = ()
    """DLLs ``ensure()`` loads before torch to prevent a load-order conflict."""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no finding is an error (warnings allowed)."""
        return not any(finding.severity == ERROR for finding in self.findings)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == ERROR)

    @property
    def blockers(self) -> tuple[Finding, ...]:
        """The errors that make ``import torch`` fail here, most fundamental first.

        An error blocks only when it is about torch itself (never a sibling's or an
        extension's: a program that never imports torchvision must not be stopped by it) and
        the replay predicts that ``import torch`` fails after ``ensure()``
        (:attr:`import_torch`; a report without a prediction, e.g. torch not installed,
        trusts its errors). An error the prediction contradicts never blocks: an error must
        be a proof.
        """
        if self.import_torch is not None and self.import_torch.ok:
            return ()
        return tuple(f for f in self.errors if f.package is None)

    @property
    def blocking(self) -> bool:
        """Whether ``import torch`` fails here: the one answer ``ensure()``, the hook, the
        pytest plugin, the markdown verdict and the error text all use."""
        return bool(self.blockers)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == WARNING)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "ok": self.ok,
            "blocking": self.blocking,
            "mode": self.mode,
            "torch": self.torch.to_dict() if self.torch else None,
            "findings": [finding.to_dict() for finding in self.findings],
            "import_torch": _outcome(self.import_torch),
            "import_torch_without_torchguard": _outcome(self.import_torch_without_torchguard),
            "python": dict(self.python),
            "dll_directories": [d.to_dict() for d in self.dll_directories],
            "modules": [m.to_dict() for m in self.modules],
            "distributions": [d.to_dict() for d in self.distributions],
            "packages": [p.to_dict() for p in self.packages],
            "preloads": [p.to_dict() for p in self.preloads],
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def render_text(self, *, colour: bool = False) -> str:
        """The human diagnosis printed by the CLI (with ANSI colour when ``colour``)."""
        return render_text(self, Paint(colour))


def _outcome(outcome: ImportOutcome | None) -> dict[str, Any] | None:
    return outcome.to_dict() if outcome else None


def render_finding(
    finding: Finding,
    *,
    indent: str = "",
    shown: set[RepairHint] | None = None,
    paint: Paint = PLAIN,
) -> str:
    """One finding as text: headline, chain, and each hint with its commands.

    Commands of a hint already in ``shown`` (printed for an earlier finding) are not repeated.
    ``paint`` colours the severity, the missing DLL and the commands to copy.
    """
    label = paint.severity(finding.severity, f"{finding.severity}[{finding.code}]")
    lines = [f"{indent}{label}: {paint.mark(finding.message, finding.missing)}"]
    if len(finding.chain) > 1:
        chain = [*finding.chain[:-1], paint("dll", finding.chain[-1])]
        lines.append(f"{indent}  chain: {' -> '.join(chain)}")
    if finding.path:
        lines.append(f"{indent}  file: {finding.path}")
    if finding.symbols:
        from torchguard._binary.demangle import readable

        names = ", ".join(dict.fromkeys(readable(name) for name in finding.symbols))
        lines.append(f"{indent}  not exported: {names}")
    for hint in finding.hints:
        repeated = _same_fix(hint, shown)
        if repeated:
            lines.append(f"{indent}  fix: the same as above ({paint('command', repeated)})")
            continue
        if shown is not None:
            shown.add(hint)
        lines.append(f"{indent}  fix: {hint.summary}")
        lines.extend(f"{indent}      {paint('command', command)}" for command in hint.commands)
        if hint.url:
            lines.append(f"{indent}      see {hint.url}")
    return "\n".join(lines)


def _same_fix(hint: RepairHint, shown: set[RepairHint] | None) -> str | None:
    """The first command of an equal fix printed before (same commands and URL), or None."""
    for earlier in shown or ():
        if earlier.commands and (earlier.commands, earlier.url) == (hint.commands, hint.url):
            return earlier.commands[0]
    return None


def render_text(report: Report, paint: Paint = PLAIN) -> str:
    lines: list[str] = []
    if report.torch is not None:
        variant = f" ({report.torch.variant})" if report.torch.variant else ""
        lines.append(f"torch {report.torch.version}{variant} at {report.torch.location}")
    if report.mode == "non-windows":
        lines.append("not Windows: no Windows DLLs to check in this environment")
    if report.python.get("platform") == "linux":
        lines.append(
            f"python {report.python.get('version')}: "
            f"{report.python.get('executable') or 'not given (offline)'} (Linux, glibc's ld.so)"
        )
    elif report.python:
        lines.append(
            f"python {report.python.get('version')}"
            + (f" ({report.python['machine']})" if report.python.get("machine") else "")
            + f": {report.python.get('executable')} "
            f"(loader's application folder: {report.python.get('app_dir')})"
        )
    if report.distributions:
        listed = ", ".join(f"{d.name} {d.version}" for d in report.distributions)
        lines.append(f"with: {listed}")
    for directory in report.dll_directories:
        lines.append(f"dll directory: {directory.path}  [{directory.provenance}]")
    outcome = report.import_torch
    if outcome is not None and not outcome.ok:
        lines.append(paint("error", f"import torch {outcome.describe()}"))
    plain = report.import_torch_without_torchguard
    if plain is not None and not plain.ok and outcome is not None and outcome.ok:
        lines.append(
            f"import torch alone {plain.describe()}; after torchguard.ensure() it succeeds"
        )
    lines.extend(preload.describe() for preload in report.preloads)
    for package in report.packages:
        lines.append(
            f"import {package.import_name} ({package.name} {package.version}) {package.message}"
        )
        lines.extend(f"  unavailable: {note}" for note in package.unavailable)
    shown: set[RepairHint] = set()
    for finding in report.findings:
        lines.append(render_finding(finding, shown=shown, paint=paint))
    unjudged = report.python.get("platform") == "linux" and report.import_torch is None
    if unjudged and report.torch is not None:
        lines.append("nothing native to judge: torch has no _C shared object here")
    if not report.findings:
        if report.mode != "non-windows" and not unjudged:  # "no problems" would overclaim
            lines.append(paint("ok", "no problems found"))
    else:
        errors, warnings = len(report.errors), len(report.warnings)
        summary = f"{errors} error(s), {warnings} warning(s)"
        lines.append(paint("error" if errors else "warning", summary))
    return "\n".join(lines)
