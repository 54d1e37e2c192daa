"""What each installed distribution's RECORD lists, remembered across runs.

Every analysis asks every distribution which ``.pyd``/``.dll`` files its RECORD lists (torch
extensions, OpenMP runtimes, VC++ runtime copies). Reading 200 RECORDs costs more than the
rest of a warm analysis, so the answers
(:class:`~torchguard._platforms.windows.dists.RecordSummary`) are kept in the persistent cache, one
entry per site-packages folder:

- keyed by the folder's state (modification time, size, file id): pip, uv and conda create or
  remove a ``.dist-info`` folder for every install, removal, upgrade and reinstall (pip
  removes the old one and writes a new one), which changes the folder's modification time on
  NTFS and on Linux file systems alike. Unchanged, a warm run stats one folder and reads no
  RECORD;
- within it, each distribution's summary is keyed by its RECORD's own state: after a change
  to the folder, only the RECORDs that changed are read again.

A folder or RECORD that changed within the last :data:`~torchguard._binary.state.RACY`
seconds (an installer may still be writing) is not trusted and is read again on the next
run; a RECORD edited in place by hand, which no installer does, is seen once the folder next
changes. A damaged entry is ignored and rebuilt.
"""

from __future__ import annotations

import ntpath
from collections.abc import Sequence
from functools import partial
from itertools import repeat
from typing import Any

from torchguard._binary.cache import FactsCache
from torchguard._platforms.windows.dists import InstalledDist, RecordSummary, TreeDistribution
from torchguard._platforms.windows.site_answers import RECORDS, SUMMARISED, SiteAnswers
from torchguard._platforms.windows.tree import WinTree

#: The cache's name for a site-packages folder's summaries.
KIND = "dist-records"
#: Between the RECORD paths of one summary in the cache (see :func:`_joined`).
SEPARATOR = "|"


def remember_records(
    tree: WinTree,
    dists: Sequence[InstalledDist],
    cache: FactsCache | None,
    answers: SiteAnswers | None = None,
) -> None:
    """Give each distribution its RECORD summary from the cache when unchanged; read and
    remember the others. A folder whose answers are remembered whole (``answers``) is looked
    up only when a summary is first asked for: a warm run asks for a few, not hundreds."""
    if cache is None or cache.directory is None:
        return
    by_site: dict[str, list[InstalledDist]] = {}
    for dist in dists:
        if dist.name != "torch":  # torch's own RECORD is never asked for its binaries
            by_site.setdefault(dist.site_dir, []).append(dist)
    for site_dir, group in by_site.items():
        known = answers.known(site_dir) if answers is not None else None
        if known is not None:
            later = partial(_site_later, tree, site_dir, group, cache)
            for dist in group:
                summary = None
                if dist.name in SUMMARISED:
                    summary = _decode(known.records.get(dist.distribution.dist_info))
                if summary is not None:
                    dist.distribution.remember(summary)
                else:
                    dist.distribution.remember_later(later)
        else:
            kept = _site(tree, site_dir, group, cache)
            if answers is not None:
                answers.learn(site_dir, RECORDS, kept)


def _site_later(
    tree: WinTree, site_dir: str, dists: list[InstalledDist], cache: FactsCache
) -> None:
    """:func:`_site` when a summary of the folder is first asked for (once for them all)."""
    for dist in dists:
        dist.distribution.remember_later(None)
    _site(tree, site_dir, dists, cache)


