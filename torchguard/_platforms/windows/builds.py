"""Which torch an extension was built for, from its own build metadata.

A compiled extension links one torch build's DLLs, so the torch it was built for is the install
that makes it load. Its distribution says so in one of three places, most exact first:

- ``<package>/cpp_lib.json`` (xformers): ``{"version": {"torch": "2.10.0+cu128", ...}}``;
- a local version tag naming CUDA and torch (``flash_attn 2.8.3+cu12torch2.8cxx11abiTRUE``,
  ``+cu128torch2.7.0``);
- a ``Requires-Dist: torch==X`` pin in its METADATA.

Read only for a package whose load failed, so a healthy warm run reads none of it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.tree import join

_LOCAL_TAG = re.compile(r"cu(\d{2,3})torch(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)
_PIN = re.compile(r"^torch\s*==\s*([0-9][0-9A-Za-z.+]*)\s*(?:;.*)?$", re.IGNORECASE)
_VARIANT = re.compile(r"^cu(\d{2})(\d)$")


@dataclass(frozen=True)
class BuildTarget:
    """The torch a package was built for, and where that was read."""

    torch: str
    """``2.10.0`` (a release) or ``2.8`` (any release of a series)."""
    cuda: tuple[int, int] | None
    """``(12, 8)``; None for a CPU build or when the metadata does not say."""
    cuda_major: int | None
    """Set when only CUDA's major version is known (``cu12``)."""
    source: str
    """Where it was read, as a user can check it: ``xformers/cpp_lib.json``."""

    @property
    def label(self) -> str:
        if self.cuda is not None:
            return f"torch {self.torch}+cu{self.cuda[0]}{self.cuda[1]}"
        if self.cuda_major is not None:
            return f"torch {self.torch} with CUDA {self.cuda_major}"
        return f"torch {self.torch}"

    def matches(self, version: str | None, cuda: str | None) -> bool:
        """Whether torch ``version`` (``2.4.1+cu124``) with ``cuda`` (``12.4``) is this build."""
        base = (version or "").partition("+")[0]
        if not (base == self.torch or base.startswith(self.torch + ".")):
            return False
        have = _cuda_tuple(cuda)
        if self.cuda is not None:
            return have == self.cuda
        if self.cuda_major is not None:
            return have is not None and have[0] == self.cuda_major
        return True


def build_target(dist: InstalledDist) -> BuildTarget | None:
    """The torch ``dist`` was built for, or None when its metadata names none."""
    return _cpp_lib(dist) or _local_tag(dist) or _pin(dist)


def _cpp_lib(dist: InstalledDist) -> BuildTarget | None:
    tree = dist.distribution.tree
    for relative in dist.record_paths():
        parts = relative.split("/")
        if len(parts) != 2 or parts[1] != "cpp_lib.json":
            continue
        text = tree.read_text(join(dist.site_dir, relative))
        try:
            version = json.loads(text or "")["version"]["torch"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(version, str) or not version[:1].isdigit():
            return None
        base, _, local = version.partition("+")
        variant = _VARIANT.match(local)
        cuda = (int(variant[1]), int(variant[2])) if variant else None
        return BuildTarget(base, cuda, None, relative)
    return None


def _local_tag(dist: InstalledDist) -> BuildTarget | None:
    local = dist.version.partition("+")[2]
    found = _LOCAL_TAG.search(local)
    if not found:
        return None
    digits = found[1]
    source = f"its version tag +{local}"
    if len(digits) == 2:
        return BuildTarget(found[2], None, int(digits), source)
    return BuildTarget(found[2], (int(digits[:2]), int(digits[2:])), None, source)


def _pin(dist: InstalledDist) -> BuildTarget | None:
    text = dist.distribution.read_text("METADATA")
    if not text:
        return None
    from email.parser import HeaderParser  # 13 ms cold: only when an extension's pin is read

    for requirement in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        found = _PIN.match(requirement.strip())
        if found and "extra" not in requirement.partition(";")[2]:
            base, _, local = found[1].partition("+")
            variant = _VARIANT.match(local)
            cuda = (int(variant[1]), int(variant[2])) if variant else None
            return BuildTarget(base, cuda, None, f"Requires-Dist: {requirement.strip()}")
    return None


def _cuda_tuple(cuda: str | None) -> tuple[int, int] | None:
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return (int(parts[0]), int(parts[1]))
