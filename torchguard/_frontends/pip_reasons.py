"""Why pip could not resolve, in pip's own words, kept whole.

pip's output is searched for what a user needs: an index it could not reach (told apart from a
resolution failure even when a constraint file turns every failure into "conflicting
dependencies"), the conflict lines ("torchvision 0.19.0 depends on torch==2.4.0"), and, for "no
matching distribution", the index's own file list: a release with wheels for other Pythons only,
or with a source distribution only, is named as such.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchguard._frontends.index_files import IndexFile
    from torchguard._frontends.no_wheel import NoWheel

_NETWORK = re.compile(
    r"NewConnectionError|ConnectTimeout|Could not fetch URL|NameResolutionError|ReadTimeout|"
    r"Failed to establish a new connection|ProxyError|SSLError|Max retries exceeded|"
    r"not a trusted or secure host|connection error"
)
_EXHAUSTED = re.compile(
    r"Retry\(total=0\b|Could not fetch URL|Max retries exceeded|connection error"
)
_CAUSE = re.compile(
    r"(Failed to establish a new connection: [^'\")]+|\[Errno -?\d+\][^'\")]+|"
    r"Read timed out|SSLError\([^)]*\))"
)
_NOT_FOUND = re.compile(
    r"Could not find a version that satisfies the requirement (.+?) \(from versions: (.*)\)"
)
PYPI = "https://pypi.org/simple"


class PipFailure(Exception):
    """pip could not resolve: ``lines`` say why (the first one alone is a summary)."""

    def __init__(self, lines: Sequence[str], kind: str = "resolution") -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)
        self.kind = kind
        self.sdist: tuple[str, IndexFile] | None = None
        """(project, newest matching sdist) when pip failed on a release with no wheels."""
        self.no_wheel: NoWheel | None = None
        """The release has wheels, but none for the Python and platform asked about."""


_ERROR_LINE = re.compile(r"^\s*error:\s*(.*)$", re.IGNORECASE)
_PIP_ERROR_KINDS = re.compile(r"^[a-z]+(-[a-z]+)+$")
"""pip's rich error names (``subprocess-exited-with-error``): a heading, never a reason."""
_FAILED_STEP = re.compile("^\\s*\u00d7\\s*(.+?)\\.?\\s*$")  # pip's multiplication sign
_EXIT_CODE = re.compile(r"^\s*│\s*exit code:\s*(-?\d+)")
_OUTPUT_START = re.compile(r"^\s*╰─>\s*\[\d+ lines? of output\]")
_OUTPUT_END = "[end of output]"
_CAUSE_LINE = re.compile(
    r"^(fatal|error|[A-Za-z_.]*Error|[A-Za-z_.]*Exception)\b|Could not resolve host|"
    r"unable to access|Permission denied|No such file",
    re.IGNORECASE,
)


def _errors(lines: Sequence[str]) -> list[str]:
    """pip's ``ERROR:``/``error:`` lines (any case, any indent), without their prefix; the
    headings of pip's subprocess blocks and "Ignored the following versions" left out."""
    found: list[str] = []
    for line in lines:
        match = _ERROR_LINE.match(line)
        if match is None:
            continue
        text = match.group(1).strip()
        if not text or _PIP_ERROR_KINDS.match(text) or text.startswith("Ignored the following"):
            continue
        if text not in found:
            found.append(text)
    return found


def subprocess_reasons(lines: Sequence[str]) -> list[str]:
    """What failed inside a subprocess pip ran (``git clone``, a build backend) and why.

    pip prints a step (a multiplication sign, then ``git clone ... did not run
    successfully.``), its exit code and either the step's output or "See above for output"
    (then the cause is a line printed before, such as git's ``fatal: unable to access ...:
    Could not resolve host``). One line per step.
    """
    reasons: list[str] = []
    seen: set[str] = set()
    before: list[str] = []
    position = 0
    while position < len(lines):
        line = lines[position]
        step = _FAILED_STEP.match(line)
        if step is None:
            if "subprocess-exited-with-error" not in line and not line.strip().startswith("note:"):
                before.append(line.strip())
            position += 1
            continue
        what = step.group(1).strip()
        code = ""
        cause = ""
        position += 1
        while position < len(lines) and lines[position].strip().startswith(("│", "╰─>")):
            current = lines[position]
            exit_code = _EXIT_CODE.match(current)
            if exit_code:
                code = exit_code.group(1)
            if _OUTPUT_START.match(current):
                output: list[str] = []
                position += 1
                while position < len(lines) and lines[position].strip() != _OUTPUT_END:
                    output.append(lines[position].strip())
                    position += 1
                cause = _cause(output)
            position += 1
        if not cause:
            cause = _cause(before)
        if what in seen:
            continue
        seen.add(what)
        suffix = " did not run successfully"
        did = what[: -len(suffix)] if what.endswith(suffix) else what
        reason = did + (" failed" if did != what else "") + (f" (exit code {code})" if code else "")
        reasons.append(reason + (f": {cause}" if cause else ""))
    return reasons


