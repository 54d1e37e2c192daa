"""GPU facts of DLLs (fatbin architectures, commit share) cached by file identity.

A warm ``ensure()`` on a CUDA machine then reads no DLL for them either: walking the fatbin
headers of a 1 GB ``torch_cuda.dll`` touches thousands of pages. Same rules as the PE facts
cache: keyed by path, size, modification time and file id, one small JSON file beside it,
replaced atomically, rebuilt silently when missing or damaged, off with ``TORCHGUARD_CACHE=off``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from torchguard._cache import cache_dir, host_key

SCHEMA = 1
FILE_NAME = f"gpu-facts-v{SCHEMA}.json"
MAX_ENTRIES = 2048


class GpuFactsCache:
    """JSON-able values by (kind, file identity); load once, save once if anything changed."""

    def __init__(self, directory: Path | None = None, *, enabled: bool = True) -> None:
        self.directory = (directory or cache_dir()) if enabled else None
        self._entries: dict[str, Any] = {}
        self._dirty = False
        if self.directory is not None:
            self._entries = _load(self.directory / FILE_NAME)

    @staticmethod
    def key(kind: str, path: str) -> str | None:
        identity = host_key(path)
        return f"{kind}|{identity}" if identity else None

    def get(self, key: str | None) -> Any:
        return self._entries.get(key) if key else None

    def put(self, key: str | None, value: Any) -> None:
        if key is None or self.directory is None:
            return
        self._entries[key] = value
        self._dirty = True

    def save(self) -> None:
        if not self._dirty or self.directory is None:
            return
        entries = dict(list(self._entries.items())[-MAX_ENTRIES:])
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".gpu-facts-", dir=self.directory)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as stream:
                    json.dump({"schema": SCHEMA, "entries": entries}, stream)
                os.replace(temporary, self.directory / FILE_NAME)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            return
        self._dirty = False


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return {}
    entries = data.get("entries")
    return dict(entries) if isinstance(entries, dict) else {}
