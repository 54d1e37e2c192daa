"""Where torch's native neighbours (:data:`torchguard._facts.neighbours.KINDS`) are installed:
the library each loads, in the site folder Python would import it from."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass

from torchguard._facts.neighbours import KINDS, Kind


@dataclass(frozen=True)
class Neighbour:
    kind: Kind
    version: str
    library: str


def find_neighbours(site_dirs: Iterable[str]) -> list[Neighbour]:
    """Each installed neighbour's library (the first site folder holding its package)."""
    found: list[Neighbour] = []
    sites = [s or "." for s in site_dirs]
    for kind in KINDS:
        for site in sites:
            if not os.path.isdir(os.path.join(site, kind.module)):
                continue
            library = next(
                (p for g in kind.globs for p in sorted(glob.glob(os.path.join(site, g)))), None
            )
            if library is not None:
                found.append(Neighbour(kind, _version(site, kind.package), library))
            break  # Python imports the first one; a CPU-only build has no such library
    return found


def _version(site: str, package: str) -> str:
    stem = package.replace("-", "_").lower()
    try:
        names = os.listdir(site)
    except OSError:
        return "?"
    for name in names:
        base, _, rest = name.partition("-")
        if name.endswith(".dist-info") and base.lower().replace("-", "_") == stem:
            return rest[: -len(".dist-info")]
    return "?"
