"""The vocabulary of the ld.so model: what it reads files through, what it knows of the
process at start, the objects it loads, and how a load fails (in glibc's words)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from torchguard._platforms.linux.files import LoadFacts as ElfFacts
from torchguard._platforms.linux.files import SymbolTable
from torchguard._platforms.linux.hwcaps import Cpu

MISSING = "missing"
CORRUPT = "corrupt"
VERSION = "version"
SYMBOL = "symbol"


class ElfFiles(Protocol):
    """The files the model may look at (a live file system, a wheel set, a test fixture)."""

    def is_file(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def dir_state(self, path: str) -> str | None:
        """A key that changes when entries are added to or removed from the folder (its
        inode and mtime); None when it is no folder."""
        ...

    def setuid(self, path: str) -> bool:
        """The file has its set-user-ID bit (secure mode preloads only such files)."""
        ...

    def readable(self, path: str) -> bool:
        """Whether the process may open ``path``: glibc moves on to the next candidate of a
        search when ``open`` fails with EACCES, as when the file is missing."""
        ...

    def identity(self, path: str) -> Hashable:
        """What makes two paths one file (device and inode on a live system)."""
        ...

    def facts(self, path: str) -> ElfFacts:
        """The dynamic facts of ``path`` (symbols may be left out); raises
        :class:`ElfRejected` for a file glibc refuses, :class:`ElfNotUnderstood` for one only
        torchguard's reader refuses, ``ElfUnreadable`` when it cannot be read now."""
        ...

    def symbols(self, path: str) -> SymbolTable:
        """The facts of ``path`` with its symbol table."""
        ...

    def fingerprint(self, path: str) -> str:
        """A key that changes whenever the file's contents may have (path, size, mtime, inode)."""
        ...


class Verdicts(Protocol):
    """Binding verdicts kept across runs: a warm analysis reads no symbol table. Also which
    hwcaps subfolders a search folder has, by the folder's state: one ``stat`` per folder."""

    def bound(self, key: str) -> bool: ...

    def remember(self, key: str) -> None: ...

    def subdir_tops(self, key: str) -> tuple[str, ...] | None: ...

    def store_subdir_tops(self, key: str, tops: tuple[str, ...]) -> None: ...


class _NoVerdicts:
    def bound(self, key: str) -> bool:
        return False

    def remember(self, key: str) -> None:
        return None

    def subdir_tops(self, key: str) -> tuple[str, ...] | None:
        return None

    def store_subdir_tops(self, key: str, tops: tuple[str, ...]) -> None:
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
    preload: tuple[str, ...] = ()
    """``LD_PRELOAD`` entries, as ld.so split them (spaces and colons)."""
    preload_file: tuple[str, ...] = ()
    """``/etc/ld.so.preload`` entries (honoured in secure mode too)."""
    lib: str = "lib64"
    """``$LIB``: glibc's configured library directory (``lib/x86_64-linux-gnu`` on Debian)."""
    cpu: Callable[[], Cpu] | None = None
    """The CPU's x86-64 level and ``$PLATFORM``, asked for only when a search directory has
    a hwcaps subdirectory or an entry names ``$PLATFORM`` (live it reads ``/proc/cpuinfo``).
    None: a baseline x86-64 (no hwcaps subdirectory is tried)."""
    glibc: tuple[int, int] | None = None
    """glibc's version (which hwcaps subdirectories exist); None: unknown, taken as 2.37+."""
    machine_name: str = "x86_64"
    library_path_doubt: str = ""
    """Why ``ld_library_path`` may not be what ld.so read at start (empty: it is). A failure
    a folder on the real one could undo then carries this as its ``doubt``."""


@dataclass(eq=False)
class SharedObject:
    """One object in the process's link map."""

    path: str
    facts: ElfFacts
    names: set[str]
    loader: SharedObject | None
    via: str
    deps: list[SharedObject] = field(default_factory=list)
    unread: str = ""
    """Why its facts are unknown (it could not be read, or only torchguard's reader refuses
    it); empty when read. An unread object is taken as glibc would map it, with no needs."""
    scope_unknown: bool = False
    """Mapped before the analysis outside the executable's closure and ``LD_PRELOAD``: it may
    have been opened with ``RTLD_GLOBAL`` (nothing in ``/proc`` says), so its definitions
    may or may not serve later loads."""

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
    doubt: str = ""
    """Why this failure is not certain (an unread object or one of unknown scope might
    supply what is missing); empty for a proof."""

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
class IgnoredPreload:
    """A preload entry ld.so reports and skips: ``ERROR: ld.so: object '<entry>' from
    <source> cannot be preloaded (<reason>): ignored.``"""

    entry: str
    source: str
    reason: str

    def message(self) -> str:
        return (
            f"ERROR: ld.so: object '{self.entry}' from {self.source} cannot be preloaded "
            f"({self.reason}): ignored."
        )


@dataclass(frozen=True)
class DlopenResult:
    ok: bool
    root: SharedObject | None = None
    error: LoadError | None = None
    new: tuple[SharedObject, ...] = ()
