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
from torchguard._model.ldso import LateLoad, Ldso, SharedObject

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


def _older(version: str | None, than: str | None) -> bool:
    """(major, minor) of ``version`` below ``than``'s: torch's check for cuDNN 7 on."""
    if version is None or than is None:
        return False
    mine, theirs = version.split("."), than.split(".")
    return (int(mine[0]), int(mine[1])) < (int(theirs[0]), int(theirs[1]))


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


def late_loads(
    ldso: Ldso, objects: Sequence[SharedObject], facts: LateFacts, cuda: str | None = None
) -> list[Late]:
    """Every late load the loaded dispatchers (and the sub-libraries they would load) make,
    then NVRTC's (torch's lazy ``libnvrtc.so.N`` for CUDA ``cuda``, nvrtc's builtins)."""
    return _cudnn(ldso, objects, facts) + exact_loads(ldso, objects, facts, cuda)


def _cudnn(ldso: Ldso, objects: Sequence[SharedObject], facts: LateFacts) -> list[Late]:
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


#: The driver library CUDA loads by name.
DRIVER = "libcuda.so.1"

#: Who ``dlopen``s ``libcuda.so.1`` first, in order (measured with LD_DEBUG=files on torch
#: 2.9.1+cu128): cuBLASLt's initialisation while ``import torch`` loads it, with cuBLASLt's
#: own search (``LD_LIBRARY_PATH``, its RUNPATH ``$ORIGIN``, the cache, the default folders);
#: cudart at CUDA initialisation only when that found nothing, with torch's RPATH first. Every
#: later caller (cuDNN, cuFFT, cuSPARSE, NCCL ... name ``libcuda.so.1`` too) reuses the loaded
#: one by soname.
DRIVER_LOADERS = ("libcublasLt.so", "libcudart.so")

#: cudart 12/13 takes every driver entry point through one of these (read from the real
#: cudart's ``.rodata`` with ``cuInit``): a copy without them is no driver to CUDA.
ENTRY_POINTS = ("cuGetProcAddress", "cuGetProcAddress_v2")
DRIVER_CALLS = ("cuInit",)


def driver_load(ldso: Ldso) -> LateLoad | None:
    """Where ``libcuda.so.1`` lands after ``import torch`` (already mapped: reused), or None
    when no library that loads it is loaded (a CPU-only torch)."""
    mapped = ldso.loaded(DRIVER)
    if mapped is not None:
        return LateLoad(DRIVER, mapped.path, mapped.path, "loaded", (mapped.path,))
    found: LateLoad | None = None
    for prefix in DRIVER_LOADERS:
        loader = next((o for o in ldso.objects if o.soname.startswith(prefix)), None)
        if loader is None:
            continue
        load = ldso.late_load(DRIVER, loader)
        if load.path is not None:
            return load
        found = found or load
    return found


def driver_lacks(ldso: Ldso, load: LateLoad, facts: LateFacts) -> list[str]:
    """The entry points CUDA needs that the ``libcuda.so.1`` landing at ``load`` lacks."""
    if load.path is None or load.via == "loaded" or load.facts is None:
        return []
    key = f"driver|{ldso.files.fingerprint(load.path)}"
    known = facts.verdict(key)
    if known is None:
        try:
            offered = ldso.files.symbols(load.path).default
        except ElfReadError:
            return []
        known = [] if any(n in offered for n in ENTRY_POINTS) else list(ENTRY_POINTS)
        known += [n for n in DRIVER_CALLS if n not in offered]
        facts.store_verdict(key, known)
    return known


#: Families whose members ``dlopen`` the exact names they hold in ``.rodata`` (names they
#: NEED are not late loads): nvrtc loads ``libnvrtc-builtins.so.12.8`` at the first compile
#: (measured, no GPU needed: missing, the compile fails with "nvrtc: error: failed to open
#: libnvrtc-builtins.so.12.8."); cuDNN 8's ``libcudnn.so.8`` loads ``libcudnn_ops_infer.so.8``,
#: ``_ops_train``, ``_cnn_infer``/``_train`` and ``_adv_infer``/``_train`` (read from the real
#: 8.9.2 dispatcher, whose first call of any kind loads ops_infer: "Could not load library
#: libcudnn_ops_infer.so.8. Error: ...", then an abort).
EXACT_FAMILIES = ("libnvrtc", "libcudnn")

#: torch's lazy NVRTC (ATen's ``LazyNVRTC``): ``libtorch_cuda.so`` ``dlopen``s
#: ``"libnvrtc.so." + <CUDA major>`` (``11.2`` for CUDA 11.3+; the prefix is in the real
#: binary's ``.rodata``) at the first kernel torch compiles at run time.
TORCH_NVRTC_CALLER = "libtorch_cuda.so"
NVRTC_COMPILE = "the first NVRTC compile"
TORCH_COMPILE = "the first kernel torch compiles at run time (jiterator ops, NVRTC)"


def torch_nvrtc_name(cuda: str | None) -> str | None:
    """The ``libnvrtc`` name torch's lazy loader asks for, by torch's CUDA version."""
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    major, minor = int(parts[0]), int(parts[1])
    if major < 11 or (major == 11 and minor < 3):
        return f"libnvrtc.so.{major}.{minor}"
    return "libnvrtc.so.11.2" if major == 11 else f"libnvrtc.so.{major}"


def _exact_family(soname: str) -> str | None:
    prefix = soname.split(".", 1)[0]
    return prefix if prefix in EXACT_FAMILIES else None


def _failure(family: str, name: str) -> tuple[str, str]:
    """(when the load happens, what the caller prints when it finds nothing)."""
    if family == "libnvrtc":
        said = f'nvrtc says "nvrtc: error: failed to open {name}." '
        return NVRTC_COMPILE, said + "(NVRTC_ERROR_BUILTIN_OPERATION_FAILURE)"
    error = f"{name}: cannot open shared object file: No such file or directory"
    return "the first cuDNN call", f'cuDNN says "Could not load library {name}. Error: {error}"'


def exact_loads(
    ldso: Ldso, objects: Sequence[SharedObject], facts: LateFacts, cuda: str | None
) -> list[Late]:
    """torch's lazy ``libnvrtc.so.N``, then the exact names nvrtc (its builtins) and cuDNN 8's
    dispatcher (its six sub-libraries) load."""
    found: list[Late] = []
    queue = [o for o in objects if _exact_family(o.soname)]
    caller = next((o for o in objects if o.soname == TORCH_NVRTC_CALLER), None)
    name = torch_nvrtc_name(cuda)
    if caller is not None and name is not None:
        load = ldso.late_load(name, caller)
        failure = f"torch's loader says {name}: cannot open shared object file"
        found.append(Late(load, name, (name,), when=TORCH_COMPILE, failure=failure))
        if load.via != "loaded" and load.path is not None and load.facts is not None:
            queue.append(SharedObject(load.path, load.facts, {name}, caller, load.via))
    seen: set[str] = {o.soname for o in queue}
    for obj in queue:
        family = _exact_family(obj.soname)
        if family is None:
            continue
        for wanted in facts.dlopen_facts(obj.path, family).names:
            if wanted in seen or wanted in obj.facts.needed:
                continue
            seen.add(wanted)
            load = ldso.late_load(wanted, obj)
            when, failure = _failure(family, wanted)
            found.append(Late(load, wanted, (wanted,), when=when, failure=failure))
            if load.via != "loaded" and load.path is not None and load.facts is not None:
                queue.append(SharedObject(load.path, load.facts, {wanted}, obj, load.via))
    return found
