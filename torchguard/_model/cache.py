"""A persistent cache of facts about binaries, so a warm ``ensure()`` reads no DLL.

Three sections: PE facts, binding verdicts, and facts other checks derive from one file (the
GPU architectures of a fatbin, the commit a DLL's writable sections cost).

Facts of a file on disk are keyed by its path, size, modification time and file id; facts of
a wheel member by the wheel's identity and the member's CRC and size. A binding verdict (does
this copy of a DLL export what that importer takes from it?) is keyed by both files'
identities. Only facts about files are stored: a reader that fails for any reason other than
the file's own damage raises instead, and nothing is written.

The file carries the schema and the version of torchguard and of its PE reader that wrote it;
a cache written by any other version is ignored and replaced, so a wrong fact never outlives
the release that fixes it. It lives in the user cache folder (``platformdirs``), or in
``TORCHGUARD_CACHE_DIR``; ``TORCHGUARD_CACHE=off`` disables it. It is replaced atomically
(entries other processes saved meanwhile are merged in), a file that is missing, unreadable,
damaged, huge or of another version is simply rebuilt, and nothing but its own file is
ever written.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torchguard._binary.pe.errors import PEReadError
from torchguard._binary.pe.image import READER_VERSION, PEFacts

SCHEMA = 2
FILE_NAME = f"pe-facts-v{SCHEMA}.json"
MAX_ENTRIES = 4096
MAX_EDGES = 8192
#: Each part of the file and how many entries it keeps: PE facts, binding verdicts, and facts
#: other checks derive from one file (a fatbin's GPU architectures, a DLL's commit share).
SECTIONS = {"facts": MAX_ENTRIES, "edges": MAX_EDGES, "derived": MAX_ENTRIES}
MAX_BYTES = 16 << 20  # a larger file is not ours to parse: ignore it and write a fresh one
LOCK_NAME = f"pe-facts-v{SCHEMA}.lock"
LOCK_WAIT = 0.5  # seconds a save waits for another process's save
LOCK_STALE = 5.0  # seconds after which a lock is taken to be a killed process's
LOCK_POLL = 0.005  # seconds between two attempts to take the lock


def writer() -> str:
    """Who wrote a cache: torchguard's version and its reader's."""
    from torchguard._version import __version__

    return f"torchguard {__version__}, reader {READER_VERSION}"


def cache_dir() -> Path | None:
    """Where the cache lives, or None when disabled."""
    if os.environ.get("TORCHGUARD_CACHE", "").strip().lower() == "off":
        return None
    override = os.environ.get("TORCHGUARD_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("torchguard", appauthor=False))


def user_cache() -> FactsCache:
    """The cache of this user (or of ``TORCHGUARD_CACHE_DIR``); a no-op one when disabled."""
    return FactsCache(cache_dir())


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
    """Facts (or the file's own read error) and edge verdicts; load once, save once."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        self._new: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
        #: Keys this run found, per section: they are the most recently used at the next save.
        self._used: dict[str, set[str]] = {name: set() for name in SECTIONS}
        if directory is not None:
            self._sections = _load(directory / FILE_NAME)
        self._facts = self._sections["facts"]

    def get(self, key: str | None) -> PEFacts | PEReadError | None:
        if key is None:
            return None
        raw = self._found("facts", key)
        if raw is None:
            return None
        try:
            if "error" in raw:
                return PEReadError(str(raw["error"]))
            return PEFacts(
                machine=int(raw["machine"]),
                is_dll=bool(raw["is_dll"]),
                imports=_names(raw["imports"]),
                delay_imports=_names(raw["delay_imports"]),
                linker_version=(int(raw["linker_version"][0]), int(raw["linker_version"][1])),
                file_version=_version(raw.get("file_version")),
                openmp=_names(raw.get("openmp", [])),
                mutex=_optional_text(raw.get("mutex")),
            )
        except (KeyError, TypeError, ValueError, IndexError):
            self._facts.pop(key, None)  # a damaged entry is dropped and read again
            return None

    def put(self, key: str | None, value: PEFacts | PEReadError) -> None:
        if key is None or self.directory is None:
            return
        raw = {"error": str(value)} if isinstance(value, PEReadError) else asdict(value)
        self._put("facts", key, raw)

    def get_edge(self, key: str) -> Any:
        """The stored verdict for a binding (validated by the caller), or None."""
        return self._found("edges", key)

    def put_edge(self, key: str, verdict: dict[str, Any]) -> None:
        self._put("edges", key, verdict)

    def get_derived(self, kind: str, identity: str | None) -> Any:
        """A JSON value derived from one file (``kind``: what it is), validated by the caller."""
        return self._found("derived", f"{kind}|{identity}") if identity else None

    def put_derived(self, kind: str, identity: str | None, value: Any) -> None:
        if identity is not None:
            self._put("derived", f"{kind}|{identity}", value)

    def _found(self, section: str, key: str) -> Any:
        """The stored value of ``key``, remembered as used by this run; None if absent."""
        raw = self._sections[section].get(key)
        if raw is not None and self.directory is not None:
            self._used[section].add(key)
        return raw

    def _put(self, section: str, key: str, value: Any) -> None:
        if self.directory is None:
            return
        self._sections[section][key] = self._new[section][key] = value

    def save(self) -> None:
        """Write the cache if it changed; failures are ignored (the cache is only a speed-up).

        Entries another process saved since this one loaded are kept: under a lock file, the
        file on disk is read again and this run's new entries are laid over it. A lock held
        too long (a killed process) is broken; one that stays busy means this run's entries
        are simply not saved.

        A full section drops its least recently used entries: what this run used counts as
        new. A run that only read saves only when what it used is among the entries the next
        drop would take, so a warm run almost never writes.
        """
        if self.directory is None:
            return
        if not any(self._new.values()) and not self._used_at_risk():
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        with _lock(self.directory / LOCK_NAME) as locked:
            if locked:
                self._merge_and_write()

    def _merge_and_write(self) -> None:
        assert self.directory is not None
        target = self.directory / FILE_NAME
        sections = _load(target)
        document: dict[str, Any] = {"schema": SCHEMA, "writer": writer()}
        for name, limit in SECTIONS.items():
            section = sections[name]
            for key in self._used[name]:  # used now: move to the most recent end
                if key in section and key not in self._new[name]:
                    section[key] = section.pop(key)
            section.update(self._new[name])
            document[name] = dict(list(section.items())[-limit:])
        try:
            handle, temporary = tempfile.mkstemp(prefix=".pe-facts-", dir=self.directory)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as stream:
                    json.dump(document, stream, separators=(",", ":"))
                os.replace(temporary, target)  # replaces a link itself, never its target
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            return
        for new in self._new.values():
            new.clear()
        for used in self._used.values():
            used.clear()

    def _used_at_risk(self) -> bool:
        """Whether an entry this run used is in the older half of a section past half full."""
        for name, limit in SECTIONS.items():
            used, section = self._used[name], self._sections[name]
            if not used or len(section) <= limit // 2:
                continue
            older = len(section) - limit // 2
            for index, key in enumerate(section):
                if index >= older:
                    break
                if key in used:
                    return True
        return False


@contextmanager
def _lock(path: Path) -> Iterator[bool]:
    """An exclusive lock file (portable: created with O_EXCL); yields whether it was taken.

    Every wait is bounded by :data:`LOCK_WAIT` and sleeps between attempts: a lock that
    cannot be taken or broken (a folder at its path, another user's file in a shared cache
    folder, a file held open on Windows) makes the save give up, never spin.
    """
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            break
        except FileExistsError:
            _break_if_stale(path)
        except OSError:
            yield False
            return
        if time.monotonic() >= deadline:
            yield False
            return
        time.sleep(LOCK_POLL)
    try:
        yield True
    finally:
        os.close(handle)
        with suppress(OSError):
            path.unlink()


def _break_if_stale(path: Path) -> None:
    """Remove a lock left by a killed process; one that cannot be removed is left alone."""
    with suppress(OSError):
        if time.time() - path.stat().st_mtime > LOCK_STALE:
            path.unlink()


def _load(path: Path) -> dict[str, dict[str, Any]]:
    """Each section of a cache file of this schema and writer; empty for anything else."""
    empty: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    try:
        if path.stat().st_size > MAX_BYTES:
            return empty
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return empty
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return empty
    if data.get("writer") != writer():
        return empty
    for name in SECTIONS:
        section = data.get(name)
        if isinstance(section, dict):
            empty[name] = dict(section)
    return empty


def _names(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise TypeError("a list of names")
    return tuple(str(name) for name in raw)


def _optional_text(raw: Any) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise TypeError("a string or null")
    return raw


def _version(raw: Any) -> tuple[int, int, int, int] | None:
    if raw is None:
        return None
    a, b, c, d = (int(part) for part in raw)
    return (a, b, c, d)
