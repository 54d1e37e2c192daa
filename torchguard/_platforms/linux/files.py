"""Files as ld.so sees them on a real (or mounted) Linux file system.

The ELF reader (``_binary.elf``) says what a file holds; this module keeps, per analysis, the
part the ld.so model uses (:class:`LoadFacts`, :class:`SymbolTable`) and serves it across runs
from a store keyed by the file's identity. A file ld.so rejects raises ``ElfReadError`` with
glibc's own words where glibc has them ("file too short", "invalid ELF header").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from torchguard._binary.elf import ElfFacts, ElfReadError, ElfSymbols, ElfUnreadable, read_elf_file
from torchguard._binary.state import watch
from torchguard._platforms.linux.verify import Verdict, verify_file

if TYPE_CHECKING:
    from torchguard._binary.fatbin import FatbinArchs


class ElfRejected(ElfReadError):
    """glibc's own checks refuse the file: a proof that loading it fails (glibc's words)."""


class ElfNotUnderstood(ElfReadError):
    """torchguard's reader refuses a file that glibc's own checks accept: glibc may map it,
    so nothing is proven; ``foreign`` when it is of another ELF class or machine (a search
    skips it)."""

    def __init__(self, message: str, foreign: bool = False, glibc: str = "") -> None:
        super().__init__(message)
        self.foreign = foreign
        self.glibc = glibc
        """glibc's words for a foreign file opened by path (``wrong ELF class: ...``)."""


