"""Findings: what the checks conclude, as plain, picklable, JSON-ready data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchguard._facts.vocab import Code, Severity

ERROR = Severity.ERROR
WARNING = Severity.WARNING
_SEVERITY_RANK = {ERROR: 0, WARNING: 1}


@dataclass(frozen=True)
class RepairHint:
    """One way to fix a problem: a one-line summary, commands to run, and an official URL."""

    summary: str
    commands: tuple[str, ...] = ()
    url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "commands": list(self.commands), "url": self.url}


@dataclass(frozen=True)
class Finding:
    """One diagnosis.

    ``code`` is a stable kebab-case identifier (documented in the README and never renamed);
    ``dll`` is the torch binary affected (the one torch's own error would name);
    ``missing`` is what is absent or wrong; ``chain`` runs from ``dll`` down to ``missing``;
    ``package`` is the torch sibling or extension whose import it breaks (None: torch itself).
    """

    code: Code
    severity: Severity
    message: str
    dll: str | None = None
    missing: str | None = None
    chain: tuple[str, ...] = ()
    hints: tuple[RepairHint, ...] = ()
    path: str | None = None
    symbols: tuple[str, ...] = ()
    """For ``missing-symbol``: the first few missing names (``#12`` for an ordinal)."""
    package: str | None = None
    rank: int = field(default=50, compare=False)

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def sort_key(self) -> tuple[int, int]:
        """Errors first, then the most fundamental family (lowest rank)."""
        return (_SEVERITY_RANK.get(self.severity, 3), self.rank)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": str(self.code),
            "severity": str(self.severity),
            "dll": self.dll.lower() if self.dll else None,
            "missing": self.missing.lower() if self.missing else None,
            "chain": [name.lower() for name in self.chain],
            "path": self.path,
            "message": self.message,
            "hints": [hint.to_dict() for hint in self.hints],
            "symbols": list(self.symbols),
            "package": self.package,
        }
