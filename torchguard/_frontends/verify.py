"""Verify a proposed fix before printing it.

When ``import torch`` fails and a hint proposes other versions (``pip install "torch>=2.4.1"
--index-url ...``), ``check`` resolves the requirements with the hint's requirements in place of
the same projects' (its index added as an extra one), downloads and scans that set too, and
says whether ``import torch`` then succeeds, or why it could not tell.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from torchguard._frontends.check_error import CheckError
from torchguard._report.report import Report

Runner = Callable[[Sequence[str], Sequence[str]], Report]
"""Runs the same check on other requirements and indexes; raises CheckError."""
_VALUE_OPTIONS = ("--index-url", "-i", "--extra-index-url", "-c", "--constraint", "-r")


def pip_install(command: str) -> tuple[list[str], list[str]] | None:
    """(requirements, index URLs) of a ``... -m pip install ...`` command; None otherwise."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if "pip" not in words or "install" not in words[words.index("pip") :]:
        return None
    words = words[words.index("install", words.index("pip")) + 1 :]
    requirements: list[str] = []
    indexes: list[str] = []
    position = 0
    while position < len(words):
        word = words[position]
        if word in _VALUE_OPTIONS:
            if word in ("--index-url", "-i", "--extra-index-url") and position + 1 < len(words):
                indexes.append(words[position + 1])
            elif word in ("-c", "--constraint", "-r"):
                return None  # a file of the user's: not something to verify from here
            position += 2
            continue
        if not word.startswith("-"):
            requirements.append(word)
        position += 1
    return (requirements, indexes) if requirements else None


def _project(requirement: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return None


def proposed(report: Report) -> tuple[str, list[str], list[str]] | None:
    """The first pip command a hint of an error proposes: (command, requirements, indexes)."""
    for finding in report.errors:
        for hint in finding.hints:
            for command in hint.commands:
                parsed = pip_install(command)
                if parsed is not None:
                    return (command, *parsed)
    return None


def replaced(requirements: Sequence[str], fix: Sequence[str]) -> list[str]:
    """``requirements`` with each one naming a project of ``fix`` replaced by the fix's."""
    fixed = {_project(r) for r in fix}
    kept = [r for r in requirements if r.startswith("-") or _project(r) not in fixed]
    # requirement files (-r FILE) are kept whole: pip says if they pin the old version
    return [*kept, *fix]


def verify_fix(
    original: Sequence[str],
    report: Report,
    notes: list[str],
    run: Runner,
    index_urls: Sequence[str],
) -> dict[str, object] | None:
    """The verdict on the fix a hint proposes, also added to ``notes``; None if none."""
    found = proposed(report)
    if found is None:
        return None
    command, fix, indexes = found
    requirements = replaced(original, fix)
    urls = list(index_urls)
    if not urls and indexes:
        import os

        from torchguard._frontends.pip_reasons import PYPI

        urls = [os.environ.get("PIP_INDEX_URL", PYPI)]  # the hint's index comes in addition
    urls += [u for u in indexes if u not in urls]
    shown = f"pip install {' '.join(shlex.quote(r) for r in requirements)}"
    result: dict[str, object] = {
        "command": command,
        "requirements": requirements,
        "index_urls": urls,
        "verified": False,
    }
    from torchguard._frontends.index_probe import probe

    for url in indexes:  # the fix's own index: without it, "verified" would be about another
        problem = probe(url)
        if problem is not None:
            result["reason"] = f"its index {url} {problem}"
            notes.append(f"fix (not verified: its index {url} {problem}): {command}")
            return result
    try:
        after = run(requirements, urls)
    except CheckError as exc:
        result["reason"] = exc.lines[0]
        notes.append(
            f"fix (not verified: pip cannot resolve it): {shown}: " + "; ".join(exc.lines[:4])
        )
        return result
    torch = after.torch
    version = torch.version if torch else "?"
    if after.ok:
        result["verified"] = True
        result["torch"] = version
        notes.append(
            f"fix (verified): {command}: pip then installs torch {version}, "
            "import torch succeeds (the same check, run on that set)"
        )
    else:  # torch itself, or only a sibling or extension (Report.blocking tells which)
        first = after.blockers[0] if after.blocking else after.errors[0]
        fails = "which still fails" if after.blocking else f"but import {first.package} fails"
        result["reason"] = first.message
        notes.append(
            f"fix (not enough): {command} installs torch {version}, {fails}: "
            f"{first.code}: {first.message}"
        )
    return result
