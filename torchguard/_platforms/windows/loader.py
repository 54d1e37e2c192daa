"""A model of the Windows loader for ``LoadLibraryExW(path, 0, 0x1100)``.

That is the call Python >= 3.8 uses for extension modules and torch uses to preload
``torch\\lib\\*.dll``. For each imported name the loader tries, in order: a module of that base
name already in the process, API sets, KnownDLLs, the folder of the DLL passed to
``LoadLibraryExW`` (DLL_LOAD_DIR, shared by the whole load), python.exe's real folder, the
``AddDllDirectory`` folders (in unspecified order), then System32. PATH and the current
directory are not searched. A candidate built for another CPU is skipped; a candidate that is
not a valid image fails the load (WinError 193). System modules are not walked into.

Every binding is then judged at symbol level (with :attr:`LoaderModel.bindings`): an imported
name the bound copy does not export fails the load with WinError 127, an ordinal with 182, a
copy the loader refuses to bind to (no export table, a broken forwarder) with 193, after
every DLL of the closure was found (a missing DLL, 126, is reported first). A delay-loaded
DLL's missing symbol fails only when first called.

When everything maps and binds, the initialisers run: one documented certain failure is
replayed there (:mod:`torchguard._platforms.windows.initialise`), a binary built with the 14.40+
toolset that imports ``msvcp140.dll`` bound to a copy older than 14.40 (WinError 1114).

``load(root, order=...)`` replaces the search steps after KnownDLLs, for torch's legacy
``LoadLibraryW`` retry (:func:`legacy_order`).

Pure logic: everything about the machine comes from the :class:`LoaderModel` fields.
"""

from __future__ import annotations

import ntpath
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Union

from torchguard._binary.pe.errors import (
    FileUnreadable,
    ImageUnavailable,
    OverBudget,
    PEReadError,
)
from torchguard._binary.pe.image import PEFacts, machine_name
from torchguard._facts.vocab import FailureKind, Step
from torchguard._platforms.windows.initialise import MSVCP140, init_failure
from torchguard._platforms.windows.tree import AssumedFile, WinTree, join, same_path

if TYPE_CHECKING:
    from torchguard._platforms.windows.bindings import ForwardResolver, Gap, Trusted

LOADED = Step.LOADED
APISET = Step.APISET
KNOWNDLL = Step.KNOWNDLL
DLL_LOAD_DIR = Step.DLL_LOAD_DIR
APP_DIR = Step.APP_DIR
USER_DIR = Step.USER_DIR
SYSTEM32 = Step.SYSTEM32
PATH_FALLBACK = Step.PATH_FALLBACK
WINDOWS_DIR = Step.WINDOWS_DIR
CURRENT_DIR = Step.CURRENT_DIR

_NOT_WALKED = frozenset({LOADED, APISET, KNOWNDLL, SYSTEM32})

MISSING = FailureKind.MISSING
CORRUPT = FailureKind.CORRUPT
ARCH = FailureKind.ARCH
SYMBOL = FailureKind.SYMBOL
INIT = FailureKind.INIT

WINERROR = {MISSING: 126, CORRUPT: 193, ARCH: 193, SYMBOL: 127, INIT: 1114}
#: The loader's phases: map the closure, bind symbols, run initialisers; it reports the
#: first phase that fails.
_PHASE = {MISSING: 0, CORRUPT: 0, ARCH: 0, SYMBOL: 1, INIT: 2}

SearchOrder = tuple[tuple[str, Step], ...]


class Bindings(Protocol):
    """Judges whether the copy of a DLL an import binds to exports what is imported."""

    def checkable(self, path: str | None) -> bool: ...

    def gap(
        self, importer: str, dll: str, exporter: str, delay: bool, resolve: ForwardResolver
    ) -> Gap | None: ...


