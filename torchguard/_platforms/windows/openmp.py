"""Every OpenMP runtime and every user of one, and the conflicts that abort with OMP: Error #15.

Two KMP-family runtimes (Intel's or LLVM's) that both *start* in one process abort it with
``OMP: Error #15``, whatever their file names: KMP finds the other through the process
environment variable ``__KMP_REGISTERED_LIB_<pid>``. A copy that is loaded but never called
never starts. How a user binds decides which copy starts:

- **by name** (torch_cpu.dll, fbgemm.dll, ctranslate2.dll ...): to the module of that base
  name loaded first, so two users of one name share one runtime;
- **sibling** (MKL's ``mkl_intel_thread*.dll``): its delay-load hook loads
  ``<dir>\\..\\compiler\\<rt>``, then ``<dir>\\<rt>`` by *full path* (a second module when another
  file of that name is loaded), and only then the plain name.

So MKL's sibling runtime starting after torch's (``import torch`` starts
``torch\\lib\\libiomp5md.dll``) is the common conda abort, and two differently named runtimes
(``libomp.dll`` and ``libiomp5md.dll``) both used abort in either order. Runtimes and users are
recognised from the binaries' OpenMP marks (:mod:`torchguard._binary.pe.openmp`), never by
file name; every fact comes from cached PE facts, so a warm analysis reads no file here.
"""

from __future__ import annotations

import ntpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from torchguard._binary.pe.errors import FileUnreadable, ImageUnavailable
from torchguard._binary.pe.image import PEFacts
from torchguard._binary.pe.openmp import ALIAS, KMP, SIBLING_HOOK
from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.bindings import Gap
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.ecosystem import binaries as dist_binaries
from torchguard._platforms.windows.initialise import MSVCP140 as RUNTIME_COPY
from torchguard._platforms.windows.loader import LoaderModel
from torchguard._platforms.windows.site_answers import OPENMP, Known, SiteAnswers
from torchguard._platforms.windows.tree import PathKey, WinTree, join, path_key

#: How a user binds its runtime.
BY_NAME = "name"
SIBLING = "sibling"

#: Conflict kinds.
NAMES = "names"
"""Two differently named runtimes both started: a certain abort, in either order."""
SIBLING_COPY = "sibling"
"""MKL's pinned sibling is another file than torch's copy: aborts when torch starts first."""
STARTED = "started"
"""Live: another runtime already started in this process; ``import torch`` starts its own."""

_TRUE = ("1", "true", "yes", "on", "y", "t")
#: The cache's name for a distribution's OpenMP summary: the briefs a warm run needs, the
#: names the others import, and the states of the folders holding them (:func:`_store`).
_KIND = "openmp-dist-v2"
#: The cache's name for the rest of a distribution's briefs (read only when one of the names
#: they import is a runtime's).
_REST_KIND = "openmp-dist-rest"
#: The cache's name for the briefs of a conda environment's ``Library\\bin``.
_CONDA_KIND = "openmp-conda-bin"
#: The types of a list of names (each exactly a ``str``): checked with ``set(map(type, ...))``.
_STR = frozenset({str})


@dataclass(frozen=True)
class Runtime:
    """A KMP runtime file (or an alias forwarding to one)."""

    path: str
    alias_of: str | None = None
    """For an alias: the DLL name its ``__kmpc_fork_call`` forwards to."""

    @property
    def name(self) -> str:
        return ntpath.basename(self.path).lower()

    @property
    def effective(self) -> str:
        """The module name that really runs: an alias's target, else its own name."""
        return self.alias_of or self.name


@dataclass(frozen=True)
class User:
    """A binary that starts a runtime when it runs."""

    path: str
    dll: str
    """The runtime's DLL name as imported (lower case)."""
    binding: str
    """:data:`BY_NAME` or :data:`SIBLING`."""


@dataclass(frozen=True)
class Conflict:
    kind: str
    torch_copy: str | None
    """The runtime torch starts (a path), None for a live conflict torch did not start."""
    other: str
    """The other runtime that starts (a path)."""
    user: str
    """The binary that starts ``other`` (live: the started module itself)."""


@dataclass(frozen=True)
class Preload:
    """A runtime ``ensure()`` loads by full path before torch, so both share it."""

    path: str
    gap: Gap | None = None
    """What torch imports that this copy lacks: then it is never preloaded."""
    importer: str | None = None


@dataclass
class OpenMPState:
    runtimes: list[Runtime] = field(default_factory=list)
    users: list[User] = field(default_factory=list)
    torch_copy: str | None = None
    """The runtime ``import torch`` starts (the copy its by-name import binds to)."""
    torch_importers: tuple[str, ...] = ()
    """torch's binaries that import that runtime by name."""
    conflicts: list[Conflict] = field(default_factory=list)
    preload: Preload | None = None
    masked: bool = False
    """``KMP_DUPLICATE_LIB_OK`` is truthy: KMP lets both run (unsafe, but no abort)."""
    sequential: bool = False
    """``MKL_THREADING_LAYER=SEQUENTIAL``: MKL loads no OpenMP runtime at all."""
    briefs: list[Brief] = field(default_factory=list)
    """Every binary outside torch\\lib that was looked at (for other load-order checks)."""


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


@dataclass
class Candidates:
    """The binaries that may be OpenMP runtimes or users (or ship a VC++ runtime)."""

    torch: list[str]
    """torch\\lib's DLLs."""
    other: list[str]
    """Every other binary, each once."""
    dist_of: dict[str, str]
    """Path (as listed in ``other``) -> the distribution that lists it, when one does."""
    digests: dict[str, str] = field(default_factory=dict)
    """Distribution -> its cache key: where it is installed and a digest of its RECORD (which
    holds every file's SHA-256). Another environment with the same wheel has the same RECORD."""
    cached: list[Brief] = field(default_factory=list)
    """Briefs of the distributions whose summary the cache holds (their files not listed)."""
    conda_key: str | None = None
    """The cache key to keep the conda ``Library\\bin`` briefs under (listed this run): its
    folder and that folder's state, which changes whenever conda adds or removes a file."""
    conda_plain: list[list[Any]] = field(default_factory=list)
    """Cached ``Library\\bin`` entries without OpenMP marks (checked, not yet briefs): such a
    binary takes part only as a by-name user of a runtime, so only those importing one are
    made briefs (:func:`_conda_users`), once every runtime is known."""
    deferred: list[Deferred] = field(default_factory=list)
    """Cached distributions whose plain briefs were not decoded (see :class:`Deferred`)."""
    groups: list[Group] = field(default_factory=list)
    """Such distributions of a folder answered whole (:mod:`.site_answers`), by names."""


class Group(NamedTuple):
    """Distributions of one folder whose plain binaries import the same DLL names: made
    :class:`Deferred` only when one of those names is a runtime's."""

    names: frozenset[str]
    members: dict[str, InstalledDist]
    """The folder's distributions by ``.dist-info`` name, in the order they were found."""
    dist_infos: list[str]


@dataclass(frozen=True)
class Deferred:
    """A cached distribution's binaries without OpenMP marks, left undecoded: such a binary
    takes part only as a by-name user of a runtime, so its briefs are read (from the cache,
    else from its files) only when one of the names it imports is a runtime's."""

    dist: InstalledDist
    key: str | None
    """Its summary's cache key; None: worked out when needed (:func:`_key`), which asks for
    its RECORD's summary."""
    names: frozenset[str]
    """Every DLL name (lower case) those binaries import or delay-load."""


def candidate_files(
    binaries: Binaries,
    lib_dir: str,
    dists: Iterable[InstalledDist],
    conda_bin: str | None,
    answers: SiteAnswers | None = None,
) -> Candidates:
    """torch\\lib's DLLs; and every other distribution's listed binaries (its ``Library\\bin``
    data files too) and a conda environment's ``Library\\bin`` DLLs, each once. A distribution
    whose summary is cached under its RECORD's digest is not listed at all, nor asked for
    when its folder's answers are remembered whole (``answers``)."""
    tree, cache = binaries.tree, binaries.persistent
    cached: list[Brief] = []
    groups: list[Group] = []
    learning: dict[str, tuple[dict[str, Any], dict[str, list[str]]] | None] = {}
    torch_files = [
        join(lib_dir, name)
        for name, _entry in tree.listdir(lib_dir).values()
        if name.lower().endswith(".dll")
    ]
    seen: dict[PathKey, str] = {}
    dist_of: dict[str, str] = {}

    def add(path: str, dist: str | None) -> None:
        kept = seen.setdefault(path_key(path), path)
        if dist is not None:
            dist_of.setdefault(kept, dist)

    digests: dict[str, str] = {}
    deferred: list[Deferred] = []
    sites: dict[str, str] = {}
    answered: set[str] = set()
    for site_dir, known in answers.answered() if answers is not None else ():
        from_answers = _answered(binaries, answers, site_dir, known)
        if from_answers is None:  # a key DLL changed: every distribution asked again
            answers.forget(site_dir)  # type: ignore[union-attr]
            continue
        answered.add(site_dir)
        cached.extend(from_answers[0])
        deferred.extend(from_answers[1])
        groups.extend(
            Group(frozenset(joined.split("|")), answers.members(site_dir), infos)  # type: ignore[union-attr]
            for joined, infos in known.groups.items()
        )
    for dist in dists:
        if dist.name == "torch" or dist.site_dir in answered:
            continue
        summary = dist.distribution.summary()
        if summary.digest is None:
            continue  # most distributions: no binary, so nothing to look up or list
        site = sites.get(dist.site_dir)
        if site is None:  # a few folders for hundreds of distributions
            site = sites[dist.site_dir] = path_key(dist.site_dir)
            learning[dist.site_dir] = ({}, {})
        key = f"{dist.name}|{site}|{summary.digest}"
        if cache is not None:
            raw = cache.get_derived(_KIND, key)
            summarised = _summary_from_cache(raw, binaries)
            if summarised is not None:
                cached.extend(summarised[0])
                if summarised[1] is not None:
                    deferred.append(Deferred(dist, key, summarised[1]))
                _learn(learning, dist, key, raw)
                continue
        learning[dist.site_dir] = None  # read now: kept whole by the next run
        listed = [*dist_binaries(dist), *_data_binaries(dist)]
        for path in listed:
            add(path, dist.name)
        digests[dist.name] = key
    if answers is not None:
        for site_dir, learned in learning.items():
            part = None if learned is None else {"check": learned[0], "groups": learned[1]}
            answers.learn(site_dir, OPENMP, part)
        for dist in dists:  # a folder of distributions without a binary has nothing to check
            if dist.name != "torch" and dist.site_dir not in learning:
                learning[dist.site_dir] = ({}, {})
                answers.learn(dist.site_dir, OPENMP, {"check": {}, "groups": {}})
    conda_key = None
    conda_plain: list[list[Any]] = []
    if conda_bin is not None:
        state = tree.folder_state(conda_bin)
        conda_key = f"{tree.folder_identity(conda_bin)}|{state}" if state is not None else None
        remembered = (
            _conda_from_cache(cache.get_derived(_CONDA_KIND, conda_key), binaries)
            if cache is not None and conda_key is not None
            else None
        )
        if remembered is not None:  # a file a distribution lists is that distribution's
            taken = {*seen, *(b.path.lower() for b in cached)}
            cached.extend(b for b in remembered[0] if b.path.lower() not in taken)
            conda_plain = [e for e in remembered[1] if e[0].lower() not in taken]
            conda_key = None
        else:
            for _key, (name, _entry) in tree.listdir(conda_bin).items():
                if name.lower().endswith(".dll"):
                    add(join(conda_bin, name), None)
    return Candidates(
        torch_files,
        list(seen.values()),
        dist_of,
        digests,
        cached,
        conda_key,
        conda_plain,
        deferred,
        groups,
    )


def _learn(
    learning: dict[str, tuple[dict[str, Any], dict[str, list[str]]] | None],
    dist: InstalledDist,
    key: str,
    raw: list[Any],
) -> None:
    """Add a distribution's cached summary to its folder's answers: grouped by the names its
    plain binaries import when it has nothing to check (most), else kept whole."""
    learned = learning.get(dist.site_dir)
    if learned is None:
        return
    entries, joined, count, folders = raw
    name = dist.distribution.dist_info
    if entries or folders or type(joined) is not str:
        learned[0][name] = [key, raw]  # its key: no RECORD summary asked for on a warm run
    elif count:
        learned[1].setdefault(joined, []).append(name)


def _answered(
    binaries: Binaries, answers: SiteAnswers | None, site_dir: str, known: Known
) -> tuple[list[Brief], list[Deferred]] | None:
    """The briefs and deferred users of the summaries a folder's answers keep whole, each
    checked as :func:`_summary_from_cache` checks the distribution's own entry; None when
    one no longer holds."""
    assert answers is not None
    briefs: list[Brief] = []
    deferred: list[Deferred] = []
    for dist_info, item in known.openmp.items():
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
            return None
        key, raw = item
        dist = answers.dist(site_dir, dist_info)
        summarised = _summary_from_cache(raw, binaries) if dist is not None else None
        if dist is None or summarised is None:
            return None
        briefs.extend(summarised[0])
        if summarised[1] is not None:
            deferred.append(Deferred(dist, key, summarised[1]))
    return briefs, deferred


def _grouped(groups: Sequence[Group], runtimes: frozenset[str]) -> list[Deferred]:
    """The distributions of the groups that import one of ``runtimes``, in the order their
    folder lists them."""
    found: list[Deferred] = []
    for group in groups:
        if group.names & runtimes:
            found.extend(
                Deferred(dist, None, group.names)
                for name in group.dist_infos
                if (dist := group.members.get(name)) is not None
            )
    if len(found) > 1:
        order = {id(d): i for g in groups for i, d in enumerate(g.members.values())}
        found.sort(key=lambda item: order.get(id(item.dist), 0))
    return found


def _key(dist: InstalledDist) -> str:
    """The cache key of a distribution's summary: where it is and its RECORD's digest."""
    return f"{dist.name}|{path_key(dist.site_dir)}|{dist.distribution.summary().digest}"


def _marked(brief: Brief) -> bool:
    """Whether a cached conda brief is checked against its file on every run: the binaries
    with OpenMP marks (runtimes, MKL's threading layers). The rest of ``Library\\bin``
    (hundreds of DLLs) is trusted while the folder is unchanged: conda replaces a file by
    removing and linking it anew."""
    return bool(brief.openmp)


def _conda_from_cache(
    raw: object, binaries: Binaries
) -> tuple[list[Brief], list[list[Any]]] | None:
    """The cached ``Library\\bin`` summary: the briefs with OpenMP marks (checked against
    their files), and the checked entries of the rest; None when damaged or changed."""
    if type(raw) is not list:
        return None
    marked: list[Any] = []
    plain: list[list[Any]] = []
    for entry in raw:
        if type(entry) is list and len(entry) == 7 and entry[1] == [] and _plain(entry):
            plain.append(entry)
        else:
            marked.append(entry)  # anything else is checked (and rejected) in full
    briefs = _from_cache(marked, binaries, _marked)
    return None if briefs is None else (briefs, plain)


def _plain(entry: list[Any]) -> bool:
    """Whether a cached entry without OpenMP marks is whole (see :func:`_to_cache`)."""
    path, _marks, imports, delay, identity, dist, version = entry
    return (
        type(path) is str
        and dist is None
        and (identity is None or type(identity) is str)
        and _names(imports)
        and _names(delay)
        and (version is None or _four(version) is not None)
    )


def _four(raw: object) -> tuple[int, int, int, int] | None:
    """A cached file version; None when there is none or it is damaged."""
    if type(raw) is not list or len(raw) != 4 or not all(type(v) is int for v in raw):
        return None
    return (raw[0], raw[1], raw[2], raw[3])


def _conda_users(briefs: list[Brief], plain: list[list[Any]]) -> list[Brief]:
    """Briefs of the cached ``Library\\bin`` binaries without OpenMP marks that import a
    runtime of ``briefs`` by name: how such a binary takes part (it is no runtime itself,
    and no distribution's VC++ runtime copy)."""
    names = {ntpath.basename(b.path).lower() for b in briefs if _runtime(b.path, b) is not None}
    if not names:
        return []
    found: list[Brief] = []
    for path, _marks, imports, delay, identity, _dist, version in plain:
        if any(n.lower() in names for n in imports) or any(n.lower() in names for n in delay):
            brief = Brief(path, (), tuple(imports), tuple(delay), identity, None, _four(version))
            found.append(brief)
    return found


def _data_binaries(dist: InstalledDist) -> list[str]:
    """DLLs a wheel installs outside site-packages (``../../Library/bin/...``), where they are."""
    return [dist.located(relative) for relative in dist.distribution.summary().data_dlls]


def _unread(binaries: Binaries, path: str) -> bool:
    """Whether ``path`` could not be read now: a summary without it is not to be cached."""
    try:
        binaries.facts(path)
    except FileUnreadable:
        return True
    except ImageUnavailable:
        return False
    return False


def _facts(binaries: Binaries, path: str) -> PEFacts | None:
    try:
        return binaries.facts(path)
    except ImageUnavailable:
        return None


def analyse(
    binaries: Binaries,
    process: LoaderModel,
    files: Candidates,
    lib_dir: str,
    environ: Mapping[str, str],
    *,
    started: str | None = None,
) -> OpenMPState:
    """Runtimes, users, conflicts and the preload that prevents the sibling conflict.

    ``process``: the guarded process after ``import torch`` was replayed (its loaded modules
    say which copy torch binds to); ``started``: live, the module that already registered a
    KMP runtime in this process.
    """
    state = OpenMPState(
        masked=truthy(environ.get("KMP_DUPLICATE_LIB_OK")),
        sequential=environ.get("MKL_THREADING_LAYER", "").strip().upper() == "SEQUENTIAL",
    )
    briefs = state.briefs = _briefs(binaries, files)
    facts = [(brief.path, brief) for brief in briefs]
    by_name: dict[str, list[Runtime]] = {}
    for path, found in facts:
        runtime = _runtime(path, found)
        if runtime is not None:
            state.runtimes.append(runtime)
            by_name.setdefault(runtime.name, []).append(runtime)
    for path, found in facts:
        imported = [(n, False) for n in found.imports] + [(n, True) for n in found.delay_imports]
        for dll, delay in imported:
            lowered = dll.lower()
            if lowered in by_name:
                binding = SIBLING if delay and SIBLING_HOOK in found.openmp else BY_NAME
                state.users.append(User(path, lowered, binding))
    _torch_side(state, binaries, process, files.torch, lib_dir)
    if state.torch_copy is None:
        return state
    torch_runtime = _runtime_at(binaries, state.torch_copy)
    torch_effective = (
        torch_runtime.effective if torch_runtime else ntpath.basename(state.torch_copy).lower()
    )
    for user in state.users:
        conflict = _user_conflict(state, binaries, process, user, by_name, torch_effective)
        if conflict is not None and conflict not in state.conflicts:
            state.conflicts.append(conflict)
    if started is not None:
        _started(state, binaries, started, torch_effective)
    return state


@dataclass(frozen=True)
class Brief:
    """What the OpenMP analysis needs of one binary (cached per distribution)."""

    path: str
    openmp: tuple[str, ...]
    imports: tuple[str, ...]
    delay_imports: tuple[str, ...]
    identity: str | None
    dist: str | None = None
    file_version: tuple[int, int, int, int] | None = None


def _brief(binaries: Binaries, path: str, dist: str | None) -> Brief | None:
    found = _facts(binaries, path)
    if found is None:
        return None
    identity = binaries.identity(path)
    imports, delay = found.imports, found.delay_imports
    return Brief(path, found.openmp, imports, delay, identity, dist, found.file_version)


def _briefs(binaries: Binaries, files: Candidates) -> list[Brief]:
    """Every candidate binary's brief. A distribution's are cached under its location and a
    digest of its RECORD (a reinstall rewrites it), so a warm run reads none of its files (see
    :func:`_summary_from_cache` for what it checks). A distribution with a file that could not
    be read now is not cached: the next run reads it again."""
    cache = binaries.persistent
    groups: dict[str | None, list[str]] = {}
    for path in files.other:
        dist = files.dist_of.get(path)
        groups.setdefault(dist if dist in files.digests else None, []).append(path)
    briefs: list[Brief] = list(files.cached)
    for dist, paths in groups.items():
        found = [b for p in paths if (b := _brief(binaries, p, dist)) is not None]
        if cache is not None and not any(_unread(binaries, p) for p in paths):
            if dist is not None:
                _store(binaries, files.digests[dist], found)
            elif files.conda_key is not None and len(found) == len(paths):
                # Library\bin's own files, each read whole: one being written is not kept
                cache.put_derived(_CONDA_KIND, files.conda_key, [_to_cache(b) for b in found])
        briefs.extend(found)
    if files.deferred or files.groups:
        runtimes = _runtime_names(briefs)
        users = [*files.deferred, *_grouped(files.groups, runtimes)]
        briefs.extend(_users_of(binaries, users, runtimes))
    if files.conda_plain:
        briefs.extend(_conda_users(briefs, files.conda_plain))
    return briefs


def _key_brief(brief: Brief) -> bool:
    """Whether a warm run needs this brief whatever the rest of the environment holds: it
    has OpenMP marks (a runtime, MKL's threading layer), or it is a VC++ runtime copy."""
    return bool(brief.openmp) or ntpath.basename(brief.path).lower() == RUNTIME_COPY


def _store(binaries: Binaries, key: str, found: list[Brief]) -> None:
    """Cache a distribution's briefs in two entries: the summary every warm run reads (its
    key briefs, the names the others import, the states of the folders holding its DLLs)
    and the rest, read only when needed. A distribution shipping a VC++ runtime copy keeps
    every brief in the summary (which of its binaries loads that copy is judged among them)."""
    cache = binaries.persistent
    assert cache is not None
    if any(ntpath.basename(b.path).lower() == RUNTIME_COPY for b in found):
        kept, rest = found, []
    else:
        kept = [b for b in found if _key_brief(b)]
        rest = [b for b in found if not _key_brief(b)]
    folders: dict[str, str] = {}
    for brief in rest:
        if brief.path.lower().endswith(".dll"):
            folder = ntpath.dirname(brief.path)
            state = binaries.tree.folder_state(folder)
            if state is None:
                return  # a folder that cannot be trusted now: read again next run
            folders[folder] = state
    names = sorted({n.lower() for b in rest for n in (*b.imports, *b.delay_imports)})
    # one JSON string for the names (a warm run parses hundreds of these summaries), or the
    # list when a name holds the separator (no DLL name does; a crafted image's might)
    joined: str | list[str] = names if any("|" in n for n in names) else "|".join(names)
    summary = [[_to_cache(b) for b in kept], joined, len(rest), sorted(folders.items())]
    cache.put_derived(_KIND, key, summary)
    if rest:
        cache.put_derived(_REST_KIND, key, [_to_cache(b) for b in rest])


def _summary_from_cache(
    raw: object, binaries: Binaries
) -> tuple[list[Brief], frozenset[str] | None] | None:
    """A cached distribution summary: its key briefs (each DLL among them checked against
    its file: a runtime pasted over one behind pip's back), and the names its other binaries
    import (None when it has none); None when damaged, or when a key DLL or a folder holding
    one of its other DLLs changed. The other DLLs are trusted while their folders are
    unchanged: an installer replaces a file by removing or renaming, which changes its
    folder, so a warm run takes one state per folder, not one identity per binary."""
    if type(raw) is not list or len(raw) != 4:
        return None
    entries, joined, count, folders = raw
    if type(joined) is str:
        names: list[str] = joined.split("|") if joined else []
    elif _names(joined):
        names = joined  # an older entry, or a name holding the separator
    else:
        return None
    if type(count) is not int or type(folders) is not list:
        return None
    briefs = _from_cache(entries, binaries)
    if briefs is None:
        return None
    for pair in folders:
        if type(pair) is not list or len(pair) != 2 or not _names(pair):
            return None
        if binaries.tree.folder_state(pair[0]) != pair[1]:
            return None
    return briefs, (frozenset(names) if count else None)


def _runtime_names(briefs: Iterable[Brief]) -> frozenset[str]:
    """The file names of the runtimes among ``briefs`` (what a by-name user imports)."""
    return frozenset(
        ntpath.basename(b.path).lower() for b in briefs if _runtime(b.path, b) is not None
    )


def _users_of(
    binaries: Binaries, deferred: Sequence[Deferred], runtimes: frozenset[str]
) -> list[Brief]:
    """The plain briefs of the deferred distributions that import one of ``runtimes``: from
    the cache, else read from their files again (and cached anew)."""
    found: list[Brief] = []
    for item in deferred:
        if not item.names & runtimes:
            continue
        cache = binaries.persistent
        key = item.key if item.key is not None else _key(item.dist)
        raw = cache.get_derived(_REST_KIND, key) if cache is not None else None
        rest = _from_cache(raw, binaries, lambda brief: False)
        if rest is None:  # dropped from the cache, or damaged: read again
            paths = [*dist_binaries(item.dist), *_data_binaries(item.dist)]
            briefs = [b for p in paths if (b := _brief(binaries, p, item.dist.name)) is not None]
            if cache is not None and not any(_unread(binaries, p) for p in paths):
                _store(binaries, key, briefs)
            rest = [b for b in briefs if not _key_brief(b)]
        found.extend(rest)
    return found


def _to_cache(brief: Brief) -> list[object]:
    version = list(brief.file_version) if brief.file_version else None
    lists = [list(brief.openmp), list(brief.imports), list(brief.delay_imports)]
    return [brief.path, *lists, brief.identity, brief.dist, version]


def _from_cache(
    raw: object, binaries: Binaries, checked: Callable[[Brief], bool] | None = None
) -> list[Brief] | None:
    """Cached briefs, or None when damaged or when one of its DLLs changed (only those
    ``checked`` selects are compared with their files, when given)."""
    if type(raw) is not list:
        return None
    briefs: list[Brief] = []
    for entry in raw:  # checked with type(): hundreds per run in a conda environment
        if type(entry) is not list or len(entry) != 7:
            return None
        path, marks, imports, delay, identity, dist, version = entry
        if type(path) is not str or not (dist is None or type(dist) is str):
            return None
        if not (identity is None or type(identity) is str):
            return None
        if not (_names(marks) and _names(imports) and _names(delay)):
            return None
        four = None
        if version is not None:
            if type(version) is not list or len(version) != 4:
                return None
            if not all(type(v) is int for v in version):
                return None
            four = (version[0], version[1], version[2], version[3])
        briefs.append(Brief(path, tuple(marks), tuple(imports), tuple(delay), identity, dist, four))
    for brief in briefs:  # a DLL (a runtime, or one pasted over) changed behind pip's back
        if checked is not None and not checked(brief):
            continue
        if brief.path.lower().endswith(".dll") and binaries.identity(brief.path) != brief.identity:
            return None
    return briefs


def _names(value: object) -> bool:
    """Whether a cached value is a list of names."""
    return type(value) is list and set(map(type, value)) <= _STR  # each exactly a str


def _runtime(path: str, found: PEFacts | Brief) -> Runtime | None:
    for mark in found.openmp:
        if mark == KMP:
            return Runtime(path)
        if mark.startswith(ALIAS):
            return Runtime(path, mark[len(ALIAS) :])
    return None


def _runtime_at(binaries: Binaries, path: str) -> Runtime | None:
    found = _facts(binaries, path)
    return _runtime(path, found) if found is not None else None


def _torch_side(
    state: OpenMPState,
    binaries: Binaries,
    process: LoaderModel,
    torch_files: Sequence[str],
    lib_dir: str,
) -> None:
    """Which runtime ``import torch`` starts: the copy torch's by-name import binds to, or,
    for torch 2.3 (no OpenMP import of its own), the sibling MKL's hook pins. Each imported
    name is judged once, through the module the replayed process loaded for it."""
    importers: list[str] = []
    copy: str | None = None
    judged: dict[str, str | None] = {}  # imported name -> the runtime it starts, or None
    for path in torch_files:
        found = _facts(binaries, path)
        if found is None:
            continue
        for dll in found.imports:
            lowered = dll.lower()
            if lowered not in judged:
                judged[lowered] = _started_by(binaries, process, dll, lib_dir)
            runtime = judged[lowered]
            if runtime is None:
                continue
            copy = copy or runtime
            if runtime == copy and lowered == ntpath.basename(runtime).lower():
                importers.append(path)
    state.torch_copy = copy
    state.torch_importers = tuple(dict.fromkeys(importers))


def _started_by(binaries: Binaries, process: LoaderModel, dll: str, lib_dir: str) -> str | None:
    """The runtime an import of ``dll`` starts: the copy it binds to when that is a runtime,
    the sibling MKL pins when it is MKL's threading layer; else None."""
    where = process.loaded.get(dll.lower()) or process.resolve(dll, lib_dir).path
    if where is None:
        return None
    target = _facts(binaries, where)
    if target is None:
        return None
    if _runtime(where, target) is not None:
        return where
    if SIBLING_HOOK in target.openmp:
        for delayed in target.delay_imports:
            sibling = _sibling(binaries.tree, where, delayed.lower())
            if sibling is not None and _runtime_at(binaries, sibling) is not None:
                return sibling
    return None


def _sibling(tree: WinTree, user: str, dll: str) -> str | None:
    """The copy MKL's hook loads by full path: ``..\\compiler\\<dll>``, then ``<dir>\\<dll>``."""
    folder = ntpath.dirname(user)
    for candidate in (join(folder, "..", "compiler", dll), join(folder, dll)):
        if tree.is_file(candidate):
            return candidate
    return None


def _user_conflict(
    state: OpenMPState,
    binaries: Binaries,
    process: LoaderModel,
    user: User,
    by_name: Mapping[str, list[Runtime]],
    torch_effective: str,
) -> Conflict | None:
    assert state.torch_copy is not None
    if user.binding == SIBLING:
        if state.sequential:
            return None  # MKL_THREADING_LAYER=SEQUENTIAL: MKL never loads its runtime
        sibling = _sibling(binaries.tree, user.path, user.dll)
        if sibling is not None:
            runtime = _runtime_at(binaries, sibling)
            if runtime is None:
                return None
            if path_key(sibling) == path_key(state.torch_copy):
                return None
            if runtime.effective != torch_effective:
                return Conflict(NAMES, state.torch_copy, sibling, user.path)
            conflict = Conflict(SIBLING_COPY, state.torch_copy, sibling, user.path)
            if state.preload is None:
                state.preload = _preload_check(binaries, process, state, sibling)
            return conflict
    copies = by_name.get(user.dll, [])
    folder = path_key(ntpath.dirname(user.path))
    own = [r for r in copies if path_key(ntpath.dirname(r.path)) == folder]
    runtime = next(iter(own or copies), None)
    if runtime is None or runtime.effective == torch_effective:
        return None  # the same name: it binds to whichever copy was loaded first, one runtime
    return Conflict(NAMES, state.torch_copy, runtime.path, user.path)


def _preload_check(
    binaries: Binaries, process: LoaderModel, state: OpenMPState, sibling: str
) -> Preload:
    """Whether torch's importers bind cleanly to ``sibling`` (every imported name exported,
    forwarders followed as the loader would from the sibling's folder)."""
    folder = ntpath.dirname(sibling)
    name = ntpath.basename(state.torch_copy or "").lower()
    for importer in state.torch_importers:
        gap = binaries.gap(
            importer, name, sibling, False, lambda dll: process._forwarded(dll, folder)
        )
        if gap is not None:
            return Preload(sibling, gap, importer)
    return Preload(sibling)


def _started(state: OpenMPState, binaries: Binaries, started: str, torch_effective: str) -> None:
    """Live: a runtime already registered; ``import torch`` starts another unless it binds to it."""
    assert state.torch_copy is not None
    if path_key(started) == path_key(state.torch_copy):
        return
    runtime = _runtime_at(binaries, state.torch_copy)
    if runtime is not None and runtime.alias_of == ntpath.basename(started).lower():
        return  # torch binds to an alias of the started runtime
    state.conflicts.insert(0, Conflict(STARTED, state.torch_copy, started, started))
    state.preload = None  # too late: a preload cannot stop the runtime already running
