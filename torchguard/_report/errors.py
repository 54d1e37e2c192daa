"""The exceptions torchguard raises: one base users catch, one subclass per failure family.

``TorchDllError`` subclasses ``ImportError`` so code that already guards ``import torch`` with
``except ImportError`` keeps working. Instances carry the finding and the whole report, render
the full diagnosis as ``str(exc)``, and survive pickling (spawned DataLoader workers pickle
exceptions back to the parent).
"""

from __future__ import annotations

from typing import Any

from torchguard._report.findings import Finding, RepairHint
from torchguard._report.report import Report, render_finding


class TorchDllError(ImportError):
    """Base of every diagnosis torchguard raises."""

    def __init__(self, finding: Finding, report: Report | None = None) -> None:
        self.finding = finding
        self.report = report if report is not None else Report(findings=(finding,))
        super().__init__(_render(finding, self.report), name="torch")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.finding, self.report))

    def __str__(self) -> str:
        return _render(self.finding, self.report)

    @property
    def code(self) -> str:
        return self.finding.code

    @property
    def dll(self) -> str | None:
        return self.finding.dll

    @property
    def missing(self) -> str | None:
        return self.finding.missing

    @property
    def chain(self) -> tuple[str, ...]:
        return self.finding.chain

    @property
    def hints(self) -> tuple[RepairHint, ...]:
        return self.finding.hints

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data, plus the whole report under ``"report"``."""
        data = self.finding.to_dict()
        data["report"] = self.report.to_dict()
        return data


class MissingDllError(TorchDllError):
    """A DLL in torch's import closure cannot be found (WinError 126)."""


class CorruptDllError(TorchDllError):
    """A DLL torch needs is truncated or not a PE image (WinError 193)."""


class ArchitectureMismatchError(TorchDllError):
    """A DLL or the interpreter is built for another CPU architecture (WinError 193)."""


class RuntimeTooOldError(TorchDllError):
    """The Visual C++ runtime torch binds to is older than torch's toolset (WinError 1114)."""


class MissingSymbolError(TorchDllError):
    """A DLL is found but does not export what is imported from it (WinError 127/182)."""


class TorchNotFoundError(TorchDllError):
    """torch is not installed where this interpreter would import it from."""


_BY_CODE: dict[str, type[TorchDllError]] = {
    "missing-dll": MissingDllError,
    "corrupt-dll": CorruptDllError,
    "arch-mismatch": ArchitectureMismatchError,
    "runtime-too-old": RuntimeTooOldError,
    "missing-symbol": MissingSymbolError,
    "torch-not-found": TorchNotFoundError,
}


def error_for(finding: Finding, report: Report) -> TorchDllError:
    """The exception to raise for an error finding."""
    return _BY_CODE.get(finding.code, TorchDllError)(finding, report)


def _render(finding: Finding, report: Report) -> str:
    shown: set[RepairHint] = set()
    blockers = report.blockers
    blocks = finding in blockers
    headline = (
        "torchguard: import torch will fail."
        if blocks
        else "torchguard: a problem that does not stop `import torch`:"
    )
    lines = [headline, render_finding(finding, indent="  ", shown=shown)]
    outcome = report.import_torch
    if blocks and outcome is not None and not outcome.ok and outcome.dll:
        lines.append(
            f"  (torch's own message: import torch {outcome.describe()}, without naming "
            f"{finding.missing or 'the cause'})"
        )
    others = [f for f in blockers if f is not finding and f != finding]
    if others:
        lines.append(f"  {len(others)} more error(s):")
        lines.extend(render_finding(other, indent="    ", shown=shown) for other in others)
    return "\n".join(lines)