@dataclass(frozen=True)
class Resolution:
    """Where the loader finds ``name``: a path and the search step, or nothing."""

    name: str
    path: str | None
    via: Step | None
    wrong_arch: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Failure:
    """Why a load fails: ``leaf`` is missing, corrupt or of the wrong architecture."""

    kind: FailureKind
    leaf: str
    chain: tuple[str, ...]
    path: str | None = None
    detail: str = ""
    delay: bool = False
    gap: Gap | None = None
    """For a :data:`SYMBOL` failure: what the bound copy lacks."""
    importer: str | None = None
    """For a :data:`SYMBOL` failure: the path of the binary that imports the symbols."""

    @property
    def winerror(self) -> int:
        if self.gap is not None:
            return self.gap.winerror
        return WINERROR[self.kind]


@dataclass(frozen=True)
class Unread:
    """A DLL the loader finds that could not be read now (held by a scanner, denied, an
    offline OneDrive file, out of memory): nothing is known against it, and what it imports
    is not walked."""

    leaf: str
    chain: tuple[str, ...]
    path: str
    detail: str
    over_budget: bool = False
    """Reading it would cost more memory than its size allows (a hostile file)."""


@dataclass
class LoadResult:
    """The outcome of one ``LoadLibraryExW`` call on ``root``."""

    root: str
    failures: list[Failure] = field(default_factory=list)
    modules: dict[str, Resolution] = field(default_factory=dict)
    retry: LoadResult | None = None
    """torch's retry through PATH after WinError 126, when that retry failed too."""
    unread: list[Unread] = field(default_factory=list)
    """Binaries of the closure that could not be read now: not failures, but unchecked."""

    @property
    def ok(self) -> bool:
        return not any(not f.delay for f in self.failures)

    @property
    def winerror(self) -> int | None:
        """The error the real loader reports: the first hard failure met in load order,
        failures to find or map a DLL before failures to bind a symbol."""
        if self.retry is not None:
            return self.retry.winerror  # what torch raises in the end
        hard = [f for f in self.failures if not f.delay]
        hard.sort(key=lambda failure: _PHASE[failure.kind])
        return hard[0].winerror if hard else None

    def final_failures(self) -> list[Failure]:
        """The failures of what torch raises in the end: its PATH retry's, when it made one."""
        return self.retry.failures if self.retry is not None else self.failures

    def all_failures(self) -> list[Failure]:
        """The failures of this load and of torch's retry through PATH."""
        return self.failures + (self.retry.failures if self.retry is not None else [])


def is_api_set(name: str) -> bool:
    """API set contracts are resolved by the OS schema, never looked up as files."""
    lowered = name.lower()
    return lowered.startswith(("api-ms-win-", "ext-ms-"))


