"""The one persistent cache of facts, for both platforms: a warm run reads no binary.

What it keeps: PE facts, ELF facts, binding verdicts, fatbin architectures and other facts
derived from files or folder states (a site-packages folder's RECORD summaries, torch's
preload plan ...), each an entry ``kind|key`` holding a JSON value. Facts of a file are keyed
by its identity (path, size, modification time, file id; a wheel member by the wheel's
identity and the member's CRC and size); facts of a folder by the folder's state. Only facts
about files are stored: a reader that fails for any reason other than the file's own damage
raises instead, and nothing is written.

Layout: two JSON files per *scope* (an environment: the torch installation a run analyses),
in ``facts-v3/`` under the user cache folder (``platformdirs``) or ``TORCHGUARD_CACHE_DIR``;
``TORCHGUARD_CACHE=off`` disables it. The *hot* file holds what the last writing run used,
the *cold* one the rest of that environment's entries (the facts of every binary, read
once after a change). A warm run parses only its environment's hot file, whose size follows
what a run needs, never the history of other environments; it reads the cold file only when
the hot one lacks an entry, and then writes, so that the next run does not.

Bounds: an environment keeps at most :data:`MAX_ENTRIES` entries and :data:`MAX_BYTES`, the
least recently used dropped first, and an entry no run has used for :data:`KEEP_DAYS`
days (the facts of a file since replaced) is dropped; at most :data:`MAX_SCOPES`
environments are kept, the least recently used removed.

Writes: a run writes only when it learned something new or when what it used is about to be
dropped (then it renews the day those entries were last used), so a warm run in an unchanged
environment writes nothing, save once every :data:`KEEP_DAYS` / 2 days. A write takes one lock
for the cache folder, reads the file again, lays its new entries over what other processes
saved meanwhile, and replaces the file atomically. A file that is missing, unreadable,
damaged, huge or of another version (the schema and the versions of torchguard and its
readers are stamped in it) is simply rebuilt, and nothing but the cache's own files is ever
written or removed.
"""

from __future__ import annotations

import hashlib
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
from torchguard._binary.state import watch

SCHEMA = 3
FOLDER = f"facts-v{SCHEMA}"
LOCK_NAME = f"facts-v{SCHEMA}.lock"
SUFFIX = ".json"
COLD_SUFFIX = ".cold.json"
DEFAULT_SCOPE = "default"
MAX_ENTRIES = 16384  # per environment, hot and cold together
MAX_BYTES = 8 << 20  # per environment: a larger file is not ours to parse; writes stay under
MAX_SCOPES = 64  # environments kept; the least recently used file goes first
SMALL_HOT = 256  # entries: a hot file this small is never rewritten just to shrink it
KEEP_DAYS = 30  # days an entry survives unused (the facts of a replaced file)
TOUCH_AFTER = 86400.0  # seconds: a used environment file older than this has its time renewed
LEFTOVER_AGE = 3600.0  # seconds after which a temporary file is a killed writer's
LOCK_WAIT = 0.5  # seconds a save waits for another process's save
LOCK_STALE = 5.0  # seconds after which a lock is taken to be a killed process's
LOCK_POLL = 0.005  # seconds between two attempts to take the lock

#: Entry kinds of the PE side (the Linux side's are ``linux-<section>``).
PE = "pe"
EDGE = "edge"

Entries = dict[str, list[Any]]
"""``kind|key`` -> ``[day last used, value]``, least recently used first."""


def writer() -> str:
    """Who wrote a cache: torchguard's version and its readers'."""
    from torchguard._version import __version__

    return f"torchguard {__version__}, reader {READER_VERSION}, schema {SCHEMA}"


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
    """The cache of this user (or of ``TORCHGUARD_CACHE_DIR``); a run-only one when disabled."""
    return FactsCache(cache_dir())


