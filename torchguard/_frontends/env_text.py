"""The text of ``check --env`` and ``torchguard pip install``: changes, breaks, a safer command."""

from __future__ import annotations

from torchguard._frontends.env_check import EnvCheck
from torchguard._report.colour import Paint

_SHOWN = 12
"""Changes listed one a line; the rest are counted (a CUDA torch brings 15 NVIDIA wheels)."""


def render_env(result: EnvCheck, paint: Paint, command: str = "pip install") -> str:
    lines = [
        f"torchguard: `{command} {' '.join(result.arguments)}` in {result.env.label}",
    ]
    changes = result.changes
    if changes:
        lines.append(f"pip would install {len(changes)} distribution(s):")
        torch_first = sorted(changes, key=lambda c: (c.name.lower() != "torch", c.old is None))
        lines += [f"  {c.line}" for c in torch_first[:_SHOWN]]
        if len(changes) > _SHOWN:
            lines.append(f"  ... and {len(changes) - _SHOWN} more")
    if result.before is not None and result.after is not None and result.after != result.before:
        lines.append(f"torch: {result.before.line} -> {result.after.line}")
    report = result.report
    if report is not None:
        outcome = "fails" if report.blockers else "works"
        line = f"import torch after the install: {outcome} (read from the wheels)"
        broken = sorted({f.package for f in report.errors if f.package})
        lines.append(line + "".join(f"; import {name} fails" for name in broken))
    if result.breaks:
        lines.append(paint("error", "would break what works today:"))
        lines += [f"  - [{b.code}] {b.message}" for b in result.breaks]
    else:
        lines.append(paint("ok", "nothing that works today would break"))
    if result.warnings:
        lines.append(paint("warning", "warning (said, not refused):"))
        lines += [f"  - [{w.code}] {w.message}" for w in result.warnings]
    for alternative in result.alternatives:
        state = "resolved by this environment's pip" if alternative.resolved else "not resolved"
        lines.append(f"instead ({state}): {alternative.command(command)}")
        lines.append(f"  {alternative.why}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
