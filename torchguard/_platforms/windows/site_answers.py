"""Each site-packages folder's answers to the questions asked of all its distributions, kept
as one cache entry per folder.

Three steps ask something of every installed distribution that lists a binary: which of its
binaries import torch (:func:`~torchguard._platforms.windows.ecosystem.discover`), what its
binaries tell of OpenMP (:func:`~torchguard._platforms.windows.openmp.candidate_files`) and
which wheel tags it was built for (the ``wheel-tag-mismatch`` rule). Each answer is cached
per distribution, but asking 300 distributions three times costs more than the rest of a
warm analysis. So, once every distribution of a folder had its answers from the cache, the
folder's answers are kept together, reduced to what a run needs:

- the distributions with a binary that imports torch, and those paths;
- the OpenMP summaries that hold a key binary or a folder to check (checked every run, as
  the per-distribution entry is), and the others grouped by the DLL names they import (a
  group is looked at only when a runtime has one of those names);
- the distributions grouped by their ``WHEEL`` tags (a group is judged once).

The entry is keyed by the folder's identity and serves while the folder's state is the one
kept and the analysis sees the same distributions there (the records of
:mod:`~torchguard._platforms.windows.records` are trusted by the same state). Any other
folder, or a damaged entry, is answered distribution by distribution as before, and the
entry is kept again by the next run that finds every answer in the cache. The entries it
stands for are not asked meanwhile, so they would be dropped as unused after
:data:`~torchguard._binary.cache.KEEP_DAYS` (and the run after the next install would read
every binary again): an entry older than half that is not served, and the run that asks one
by one instead renews them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from torchguard._binary import cache as facts_cache
from torchguard._binary.cache import FactsCache
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.siblings import SIBLINGS
from torchguard._platforms.windows.tree import WinTree

#: The cache's name for a site-packages folder's answers.
KIND = "site-answers"
#: What a folder's answers are made of (each learned by one step of a run).
LINKED, OPENMP, TAGS, RECORDS = "linked", "openmp", "tags", "records"
PARTS = (LINKED, OPENMP, TAGS, RECORDS)
#: The distributions whose RECORD summary every run asks for (their loaders' binaries).
SUMMARISED = frozenset(SIBLINGS)


class Known(NamedTuple):
    """One folder's remembered answers."""

    linked: dict[str, list[str]]
    """``.dist-info`` name -> its binaries that import torch (only those with any)."""
    openmp: dict[str, Any]
    """``.dist-info`` name -> [its summary's cache key, its OpenMP summary as cached], for
    those with something to check every run."""
    groups: dict[str, list[str]]
    """The DLL names (``|``-joined) plain binaries import -> the ``.dist-info`` names."""
    tags: dict[str, list[str]]
    """A ``WHEEL`` text -> the ``.dist-info`` names of the distributions built with it."""
    records: dict[str, Any]
    """``.dist-info`` name -> its RECORD summary as cached, for the distributions whose
    summary every run asks for (torch's siblings: :data:`SUMMARISED`)."""


class SiteAnswers:
    """This run's view: the folders answered from one entry, and what the others taught."""

    def __init__(self, tree: WinTree, cache: FactsCache | None, dists: Sequence[InstalledDist]):
        self.cache = cache
        self._dists: dict[str, dict[str, InstalledDist]] = {}
        for dist in dists:
            if dist.name != "torch":
                self._dists.setdefault(dist.site_dir, {})[dist.distribution.dist_info] = dist
        self._known: dict[str, Known] = {}
        self._keys: dict[str, tuple[str, str, str]] = {}
        self._learned: dict[str, dict[str, Any]] = {}
        if cache is None or cache.directory is None:
            return
        for site_dir, members in self._dists.items():
            state = tree.folder_state(site_dir)
            if state is None:
                continue  # changed just now, or not on the disk: asked one by one, not kept
            identity = tree.folder_identity(site_dir)
            names = "/".join(members)  # no file name holds a "/"
            self._keys[site_dir] = (identity, state, names)
            known = _known(cache.get_derived(KIND, identity), state, names, facts_cache._today())
            if known is not None:
                self._known[site_dir] = known

    def known(self, site_dir: str) -> Known | None:
        """The remembered answers of ``site_dir``, or None: ask its distributions."""
        return self._known.get(site_dir)

    def answered(self) -> list[tuple[str, Known]]:
        """Every folder answered from its entry, in the order the analysis found them."""
        return [(site, known) for site, known in self._known.items()]

    def sites(self) -> list[str]:
        """Every folder holding a distribution (torch aside), in found order."""
        return list(self._dists)

    def linked(self, site_dir: str) -> dict[str, list[str]] | None:
        """A folder's remembered distributions with a binary that imports torch, or None."""
        known = self._known.get(site_dir)
        return known.linked if known is not None else None

    def dist(self, site_dir: str, dist_info: str) -> InstalledDist | None:
        return self._dists.get(site_dir, {}).get(dist_info)

    def members(self, site_dir: str) -> dict[str, InstalledDist]:
        """A folder's distributions (torch aside) by ``.dist-info`` name, in found order."""
        return self._dists.get(site_dir, {})

    def forget(self, site_dir: str) -> None:
        """A folder whose remembered answers no longer hold (a key DLL changed): asked one
        by one from now on, and kept again whole with what this run learns (the answers
        already used this run stay learned)."""
        known = self._known.pop(site_dir, None)
        if known is not None:
            self._learned[site_dir] = {LINKED: known.linked, RECORDS: known.records}

    def learn(self, site_dir: str, part: str, value: Any) -> None:
        """What one step found for every distribution of a folder it asked one by one;
        None: an answer could not be kept, so the folder's entry is not written this run."""
        if site_dir in self._known or site_dir not in self._keys:
            return
        self._learned.setdefault(site_dir, {})[part] = value

    def save(self) -> None:
        """Keep the answers of every folder whose three answers were all learned whole."""
        if self.cache is None:
            return
        for site_dir, parts in self._learned.items():
            if any(parts.get(part) is None for part in PARTS):
                continue
            identity, state, names = self._keys[site_dir]
            value = {"state": state, "dists": names, "day": facts_cache._today(), **parts}
            self.cache.put_derived(KIND, identity, value)


def _known(stored: Any, state: str, names: str, today: int) -> Known | None:
    """The answers an entry holds when it is whole, still true and recent enough; None
    otherwise."""
    if type(stored) is not dict or stored.get("state") != state or stored.get("dists") != names:
        return None
    day = stored.get("day")
    if type(day) is not int or not 0 <= today - day < facts_cache.KEEP_DAYS // 2:
        return None  # the entries it stands for are renewed by asking them once
    linked, openmp = stored.get(LINKED), stored.get(OPENMP)
    if type(linked) is not dict or type(openmp) is not dict:
        return None
    others, groups = openmp.get("check"), openmp.get("groups")
    tags, records = stored.get(TAGS), stored.get(RECORDS)
    if type(others) is not dict or type(records) is not dict:
        return None
    if not _lists(groups) or not _lists(tags) or not _lists(linked):
        return None
    return Known(linked, others, groups, tags, records)  # type: ignore[arg-type]  # checked: _lists


def _lists(value: Any) -> bool:
    """A mapping of strings to lists of strings (what a damaged entry is not)."""
    return type(value) is dict and all(
        type(items) is list and all(type(item) is str for item in items) for items in value.values()
    )