@dataclass
class LoaderModel:
    """One process's loader state; ``load`` mutates ``loaded`` as the real loader would."""

    tree: WinTree
    facts: Callable[[str], PEFacts]
    machine: int
    app_dir: str
    system32: str
    user_dirs: tuple[str, ...]
    known_dlls: frozenset[str]
    loaded: dict[str, str] = field(default_factory=dict)
    bindings: Bindings | None = None
    """Judges symbols; None checks DLL presence only."""

    def resolve(self, name: str, load_dir: str, order: SearchOrder | None = None) -> Resolution:
        """Where ``name`` binds; ``order`` replaces the steps after KnownDLLs (legacy load)."""
        lowered = name.lower()
        if lowered in self.loaded:
            return Resolution(name, self.loaded[lowered], LOADED)
        if is_api_set(lowered):
            return Resolution(name, None, APISET)
        if lowered in self.known_dlls:
            return Resolution(name, join(self.system32, lowered), KNOWNDLL)
        wrong: list[tuple[str, int]] = []
        for folder, via in self._search_order(load_dir) if order is None else order:
            hit = self.tree.lookup(folder, lowered)
            if hit is None:
                continue
            path = join(folder, hit[0])
            if via != SYSTEM32 and not isinstance(hit[1], AssumedFile):
                machine = self._machine(path)
                if machine is not None and machine != self.machine:
                    wrong.append((path, machine))
                    continue
            return Resolution(name, path, via, tuple(wrong))
        return Resolution(name, None, None, tuple(wrong))

    def _search_order(self, load_dir: str) -> Iterable[tuple[str, Step]]:
        yield load_dir, DLL_LOAD_DIR
        yield self.app_dir, APP_DIR
        for folder in self.user_dirs:
            yield folder, USER_DIR
        yield self.system32, SYSTEM32

    def _machine(self, path: str) -> int | None:
        try:
            return self.facts(path).machine
        except ImageUnavailable:
            return None  # a corrupt candidate is taken, and fails the load when read

    def walkable(self, resolution: Resolution) -> bool:
        if resolution.path is None or resolution.via in _NOT_WALKED:
            return False
        return not isinstance(self.tree.entry(resolution.path), AssumedFile)

    def load(self, root: str, order: SearchOrder | None = None) -> LoadResult:
        """Simulate loading ``root`` by full path and every static import below it.

        ``order``: the folders searched after KnownDLLs instead of ``LoadLibraryExW(path, 0,
        0x1100)``'s (torch's legacy ``LoadLibraryW`` retry, :func:`legacy_order`).
        """
        result = LoadResult(root)
        root_name = ntpath.basename(root)
        load_dir = ntpath.dirname(root)
        if same_path(self.loaded.get(root_name.lower(), ""), root):
            result.modules[root_name.lower()] = Resolution(root_name, root, LOADED)
            return result
        result.modules[root_name.lower()] = Resolution(root_name, root, Step.ROOT)
        queue: deque[tuple[str, tuple[str, ...]]] = deque([(root, (root_name,))])
        mapped: list[tuple[str, tuple[str, ...]]] = []
        while queue:
            path, chain = queue.popleft()
            try:
                facts = self.facts(path)
            except FileUnreadable as exc:  # not the file's fault: unchecked, never failed
                budget = isinstance(exc, OverBudget)
                result.unread.append(Unread(chain[-1], chain, path, str(exc), budget))
                continue
            except PEReadError as exc:
                result.failures.append(Failure(CORRUPT, chain[-1], chain, path, str(exc)))
                continue
            if facts.machine != self.machine:
                result.failures.append(Failure(ARCH, chain[-1], chain, path, facts.machine_name))
                continue
            mapped.append((path, chain))
            for name, delay in _imports(facts):
                lowered = name.lower()
                if lowered in result.modules:
                    self._check_binding(
                        result, path, chain, name, result.modules[lowered], delay, order
                    )
                    continue
                resolution = self.resolve(name, load_dir, order)
                if resolution.path is None and resolution.via is None:
                    kind = ARCH if resolution.wrong_arch else MISSING
                    detail = (
                        machine_name(resolution.wrong_arch[0][1]) if resolution.wrong_arch else ""
                    )
                    where = resolution.wrong_arch[0][0] if resolution.wrong_arch else None
                    result.failures.append(
                        Failure(kind, name, (*chain, name), where, detail, delay)
                    )
                    if not delay:
                        result.modules[lowered] = resolution
                    continue
                self._check_binding(result, path, chain, name, resolution, delay, order)
                if delay:
                    continue  # loaded later by the delay-load helper; not walked here
                result.modules[lowered] = resolution
                if resolution.path is not None and self.walkable(resolution):
                    queue.append((resolution.path, (*chain, name)))
        if result.ok:
            runtime = result.modules.get(MSVCP140)
            failed = init_failure(self.facts, mapped, runtime.path if runtime else None)
            if failed is not None and runtime is not None:
                result.failures.append(
                    Failure(
                        FailureKind.INIT,
                        runtime.name,
                        (*failed.chain, runtime.name),
                        runtime.path,
                        failed.runtime_version,
                        importer=failed.binary,
                    )
                )
        if result.ok:
            for lowered, resolution in result.modules.items():
                if resolution.path is not None:
                    self.loaded.setdefault(lowered, resolution.path)
        return result

    def _check_binding(
        self,
        result: LoadResult,
        importer: str,
        chain: tuple[str, ...],
        name: str,
        resolution: Resolution,
        delay: bool,
        order: SearchOrder | None = None,
    ) -> None:
        """Add a :data:`SYMBOL` failure when the bound copy lacks what ``importer`` takes."""
        bindings = self.bindings
        if bindings is None or not bindings.checkable(resolution.path):
            return
        assert resolution.path is not None
        load_dir = ntpath.dirname(result.root)
        gap = bindings.gap(
            importer,
            name,
            resolution.path,
            delay,
            lambda dll: self._forwarded(dll, load_dir, order),
        )
        if gap is not None:
            result.failures.append(
                Failure(SYMBOL, name, (*chain, name), resolution.path, "", delay, gap, importer)
            )

    def _forwarded(
        self, dll: str, load_dir: str, order: SearchOrder | None = None
    ) -> Union[str, Trusted, None]:
        """Where an export forwarder's target DLL comes from: a path, trusted, or missing."""
        from torchguard._platforms.windows.bindings import TRUSTED

        resolution = self.resolve(dll, load_dir, order)
        if resolution.via == APISET:
            return TRUSTED
        if resolution.path is None:
            return None
        if self.bindings is None or not self.bindings.checkable(resolution.path):
            return TRUSTED
        return resolution.path


