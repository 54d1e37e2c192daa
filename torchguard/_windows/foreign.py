"""Wheels built for another OS: never judged as Windows.

A manylinux or macOS torch wheel holds no Windows DLL, so a Windows analysis of it would say
"no problems found" about nothing. Linux wheels never come here: ``scan()`` sends them to the
Linux analysis (ld.so's rules). :func:`refuse_other_platforms` refuses a macOS wheel (or a
Linux one given to the Windows analysis directly) with what to run instead.
"""

from __future__ import annotations

import ntpath
import re

_LINUX = ("manylinux", "musllinux", "linux")
_MACOS = ("macosx",)


def refuse_other_platforms(wheel: str) -> str | None:
    """Why ``wheel`` cannot be scanned by this version (a sentence saying what to run
    instead), or None for a Windows or pure-Python wheel."""
    name = ntpath.basename(wheel)
    parts = name[: -len(".whl")].split("-")
    if len(parts) < 5:
        return None
    tags = parts[-1].lower().split(".")
    if any(not tag.startswith(_LINUX + _MACOS) for tag in tags):
        return None  # win_amd64, any, or one tag this refusal does not know
    instead = _check_command(parts[0], parts[1], parts[-3])
    if all(tag.startswith(_LINUX) for tag in tags):
        return (
            f"{name} is a Linux wheel: scan it without Windows targets to judge it on Linux; "
            f"to ask whether this release works on Windows, run: {instead}"
        )
    return (
        f"{name} is a macOS wheel: macOS loads no Windows DLLs and torchguard does not analyse "
        f"macOS installs; to ask whether this release works on Windows, run: {instead}"
    )


def _check_command(project: str, version: str, python_tag: str) -> str:
    """The ``torchguard check`` that asks the same question about Windows."""
    requirement = f"{project.replace('_', '-').lower()}=={version.split('+', 1)[0]}"
    found = re.fullmatch(r"cp3(\d{1,2})", python_tag.split(".")[0])
    python = f" --python 3.{found.group(1)}" if found else ""
    return f"torchguard check {requirement}{python}"
