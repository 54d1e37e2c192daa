"""What ``check`` may say about a CUDA build for its target (``--python``, ``--platform``).

torchguard's table of CUDA builds (:mod:`torchguard._facts.cuda_builds`) lists the CUDA variants
of each release for the regular CPython on Windows x64. It says nothing of the free-threaded
builds (``cp313t``), and PyTorch publishes no CUDA wheel for Windows on ARM64 at all. So for
``win_arm64`` no CUDA command is given (one line says why), and for a free-threaded target the
command is kept but marked ``(not verified: ...)``, as ``check`` words every fix it did not
verify: download.pytorch.org's file list for that ABI was not read.
"""

from __future__ import annotations

import dataclasses

from torchguard._frontends.gpu_answer import GpuAnswer
from torchguard._frontends.target import Target
from torchguard._report.findings import Finding, RepairHint
from torchguard._report.report import Report

CUDA_INDEX = "download.pytorch.org/whl/cu"
"""What a command installing a CUDA build of torch names: its index."""


def no_cuda_build(target: Target) -> str | None:
    """Why no CUDA build of torch installs on ``target`` at all; None when one may."""
    if target.platform == "win_arm64":
        return "PyTorch publishes no CUDA build for Windows on ARM64 (torch runs on the CPU there)"
    return None


def unverified(target: Target) -> str | None:
    """The ``not verified: ...`` reason for a CUDA command on ``target``; None when the table
    of CUDA builds covers it."""
    if target.free_threaded:
        return f"not verified: download.pytorch.org's {target.abi} wheels were not checked"
    return None


def _is_cuda(hint: RepairHint) -> bool:
    return any(CUDA_INDEX in command for command in hint.commands)


def _hints(hints: tuple[RepairHint, ...], target: Target) -> tuple[RepairHint, ...]:
    none, caveat = no_cuda_build(target), unverified(target)
    kept: list[RepairHint] = []
    for hint in hints:
        if not _is_cuda(hint):
            kept.append(hint)
        elif none is not None:
            replacement = RepairHint(none)
            if replacement not in kept:
                kept.append(replacement)
        elif caveat is not None:
            kept.append(dataclasses.replace(hint, summary=f"{hint.summary} ({caveat})"))
        else:
            kept.append(hint)
    return tuple(kept)


def for_target(report: Report, target: Target) -> Report:
    """``report`` with each fix that installs a CUDA build said as honestly as ``target``
    allows: none on Windows ARM64, marked not verified for a free-threaded Python."""
    if no_cuda_build(target) is None and unverified(target) is None:
        return report
    findings: list[Finding] = []
    for finding in report.findings:
        hints = _hints(finding.hints, target)
        findings.append(
            finding if hints == finding.hints else dataclasses.replace(finding, hints=hints)
        )
    return dataclasses.replace(report, findings=tuple(findings))


def answer_for_target(answer: GpuAnswer | None, target: Target) -> GpuAnswer | None:
    """The ``--gpu`` answer for ``target``: on Windows ARM64 no build (and no command), for a
    free-threaded Python its command marked not verified."""
    if answer is None or answer.pick is None:
        return answer
    none, caveat = no_cuda_build(target), unverified(target)
    if none is not None:
        lines = [line for line in answer.lines if not line.startswith("answer: the newest torch")]
        lines = [line for line in lines if answer.command is None or line.strip() != answer.command]
        lines.append(f"answer: no torch build uses the GPU on {target.describe()}: {none}")
        return dataclasses.replace(answer, lines=tuple(lines), pick=None, command=None)
    if caveat is not None:
        lines = [
            f"{line} ({caveat})" if line.startswith("answer: the newest torch") else line
            for line in answer.lines
        ]
        return dataclasses.replace(answer, lines=tuple(lines), not_verified=caveat)
    return answer


__all__ = ["answer_for_target", "for_target", "no_cuda_build", "unverified"]