def scope_file(directory: Path, scope: str) -> Path:
    """The file that holds one environment's entries."""
    digest = hashlib.sha1(scope.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return directory / FOLDER / f"{digest}{SUFFIX}"


def cold_file(hot: Path) -> Path:
    """The file that holds the entries of an environment its last writing run did not use."""
    return hot.with_name(hot.name[: -len(SUFFIX)] + COLD_SUFFIX)


def host_key(path: str) -> str | None:
    """The identity of a file on disk, or None when it cannot be stat-ed."""
    watch(path)
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
    """One environment's entries: loaded on first use, saved once at the end of a run.

    ``directory=None`` keeps entries for this run only. :meth:`use_scope` names the
    environment before the first look-up (``default`` otherwise).
    """

    def __init__(self, directory: Path | None, scope: str = DEFAULT_SCOPE) -> None:
        self.directory = directory
        self.scope = scope
        self._entries: Entries | None = None  # the hot file's
        self._cold: Entries | None = None  # read only when the hot file lacks an entry
        self._stale = False  # the file's time is old: renew it so the environment stays
        self._new: dict[str, Any] = {}
        self._used: set[str] = set()
        self._from_cold: set[str] = set()

    def use_scope(self, scope: str) -> None:
        """Serve ``scope`` from now on; what another scope learned is saved first."""
        if scope == self.scope:
            return
        if self._new:
            self.save()
        self.scope, self._entries, self._cold = scope, None, None
        self._new.clear()
        self._used.clear()
        self._from_cold.clear()

    # -- generic entries ----------------------------------------------------------------
    def found(self, kind: str, key: str | None) -> Any:
        """The stored value of ``kind|key`` (validated by the caller), or None."""
        if key is None:
            return None
        name = f"{kind}|{key}"
        if name in self._new:
            return self._new[name]
        entry = self._entry(name)
        if entry is None:
            return None
        self._used.add(name)
        return entry[1]

    def store(self, kind: str, key: str | None, value: Any) -> None:
        """Keep ``value`` for ``kind|key``; storing what is already there is a use, not news."""
        if key is None:
            return
        name = f"{kind}|{key}"
        if name not in self._new:
            entry = self._entry(name)
            if entry is not None and entry[1] == value:
                self._used.add(name)
                return
        self._new[name] = value

    def forget(self, kind: str, key: str) -> None:
        """Drop a damaged entry of this run's view (a later store replaces it on disk)."""
        name = f"{kind}|{key}"
        self._loaded().pop(name, None)
        self._cold_loaded().pop(name, None)
        self._new.pop(name, None)
        self._used.discard(name)
        self._from_cold.discard(name)

    # -- the PE side ---------------------------------------------------------------------
    def get(self, key: str | None) -> PEFacts | PEReadError | None:
        """PE facts (or the file's read error) of the file ``key`` names, or None."""
        raw = self.found(PE, key)
        if raw is None or key is None:
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
            self.forget(PE, key)  # a damaged entry is dropped and read again
            return None

    def put(self, key: str | None, value: PEFacts | PEReadError) -> None:
        """Keep PE facts, or a :class:`PEReadError` (the file's own damage)."""
        raw = {"error": str(value)} if isinstance(value, PEReadError) else asdict(value)
        self.store(PE, key, raw)

    def get_edge(self, key: str) -> Any:
        """The stored verdict for a binding (validated by the caller), or None."""
        return self.found(EDGE, key)

    def put_edge(self, key: str, verdict: dict[str, Any]) -> None:
        self.store(EDGE, key, verdict)

    def get_derived(self, kind: str, identity: str | None) -> Any:
        """A JSON value derived from one file or folder (``kind``: what it is), or None."""
        return self.found(kind, identity) if identity else None

    def put_derived(self, kind: str, identity: str | None, value: Any) -> None:
        if identity:
            self.store(kind, identity, value)

    # -- loading and saving --------------------------------------------------------------
    def _entry(self, name: str) -> list[Any] | None:
        """The well-formed entry ``name``: from the hot file, else from the cold one."""
        entries = self._entries  # loaded once; asked hundreds of times a warm run
        entry = (entries if entries is not None else self._loaded()).get(name)
        if entry is None:
            entry = self._cold_loaded().get(name)
            if entry is not None:
                self._from_cold.add(name)
        return entry

    def _loaded(self) -> Entries:
        if self._entries is None:
            self._entries = {}
            if self.directory is not None:
                path = scope_file(self.directory, self.scope)
                self._entries, age = _load(path, self.scope)
                self._stale = age > TOUCH_AFTER
        return self._entries

    def _cold_loaded(self) -> Entries:
        if self._cold is None:
            self._cold = {}
            if self.directory is not None:
                path = cold_file(scope_file(self.directory, self.scope))
                self._cold = _load(path, self.scope)[0]
        return self._cold

    def save(self) -> None:
        """Write what this run learned; failures are ignored (the cache is only a speed-up).

        A run that only read writes nothing unless its view of the hot file is worth
        renewing (:meth:`_worth_rewriting`). The file of an environment that is used but
        unchanged has only its time renewed, once a day.
        """
        if self.directory is None or self._entries is None:
            return
        path = scope_file(self.directory, self.scope)
        if not self._new and not self._worth_rewriting():
            if self._stale and self._used:
                with suppress(OSError):
                    os.utime(path)
                self._stale = False
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        with _lock(self.directory / LOCK_NAME) as locked:
            if locked and self._merge_and_write(path):
                _evict_scopes(path.parent, keep=path)

    def _merge_and_write(self, path: Path) -> bool:
        """Under the lock: both files read again, this run's uses and news laid over them,
        the bounds applied, then split: what this run used or learned is the hot file."""
        cold = cold_file(path)
        entries = _load(cold, self.scope)[0]
        entries.update(_load(path, self.scope)[0])
        today = _today()
        for name in self._used:  # used now: moved to the most recent end
            entry = entries.pop(name, None)
            if entry is not None and name not in self._new:
                entries[name] = [today, entry[1]]
        for name, value in self._new.items():
            entries.pop(name, None)
            entries[name] = [today, value]
        oldest = today - KEEP_DAYS
        kept = [(name, entry) for name, entry in entries.items() if entry[0] >= oldest]
        kept = kept[-MAX_ENTRIES:]
        wanted = self._used | set(self._new)
        hot = [(name, entry) for name, entry in kept if name in wanted]
        rest = [(name, entry) for name, entry in kept if name not in wanted]
        if rest:
            if not self._write(cold, rest):
                return False
        else:
            with suppress(OSError):
                cold.unlink()
        if not self._write(path, hot):
            return False
        self._entries, self._cold = dict(hot), None
        self._new.clear()
        self._used.clear()
        self._from_cold.clear()
        self._stale = False
        return True

    def _write(self, path: Path, kept: list[tuple[str, list[Any]]]) -> bool:
        """Write one file, under :data:`MAX_BYTES` (its older half dropped until it is)."""
        while True:
            document = {
                "schema": SCHEMA,
                "writer": writer(),
                "scope": self.scope,
                "entries": dict(kept),
            }
            text = json.dumps(document, separators=(",", ":"))
            if len(text) < MAX_BYTES or not kept:
                break
            kept[:] = kept[len(kept) // 2 :]  # over the size bound: the older half goes
        return replace_text(path, text)

    def _worth_rewriting(self) -> bool:
        """Whether a run that learned nothing should still write: it needed entries of the
        cold file (the next run would read it again), it used under half of a large hot
        file (what a change left there), an entry it used was last renewed more than half
        of :data:`KEEP_DAYS` ago, or one is in the older half of a file past half full."""
        entries = self._entries or {}
        if not self._used:
            return False
        if self._from_cold:
            return True
        if len(entries) > SMALL_HOT and len(self._used) < len(entries) // 2:
            return True
        limit = _today() - KEEP_DAYS // 2
        if any(entries[name][0] < limit for name in self._used if name in entries):
            return True
        if len(entries) <= MAX_ENTRIES // 2:
            return False
        older = len(entries) - MAX_ENTRIES // 2
        for index, name in enumerate(entries):
            if index >= older:
                break
            if name in self._used:
                return True
        return False


def _today() -> int:
    """Days since the epoch: when an entry was last used (a seam for tests)."""
    return int(time.time() // 86400)


def _load(path: Path, scope: str) -> tuple[Entries, float]:
    """(entries, age in seconds) of an environment's file; empty for a missing, damaged,
    huge or foreign one, or one of another scope (a digest collision)."""
    empty: tuple[Entries, float] = ({}, 0.0)
    try:
        info = path.stat()
        if info.st_size > MAX_BYTES:
            return empty
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return empty
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return empty
    if data.get("writer") != writer() or data.get("scope") != scope:
        return empty
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return empty
    # well formed: [day last used, value] (JSON's names are strings already)
    kept = {
        name: entry
        for name, entry in entries.items()
        if type(entry) is list and len(entry) == 2 and type(entry[0]) is int
    }
    return kept, time.time() - info.st_mtime


def replace_text(path: Path, text: str, newline: str | None = None) -> bool:
    """Write ``text`` to ``path`` atomically (a link is replaced, never its target);
    ``newline`` as :func:`open`'s (``"\\n"``: the same bytes on Windows)."""
    try:
        handle, temporary = tempfile.mkstemp(prefix=".facts-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline=newline) as stream:
                stream.write(text)
            os.replace(temporary, path)
        except BaseException:
            with suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError:
        return False
    return True


def _evict_scopes(folder: Path, keep: Path) -> None:
    """Remove the least recently used environments' files past :data:`MAX_SCOPES`, and the
    temporary files of killed writers; only the cache's own file names are ever removed."""
    now = time.time()
    scopes: dict[str, float] = {}
    with suppress(OSError):
        for entry in os.scandir(folder):
            name = entry.name
            with suppress(OSError):
                if name.startswith(".facts-") and name.endswith(".tmp"):
                    if now - entry.stat().st_mtime > LEFTOVER_AGE:
                        os.unlink(entry.path)
                elif _digest_of(name) and _digest_of(name) != _digest_of(keep.name):
                    digest = _digest_of(name)
                    scopes[digest] = max(scopes.get(digest, 0.0), entry.stat().st_mtime)
    order = sorted(scopes, key=lambda digest: scopes[digest])
    for digest in order[: max(0, len(order) + 1 - MAX_SCOPES)]:
        for suffix in (SUFFIX, COLD_SUFFIX):
            with suppress(OSError):
                (folder / f"{digest}{suffix}").unlink()


def _digest_of(name: str) -> str:
    """The environment digest of one of its files' names; "" for any other name."""
    for suffix in (COLD_SUFFIX, SUFFIX):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == 20 and all(c in "0123456789abcdef" for c in stem):
                return stem
    return ""


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
