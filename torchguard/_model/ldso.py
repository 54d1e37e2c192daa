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
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from torchguard._binary.elf import ElfReadError
from torchguard._linux.files import LoadFacts as ElfFacts
from torchguard._linux.files import SymbolTable

MISSING = "missing"
CORRUPT = "corrupt"
VERSION = "version"
SYMBOL = "symbol"


class ElfFiles(Protocol):
    """The files the model may look at (a live file system, a wheel set, a test fixture)."""

    def is_file(self, path: str) -> bool: ...

    def readable(self, path: str) -> bool:
        """Whether the process may open ``path``: glibc moves on to the next candidate of a
        search when ``open`` fails with EACCES, as when the file is missing."""
        ...

    def identity(self, path: str) -> Hashable:
        """What makes two paths one file (device and inode on a live system)."""
        ...

    def facts(self, path: str) -> ElfFacts:
        """The dynamic facts of ``path`` (symbols may be left out); raises
        :class:`ElfReadError` for a damaged file."""
        ...

    def symbols(self, path: str) -> SymbolTable:
        """The facts of ``path`` with its symbol table."""
        ...

    def fingerprint(self, path: str) -> str:
        """A key that changes whenever the file's contents may have (path, size, mtime, inode)."""
        ...


class Verdicts(Protocol):
    """Binding verdicts kept across runs: a warm analysis reads no symbol table."""

    def bound(self, key: str) -> bool: ...

    def remember(self, key: str) -> None: ...


class _NoVerdicts:
    def bound(self, key: str) -> bool:
        return False

    def remember(self, key: str) -> None:
        return None


@dataclass(frozen=True)
class Environment:
    """What ld.so knows at process start."""

    ld_library_path: tuple[str, ...] = ()
    secure: bool = False
    cache: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_dirs: tuple[str, ...] = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
    machine: int = 62  # EM_X86_64
    elf_class: int = 2
    assume_python_symbols: bool = False
    """No interpreter to bind against (offline): ``Py*``/``_Py*`` references are satisfied."""


@dataclass(eq=False)
class SharedObject:
    """One object in the process's link map."""

    path: str
    facts: ElfFacts
    names: set[str]
    loader: SharedObject | None
    via: str
    deps: list[SharedObject] = field(default_factory=list)

    @property
    def soname(self) -> str:
        return self.facts.soname or self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class LoadError:
    """Why a ``dlopen`` fails, as glibc's ``dlerror()`` would say it.

    ``kind``: missing/corrupt/version/symbol. ``obj`` is the object whose need failed (its
    path); ``missing`` the soname, version or symbol; ``provider`` the file that lacked it;
    ``chain`` the sonames from the dlopen root down to ``obj``; ``trail`` the paths tried.
    """

    kind: str
    obj: str
    missing: str
    version: str = ""
    provider: str | None = None
    chain: tuple[str, ...] = ()
    trail: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    provider_via: str = ""
    """How ``provider`` was found (``LD_LIBRARY_PATH``, ``RUNPATH of ...``, ``path`` ...)."""

    def message(self) -> str:
        if self.kind == MISSING:
            return f"{self.missing}: cannot open shared object file: No such file or directory"
        if self.kind == CORRUPT:
            return f"{self.obj}: {self.missing}"
        if self.kind == VERSION:
            return f"{self.provider}: version `{self.missing}' not found (required by {self.obj})"
        suffix = f", version {self.version}" if self.version else ""
        return f"{self.obj}: undefined symbol: {self.missing}{suffix}"


@dataclass(frozen=True)
class LateLoad:
    """Where a library's ``dlopen(name)`` at first use would land (``path`` None: nowhere).

    ``via`` is how it was found (``loaded`` when an object of that name is reused);
    ``facts`` the file's facts when it was newly found and readable."""

    name: str
    requester: str
    path: str | None
    via: str
    trail: tuple[str, ...] = ()
    facts: ElfFacts | None = None


@dataclass(frozen=True)
class DlopenResult:
    ok: bool
    root: SharedObject | None = None
    error: LoadError | None = None
    new: tuple[SharedObject, ...] = ()


