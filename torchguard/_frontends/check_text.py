"""``torchguard check`` as text: the verdict first, then why, then what was assumed.

The scan's header (an assumed ``C:\\Python``, its DLL directories) describes a machine the user
never named, so it is left out; ``--json`` and ``--markdown`` keep everything.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchguard._frontends.check import Check
from torchguard._report.colour import Paint
from torchguard._report.findings import Finding, RepairHint
from torchguard._report.report import render_finding


def verdict(check: Check) -> str:
    report = check.report
    outcome = report.import_torch
    torch = report.torch
    what = f"torch {torch.version}" if torch else "torch"
    where = f"{check.target.machine_name}, CPython {check.python}"
    head = f"pip install {' '.join(check.requirements)} on {where}"
    if check.unchecked:
        head += f" ({len(check.unchecked)} requirement(s) not checked: named below)"
    if check.index_problems:
        head += f" (without {len(check.index_problems)} index(es) that failed: see below)"
    if check.no_wheel is not None:
        return f"{head}: pip install fails: {check.no_wheel}"
    if outcome is not None and not outcome.ok:
        return f"{head}: import torch fails ({what}): {outcome.describe()[len('fails: ') :]}"
    errors = len(report.errors)
    if errors:
        return f"{head}: {what} imports, but {errors} error(s) below"
    warnings = len(report.warnings)
    tail = f", {warnings} warning(s)" if warnings else ""
    return f"{head}: import torch succeeds ({what}){tail}"


def render_check(check: Check, paint: Paint) -> str:
    report = check.report
    kind = "error" if not report.ok else ("warning" if report.warnings else "ok")
    lines = [paint(kind, verdict(check))]
    for package in report.packages:
        lines.append(
            f"import {package.import_name} ({package.name} {package.version}) {package.message}"
        )
        lines.extend(f"  unavailable: {note}" for note in package.unavailable)
    shown: set[RepairHint] = set()
    groups = fold(report.findings)
    for first, *others in groups:
        lines.append(render_finding(first, shown=shown, paint=paint))
        if others:
            missing = ", ".join(_missing(f) for f in others)
            lines.append(f"  and {len(others)} more of the same cause and fix: {missing}")
    if report.findings:
        summary = f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        if len(groups) < len(report.findings):
            summary += f" from {len(groups)} cause(s)"
        lines.append(paint("error" if report.errors else "warning", summary))
    else:
        lines.append(paint("ok", "no problems found"))
    lines.extend(check.notes)
    return "\n".join(lines)


def fold(findings: Sequence[Finding]) -> list[list[Finding]]:
    """Findings of one cause together: the same code, severity, package and fixes (an
    extension's binaries each missing libraries one install brings: one cause, not one error
    per DLL); the first stands for the group, the others are listed under it. Order kept."""
    groups: list[list[Finding]] = []
    index: dict[tuple[object, ...], list[Finding]] = {}
    for finding in findings:
        if not finding.missing or finding.package is None:
            groups.append([finding])
            continue
        key = (finding.code, finding.severity, finding.package, finding.hints)
        if key in index:
            index[key].append(finding)
        else:
            index[key] = [finding]
            groups.append(index[key])
    return groups


def _missing(finding: Finding) -> str:
    needs = finding.chain[-2] if len(finding.chain) > 1 else finding.dll
    return f"{finding.missing} ({needs})" if needs else str(finding.missing)