def _site(
    tree: WinTree, site_dir: str, dists: list[InstalledDist], cache: FactsCache
) -> dict[str, Any] | None:
    """Give the folder's distributions their summaries; return the cached entries of those
    of :data:`SUMMARISED` (None when one could not be kept)."""
    identity = tree.folder_identity(site_dir)
    state = tree.folder_state(site_dir)
    stored = cache.get_derived(KIND, identity)
    known: dict[str, Any] = {}
    if isinstance(stored, dict) and isinstance(stored.get("dists"), dict):
        known = stored["dists"]
    changed = not isinstance(stored, dict) or stored.get("state") != state
    trusted = not changed and state is not None  # the folder is as it was when remembered
    if trusted and _remembered(dists, known):
        return _summarised(dists, known)  # warm: the folder is as it was, all in the cache
    entries: dict[str, list[Any]] = {}
    for dist in dists:
        distribution = dist.distribution
        raw = known.get(distribution.dist_info)
        if trusted and raw is not None:
            summary = _decode(raw)
            if summary is not None:
                distribution.remember(summary)
                entries[distribution.dist_info] = raw
                continue
        current = record_state(tree, distribution)
        if current is not None and isinstance(raw, list) and raw[:1] == [current]:
            summary = _decode(raw)
            if summary is not None:
                distribution.remember(summary)
                entries[distribution.dist_info] = raw
                continue
        summary = distribution.summary()  # read now; its state was taken first
        if current is not None:
            entries[distribution.dist_info] = _encode(current, summary)
            changed = True
    if changed:  # a distribution whose state cannot be kept is read on every run, not saved
        cache.put_derived(KIND, identity, {"state": state, "dists": entries})
    return _summarised(dists, entries)


def _summarised(dists: list[InstalledDist], entries: dict[str, Any]) -> dict[str, Any] | None:
    """The entries of the distributions of :data:`SUMMARISED`; None when one is not kept."""
    kept: dict[str, Any] = {}
    for dist in dists:
        if dist.name in SUMMARISED:
            raw = entries.get(dist.distribution.dist_info)
            if raw is None:
                return None
            kept[dist.distribution.dist_info] = raw
    return kept


def _remembered(dists: list[InstalledDist], known: dict[str, Any]) -> bool:
    """Give every distribution its remembered summary; False when one is missing or damaged
    (the others keep theirs)."""
    complete = True
    for dist in dists:
        summary = _decode(known.get(dist.distribution.dist_info))
        if summary is None:
            complete = False
        else:
            dist.distribution.remember(summary)
    return complete


def record_state(tree: WinTree, distribution: TreeDistribution) -> str | None:
    """The state of its RECORD; for a ``.dist-info`` without one (some installers write
    none), the folder's; None when it cannot be kept (in memory, or changed just now)."""
    path = distribution.metadata_path("RECORD")
    state = tree.file_state(path)
    if state is not None or tree.entry(path) is not None:
        return state
    folder = tree.folder_state(ntpath.dirname(path))
    return f"none|{folder}" if folder is not None else None


def _encode(state: str, summary: RecordSummary) -> list[Any]:
    if summary.digest is None:
        return [state]  # most distributions: no binary
    return [state, _joined(summary.binaries), _joined(summary.data_dlls), summary.digest]


def _joined(paths: tuple[str, ...]) -> str | list[str]:
    """One string for a list of RECORD paths (a warm run parses one JSON string, not one per
    binary): joined by ``|``, which no Windows file name holds; a list when one does."""
    if any(SEPARATOR in path for path in paths):
        return list(paths)  # a name Windows would refuse (a hostile archive): kept exact
    return SEPARATOR.join(paths)


def _decode(raw: Any) -> RecordSummary | None:
    """The summary an entry holds, or None when it is damaged."""
    if type(raw) is not list or not raw or type(raw[0]) is not str:
        return None
    if len(raw) == 1:
        return _EMPTY  # most distributions: no binary
    if len(raw) != 4:
        return None
    _state, binaries, data, digest = raw
    if type(digest) is not str:
        return None
    paths, data_paths = _split(binaries), _split(data)
    if paths is None or data_paths is None:
        return None
    return RecordSummary(paths, data_paths, digest)


def _split(value: Any) -> tuple[str, ...] | None:
    """The paths :func:`_joined` kept (a list: an older entry, or an odd name); None when
    damaged."""
    if type(value) is str:
        return tuple(value.split(SEPARATOR)) if value else ()
    return tuple(value) if _strings(value) else None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(map(isinstance, value, repeat(str)))


_EMPTY = RecordSummary()
