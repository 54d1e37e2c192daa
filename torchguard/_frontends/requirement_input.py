"""What ``check`` hands pip, and what it cannot check, from the user's requirements.

Requirement files (``-r``, nested ones included) are read into one list of requirements and
pip options, so a fix can replace one pin of a file and every requirement has a place
(``requirements.txt:12``). A VCS requirement (``git+https://...``), a link to a source archive
and a local folder or file are not resolved: cloning or building them is not what ``check``
answers, and one unreachable host must not cost the answer for the rest. They are named, with
why, and everything else is checked.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

_VCS = re.compile(r"^(git|hg|svn|bzr)\+", re.IGNORECASE)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_FILES = ("-r", "--requirement", "-c", "--constraint")
_EDITABLE = ("-e", "--editable")
_WITH_VALUE = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--trusted-host",
    "--no-binary",
    "--only-binary",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
    "--config-settings",
    "--global-option",
    "--hash",
)
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url")
_PER_REQUIREMENT = ("--hash", "--config-settings", "--global-option", "--install-option")


@dataclass(frozen=True)
class Unchecked:
    """A requirement ``check`` does not resolve: as written, where, and why not."""

    requirement: str
    where: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"requirement": self.requirement, "where": self.where, "why": self.why}


@dataclass
class RequirementInput:
    """pip's arguments (files read, the unchecked left out) and what was left out."""

    arguments: list[str] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    """The requirement files read, in order (their folders can tell a portable layout)."""
    places: dict[str, str] = field(default_factory=dict)
    """Where each requirement kept was written (``requirements.txt:12``)."""

    def index_urls(self) -> list[tuple[str, str]]:
        """(option, URL) of every index the arguments name, in order."""
        found: list[tuple[str, str]] = []
        words = self.arguments
        for position, word in enumerate(words):
            option, _, value = word.partition("=")
            if option in INDEX_OPTIONS:
                if not value and position + 1 < len(words):
                    value = words[position + 1]
                if value:
                    found.append((option, value))
        return found

    def without_indexes(self, urls: Sequence[str]) -> list[str]:
        """The arguments with the index options naming ``urls`` left out."""
        kept: list[str] = []
        words = self.arguments
        position = 0
        while position < len(words):
            option, _, value = words[position].partition("=")
            if option in INDEX_OPTIONS:
                step = 1 if value else 2
                value = value or (words[position + 1] if position + 1 < len(words) else "")
                if value in urls:
                    position += step
                    continue
                kept.extend(words[position : position + step])
                position += step
                continue
            kept.append(words[position])
            position += 1
        return kept

    def without_local_builds(
        self, arguments: Sequence[str], urls: Sequence[str]
    ) -> tuple[list[str], list[Unchecked]]:
        """``arguments`` with each pin of a local build (``torch==2.7.0+cu128``) replaced by
        its release (``torch==2.7.0``), and each named as not checked: when the indexes
        ``urls`` failed, no index left can serve it (PyPI takes no local version), and one
        missing build must not cost the answer for the rest."""
        kept: list[str] = []
        replaced: list[Unchecked] = []
        where = ", ".join(urls)
        for argument in arguments:
            release = _without_local(argument) if not argument.startswith("-") else None
            if release is None:
                kept.append(argument)
                continue
            kept.append(release)
            replaced.append(
                Unchecked(
                    argument,
                    self.places.get(argument, "the command line"),
                    f"a local build that only the index {where} can serve, which failed: "
                    f"its release ({release}) from the indexes that answer is checked in its "
                    "place, not this build",
                )
            )
        return kept, replaced


def why_unchecked(requirement: str) -> str | None:
    """Why ``check`` does not resolve this requirement; None when pip can resolve it here."""
    text = requirement.strip()
    target = text.split(" @ ", 1)[1].strip() if " @ " in text else text
    target = target.split(";", 1)[0].strip()
    if _VCS.match(target):
        return (
            "a VCS requirement: torchguard does not clone repositories, so this project and "
            "what it depends on are not checked (name its release instead, e.g. the project "
            "name, to check what PyPI has)"
        )
    if _URL.match(target):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path.lower().endswith(".whl") and not target.lower().startswith("file:"):
            return None  # a wheel: pip reads its metadata like an index's
        return (
            "a link to a source archive or file: pip would build it on the machine that "
            "installs it, so it is not checked"
        )
    if _local_path(target):
        return (
            "a local folder or file: it exists only on the machine that installs it, so it "
            "and what it depends on are not checked"
        )
    return None


_LOCAL_PIN = re.compile(r"(===?\s*[0-9][^,;\s+]*)\+[A-Za-z0-9._-]+")