def _cause(output: Sequence[str]) -> str:
    """The line of a subprocess's output that says why: the last error-like one, else the
    last non-empty one."""
    shown = [line for line in output if line and not line.startswith("[end of output")]
    causes = [line for line in shown if _CAUSE_LINE.search(line)]
    chosen = causes[-1] if causes else (shown[-1] if shown else "")
    return _short(chosen)


def _index(lines: Sequence[str], index_urls: Sequence[str]) -> str:
    for line in lines:
        if line.startswith("Looking in indexes:"):
            return line.split(":", 1)[1].strip()
    if index_urls:
        return ", ".join(index_urls)
    return os.environ.get("PIP_INDEX_URL", PYPI)


def _constraint_note() -> list[str]:
    constraint = os.environ.get("PIP_CONSTRAINT", "").strip()
    return (
        [f"(a pip constraint file is in effect: PIP_CONSTRAINT={constraint})"] if constraint else []
    )


def network_failure(lines: Sequence[str], index_urls: Sequence[str]) -> PipFailure | None:
    """An index pip gave up reaching; None when every request finally got through."""
    network = [line for line in lines if _NETWORK.search(line)]
    if not network or not any(_EXHAUSTED.search(line) for line in network):
        return None
    where = _index(lines, index_urls)
    if "not a trusted or secure host" in network[-1]:
        return PipFailure(
            [f"pip ignores the package index {where}: not HTTPS and not a trusted host"], "network"
        )
    cause = _CAUSE.search(network[-1])
    detail = cause.group(1).strip() if cause else _short(network[-1])
    return PipFailure(
        [f"cannot reach the package index {where}: {detail}", *_constraint_note()], "network"
    )


def explain_failure(
    lines: Sequence[str],
    requirements: Sequence[str],
    index_urls: Sequence[str],
    python: str,
    platform: str = "win_amd64",
) -> PipFailure:
    """pip's reasons for failing: a summary line and the lines that explain it. A release
    with wheels, none of them for CPython ``python`` (``3.13t``: free-threaded) on
    ``platform``, is named as such (``no_wheel``)."""
    lines = [line.rstrip() for line in lines]
    network = network_failure(lines, index_urls)
    if network is not None:
        return network
    errors = _errors(lines)
    if any("has no pip" in e for e in errors):
        return PipFailure([errors[0]], "pip")
    steps = subprocess_reasons(lines)
    if steps:
        return PipFailure([*steps, *_constraint_note()])
    conflict = _conflict(lines)
    versions_none = any(e.endswith("(from versions: none)") for e in errors)
    if (conflict and any("(constraint)" in c for c in conflict)) or versions_none:
        unreachable = _unreachable(lines, index_urls)
        if unreachable is not None:
            return unreachable
    if conflict:
        missing = _missing_from_conflict(conflict[1:], index_urls, python)
        return PipFailure([*(missing or conflict[:1]), *conflict[1:], *_constraint_note()])
    for error in errors:
        found = _NOT_FOUND.search(error)
        if found:
            lacking = _no_wheel(found.group(1), index_urls, python, platform)
            if lacking is not None:
                failure = PipFailure([lacking.message, error, *_constraint_note()])
                failure.no_wheel = lacking
                return failure
            why = _why_not_found(found.group(1), found.group(2), index_urls, python)
            failure = PipFailure([error, *why, *_constraint_note()])
            failure.sdist = sdist_only(found.group(1), index_urls)
            return failure
    if errors:
        return PipFailure([errors[0], *_constraint_note()])
    tail = [
        line.strip()
        for line in lines
        if line.strip() and not line.strip().lower().startswith(("note:", "hint:"))
    ]
    return PipFailure([_short(tail[-1]) if tail else "pip failed without a message"], "pip")


def _no_wheel(
    requirement: str, index_urls: Sequence[str], python: str, platform: str
) -> NoWheel | None:
    """The release pip found no distribution of, when it has wheels for other targets only."""
    from torchguard._frontends.index_files import project_files
    from torchguard._frontends.no_wheel import no_wheel
    from torchguard._frontends.target import parse_target

    target = parse_target(python, platform)
    name = requirement.split(" (from ")[0].split(";")[0].strip()
    project = re.split(r"[\s<>=!~\[@(]", name, maxsplit=1)[0]
    if target is None or not project:
        return None
    index = index_urls[0] if index_urls else os.environ.get("PIP_INDEX_URL", PYPI)
    return no_wheel(name, project_files(index, project), target)


