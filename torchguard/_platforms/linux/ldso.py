"""A model of glibc's ld.so: which file each name loads, and whether every symbol binds.

Pure: files are reached only through :class:`ElfFiles`. The rules follow glibc's
``dl-load.c``/``dl-open.c``/``dl-lookup.c`` as measured against the real loader (see the README,
"On Linux"): a loaded object whose soname or requested name matches is reused; otherwise
DT_RPATH of the requester and its loaders (only while no DT_RUNPATH is present), then
``LD_LIBRARY_PATH`` (read at process start; ignored in secure mode), then the requester's own
DT_RUNPATH, then ``/etc/ld.so.cache``, then the default directories (unless ``-z nodeflib``).
A candidate of another ELF class or machine is skipped; a damaged one ends the load. With
``RTLD_NOW`` (what Python always uses) every version need and every non-weak symbol is bound at
load time against the global scope then the root's breadth-first closure; a failed ``dlopen``
leaves the process as it was.

Also modelled: ``LD_PRELOAD`` and ``/etc/ld.so.preload`` (loaded first, in the global scope;
an entry that cannot be loaded is reported and skipped, as ld.so does), the dynamic string
tokens ``$ORIGIN``/``$LIB``/``$PLATFORM`` with glibc's ``is_dst`` rules, the
``glibc-hwcaps`` (and, before glibc 2.37, legacy) subdirectories of every search directory,
and what cannot be known: a file that cannot be read, or that only torchguard's reader
refuses, is carried unread (glibc may well map it), and an object mapped before the analysis
outside the executable's closure may or may not be in the global scope. A failure that
either of them might undo is reported with a ``doubt``: a warning, never a proof.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace

from torchguard._binary.elf import ElfReadError
from torchguard._platforms.linux.files import ElfNotUnderstood, ElfRejected, SymbolTable
from torchguard._platforms.linux.files import LoadFacts as ElfFacts
from torchguard._platforms.linux.hwcaps import Cpu, subdir_tops, subdirs
from torchguard._platforms.linux.ldso_dst import expand
from torchguard._platforms.linux.ldso_types import (
    CORRUPT,
    MISSING,
    SYMBOL,
    VERSION,
    DlopenResult,
    ElfFiles,
    Environment,
    IgnoredPreload,
    LateLoad,
    LoadError,
    SharedObject,
    Verdicts,
    _NoVerdicts,
)

__all__ = [
    "CORRUPT",
    "MISSING",
    "SYMBOL",
    "VERSION",
    "DlopenResult",
    "ElfFacts",
    "ElfFiles",
    "Environment",
    "IgnoredPreload",
    "LateLoad",
    "Ldso",
    "LoadError",
    "SharedObject",
    "Verdicts",
    "expand",
]

_FIXED_VIAS = ("RPATH", "path", "loaded")
"""How an object is found when ``LD_LIBRARY_PATH`` could not have supplied another copy."""


def _dirname(path: str) -> str:
    head = path.rsplit("/", 1)[0] if "/" in path else "."
    return head or "/"


class Ldso:
    """One process's dynamic loader: its link map, global scope and ``dlopen``."""

    def __init__(self, files: ElfFiles, env: Environment, verdicts: Verdicts | None = None) -> None:
        self.files = files
        self.env = env
        self.verdicts: Verdicts = verdicts if verdicts is not None else _NoVerdicts()
        self.objects: list[SharedObject] = []
        self.global_scope: list[SharedObject] = []
        self.main: SharedObject | None = None
        self._by_identity: dict[Hashable, SharedObject] = {}
        self._dirs: dict[int, list[tuple[str, str]]] = {}
        self._names: dict[str, SharedObject] = {}
        self._hwcaps: dict[str, list[str]] = {}
        self._subdir_names: tuple[str, ...] | None = None
        self.ignored_preloads: list[IgnoredPreload] = []
        self.preloaded: list[SharedObject] = []
        self._cpu: Cpu | None = None
        self._expanded: dict[tuple[str, str], str | None] = {}
        self._prefixes: dict[tuple[int, bool], list[tuple[str, str]]] = {}
        self._in_folder: dict[str, list[str]] = {}
        self._by_dirs: dict[tuple[tuple[tuple[str, str], ...], bool], list[tuple[str, str]]] = {}
        self._tops = subdir_tops(env.glibc, env.machine_name) if env.cpu is not None else ()

    def cpu(self) -> Cpu:
        if self._cpu is None:
            self._cpu = self.env.cpu() if self.env.cpu is not None else Cpu(1, "x86_64")
        return self._cpu

    def _platform(self) -> str:
        return self.cpu().platform

    def expand(self, entry: str, origin: str) -> str | None:
        """``entry`` with ``$ORIGIN``/``$LIB``/``$PLATFORM`` replaced (None: unusable)."""
        key = (entry, origin)
        if key in self._expanded:
            return self._expanded[key]
        found = self._expanded[key] = expand(
            entry, origin, self.env.secure, self.env.lib, self._platform
        )
        return found

    def _expand_all(self, entries: Sequence[str], origin: str, via: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for entry in entries:
            expanded = self.expand(entry, origin)
            if expanded is not None:
                found.append((expanded, via))
        return found

    # -- process start -----------------------------------------------------------------
    def start(self, executable: str | None, mapped: Sequence[str] = (), live: bool = False) -> None:
        """The interpreter and what is already mapped (``/proc/self/maps``), loaded as-is,
        then the preloads: loaded here, or (``live``) found among the mapped objects, where
        ld.so put them at process start (an entry that is not there was skipped then).

        The global scope is the executable, the preloaded objects, then their NEEDED closure
        breadth first, as at start-up. Anything else mapped has a scope nobody can see."""
        for path in ([executable] if executable else []) + list(mapped):
            if self.files.is_file(path) and self.files.identity(path) not in self._by_identity:
                try:
                    facts = self.files.facts(path)
                except ElfReadError as err:  # mapped, so glibc took it: its facts unknown
                    self._add_unread(path, path, None, "loaded", str(err))
                    continue
                self._add(path, facts, {path}, None, "loaded")
        if executable is not None and self.objects:
            self.main = self.objects[0]
        before = len(self.objects)
        self._preload(live)
        order = ([self.main] if self.main is not None else []) + [
            o for o in self.preloaded if o is not self.main
        ]
        for obj in order:
            if self.objects.index(obj) < before:  # the preload step found its own deps
                for name in obj.facts.needed:
                    dep = self._reuse(name)
                    if dep is not None and dep not in obj.deps:
                        obj.deps.append(dep)
            order += [d for d in obj.deps if d not in order]
        self.global_scope = order
        if self.main is not None:
            for obj in self.objects[:before]:
                obj.scope_unknown = obj not in order

    def _preload(self, live: bool) -> None:
        """``LD_PRELOAD`` then ``/etc/ld.so.preload``, as ld.so's ``do_preload`` treats them."""
        entries = [(e, "LD_PRELOAD") for e in self.env.preload]
        entries += [(e, "/etc/ld.so.preload") for e in self.env.preload_file]
        for entry, source in entries:
            secure = self.env.secure and source == "LD_PRELOAD"
            if secure and "/" in entry:
                continue  # not a valid name for a set-user-ID program: skipped silently
            obj = self._preloaded(entry) if live else self._preload_one(entry, secure)
            if isinstance(obj, str):
                self.ignored_preloads.append(IgnoredPreload(entry, source, obj))
            elif obj not in self.preloaded:
                self.preloaded.append(obj)

    def _preloaded(self, entry: str) -> SharedObject | str:
        """The mapped object a live process's preload ``entry`` became, or why there is none."""
        if "/" not in entry:
            found = self._reuse(entry)
            if found is not None:
                return found
        for path, _via in self._candidates(entry, self.main):
            if not self._openable(path):
                continue
            found = self._by_identity.get(self.files.identity(path))
            if found is not None:
                return found
            try:
                facts = self.files.facts(path)
            except ElfRejected as err:
                return str(err)
            except ElfReadError:
                return "not loaded when the process started"
            if facts.elf_class != self.env.elf_class:
                return f"wrong ELF class: ELFCLASS{32 if facts.elf_class == 1 else 64}"
            return "not loaded when the process started"
        return "cannot open shared object file"

    def _preload_one(self, entry: str, secure: bool) -> SharedObject | str:
        if secure:  # only set-user-ID files from the trusted directories
            found = next(
                (
                    p
                    for p, _via in self._candidates(entry, None)
                    if _via in ("ld.so.cache", "default")
                    and self._openable(p)
                    and self.files.setuid(p)
                ),
                None,
            )
            if found is None:
                return "cannot open shared object file"
            entry = found
        first = len(self.objects)
        trail: list[str] = []
        root = self._map(entry, self.main, trail)
        if isinstance(root, LoadError):
            return "cannot open shared object file" if root.kind == MISSING else root.missing
        order = [root]
        for obj in order:
            if self.objects.index(obj) < first:
                continue
            for needed in obj.facts.needed:
                dep = self._map(needed, obj, [])
                if isinstance(dep, LoadError):
                    continue  # ld.so would stop the process; nothing more is known here
                if dep not in obj.deps:
                    obj.deps.append(dep)
                if dep not in order:
                    order.append(dep)
        return root

    def _add(
        self, path: str, facts: ElfFacts, names: set[str], loader: SharedObject | None, via: str
    ) -> SharedObject:
        obj = SharedObject(path, facts, set(), loader, via)
        for name in [*names, *([facts.soname] if facts.soname else [])]:
            self._name(obj, name)
        self.objects.append(obj)
        self._by_identity[self.files.identity(path)] = obj
        return obj

    def _reuse(self, name: str) -> SharedObject | None:
        return self._names.get(name)

    def _name(self, obj: SharedObject, name: str) -> None:
        obj.names.add(name)
        self._names.setdefault(name, obj)  # the first object loaded under a name wins

    def loaded(self, name: str) -> SharedObject | None:
        """The object a request for ``name`` (a soname) would reuse."""
        return self._reuse(name)

    # -- the search ------------------------------------------------------------------------
    def search_dirs(self, requester: SharedObject | None) -> list[tuple[str, str]]:
        """(directory, provenance) in the order ld.so tries them for ``requester``'s needs."""
        key = id(requester)
        found = self._dirs.get(key)
        if found is None:
            found = self._dirs[key] = self._search_dirs(requester)
        return found

    def _search_dirs(self, requester: SharedObject | None) -> list[tuple[str, str]]:
        dirs: list[tuple[str, str]] = []
        env = self.env
        facts = requester.facts if requester else None
        if facts is None or facts.runpath is None:
            seen: set[int] = set()
            chain = requester
            while chain is not None and id(chain) not in seen:
                seen.add(id(chain))
                if chain.facts.runpath is None and chain.facts.rpath:
                    origin = _dirname(chain.path)
                    dirs += self._expand_all(chain.facts.rpath, origin, f"RPATH of {chain.soname}")
                chain = chain.loader
            main = self.main
            if main is not None and id(main) not in seen and main.facts.runpath is None:
                origin = _dirname(main.path)
                dirs += self._expand_all(main.facts.rpath or (), origin, "RPATH of the interpreter")
        if not env.secure:  # ld.so(8): $ORIGIN there is the program's folder
            origin = _dirname(self.main.path) if self.main is not None else "."
            dirs += self._expand_all(env.ld_library_path, origin, "LD_LIBRARY_PATH")
        if facts is not None and facts.runpath:
            origin = _dirname(requester.path) if requester else "."
            via = f"RUNPATH of {requester.soname if requester else ''}"
            dirs += self._expand_all(facts.runpath, origin, via)
        return dirs

    def _present_tops(self, folder: str) -> tuple[str, ...]:
        """Which of the hwcaps subfolder names ``folder`` has, kept by the folder's state
        (adding or removing an entry changes its mtime)."""
        if not self._tops:
            return ()
        state = self.files.dir_state(folder)
        if state is None:
            return ()
        key = f"{folder}|{state}|{','.join(self._tops)}"
        known = self.verdicts.subdir_tops(key)
        if known is None:
            known = tuple(t for t in self._tops if self.files.is_dir(f"{folder}/{t}"))
            self.verdicts.store_subdir_tops(key, known)
        return known

    def _subdirs(self, folder: str) -> list[str]:
        """``folder``'s hwcaps subdirectories ld.so tries before it, best first."""
        found = self._hwcaps.get(folder)
        if found is None:
            tops = self._present_tops(folder)
            found = []
            if tops:
                if self._subdir_names is None:
                    self._subdir_names = subdirs(self.cpu(), self.env.glibc, self.env.machine_name)
                found = [
                    sub
                    for sub in self._subdir_names
                    if sub.split("/", 1)[0] in tops and self.files.is_dir(f"{folder}/{sub}")
                ]
            self._hwcaps[folder] = found
        return found

    def locate(self, name: str) -> str | None:
        """The first file a ``dlopen(name)`` from the executable would try that exists: what
        a library loaded later by name (``libcuda.so.1``) resolves to; None when none does."""
        for path, _via in self._candidates(name, None):
            if self._openable(path):
                return path
        return None

    def _openable(self, path: str) -> bool:
        return self.files.is_file(path) and self.files.readable(path)

    def late_load(self, name: str, requester: SharedObject) -> LateLoad:
        """Where ``requester``'s own ``dlopen(name)`` after this state would land, without
        loading it: a loaded object with that name is reused; otherwise the search runs with
        the caller's RPATH/RUNPATH (glibc's ``dlopen`` searches for the calling object).
        ``requester`` may be a library that is not loaded yet (one late load opening
        another)."""
        existing = self._reuse(name) if "/" not in name else None
        if existing is not None:
            return LateLoad(name, requester.path, existing.path, "loaded", (existing.path,))
        trail: list[str] = []
        for path, via in self._candidates(name, requester, cached=False):
            if not self._openable(path):
                continue
            trail.append(path)
            try:
                facts = self.files.facts(path)
            except ElfNotUnderstood as err:
                if err.foreign:
                    continue  # another class or machine: the search goes on
                return LateLoad(name, requester.path, path, via, tuple(trail), facts=None)
            except ElfReadError:
                return LateLoad(name, requester.path, path, via, tuple(trail), facts=None)
            if facts.elf_class != self.env.elf_class or facts.machine != self.env.machine:
                continue
            return LateLoad(name, requester.path, path, via, tuple(trail), facts=facts)
        return LateLoad(name, requester.path, None, "", tuple(trail))

    def _candidates(
        self, name: str, requester: SharedObject | None, cached: bool = True
    ) -> list[tuple[str, str]]:
        if "/" in name:
            origin = _dirname(requester.path) if requester else "."
            path = self.expand(name, origin)
            return [] if path is None else [(path, "path")]
        nodeflib = requester is not None and requester.facts.nodeflib
        key = (id(requester), cached)
        prefixes = self._prefixes.get(key) if cached else None
        if prefixes is None:
            dirs = self.search_dirs(requester) if cached else self._search_dirs(requester)
            prefixes = self._folder_prefixes(dirs, nodeflib)
            if cached:
                self._prefixes[key] = prefixes
        found: list[tuple[str, str]] = []
        cache = () if nodeflib else self.env.cache.get(name, ())
        for prefix, via in prefixes:
            if via == "default" and cache:
                found += [(p, "ld.so.cache") for p in cache]  # before the default folders
                cache = ()
            found.append((prefix + name, via))
        return found + [(p, "ld.so.cache") for p in cache]

    def _folder_prefixes(
        self, dirs: list[tuple[str, str]], nodeflib: bool
    ) -> list[tuple[str, str]]:
        """Each search folder as the prefixes ld.so tries in it: its hwcaps subfolders, then
        itself; the default folders last (the cache goes before them)."""
        key = (tuple(dirs), nodeflib)
        known = self._by_dirs.get(key)
        if known is not None:  # libraries sharing one RPATH (torch's) share the prefixes
            return known
        if not nodeflib:
            dirs = [*dirs, *((d, "default") for d in self.env.default_dirs)]
        prefixes: list[tuple[str, str]] = []
        for folder, via in dirs:
            found = self._in_folder.get(folder)
            if found is None:
                found = self._in_folder[folder] = self._folder_paths(folder)
            prefixes += [(prefix, via) for prefix in found]
        self._by_dirs[key] = prefixes
        return prefixes

    def _folder_paths(self, folder: str) -> list[str]:
        """The prefixes tried in ``folder``; none when it is no folder (glibc marks such a
        search folder nonexistent and skips it: one ``stat`` instead of one per name)."""
        folder = folder.rstrip("/") or "/"
        if self.files.dir_state(folder) is None:
            return []
        found = [f"{folder}/{sub}/" for sub in self._subdirs(folder)]
        return [*found, f"{folder.rstrip('/')}/"]

    def _map(
        self, name: str, requester: SharedObject | None, trail: list[str]
    ) -> SharedObject | LoadError:
        """The object ``name`` loads as for ``requester``: reused, newly mapped, or an error."""
        if "/" not in name:
            existing = self._reuse(name)
            if existing is not None:
                return existing
        other_class = ""
        for path, via in self._candidates(name, requester):
            if not self._openable(path):
                continue
            trail.append(path)
            same = self._by_identity.get(self.files.identity(path))
            if same is not None:
                self._name(same, name)
                return same
            try:
                facts = self.files.facts(path)
            except ElfRejected as err:  # glibc's own checks refuse it: the load fails
                doubt = self._path_doubt((via,))
                return LoadError(CORRUPT, path, str(err), trail=tuple(trail), doubt=doubt)
            except ElfNotUnderstood as err:
                if err.foreign:
                    other_class = other_class or err.glibc
                    continue
                return self._add_unread(path, name, requester, via, str(err))
            except ElfReadError as err:  # cannot be read now: glibc may map it fine
                return self._add_unread(path, name, requester, via, str(err))
            if facts.elf_class != self.env.elf_class:
                bits = 32 if facts.elf_class == 1 else 64
                other_class = other_class or f"wrong ELF class: ELFCLASS{bits}"
                continue
            if facts.machine != self.env.machine:
                continue  # ld.so skips a candidate built for another machine
            return self._add(path, facts, {name}, requester, via)
        doubt = "" if "/" in name else self._path_doubt(("LD_LIBRARY_PATH",))
        if other_class:  # glibc names the class it skipped rather than "cannot open"
            return LoadError(CORRUPT, name, other_class, trail=tuple(trail), doubt=doubt)
        requester_path = requester.path if requester else name
        return LoadError(MISSING, requester_path, name, trail=tuple(trail), doubt=doubt)

    def _add_unread(
        self, path: str, name: str, requester: SharedObject | None, via: str, why: str
    ) -> SharedObject:
        facts = ElfFacts(self.env.elf_class, self.env.machine, None, (), None, None, False)
        obj = self._add(path, facts, {name}, requester, via)
        obj.unread = why
        return obj

    @property
    def unread(self) -> list[SharedObject]:
        """The loaded objects whose facts are unknown."""
        return [o for o in self.objects if o.unread]

    # -- dlopen ------------------------------------------------------------------------------
    def dlopen(self, name: str, *, global_: bool = False) -> DlopenResult:
        """``dlopen(name, RTLD_NOW | (RTLD_GLOBAL if global_))`` from the interpreter."""
        before = (list(self.objects), list(self.global_scope), dict(self._by_identity))
        names = {id(o): set(o.names) for o in self.objects}
        index = dict(self._names)
        first_new = len(self.objects)
        result = self._open(name, first_new, global_)
        if not result.ok:
            self.objects, self.global_scope, self._by_identity = before
            self._names = index
            for obj in self.objects:
                obj.names = names[id(obj)]
            self._dirs.clear()
            self._prefixes.clear()
        return result

    def _open(self, name: str, first_new: int, global_: bool) -> DlopenResult:
        trail: list[str] = []
        root = self._map(name, self.main, trail)
        if isinstance(root, LoadError):
            return DlopenResult(False, error=self._missing_doubt(root))
        root.loader = root.loader if root.loader is not None else self.main
        order = [root]
        parents: dict[int, SharedObject] = {}
        if self.objects.index(root) < first_new:  # already loaded: nothing to map or bind
            if global_:
                self._promote(_closure(root))
            return DlopenResult(True, root=root)
        for obj in order:
            if self.objects.index(obj) < first_new:
                if not obj.deps:  # mapped before we looked: its dependencies by name
                    obj.deps = [d for d in map(self._reuse, obj.facts.needed) if d is not None]
                continue
            for needed in obj.facts.needed:
                trail = []
                dep = self._map(needed, obj, trail)
                if isinstance(dep, LoadError):
                    chain = _chain(obj, parents)
                    return DlopenResult(False, error=_with_chain(self._missing_doubt(dep), chain))
                if dep not in obj.deps:
                    obj.deps.append(dep)
                if dep not in order:
                    order.append(dep)
                    parents.setdefault(id(dep), obj)
        new = [obj for obj in self.objects[first_new:]]
        local = _closure(root)
        for obj in new:
            error = self._check_versions(obj)
            if error is not None:
                return DlopenResult(False, error=_with_chain(error, _chain(obj, parents)))
        scope = self.global_scope + [o for o in local if o not in self.global_scope]
        for obj in reversed(new):
            error = self._bind(obj, scope)
            if error is not None:
                return DlopenResult(False, error=_with_chain(error, _chain(obj, parents)))
        if global_:
            self._promote(local)
        return DlopenResult(True, root=root, new=tuple(new))

    def _promote(self, objects: list[SharedObject]) -> None:
        for obj in objects:
            obj.scope_unknown = False
            if obj not in self.global_scope:
                self.global_scope.append(obj)

    def _path_doubt(self, vias: Sequence[str]) -> str:
        """Why a failure involving objects found these ways is no proof: ``LD_LIBRARY_PATH``
        is not known for sure, and a folder on it might supply another copy (it comes after
        ``RPATH`` only; an object opened by path or already mapped stays what it is)."""
        if not self.env.library_path_doubt or self.env.secure:
            return ""
        if all(via.startswith(_FIXED_VIAS) for via in vias):
            return ""
        return self.env.library_path_doubt

    def _missing_doubt(self, error: LoadError) -> LoadError:
        """A name found nowhere may still be the soname of a mapped object torchguard could
        not read (its soname unknown): then it is no proof."""
        if error.kind != MISSING:
            return error
        unknown = next((o for o in self.objects if o.unread and o.via == "loaded"), None)
        if unknown is None:
            return error
        why = (
            f"{_base(unknown.path)} is loaded but could not be read ({unknown.unread}); its "
            f"soname may be {error.missing}"
        )
        return replace(error, doubt=why)

    def _check_versions(self, obj: SharedObject) -> LoadError | None:
        if obj.unread:
            return None
        for filename, needs in obj.facts.verneed.items():
            provider = next((d for d in obj.deps if filename in d.names), None)
            if provider is None or provider.unread or provider.facts.verdef is None:
                continue  # glibc only warns when the provider defines no versions
            for version, weak in needs:
                if not weak and version not in provider.facts.verdef:
                    return LoadError(
                        VERSION,
                        obj.path,
                        version,
                        provider=provider.path,
                        provider_via=provider.via,
                        doubt=self._path_doubt((obj.via, provider.via)),
                    )
        return None

    def _table(self, obj: SharedObject) -> SymbolTable | None:
        """``obj``'s symbols; None (and ``obj`` marked unread) when they cannot be read."""
        if obj.unread:
            return None
        try:
            return self.files.symbols(obj.path)
        except ElfReadError as err:
            obj.unread = f"its symbol table could not be read: {err}"
            return None

    def _bind(self, obj: SharedObject, scope: list[SharedObject]) -> LoadError | None:
        if obj.unread:
            return None
        prints = [self.files.fingerprint(o.path) for o in [obj, *scope]]
        key = "\n".join([str(self.env.assume_python_symbols), *prints])
        if self.verdicts.bound(key):
            return None
        files_of = {v: f for f, needs in obj.facts.verneed.items() for v, _ in needs}
        own = self._table(obj)
        if own is None:
            return None
        tables = {id(o): t for o in scope if (t := self._table(o)) is not None}
        missing: list[tuple[str, str]] = []
        for symbol, version in own.undefined:
            if self.env.assume_python_symbols and symbol.startswith(("Py", "_Py")):
                continue
            filename = files_of.get(version)
            if not any(
                _defines(o, tables[id(o)], symbol, version, filename)
                for o in scope
                if id(o) in tables
            ):
                missing.append((symbol, version))
        if not missing:
            self.verdicts.remember(key)
            return None
        doubt = ""
        unread = [o for o in scope if o.unread]
        if unread:
            doubt = (
                f"{_base(unread[0].path)} could not be read ({unread[0].unread}), and it may "
                "define what is missing"
            )
        else:
            missing, doubt = self._unknown_scope(missing, files_of)
        doubt = doubt or self._path_doubt([obj.via, *(o.via for o in scope)])
        symbol, version = missing[0]
        owner = next((o for o in scope if files_of.get(version) in o.names), None)
        if owner is None and not version:
            owner = self._family_provider(obj, symbol)
        return LoadError(
            SYMBOL,
            obj.path,
            symbol,
            version=version,
            provider=owner.path if owner else None,
            provider_via=owner.via if owner else "",
            symbols=tuple(f"{s}@{v}" if v else s for s, v in missing[:5]),
            doubt=doubt,
        )

    def _family_provider(self, obj: SharedObject, symbol: str) -> SharedObject | None:
        """For an unversioned C symbol (``ncclCommResume``), the direct dependency that
        exports its API family (most ``nccl*`` symbols): the library the caller was linked
        against, named in the message and the hint. Only read on a failure."""
        family = _FAMILY.match(symbol)
        if family is None:
            return None
        best: tuple[int, SharedObject | None] = (0, None)
        for dep in obj.deps:
            table = self._table(dep)
            if table is None:
                continue
            count = sum(1 for name in table.defined if name.startswith(family.group()))
            if count > best[0]:
                best = (count, dep)
        return best[1] if best[0] >= 3 else None

    def _unknown_scope(
        self, missing: list[tuple[str, str]], files_of: Mapping[str, str]
    ) -> tuple[list[tuple[str, str]], str]:
        """The missing symbols no object of unknown scope defines (a proof), else all of them
        and why they may still bind (one such object defines each)."""
        maybe = [o for o in self.objects if o.scope_unknown and o not in self.global_scope]
        if not maybe:
            return missing, ""
        tables = [(o, t) for o in maybe if (t := self._table(o)) is not None]
        proven: list[tuple[str, str]] = []
        supplier: SharedObject | None = None
        for symbol, version in missing:
            filename = files_of.get(version)
            found = next((o for o, t in tables if _defines(o, t, symbol, version, filename)), None)
            if found is None:
                proven.append((symbol, version))
            elif supplier is None:
                supplier = found
        if proven or supplier is None:
            return proven or missing, ""
        return missing, (
            f"{_base(supplier.path)}, already loaded by the process, defines it: if it was "
            "opened with RTLD_GLOBAL (nothing in /proc says), the symbol binds there"
        )


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


_FAMILY = re.compile(r"[a-z]{4,}")


def _defines(
    obj: SharedObject, table: SymbolTable, symbol: str, version: str, filename: str | None
) -> bool:
    versions = table.defined.get(symbol)
    if versions is None:
        return False
    if not version:
        return symbol in table.default
    if version in versions:
        return True
    return obj.facts.verdef is None and filename is not None and filename in obj.names


def _closure(root: SharedObject) -> list[SharedObject]:
    """The root's local scope: itself and its dependencies, breadth first."""
    order = [root]
    for obj in order:
        for dep in obj.deps:
            if dep not in order:
                order.append(dep)
    return order


def _chain(obj: SharedObject, parents: dict[int, SharedObject]) -> tuple[str, ...]:
    names = [obj.soname]
    seen = {id(obj)}
    while id(obj) in parents:
        obj = parents[id(obj)]
        if id(obj) in seen:
            break
        seen.add(id(obj))
        names.append(obj.soname)
    return tuple(reversed(names))


def _with_chain(error: LoadError, chain: tuple[str, ...]) -> LoadError:
    if error.kind == MISSING:
        chain = (*chain, error.missing)
    return replace(error, chain=chain)
