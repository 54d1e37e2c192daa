"""Which of a distribution's binaries import torch, remembered per site-packages state.

Finding the packages that build on torch asks every binary every distribution's RECORD
lists for its imports: in an environment of 300 binary distributions that is 2,000 files
whose identity must be taken (a ``stat`` each) before the facts cache can answer. The
answers are kept in the persistent cache, one entry per site-packages folder, keyed by the
folder's state as :mod:`~torchguard._platforms.windows.records` keeps RECORD summaries (pip, uv and
conda create or remove a ``.dist-info`` on every install, which changes that state). A warm run in
an unchanged folder takes no binary's identity; after a change, a distribution whose RECORD
is unchanged keeps its answer (one ``stat``), and only the others are worked out again from
their binaries' facts.

An answer that leaned on a file that could not be read now is not kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchguard._binary.cache import FactsCache
from torchguard._binary.pe.errors import FileUnreadable, PEReadError
from torchguard._binary.pe.image import PEFacts
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.ecosystem import is_torch_dll
from torchguard._platforms.windows.records import record_state
from torchguard._platforms.windows.tree import WinTree

#: The cache's name for a site-packages folder's answers.
KIND = "torch-linked"
#: The types of a list of names (each exactly a ``str``): checked with ``set(map(type, ...))``.
_STR = frozenset({str})


class RememberedLinks:
    """``discover``'s question (which of these binaries import torch?), answered from the
    cache while the distribution's site-packages folder is as it was."""

    def __init__(self, tree: WinTree, cache: FactsCache, facts: Callable[[str], PEFacts]) -> None:
        self.tree = tree
        self.cache = cache
        self.facts = facts
        self._sites: dict[str, tuple[str, str | None, dict[str, Any], bool]] = {}
        self._changed: set[str] = set()
        self._asked: dict[str, set[str]] = {}

    def __call__(self, dist: InstalledDist, paths: Callable[[], list[str]]) -> list[str]:
        """The binaries of ``dist`` (``paths``: all it lists, asked only when not
        remembered) that import a torch DLL."""
        _identity, state, known, settled = self._site(dist.site_dir)
        name = dist.distribution.dist_info
        self._asked.setdefault(dist.site_dir, set()).add(name)
        stored: Any = known.get(name)
        if settled and _entry(stored):  # the folder is as it was: no file looked at
            return list(stored[1:])
        record = record_state(self.tree, dist.distribution)
        if record is not None and _entry(stored) and stored[0] == record:
            return list(stored[1:])  # the folder changed, this distribution did not
        linked, certain = self._linked(paths())
        if certain and state is not None and record is not None:
            known[name] = [record, *linked]
            self._changed.add(dist.site_dir)
        return linked

    def save(self) -> None:
        """Keep the answers of every folder that gained one, or changed (then only those of
        the distributions it holds now)."""
        for site_dir, (identity, state, known, settled) in self._sites.items():
            if state is not None and (site_dir in self._changed or not settled):
                asked = self._asked.get(site_dir, set())
                kept = {name: value for name, value in known.items() if name in asked}
                self.cache.put_derived(KIND, identity, {"state": state, "dists": kept})

    def whole(self, site_dir: str) -> dict[str, list[str]] | None:
        """A folder's answers for :mod:`.site_answers` (the distributions with a binary that
        imports torch, and those binaries), when every distribution asked has one kept;
        None when one could not be kept."""
        found = self._sites.get(site_dir)
        if found is None:
            return {}  # no distribution there lists a binary
        _identity, state, known, _settled = found
        if state is None:
            return None
        answers: dict[str, list[str]] = {}
        for name in self._asked.get(site_dir, ()):
            stored: Any = known.get(name)
            if not _entry(stored):
                return None
            if len(stored) > 1:
                answers[name] = list(stored[1:])
        return answers

    def _site(self, site_dir: str) -> tuple[str, str | None, dict[str, Any], bool]:
        """(the folder's identity, its state, the answers kept for it, whether it is as it
        was when they were kept)."""
        found = self._sites.get(site_dir)
        if found is None:
            identity = self.tree.folder_identity(site_dir)
            state = self.tree.folder_state(site_dir)
            stored = self.cache.get_derived(KIND, identity)
            known: dict[str, Any] = {}
            settled = False
            if isinstance(stored, dict) and isinstance(stored.get("dists"), dict):
                known = dict(stored["dists"])
                settled = state is not None and stored.get("state") == state
            found = self._sites[site_dir] = (identity, state, known, settled)
        return found

    def _linked(self, paths: list[str]) -> tuple[list[str], bool]:
        """(the paths that import a torch DLL, whether every answer is a fact of its file)."""
        linked: list[str] = []
        certain = True
        for path in paths:
            try:
                found = self.facts(path)
            except FileUnreadable:
                certain = False  # not the file's doing: asked again next run
                continue
            except PEReadError:
                continue
            if any(is_torch_dll(name) for name in (*found.imports, *found.delay_imports)):
                linked.append(path)
        return linked, certain


def _entry(value: Any) -> bool:
    """Whether a kept answer is whole: its RECORD's state, then the linked paths."""
    return type(value) is list and bool(value) and set(map(type, value)) <= _STR
