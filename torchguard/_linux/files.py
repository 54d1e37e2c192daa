"""Files as ld.so sees them on a real (or mounted) Linux file system."""

from __future__ import annotations

import os
from typing import Protocol

from torchguard._binary.elfdyn import ElfFacts, read_elf_file


class FactsStore(Protocol):
    """Dynamic facts kept across runs, by file fingerprint."""

    def facts(self, fingerprint: str) -> ElfFacts | None: ...

    def store_facts(self, fingerprint: str, facts: ElfFacts) -> None: ...


class PosixFiles:
    """Paths joined as given (``..`` resolved by the kernel, never by ``normpath``), each
    file's facts read once per analysis; ``store`` serves them across runs by fingerprint."""

    def __init__(self, store: FactsStore | None = None) -> None:
        self._facts: dict[tuple[int, int], ElfFacts] = {}
        self._symbols: dict[tuple[int, int], ElfFacts] = {}
        self._stats: dict[str, os.stat_result | None] = {}
        self._store = store
        self.reads = 0

    def _stat(self, path: str) -> os.stat_result | None:
        if path not in self._stats:
            try:
                self._stats[path] = os.stat(path)
            except (OSError, ValueError):
                self._stats[path] = None
        return self._stats[path]

    def is_file(self, path: str) -> bool:
        info = self._stat(path)
        return info is not None and (info.st_mode & 0o170000) == 0o100000

    def identity(self, path: str) -> tuple[int, int]:
        info = self._stat(path)
        return (info.st_dev, info.st_ino) if info is not None else (-1, hash(path))

    def facts(self, path: str) -> ElfFacts:
        key = self.identity(path)
        found = self._facts.get(key)
        if found is not None:
            return found
        fingerprint = self.fingerprint(path)
        if self._store is not None:
            found = self._store.facts(fingerprint)
        if found is None:
            self.reads += 1
            found = read_elf_file(path, symbols=False)
            if self._store is not None:
                self._store.store_facts(fingerprint, found)
        self._facts[key] = found
        return found

    def symbols(self, path: str) -> ElfFacts:
        key = self.identity(path)
        found = self._symbols.get(key)
        if found is None:
            self.reads += 1
            found = self._symbols[key] = read_elf_file(path, symbols=True)
        return found

    def fingerprint(self, path: str) -> str:
        """The file's identity and state, not its name: a symlink and its target, or one
        file seen through two venvs, share facts and verdicts."""
        info = self._stat(path)
        if info is None:
            return f"{path}|absent"
        return f"{info.st_dev}|{info.st_ino}|{info.st_size}|{info.st_mtime_ns}"
