"""Binding verdicts in the persistent cache: keyed by both files' identities, never symbols.

A verdict reached through export forwarders records how each forwarder's DLL resolved (its
kind, path key and identity); it holds only while they all resolve alike, so a changed or
newly shadowed forwarder target is judged again. A missing or damaged entry is no verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchguard._binary.cache import FactsCache
from torchguard._platforms.windows.bindings import (
    BAD_IMAGE,
    ForwardResolver,
    Gap,
    Resolutions,
    Trusted,
)
from torchguard._platforms.windows.tree import path_key

#: What makes a file the same file next time (see ``Binaries.identity``).
Identity = Callable[[str], "str | None"]


class VerdictCache:
    """The binding-verdict section of the persistent cache, seen through file identities."""

    def __init__(self, persistent: FactsCache, identity: Identity) -> None:
        self.persistent = persistent
        self.identity = identity

    def key(self, importer: str, dll: str, exporter: str, delay: bool) -> str | None:
        first, second = self.identity(importer), self.identity(exporter)
        if first is None or second is None:
            return None
        return f"{first}>{dll.lower()}{'~delay' if delay else ''}>{second}"

    def get(self, key: str, resolve: ForwardResolver) -> tuple[bool, Gap | None]:
        """(whether a verdict holds, the Gap or None for a sound binding)."""
        raw = self.persistent.get_edge(key)
        known, gap = gap_from(raw)
        return (True, gap) if known and self._trail_holds(raw, resolve) else (False, None)

    def put(self, key: str, gap: Gap | None, resolutions: Resolutions) -> None:
        record = gap_to(gap)
        if resolutions:  # forwarders were resolved: the verdict holds while they resolve alike
            record["trail"] = {dll: self._record(where) for dll, where in resolutions.items()}
        self.persistent.put_edge(key, record)

    def _trail_holds(self, raw: Any, resolve: ForwardResolver) -> bool:
        trail = raw.get("trail", {}) if isinstance(raw, dict) else {}
        if not isinstance(trail, dict):
            return False
        return all(
            isinstance(then, list) and then == self._record(resolve(dll))
            for dll, then in trail.items()
        )

    def _record(self, where: str | Trusted | None) -> list[str | None]:
        """How a forwarder's DLL resolved, as a cacheable record: [kind, path, identity]."""
        if isinstance(where, Trusted):
            return ["trusted", None, None]
        if where is None:
            return ["missing", None, None]
        return ["file", path_key(where), self.identity(where)]


def gap_to(gap: Gap | None) -> dict[str, object]:
    if gap is None:
        return {"ok": True}
    return {
        "ok": False,
        "missing": list(gap.missing),
        "count": gap.count,
        "winerror": gap.winerror,
        "forward_missing": gap.forward_missing,
        "bad_image": gap.bad_image,
        "damaged_exports": gap.damaged_exports,
    }


def gap_from(raw: object) -> tuple[bool, Gap | None]:
    """(whether a verdict is cached, the Gap or None for a sound binding); a missing or
    damaged entry is not a verdict."""
    if not isinstance(raw, dict) or raw.get("ok") not in (True, False):
        return False, None
    if raw["ok"] is True:
        return True, None
    missing = raw.get("missing")
    count, winerror, forward = raw.get("count"), raw.get("winerror"), raw.get("forward_missing")
    bad_image, damaged = raw.get("bad_image"), raw.get("damaged_exports")
    if (
        not isinstance(missing, list)
        or not all(isinstance(name, str) for name in missing)
        or not isinstance(count, int)
        or winerror not in (127, 182, BAD_IMAGE)
        or not (forward is None or isinstance(forward, str))
        or not (bad_image is None or isinstance(bad_image, str))
        or (winerror == BAD_IMAGE) != (bad_image is not None)
        or not (damaged is None or isinstance(damaged, str))
    ):
        return False, None
    return True, Gap(tuple(missing), count, int(winerror), forward, bad_image, damaged)
