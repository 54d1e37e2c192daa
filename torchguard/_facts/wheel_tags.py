"""Whether an installed wheel was built for this interpreter, from its ``WHEEL`` tags.

A wheel's ``Tag:`` lines (PEP 425: ``python-abi-platform``) say which interpreters may import
its extension modules: ``cp313-cp313-win_amd64`` needs a CPython 3.13 with the GIL on x64
Windows; a free-threaded 3.13t (``Py_GIL_DISABLED``, ``abiflags`` ``t``) looks only for
``.cp313t-*`` extension modules, so it cannot import one, and it takes no ``abi3`` module
either (PEP 703; ``packaging.tags`` offers it no ``abi3`` tag). A wheel pip would never have
chosen for this interpreter got there by another Python's pip, ``--target``, a copied
folder or ``--platform``: its ``import`` then fails with "No module named ..." or a DLL
error that names the wrong cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PYTHON = re.compile(r"^(?:cp|py)(\d)(\d*)$")
_ABI = re.compile(r"^cp(\d)(\d+)([a-z]*)$")
_LINUX = re.compile(r"^(?:many|musl)?linux(?:1|2010|2014|_\d+_\d+)?_(.+)$")


@dataclass(frozen=True)
class Interpreter:
    """The interpreter the wheels must fit."""

    version: tuple[int, int]
    free_threaded: bool
    platform: str
    """``win_amd64``, ``win_arm64``, ``win32``, ``linux_x86_64``, ``linux_aarch64`` ..."""

    @property
    def label(self) -> str:
        build = f"{self.version[0]}.{self.version[1]}{'t' if self.free_threaded else ''}"
        kind = " (free-threaded)" if self.free_threaded else ""
        return f"CPython {build}{kind} on {self.platform}"

    @property
    def cp(self) -> str:
        return f"cp{self.version[0]}{self.version[1]}{'t' if self.free_threaded else ''}"


def wheel_tags(text: str | None) -> tuple[str, ...]:
    """The tags a ``WHEEL`` file lists, lower-case and expanded (``cp311.cp312-...`` is two);
    empty for a missing or unreadable file, which says nothing."""
    tags: list[str] = []
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        parts = value.strip().lower().split("-")
        if key.strip().lower() != "tag" or len(parts) != 3 or not all(parts):
            continue
        tags.extend(
            f"{p}-{a}-{plat}"
            for p in parts[0].split(".")
            for a in parts[1].split(".")
            for plat in parts[2].split(".")
        )
    return tuple(tags)


def misfit(tags: tuple[str, ...], interpreter: Interpreter) -> str | None:
    """Why none of ``tags`` fits ``interpreter`` (the reason of the nearest tag), or None when
    one fits or there is nothing to judge."""
    reasons = [_reason(tag, interpreter) for tag in tags]
    if not reasons or any(r is None for r in reasons):
        return None
    return min((r for r in reasons if r is not None), key=lambda r: r[0])[1]


def _reason(tag: str, interpreter: Interpreter) -> tuple[int, str] | None:
    """None when ``tag`` fits; else (closeness, why): a tag that fails only on the ABI is
    nearer than one for another platform."""
    python, abi, platform = tag.split("-")
    if not _platform_fits(platform, interpreter.platform):
        return 3, f"built for {platform}, not {interpreter.platform}"
    major, minor = interpreter.version
    abi_match = _ABI.match(abi)
    if abi_match is not None:  # a version-specific CPython ABI: cp313, cp313t, cp39m
        built = (int(abi_match[1]), int(abi_match[2]))
        threaded = "t" in abi_match[3]
        name = f"{built[0]}.{built[1]}{'t' if threaded else ''}"
        if built != interpreter.version:
            return 2, f"built for CPython {name} ({abi}), not {major}.{minor}"
        if threaded and not interpreter.free_threaded:
            return 1, f"built for the free-threaded CPython {name} ({abi}); this one has the GIL"
        if interpreter.free_threaded and not threaded:
            return 1, (
                f"built for CPython {name} with the GIL ({abi}); a free-threaded "
                f"{major}.{minor}t imports only {interpreter.cp} extension modules"
            )
        return None
    if abi == "abi3":
        if interpreter.free_threaded:
            return 1, "built for the stable ABI (abi3), which a free-threaded CPython cannot import"
        return _python_fits(python, interpreter)
    if abi == "none":
        return _python_fits(python, interpreter)
    return None  # another implementation's ABI (pypy...) or a new scheme: not judged


def _python_fits(python: str, interpreter: Interpreter) -> tuple[int, str] | None:
    """``cp3X``/``py3X`` under ``none`` or ``abi3``: any Python 3 at least 3.X."""
    match = _PYTHON.match(python)
    if match is None:
        return None  # pp310, ironpython ...: not judged
    major, minor = interpreter.version
    if int(match[1]) != major:
        return 2, f"built for Python {match[1]} ({python}), not {major}.{minor}"
    if match[2] and int(match[2]) > minor:
        return 2, f"built for Python {match[1]}.{match[2]} or newer ({python}), not {major}.{minor}"
    return None


def _platform_fits(platform: str, wanted: str) -> bool:
    if platform == "any" or platform == wanted:
        return True
    have, want = _LINUX.match(platform), _LINUX.match(wanted)
    return have is not None and want is not None and have[1] == want[1]


def platform_tag(system: str, machine: str) -> str:
    """The wheel platform of an interpreter: ``win_amd64`` for ("windows", "amd64")."""
    system, machine = system.lower(), machine.lower()
    if system == "windows":
        return {"amd64": "win_amd64", "x86_64": "win_amd64", "arm64": "win_arm64"}.get(
            machine, "win32"
        )
    return "linux_" + {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
