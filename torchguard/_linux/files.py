"""Files as ld.so sees them on a real (or mounted) Linux file system."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Optional

from torchguard._binary.elfdyn import ElfFacts, read_elf_file

FactsHook = Callable[[str, "os.stat_result"], Optional[ElfFacts]]


class PosixFiles:
    """Paths joined as given (``..`` resolved by the kernel, never by ``normpath``), each
    file's facts read once per analysis; ``cached``/``store`` let a persistent cache serve
    them by file identity (device, inode, size, mtime)."""

    def __init__(
        self,
        cached: FactsHook | None = None,
        store: Callable[[str, os.stat_result, ElfFacts], None] | None = None,
    ) -> None:
        self._facts: dict[tuple[int, int], ElfFacts] = {}
        self._stats: dict[str, os.stat_result | None] = {}
        self._cached = cached
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
        info = self._stat(path)
        if info is not None and self._cached is not None:
            found = self._cached(path, info)
        if found is None:
            self.reads += 1
            found = read_elf_file(path)
            if info is not None and self._store is not None:
                self._store(path, info, found)
        self._facts[key] = found
        return found
