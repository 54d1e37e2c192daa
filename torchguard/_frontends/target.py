"""The interpreter ``torchguard check`` asks pip about: CPython X.Y, free-threaded or not, on
Windows x64 or ARM64 (``--python 3.13t --platform win_arm64``).

pip is told all of it (``--python-version``, ``--abi``, ``--platform``, ``--implementation cp``)
and its marker environment says the same machine (:mod:`.pip_windows`); the offline scan is
told the CPU and the free-threaded flag rather than guessing them from the wheels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.tags import Tag

PLATFORMS = ("win_amd64", "win_arm64")
"""The Windows platform tags ``check`` resolves for (``--platform``); the first is the default."""

_NAMES = {"win_amd64": "Windows x64", "win_arm64": "Windows ARM64"}
_PYTHON = re.compile(r"3\.(\d{1,2})(t?)")


@dataclass(frozen=True)
class Target:
    """A python.org CPython on Windows, as pip's tags and markers see it."""

    version: str
    """``3.13``: what ``--python-version`` and the ``python_version`` marker get."""
    free_threaded: bool = False
    platform: str = "win_amd64"

    @property
    def build(self) -> str:
        """``3.13t`` for a free-threaded 3.13 (``py -3.13t``), else ``3.13``."""
        return self.version + ("t" if self.free_threaded else "")

    @property
    def abi(self) -> str:
        """pip's ``--abi``: ``cp313t`` or ``cp313``."""
        return f"cp{self.version.replace('.', '')}" + ("t" if self.free_threaded else "")

    @property
    def machine_name(self) -> str:
        """``Windows x64`` or ``Windows ARM64``."""
        return _NAMES.get(self.platform, self.platform)

    def describe(self) -> str:
        """``CPython 3.13t on win_arm64``."""
        return f"CPython {self.build} on {self.platform}"

    def pip_options(self) -> list[str]:
        """What pip's dry run and download are told: the wheel tags of exactly this Python
        (``--abi`` given always, so pip never adds the running interpreter's flags to it)."""
        return [
            "--platform",
            self.platform,
            "--python-version",
            self.version,
            "--implementation",
            "cp",
            "--abi",
            self.abi,
        ]

    def tags(self) -> tuple[Tag, ...]:
        """Every wheel tag pip installs on this Python, most preferred first (its choice among
        a release's wheels): ``cp313-cp313t-win_arm64``, ``cp313-none-win_arm64``,
        ``py3-none-any`` ...; no ``abi3`` for a free-threaded Python, which cannot load the
        stable ABI."""
        from packaging.tags import compatible_tags, cpython_tags

        minor = int(self.version.split(".")[1])
        found = [
            tag
            for tag in cpython_tags((3, minor), [self.abi], [self.platform])
            if not (self.free_threaded and tag.abi == "abi3")
        ]
        found += compatible_tags((3, minor), f"cp3{minor}", [self.platform])
        return tuple(found)

    def runner_argument(self) -> str:
        """The first argument of :mod:`.pip_windows`: ``3.13t`` or ``3.13t:win_arm64``."""
        return self.build if self.platform == PLATFORMS[0] else f"{self.build}:{self.platform}"


def parse_target(python: str, platform: str | None = None) -> Target | None:
    """``--python 3.13t`` and ``--platform win_arm64`` as a :class:`Target`; None when either
    is not one ``check`` resolves for."""
    match = _PYTHON.fullmatch(python.strip())
    chosen = (platform or PLATFORMS[0]).strip().lower()
    if match is None or chosen not in PLATFORMS:
        return None
    minor, threaded = int(match.group(1)), bool(match.group(2))
    if threaded and minor < 13:  # free-threaded builds start with 3.13
        return None
    return Target(f"3.{minor}", threaded, chosen)


__all__ = ["PLATFORMS", "Target", "parse_target"]
