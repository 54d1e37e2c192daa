"""Which installed NVIDIA distributions claim the same shared object (their RECORD files).

pip lets two distributions write one path: nvidia-nccl-cu12 and nvidia-nccl-cu13 both install
``nvidia/nccl/lib/libnccl.so.2``; the last one installed wins and uninstalling either removes
the file. Only ``nvidia_*`` distributions are read (a few short RECORDs), so this stays cheap.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    """One distribution's RECORD row for a shared object: ``size`` is what it wrote."""

    dist: str
    size: int | None
    digest: str | None


def _dist_name(dist_info: str) -> str:
    base = os.path.basename(dist_info)[: -len(".dist-info")]
    name, _, version = base.partition("-")
    return f"{name.replace('_', '-')} {version}"


def _nvidia_records(site: str) -> Iterator[tuple[str, list[str]]]:
    """(dist-info folder, RECORD rows) of each readable ``nvidia_*`` distribution in ``site``."""
    for dist_info in sorted(glob.glob(os.path.join(site, "nvidia_*.dist-info"))):
        try:
            with open(os.path.join(dist_info, "RECORD"), encoding="utf-8") as handle:
                rows = handle.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        yield dist_info, rows


def shared_object_claims(site: str) -> dict[str, list[Claim]]:
    """path (absolute) -> the claims of every ``nvidia_*`` distribution in ``site``."""
    claims: dict[str, list[Claim]] = {}
    for dist_info, rows in _nvidia_records(site):
        for row in rows:
            parts = row.rsplit(",", 2)
            if len(parts) != 3 or ".so" not in parts[0]:
                continue
            path, digest, size = parts
            claims.setdefault(os.path.join(site, path), []).append(
                Claim(_dist_name(dist_info), int(size) if size.isdigit() else None, digest or None)
            )
    return {path: found for path, found in claims.items() if len(found) > 1}


def owner(site: str, path: str) -> str | None:
    """``"name version"`` of the ``nvidia_*`` distribution whose RECORD lists ``path``."""
    try:
        relative = os.path.relpath(path, site)
    except ValueError:
        return None
    if relative.startswith(".."):
        return None
    for dist_info, rows in _nvidia_records(site):
        if any(row.rsplit(",", 2)[0] == relative for row in rows):
            return _dist_name(dist_info)
    return None


def on_disk(path: str, claims: list[Claim]) -> str | None:
    """The distribution whose bytes are on disk, told by size (None: not told apart)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return None
    owners = [claim.dist for claim in claims if claim.size == size]
    return owners[0] if len(owners) == 1 else None