def _without_local(requirement: str) -> str | None:
    """``torch==2.7.0`` for ``torch==2.7.0+cu128``; None when nothing pins a local build."""
    head, marker, tail = requirement.partition(";")
    release = _LOCAL_PIN.sub(r"\1", head)
    return None if release == head else release.rstrip() + (f" ;{tail}" if marker else "")


def _local_path(text: str) -> bool:
    if text.startswith((".", "/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", text):
        return True
    return ("/" in text or "\\" in text) and not re.match(r"^[A-Za-z0-9_.\-\[\], ]+[<>=!~]", text)


def read_requirements(requirements: Sequence[str]) -> RequirementInput:
    """The command line's requirements and options, with requirement files read in."""
    result = RequirementInput()
    _read_words(list(requirements), "the command line", os.getcwd(), result, depth=0)
    return result


def _read_words(
    words: list[str], where: str, folder: str, result: RequirementInput, depth: int
) -> None:
    position = 0
    while position < len(words):
        word = words[position]
        option, value = _split_option(word, _FILES + _EDITABLE + _WITH_VALUE)
        if option is not None and value is None:
            value = words[position + 1] if position + 1 < len(words) else ""
            position += 1
        position += 1
        if option in ("-r", "--requirement") and value is not None:
            _read_file(_path(value, folder), result, depth)
        elif option in ("-c", "--constraint") and value is not None:
            result.arguments += ["-c", _path(value, folder)]
        elif option in _EDITABLE and value is not None:
            result.unchecked.append(
                Unchecked(
                    f"-e {value}",
                    where,
                    why_unchecked(value)
                    or "an editable install: built from its source on the installing machine",
                )
            )
        elif option is not None and value is not None:
            if option in ("-f", "--find-links") and not _URL.match(value):
                value = _path(value, folder)
            result.arguments += [option, value]
        elif word.startswith("-"):
            result.arguments.append(word)
        else:
            why = why_unchecked(word)
            if why is None:
                result.arguments.append(word)
                result.places.setdefault(word, where)
            else:
                result.unchecked.append(Unchecked(word, where, why))


def _split_option(word: str, options: Sequence[str]) -> tuple[str | None, str | None]:
    """(option, value) of ``--opt=value``, ``-rFILE`` or ``--opt`` (value None: the next)."""
    for option in options:
        if word == option:
            return option, None
        if option.startswith("--") and word.startswith(option + "="):
            return option, word[len(option) + 1 :]
        if len(option) == 2 and word.startswith(option) and len(word) > 2:
            return option, word[2:].lstrip("=")
    return None, None


def _path(value: str, folder: str) -> str:
    expanded = os.path.expanduser(value)
    return expanded if os.path.isabs(expanded) else os.path.normpath(os.path.join(folder, expanded))


def _read_file(path: str, result: RequirementInput, depth: int) -> None:
    """One requirement file: continuation lines joined, comments dropped, each line read as
    pip reads it (options and requirements), nested files relative to this one."""
    if depth > 20 or path in result.files:
        return  # a file that includes itself: pip would say so; read it once
    try:
        with open(path, encoding="utf-8-sig") as handle:
            text = handle.read()
    except OSError:
        result.arguments += ["-r", path]  # pip says it cannot open it, in its words
        return
    result.files.append(path)
    folder = os.path.dirname(path)
    name = os.path.basename(path)
    for number, line in _logical_lines(text):
        where = f"{name}:{number}"
        if line.startswith("-"):
            try:
                words = shlex.split(line, posix=True)
            except ValueError:
                words = line.split()
            _read_words(words, where, folder, result, depth + 1)
            continue
        requirement, _, options = line.partition(" --")
        requirement = requirement.strip()
        why = why_unchecked(requirement)
        if why is None:
            result.arguments.append(requirement)
            result.places.setdefault(requirement, where)
        else:
            result.unchecked.append(Unchecked(requirement, where, why))
        if options:  # pip applies a line's --index-url to the whole run, as if on its own line
            try:
                words = shlex.split("--" + options, posix=True)
            except ValueError:
                words = ("--" + options).split()
            _read_words(_global_options(words), where, folder, result, depth + 1)


def _global_options(words: list[str]) -> list[str]:
    """A requirement line's options without the ones that only describe it (its hashes, its
    build settings)."""
    kept: list[str] = []
    position = 0
    while position < len(words):
        option, value = _split_option(words[position], _PER_REQUIREMENT)
        if option is not None:
            position += 2 if value is None else 1
            continue
        kept.append(words[position])
        position += 1
    return kept


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines
