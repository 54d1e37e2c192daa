"""Libraries loaded later by name, after ``import torch``: where each would land, and whether
the copy that lands gives its callers what they ask of it.

cuDNN 9's ``libcudnn.so.9`` keeps its sub-libraries as bare stems (``libcudnn_graph.so``) and,
at the first cuDNN call, ``dlopen``s ``<stem>.<major.minor.patch>``, ``.<major.minor>``,
``.<major>`` and the bare stem, each a whole search before the next (measured: "Unable to load
any of {libcudnn_ops.so.9.10.2, libcudnn_ops.so.9.10, libcudnn_ops.so.9, libcudnn_ops.so}");
``libcudnn_graph.so.9`` does the same for the engine libraries. The version is cuDNN's own
(the sub-libraries export it as a word; the wheels ship only ``.so.9``, so a fully versioned
file anywhere on the search, ``/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9.10.2`` of a
system cuDNN of the same release, wins over the wheel's sibling). glibc searches such a
``dlopen`` with the *calling* library's RPATH/RUNPATH, ``LD_LIBRARY_PATH``, the cache and the
default directories, so a foreign copy can win where ``import torch`` showed nothing wrong.

A foreign copy is then checked the way its callers use it: the API names the caller looks up
with ``dlsym`` that the shipped sibling exports and the copy lacks (cuDNN aborts: "Could not
load symbol cudnnGetVersion"), its cuDNN version against the caller's (torch's
``cudnn.version()`` raises "cuDNN version incompatibility" for an older one), and the
sub-libraries that bind to it (``libcudnn_ops.so.9`` imports ``...@libcudnn_graph.so.9``: its
``dlopen`` fails, cuDNN aborts with "Unable to load any of ..."). Names, versions and symbol
verdicts are kept by file state, so a warm run reads no file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from torchguard._binary.elf import ElfReadError
from torchguard._binary.elf.strings import DlopenFacts
from torchguard._platforms.linux.ldso import LateLoad, Ldso, SharedObject

#: Soname families whose members ``dlopen`` siblings of the same family by bare stem.
DISPATCHER_FAMILIES = ("libcudnn",)

#: The API call whose answer torch's ``cudnn.version()`` compares with its build.
VERSION_CALL = "cudnnGetVersion"

#: Symbols named in one verdict at most.
MAX_NAMED = 8


class LateFacts(Protocol):
    """What the model reads of files, cached by file state (a warm run reads nothing)."""

    def dlopen_facts(self, path: str, family: str) -> DlopenFacts:
        """The stems, ``dlsym`` names and version word of ``path`` (empty when unreadable)."""
        ...

    def verdict(self, key: str) -> list[str] | None:
        """A symbol verdict kept for ``key`` (None: not known)."""
        ...

    def store_verdict(self, key: str, names: list[str]) -> None: ...


@dataclass(frozen=True)
class Late:
    """One late load and what its callers would meet.

    ``soname``: the name with the major (``libcudnn_graph.so.9``); ``tried``: the names the
    caller tries, in order; ``reference``: the sibling shipped beside the caller (None: none);
    ``foreign``: the landing copy is not that sibling;
    ``lacks``: names the caller looks up that the reference exports and the landing copy
    does not; ``version``/``expected``: the landing copy's cuDNN version and the caller's;
    ``answers_version``: the landing copy is the one that answers torch's version query;
    ``unbound``: ``symbol@version`` this library needs from ``provider`` (a foreign copy of
    a sibling) that it does not define, so its own ``dlopen`` fails."""

    load: LateLoad
    soname: str
    tried: tuple[str, ...]
    reference: str | None = None
    foreign: bool = False
    lacks: tuple[str, ...] = ()
    version: str | None = None
    expected: str | None = None
    answers_version: bool = False
    unbound: tuple[str, ...] = ()
    provider: str | None = None
    provider_via: str = ""
    when: str = "the first cuDNN call"
    """When the caller makes the load."""
    failure: str = ""
    """What the caller prints when the load finds nothing ("": cuDNN's words)."""


def _family(soname: str) -> str | None:
    prefix = soname.split(".", 1)[0].split("_", 1)[0]
    return prefix if prefix in DISPATCHER_FAMILIES else None


def _major(soname: str) -> str | None:
    _, sep, tail = soname.partition(".so.")
    major = tail.split(".", 1)[0]
    return major if sep and major.isdigit() else None


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def candidate_names(stem: str, major: str, version: str | None) -> tuple[str, ...]:
    """The names cuDNN formats for ``stem``, in the order it ``dlopen``s them."""
    names = [f"{stem}.{major}", stem]
    parts = version.split(".") if version else []
    if len(parts) == 3 and parts[0] == major:
        names[:0] = [f"{stem}.{version}", f"{stem}.{parts[0]}.{parts[1]}"]
    return tuple(names)


class _Replay:
    def __init__(self, ldso: Ldso, facts: LateFacts) -> None:
        self.ldso = ldso
        self.facts = facts
        self.files = ldso.files

    def fingerprint(self, path: str) -> str:
        return self.files.fingerprint(path)

    def same(self, a: str, b: str) -> bool:
        return self.files.identity(a) == self.files.identity(b)

    def version_of(
        self, obj: SharedObject, own: DlopenFacts, family: str, major: str
    ) -> str | None:
        """The caller's cuDNN version: its own word, else a shipped sibling's."""
        if own.version is not None:
            return own.version
        for stem in own.stems:
            sibling = f"{_folder(obj.path)}/{stem}.{major}"
            if self.files.is_file(sibling):
                found = self.facts.dlopen_facts(sibling, family).version
                if found is not None:
                    return found
        return None

    def search(
        self, stem: str, major: str, version: str | None, obj: SharedObject
    ) -> tuple[LateLoad, tuple[str, ...]]:
        names = candidate_names(stem, major, version)
        first: LateLoad | None = None
        for name in names:
            load = self.ldso.late_load(name, obj)
            first = first or load
            if load.path is not None:
                return load, names
        assert first is not None
        return LateLoad(f"{stem}.{major}", obj.path, None, "", first.trail), names

    def lookups(
        self, lookups: tuple[str, ...], caller: str, reference: str, landing: str
    ) -> tuple[list[str], list[str]]:
        """(names ``caller`` looks up that ``reference`` exports, those ``landing`` lacks)."""
        key = "|".join(("lookups", *map(self.fingerprint, (caller, reference, landing))))
        wants, lacks = self.facts.verdict("wants|" + key), self.facts.verdict(key)
        if wants is None or lacks is None:
            try:
                offered = self.files.symbols(reference).default
                have = self.files.symbols(landing).default
            except ElfReadError:  # an unreadable copy: judged by the load itself
                return [], []
            wants = sorted(n for n in lookups if n in offered)
            lacks = [n for n in wants if n not in have]
            lacks.sort(key=lambda n: n != VERSION_CALL)  # torch's first call leads
            self.facts.store_verdict("wants|" + key, wants)
            self.facts.store_verdict(key, lacks)
        return wants, lacks

    def unbound(self, late: Late, provider: Late) -> list[str]:
        """``symbol@version`` that ``late`` imports from ``provider``'s soname and the landing
        copy of ``provider`` does not define (a missing version node counts as all)."""
        path, source = late.load.path, provider.load.path
        assert path is not None and source is not None
        key = "|".join(("bind", provider.soname, self.fingerprint(path), self.fingerprint(source)))
        known = self.facts.verdict(key)
        if known is None:
            known = self._unbound(path, source, provider)
            self.facts.store_verdict(key, known)
        return known

    def _unbound(self, path: str, source: str, provider: Late) -> list[str]:
        facts, offered = provider.load.facts, self.files.facts(path)
        needs = {v for v, weak in offered.verneed.get(provider.soname, ()) if not weak}
        if not needs or facts is None:
            return []
        try:
            table = self.files.symbols(path)
            theirs = self.files.symbols(source)
        except ElfReadError:  # an unreadable copy: judged by the load itself
            return []
        missing_nodes = needs - facts.verdef if facts.verdef is not None else set()
        found = []
        for symbol, version in table.undefined:
            if version not in needs:
                continue
            defined = theirs.defined.get(symbol, frozenset())
            if version in missing_nodes or (
                version not in defined and not (facts.verdef is None and "" in defined)
            ):
                found.append(f"{symbol}@{version}")
        return found


def late_loads(ldso: Ldso, objects: Sequence[SharedObject], facts: LateFacts) -> list[Late]:
    """Every late load the loaded cuDNN 9 dispatchers (and the sub-libraries they would
    load) make (:mod:`.late_exact` has the exact-name ones, :mod:`.late_driver` the driver's)."""
    replay = _Replay(ldso, facts)
    queue = [o for o in objects if o.facts.soname and _family(o.facts.soname)]
    seen = {o.facts.soname for o in queue}
    found: list[Late] = []
    for obj in queue:
        soname = obj.facts.soname or ""
        family, major = _family(soname), _major(soname)
        if family is None or major is None:
            continue
        own = facts.dlopen_facts(obj.path, family)
        version = replay.version_of(obj, own, family, major)
        for stem in own.stems:
            name = f"{stem}.{major}"
            if name in seen:
                continue
            seen.add(name)
            load, tried = replay.search(stem, major, version, obj)
            late = Late(load, name, tried, expected=version)
            if load.path is not None and load.facts is not None:
                late = _checked(replay, late, obj, own, family)
                queue.append(SharedObject(load.path, load.facts, {name}, obj, load.via))
            found.append(late)
    return _bound(replay, found)


def _checked(replay: _Replay, late: Late, obj: SharedObject, own: DlopenFacts, family: str) -> Late:
    """``late`` with what its caller meets when the landing copy is not the shipped sibling."""
    path = late.load.path
    assert path is not None
    reference = f"{_folder(obj.path)}/{late.soname}"
    if not replay.files.is_file(reference):
        reference_path: str | None = None
    elif replay.same(reference, path):
        return late
    else:
        reference_path = reference
    version = replay.facts.dlopen_facts(path, family).version
    wants: list[str] = []
    lacks: list[str] = []
    if reference_path is not None:
        wants, lacks = replay.lookups(own.lookups, obj.path, reference_path, path)
    return replace(
        late,
        reference=reference_path,
        foreign=True,
        lacks=tuple(lacks),
        version=version,
        answers_version=VERSION_CALL in wants and VERSION_CALL not in lacks,
    )


def _bound(replay: _Replay, found: list[Late]) -> list[Late]:
    """Each landed library against the foreign copies of the siblings it binds to."""
    foreign = {late.soname: late for late in found if late.foreign}
    checked: list[Late] = []
    for late in found:
        facts = late.load.facts
        if late.load.path is None or facts is None:
            checked.append(late)
            continue
        for needed in facts.needed:
            provider = foreign.get(needed)
            if provider is None or provider is late:
                continue
            missing = replay.unbound(late, provider)
            if missing:
                late = replace(
                    late,
                    unbound=tuple(missing[:MAX_NAMED]),
                    provider=provider.load.path,
                    provider_via=provider.load.via,
                )
                break
        checked.append(late)
    return checked