def legacy_order(
    model: LoaderModel,
    path_dirs: Iterable[str],
    *,
    cwd: str | None = None,
) -> SearchOrder:
    """``LoadLibraryW``'s standard search order (SafeDllSearchMode) after KnownDLLs.

    python.exe's folder, System32, the 16-bit System folder, the Windows folder, the current
    directory, then PATH (torch prepends its own folders to it before the retry). Folders
    added with ``os.add_dll_directory`` are not searched: CPython never calls
    ``SetDefaultDllDirectories``.
    """
    windows = ntpath.dirname(ntpath.normpath(model.system32))
    order: list[tuple[str, Step]] = [
        (model.app_dir, APP_DIR),
        (model.system32, SYSTEM32),
        (join(windows, "System"), WINDOWS_DIR),
        (windows, WINDOWS_DIR),
    ]
    if cwd:
        order.append((cwd, CURRENT_DIR))
    for folder in path_dirs:
        if folder and not ntpath.isabs(folder):  # a relative PATH entry: from the cwd
            folder = ntpath.join(cwd, folder) if cwd else ""
        if folder:
            order.append((ntpath.normpath(folder), PATH_FALLBACK))
    return tuple(order)


def _imports(facts: PEFacts) -> Iterable[tuple[str, bool]]:
    for name in facts.imports:
        yield name, False
    for name in facts.delay_imports:
        yield name, True


def glob_unsafe(path: str) -> bool:
    """Whether ``glob`` reads ``path`` as a pattern (``[``, ``*``, ``?``) instead of literally."""
    return any(ch in path for ch in "[*?")


def preload_order(tree: WinTree, lib_dir: str, *, ntfs: bool = True) -> list[str]:
    """``glob(torch\\lib\\*.dll)``: the files in directory-listing order.

    On a live machine that is the order the file system lists (what torch's glob sees). For
    an offline install it is NTFS's order (``ntfs``): names compared upper-cased, so ``_``
    sorts after letters. glob's ``*`` skips names that start with a dot. A folder path with
    glob metacharacters (``[``) is itself read as a pattern and matches nothing, so torch
    then preloads nothing at all.
    """
    if glob_unsafe(lib_dir):
        return []
    names = [
        name
        for name, _ in tree.listdir(lib_dir).values()
        if name.lower().endswith(".dll") and not name.startswith(".")
    ]
    if ntfs:
        names.sort(key=str.upper)
    return [join(lib_dir, name) for name in names]