@dataclass(frozen=True)
class LoadFacts:
    """What ld.so reads of an object to map it and check its versions.

    ``verneed`` maps a needed file to its (version, weak) pairs; ``verdef`` is None when the
    object defines no versions (glibc then only warns about a missing one).
    """

    elf_class: int
    machine: int
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...] | None
    runpath: tuple[str, ...] | None
    nodeflib: bool
    verneed: dict[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    verdef: frozenset[str] | None = None


@dataclass(frozen=True)
class SymbolTable:
    """``defined``: name -> version names (``""`` unversioned), hidden ones included;
    ``default``: names an unversioned reference binds to; ``undefined``: the non-weak
    references as (name, version or ``""``)."""

    defined: dict[str, frozenset[str]]
    default: frozenset[str]
    undefined: tuple[tuple[str, str], ...]


def load_facts(facts: ElfFacts) -> LoadFacts:
    verneed: dict[str, list[tuple[str, bool]]] = {}
    for need in facts.verneed:
        verneed.setdefault(need.file, []).append((need.name, need.weak))
    names = frozenset(d.name for d in facts.verdef if not d.base)
    return LoadFacts(
        elf_class=facts.elf_class,
        machine=facts.machine,
        soname=facts.soname,
        needed=facts.needed,
        rpath=None if facts.rpath is None else facts.rpath_entries,
        runpath=None if facts.runpath is None else facts.runpath_entries,
        nodeflib=facts.nodeflib,
        verneed={f: tuple(v) for f, v in verneed.items()},
        verdef=names if facts.verdef else None,
    )


def symbol_table(symbols: ElfSymbols) -> SymbolTable:
    defined: dict[str, set[str]] = {}
    default: set[str] = set()
    for symbol in symbols.defined:
        name = symbol.name.decode("utf-8", "surrogateescape")
        defined.setdefault(name, set()).add(symbol.version or "")
        if not symbol.hidden:
            default.add(name)
    undefined = tuple(
        (s.name.decode("utf-8", "surrogateescape"), s.version or "")
        for s in symbols.undefined
        if not s.weak
    )
    return SymbolTable({k: frozenset(v) for k, v in defined.items()}, frozenset(default), undefined)


def glibc_words(
    path: str, error: ElfReadError, elf_class: int = 2, machine: int = 62
) -> ElfReadError:
    """What glibc makes of a file torchguard's reader refused: :class:`ElfRejected` with
    glibc's own message when its checks refuse it too, else :class:`ElfNotUnderstood`
    (or the :class:`ElfUnreadable` it is when the file cannot be read now)."""
    if isinstance(error, ElfUnreadable):
        return error
    return verdict_words(verify_file(path, elf_class, machine), error)


def verdict_words(verdict: Verdict | None, error: ElfReadError) -> ElfReadError:
    """:func:`glibc_words` from glibc's checks' ``verdict`` on the file (None: unreadable)."""
    if verdict is None:
        return ElfUnreadable(f"{error} (and it could not be opened again)")
    if verdict.reject and not verdict.foreign:
        return ElfRejected(verdict.reject)
    return ElfNotUnderstood(
        f"torchguard's ELF reader refuses it: {error}", verdict.foreign, verdict.reject
    )


class FactsStore(Protocol):
    """Load facts kept across runs, by file fingerprint."""

    def facts(self, fingerprint: str) -> LoadFacts | None: ...

    def store_facts(self, fingerprint: str, facts: LoadFacts) -> None: ...


class PosixFiles:
    """Paths joined as given (``..`` resolved by the kernel, never by ``normpath``), each
    file's facts read once per analysis; ``store`` serves them across runs by fingerprint."""

    def __init__(
        self, store: FactsStore | None = None, elf_class: int = 2, machine: int = 62
    ) -> None:
        self._class = elf_class
        self._machine = machine
        self._facts: dict[tuple[int, int], LoadFacts] = {}
        self._symbols: dict[tuple[int, int], SymbolTable] = {}
        self._stats: dict[str, os.stat_result | None] = {}
        self._prints: dict[str, str] = {}
        self._readable: dict[str, bool] = {}
        self._store = store
        self.reads = 0

    def _stat(self, path: str) -> os.stat_result | None:
        if path not in self._stats:
            watch(path)
            try:
                self._stats[path] = os.stat(path)
            except (OSError, ValueError):
                self._stats[path] = None
        return self._stats[path]

    def is_file(self, path: str) -> bool:
        info = self._stat(path)
        return info is not None and (info.st_mode & 0o170000) == 0o100000

    def is_dir(self, path: str) -> bool:
        info = self._stat(path)
        return info is not None and (info.st_mode & 0o170000) == 0o040000

    def dir_state(self, path: str) -> str | None:
        info = self._stat(path)
        if info is None or (info.st_mode & 0o170000) != 0o040000:
            return None
        return f"{info.st_dev}|{info.st_ino}|{info.st_mtime_ns}"

    def setuid(self, path: str) -> bool:
        info = self._stat(path)
        return info is not None and bool(info.st_mode & 0o4000)

    def readable(self, path: str) -> bool:
        found = self._readable.get(path)
        if found is None:
            found = self._readable[path] = os.access(path, os.R_OK)
        return found

    def identity(self, path: str) -> tuple[int, int]:
        info = self._stat(path)
        return (info.st_dev, info.st_ino) if info is not None else (-1, hash(path))

    def facts(self, path: str) -> LoadFacts:
        key = self.identity(path)
        found = self._facts.get(key)
        if found is not None:
            return found
        fingerprint = self.fingerprint(path)
        if self._store is not None:
            found = self._store.facts(fingerprint)
        if found is None:
            self.reads += 1
            try:
                found = load_facts(read_elf_file(path).facts)
            except ElfReadError as error:
                raise glibc_words(path, error, self._class, self._machine) from None
            verdict = verify_file(path, self._class, self._machine)
            if verdict is not None and verdict.reject and not verdict.foreign:
                raise ElfRejected(verdict.reject)  # read, yet glibc's checks refuse it
            if self._store is not None:
                self._store.store_facts(fingerprint, found)
        self._facts[key] = found
        return found

    def symbols(self, path: str) -> SymbolTable:
        key = self.identity(path)
        found = self._symbols.get(key)
        if found is None:
            self.reads += 1
            image = read_elf_file(path, symbols=True)
            assert image.symbols is not None
            found = self._symbols[key] = symbol_table(image.symbols)
        return found

    def fatbin(self, path: str, read: Callable[[str], FatbinArchs | None]) -> FatbinArchs | None:
        """The architectures in the file's ``.nv_fatbin`` through ``read`` (a mapped-file
        reader; ``WheelFiles`` streams the member instead)."""
        return read(self.whole(path))

    def whole(self, path: str) -> str:
        """``path``, ready for a reader that maps the whole file (its ``.rodata`` or
        ``.nv_fatbin``): already so here (see ``WheelFiles``)."""
        return path

    def fingerprint(self, path: str) -> str:
        """The file's identity and state, not its name: a symlink and its target, or one
        file seen through two venvs, share facts and verdicts."""
        found = self._prints.get(path)
        if found is None:
            info = self._stat(path)
            if info is None:
                found = f"{path}|absent"
            else:
                found = f"{info.st_dev}|{info.st_ino}|{info.st_size}|{info.st_mtime_ns}"
            self._prints[path] = found
        return found
