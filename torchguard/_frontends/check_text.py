"""``torchguard check`` as text: the verdict first, then why, then what was assumed.

The scan's header (an assumed ``C:\\Python``, its DLL directories) describes a machine the user
never named, so it is left out; ``--json`` and ``--markdown`` keep everything.
"""

from __future__ import annotations

from torchguard._frontends.check import Check
from torchguard._report.colour import Paint
from torchguard._report.findings import RepairHint
from torchguard._report.report import render_finding


def verdict(check: Check) -> str:
    report = check.report
    outcome = report.import_torch
    torch = report.torch
    what = f"torch {torch.version}" if torch else "torch"
    head = f"pip install {' '.join(check.requirements)} on Windows x64, CPython {check.python}"
    if check.unchecked:
        head += f" ({len(check.unchecked)} requirement(s) not checked: named below)"
    if check.index_problems:
        head += f" (without {len(check.index_problems)} index(es) that failed: see below)"
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
    for finding in report.findings:
        lines.append(render_finding(finding, shown=shown, paint=paint))
    if report.findings:
        summary = f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        lines.append(paint("error" if report.errors else "warning", summary))
    else:
        lines.append(paint("ok", "no problems found"))
    lines.extend(check.notes)
    return "\n".join(lines)