def _unreachable(lines: Sequence[str], index_urls: Sequence[str]) -> PipFailure | None:
    """pip saw no files at all (with a constraint file it calls that a conflict): if the
    index's root page cannot be read either, the index is unreachable, not the versions."""
    from torchguard._frontends.index_files import index_reachable

    index = index_urls[0] if index_urls else os.environ.get("PIP_INDEX_URL", PYPI)
    problem = index_reachable(index)
    if problem is None:
        return None
    return PipFailure(
        [f"cannot reach the package index {index}: {problem}", *_constraint_note()], "network"
    )


def _conflict(lines: Sequence[str]) -> list[str]:
    """``Cannot install ...`` and pip's "The conflict is caused by:" lines, indented."""
    head = next((e for e in _errors(lines) if e.startswith("Cannot install")), None)
    if head is None:
        return []
    kept = [head]
    inside = False
    for line in lines:
        if line.strip() == "The conflict is caused by:":
            inside = True
            kept.append("the conflict is caused by:")
            continue
        if inside:
            if not line.startswith("    ") or not line.strip():
                break
            kept.append("  " + line.strip())
    return kept


def _missing_from_conflict(
    causes: Sequence[str], index_urls: Sequence[str], python: str
) -> list[str]:
    """A "conflict" between a requested version that does not exist and a constraint."""
    if not any("(constraint)" in c for c in causes):
        return []
    for cause in causes:
        text = cause.strip()
        if text.startswith("The user requested ") and "(constraint)" not in text:
            requirement = text[len("The user requested ") :]
            why = _why_not_found(requirement, None, index_urls, python)
            if why:
                return [f"no release matches {requirement}", *why]
    return []


def _why_not_found(
    requirement: str, versions: str | None, index_urls: Sequence[str], python: str
) -> list[str]:
    """What the index has for ``requirement``: wheels for other Pythons, sdists only, nothing."""
    from packaging.requirements import InvalidRequirement, Requirement

    from torchguard._frontends.index_files import project_files

    try:
        wanted = Requirement(requirement.split(" ;")[0])
    except InvalidRequirement:
        return []
    index = index_urls[0] if index_urls else os.environ.get("PIP_INDEX_URL", PYPI)
    files = project_files(index, wanted.name)
    if files is None:
        return []
    matching = [
        f
        for f in files
        if f.version is not None and wanted.specifier.contains(f.version, prereleases=True)
    ]
    if versions is None and not matching:
        newest = max((f.version for f in files if f.version is not None), default=None)
        return (
            [
                f"{index} has no {wanted.name} {wanted.specifier}"
                + (f" (newest: {newest})" if newest else "")
            ]
            if files
            else [f"{index} has no project named {wanted.name}"]
        )
    if not matching:
        return []
    cp = f"cp{python.replace('.', '')}"
    windows = [f for f in matching if f.wheel and any("win_amd64" in t for t in f.platforms)]
    if windows:
        tags = sorted({t for f in windows for t in f.pythons}, key=_tag_order)
        release = f"{wanted.name} {max(f.version for f in windows if f.version)}"
        return [
            f"{release} has Windows x64 wheels for {', '.join(tags)} only: none for CPython "
            f"{python} ({cp}); choose a --python it has, or a release built for {cp}"
        ]
    if all(not f.wheel for f in matching):
        return [
            f"{wanted.name} publishes only source distributions ({matching[-1].filename}): "
            "pip builds it on the machine that installs it"
        ]
    return [f"{wanted.name} {wanted.specifier} has wheels, but none for Windows x64"]


def sdist_only(requirement: str, index_urls: Sequence[str]) -> tuple[str, IndexFile] | None:
    """(project, its newest sdist matching ``requirement``) when no matching release has a
    wheel at all; None otherwise."""
    from packaging.requirements import InvalidRequirement, Requirement

    from torchguard._frontends.index_files import project_files

    try:
        wanted = Requirement(requirement.split(" (from ")[0].split(" ;")[0].strip())
    except InvalidRequirement:
        return None
    index = index_urls[0] if index_urls else os.environ.get("PIP_INDEX_URL", PYPI)
    files = project_files(index, wanted.name) or []
    matching = [
        f
        for f in files
        if f.version is not None and wanted.specifier.contains(f.version, prereleases=True)
    ]
    if not matching or any(f.wheel for f in matching):
        return None
    return wanted.name, matching[-1]


def _tag_order(tag: str) -> tuple[int, str]:
    digits = tag[2:] if tag.startswith("cp") else ""
    return (int(digits) if digits.isdigit() else 0, tag)


def _short(line: str) -> str:
    text = line.strip()
    for prefix in ("WARNING:", "ERROR:"):
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
    return text if len(text) <= 300 else text[:297] + "..."
