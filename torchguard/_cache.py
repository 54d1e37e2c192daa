"""A persistent cache of PE facts, so a warm ``ensure()`` costs little more than stat calls.

Facts of a file on disk are keyed by its path, size, modification time and file id; facts of
a wheel member by the wheel's identity and the member's CRC and size. The cache lives in the
user cache folder (``platformdirs``), or in ``TORCHGUARD_CACHE_DIR``; ``TORCHGUARD_CACHE=off``
disables it. It is one small JSON file, replaced atomically; a missing, unreadable or corrupt
cache is simply rebuilt, never an error, and never touches anything but its own file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torchguard._pe import PEFacts, PEReadError

SCHEMA = 1
FILE_NAME = f"pe-facts-v{SCHEMA}.json"
MAX_ENTRIES = 4096


def cache_dir() -> Path | None:
    """Where the cache lives, or None when disabled."""
    if os.environ.get("TORCHGUARD_CACHE", "").strip().lower() == "off":
        return None
    override = os.environ.get("TORCHGUARD_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("torchguard", appauthor=False))


def host_key(path: str) -> str | None:
    """The identity of a file on disk, or None when it cannot be stat-ed."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"file|{os.path.normcase(path)}|{info.st_size}|{info.st_mtime_ns}|{info.st_ino}"


def member_key(archive: str, member: str, crc: int, size: int) -> str | None:
    try:
        info = os.stat(archive)
    except OSError:
        return None
    identity = f"{os.path.normcase(os.path.abspath(archive))}|{info.st_size}|{info.st_mtime_ns}"
    return f"zip|{identity}|{member}|{crc}|{size}"


class FactsCache:
    """Facts (or the read error) by file identity; load once, save once if anything changed."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._entries: dict[str, Any] = {}
        self._dirty = False
        if directory is not None:
            self._entries = _load(directory / FILE_NAME)

    def get(self, key: str | None) -> PEFacts | PEReadError | None:
        if key is None:
            return None
        raw = self._entries.get(key)
        if raw is None:
            return None
        try:
            if "error" in raw:
                return PEReadError(str(raw["error"]))
            return PEFacts(
                machine=int(raw["machine"]),
                is_dll=bool(raw["is_dll"]),
                imports=tuple(str(n) for n in raw["imports"]),
                delay_imports=tuple(str(n) for n in raw["delay_imports"]),
                linker_version=(int(raw["linker_version"][0]), int(raw["linker_version"][1])),
                file_version=_version(raw.get("file_version")),
            )
        except (KeyError, TypeError, ValueError, IndexError):
            self._entries.pop(key, None)  # a damaged entry is dropped and read again
            return None

    def put(self, key: str | None, value: PEFacts | PEReadError) -> None:
        if key is None or self.directory is None:
            return
        if isinstance(value, PEReadError):
            self._entries[key] = {"error": str(value)}
        else:
            self._entries[key] = asdict(value)
        self._dirty = True

    def save(self) -> None:
        """Write the cache if it changed; failures are ignored (the cache is only a speed-up)."""
        if not self._dirty or self.directory is None:
            return
        entries = dict(list(self._entries.items())[-MAX_ENTRIES:])
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=".pe-facts-", dir=self.directory)
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


def _version(raw: Any) -> tuple[int, int, int, int] | None:
    if raw is None:
        return None
    a, b, c, d = (int(part) for part in raw)
    return (a, b, c, d)