def _expand(entry: str, origin: str) -> str:
    if "$" not in entry:
        return entry
    for token in ("${ORIGIN}", "$ORIGIN"):
        entry = entry.replace(token, origin)
    return entry


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

    # -- process start -----------------------------------------------------------------
    def start(self, executable: str | None, mapped: Sequence[str] = ()) -> None:
        """The interpreter and what is already mapped (``/proc/self/maps``), loaded as-is.

        The global scope is the executable and its NEEDED closure, as at start-up."""
        for path in ([executable] if executable else []) + list(mapped):
            if self.files.is_file(path) and self.files.identity(path) not in self._by_identity:
                try:
                    facts = self.files.facts(path)
                except ElfReadError:
                    continue
                self._add(path, facts, {path}, None, "loaded")
        if executable is None or not self.objects:
            return
        self.main = self.objects[0]
        order = [self.main]
        for obj in order:
            for name in obj.facts.needed:
                dep = self._reuse(name)
                if dep is not None and dep not in order:
                    order.append(dep)
                    obj.deps.append(dep)
        self.global_scope = order

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
        facts = requester.facts if requester else None
        if facts is None or facts.runpath is None:
            seen: set[int] = set()
            chain = requester
            while chain is not None and id(chain) not in seen:
                seen.add(id(chain))
                if chain.facts.runpath is None and chain.facts.rpath:
                    origin = _dirname(chain.path)
                    dirs += [
                        (_expand(d, origin), f"RPATH of {chain.soname}") for d in chain.facts.rpath
                    ]
                chain = chain.loader
            main = self.main
            if main is not None and id(main) not in seen and main.facts.runpath is None:
                origin = _dirname(main.path)
                dirs += [
                    (_expand(d, origin), "RPATH of the interpreter") for d in main.facts.rpath or ()
                ]
        if not self.env.secure:  # ld.so(8): $ORIGIN there is the program's folder
            origin = _dirname(self.main.path) if self.main is not None else "."
            dirs += [(_expand(d, origin), "LD_LIBRARY_PATH") for d in self.env.ld_library_path]
        if facts is not None and facts.runpath:
            origin = _dirname(requester.path) if requester else "."
            dirs += [
                (_expand(d, origin), f"RUNPATH of {requester.soname if requester else ''}")
                for d in facts.runpath
            ]
        return dirs

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
            return [(_expand(name, origin), "path")]
        dirs = self.search_dirs(requester) if cached else self._search_dirs(requester)
        found = [(f"{d.rstrip('/')}/{name}", via) for d, via in dirs]
        nodeflib = requester is not None and requester.facts.nodeflib
        if not nodeflib:
            found += [(path, "ld.so.cache") for path in self.env.cache.get(name, ())]
            found += [(f"{d.rstrip('/')}/{name}", "default") for d in self.env.default_dirs]
        return found

    def _map(
        self, name: str, requester: SharedObject | None, trail: list[str]
    ) -> SharedObject | LoadError:
        """The object ``name`` loads as for ``requester``: reused, newly mapped, or an error."""
        if "/" not in name:
            existing = self._reuse(name)
            if existing is not None:
                return existing
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
            except ElfReadError as err:
                return LoadError(CORRUPT, path, str(err), trail=tuple(trail))
            if facts.elf_class != self.env.elf_class or facts.machine != self.env.machine:
                continue  # ld.so skips a candidate built for another machine
            return self._add(path, facts, {name}, requester, via)
        return LoadError(MISSING, requester.path if requester else name, name, trail=tuple(trail))

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
        return result

    def _open(self, name: str, first_new: int, global_: bool) -> DlopenResult:
        trail: list[str] = []
        root = self._map(name, self.main, trail)
        if isinstance(root, LoadError):
            return DlopenResult(False, error=root)
        root.loader = root.loader if root.loader is not None else self.main
        order = [root]
        parents: dict[int, SharedObject] = {}
        if self.objects.index(root) < first_new:  # already loaded: nothing to map or bind
            if global_:
                self.global_scope += [o for o in _closure(root) if o not in self.global_scope]
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
                    return DlopenResult(False, error=_with_chain(dep, chain))
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
            self.global_scope += [o for o in local if o not in self.global_scope]
        return DlopenResult(True, root=root, new=tuple(new))

    def _check_versions(self, obj: SharedObject) -> LoadError | None:
        for filename, needs in obj.facts.verneed.items():
            provider = next((d for d in obj.deps if filename in d.names), None)
            if provider is None or provider.facts.verdef is None:
                continue  # glibc only warns when the provider defines no versions
            for version, weak in needs:
                if not weak and version not in provider.facts.verdef:
                    return LoadError(
                        VERSION,
                        obj.path,
                        version,
                        provider=provider.path,
                        provider_via=provider.via,
                    )
        return None

    def _bind(self, obj: SharedObject, scope: list[SharedObject]) -> LoadError | None:
        prints = [self.files.fingerprint(o.path) for o in [obj, *scope]]
        key = "\n".join([str(self.env.assume_python_symbols), *prints])
        if self.verdicts.bound(key):
            return None
        files_of = {v: f for f, needs in obj.facts.verneed.items() for v, _ in needs}
        tables = {id(o): self.files.symbols(o.path) for o in scope}
        missing: list[tuple[str, str]] = []
        for symbol, version in self.files.symbols(obj.path).undefined:
            if self.env.assume_python_symbols and symbol.startswith(("Py", "_Py")):
                continue
            filename = files_of.get(version)
            if not any(_defines(o, tables[id(o)], symbol, version, filename) for o in scope):
                missing.append((symbol, version))
        if not missing:
            self.verdicts.remember(key)
            return None
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
            count = sum(
                1
                for name in self.files.symbols(dep.path).defined
                if name.startswith(family.group())
            )
            if count > best[0]:
                best = (count, dep)
        return best[1] if best[0] >= 3 else None


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
