"""A case-insensitive view of a Windows file tree, live or assembled from pieces.

Every path the pipeline handles is a Windows path string (``C:\\Python311\\Lib``). On a live
Windows machine those paths are the host's own. For an offline scan the tree is assembled from
mounts: host folders (a site-packages tree, a folder standing in for System32), wheel members
read in place from the zip, and names that are only assumed to exist (a clean Windows' DLLs).
Lookups ignore case, as NTFS does, even when the host file system does not.
"""

from __future__ import annotations

import errno
import hashlib
import ntpath
import os
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NewType, Union

from torchguard._binary.budget import inflate_budget, mib
from torchguard._binary.state import host_state, watch


@dataclass(frozen=True)
class HostFile:
    """A file on the host file system."""

    path: str

    @property
    def origin(self) -> str:
        return self.path


@dataclass(frozen=True)
class ZipMember:
    """A file read in place from a zip archive (a wheel); never extracted to disk."""

    archive: str
    member: str
    size: int

    @property
    def origin(self) -> str:
        return f"{self.archive}!{self.member}"


@dataclass(frozen=True)
class MemoryFile:
    """A small file held in memory (a RECORD rewritten for an overlaid wheel)."""

    data: bytes
    label: str

    @property
    def origin(self) -> str:
        return self.label


@dataclass(frozen=True)
class AssumedFile:
    """A file that is assumed to exist without being read (a DLL every Windows has)."""

    why: str

    @property
    def origin(self) -> str:
        return f"<{self.why}>"


Entry = Union[HostFile, ZipMember, MemoryFile, AssumedFile]

#: What zipfile raises for a damaged or unusual zip, found by flipping random bytes of wheels:
#: BadZipFile (bad headers, CRC), zlib.error and EOFError (a corrupt deflate stream), OSError,
#: NotImplementedError (an unsupported method or version), RuntimeError (a member flagged as
#: encrypted), ValueError (a negative seek from a bad offset, an undecodable name) and KeyError
#: (a member missing from the directory). Broad, so it is only ever caught around zipfile's own
#: calls (see :class:`MemberStream`), never around torchguard's code, where the same types mean
#: a bug.
ZIP_ERRORS = (
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    KeyError,
    RuntimeError,
    NotImplementedError,
    ValueError,
)


class DamagedMember(OSError):
    """A zip member whose data cannot be read back (what :data:`ZIP_ERRORS` lists)."""


class OversizedMember(DamagedMember):
    """A zip member that inflates beyond its budget (a deflate bomb): never read whole."""


def zip_damage(exc: BaseException) -> bool:
    """Whether an error zipfile raised comes from the archive's bytes, not from reading them.

    zipfile's own OSError for damage is a seek to a negative offset read from a damaged
    header (EINVAL); any other OSError (access denied, a sharing violation, a disk error) is
    the environment's, and says nothing about the archive.
    """
    if isinstance(exc, OSError) and not isinstance(exc, DamagedMember):
        return exc.errno == errno.EINVAL
    return True


class MemberStream:
    """A zip member's stream whose damage errors are :class:`DamagedMember`, and only those
    (an environment's ``OSError`` passes through as itself).

    The reader above it (pefile) then runs outside any zip ``except`` clause, so an error of
    its own is never mistaken for damage in the archive.
    """

    def __init__(self, archive: zipfile.ZipFile, member: str) -> None:
        try:
            self._stream = archive.open(member)
        except ZIP_ERRORS as exc:
            if not zip_damage(exc):
                raise  # the environment's: the caller says so, never "damaged"
            raise DamagedMember(f"cannot open {member}: {exc}") from None

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except ZIP_ERRORS as exc:
            if not zip_damage(exc):
                raise
            raise DamagedMember(f"damaged data: {exc}") from None

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: The one answer to "is this the same file?": a Windows path normalised (``..`` and slashes
#: resolved) and case-folded, as NTFS compares names. Every module asks :func:`path_key`.
PathKey = NewType("PathKey", str)


def normpath(path: str) -> str:
    """``ntpath.normpath(path)``, answered without it for a path already normal.

    Nearly every path an analysis handles is an absolute ``C:\\...`` path built by
    :func:`join`, so already normal; a few substring tests (~0.3 us) then replace
    ``ntpath.normpath``'s ~1.5 us, which every lookup of the tree paid several times.
    """
    if path[1:3] == ":\\" and path[0].isascii() and path[0].isalpha() and "/" not in path:
        rest = path[3:]
        if not rest:
            return path
        if rest[0] != "\\" and rest[-1] != "\\" and "\\\\" not in rest:
            wrapped = f"\\{rest}\\"
            if "\\.\\" not in wrapped and "\\..\\" not in wrapped:
                return path
    return ntpath.normpath(path)


def split(path: str) -> tuple[str, str]:
    """``ntpath.split(normpath(path))``: the folder and the name of a path."""
    normal = normpath(path)
    head, _, name = normal.rpartition("\\")
    if len(head) > 2 and head[1:2] == ":" and head[0].isascii() and head[0].isalpha():
        # below a drive's root: nothing more to strip
        return head, name
    return ntpath.split(normal)


def path_key(path: str) -> PathKey:
    """The case-insensitive identity of a Windows path."""
    return PathKey(ntpath.normcase(normpath(path)))


def same_path(a: str, b: str) -> bool:
    return path_key(a) == path_key(b)


def is_within(path: str, folder: str) -> bool:
    """Whether ``path`` lies in ``folder`` or below it."""
    return path_key(path).startswith(path_key(folder).rstrip("\\") + "\\")


def join(*parts: str) -> str:
    return normpath(ntpath.join(*parts))


@dataclass
class WinTree:
    """A Windows directory tree made of mounts; see the module docstring.

    With ``passthrough`` (live Windows), paths outside every mount are the host's own paths.
    """

    passthrough: bool = False
    _files: dict[str, dict[str, tuple[str, Entry]]] = field(default_factory=dict)
    _host_mounts: list[tuple[str, str]] = field(default_factory=list)
    _listing_cache: dict[str, dict[str, tuple[str, bool]] | None] = field(default_factory=dict)
    _archives: dict[str, zipfile.ZipFile] = field(default_factory=dict)
    _listdir_cache: dict[str, dict[str, tuple[str, Entry]]] = field(default_factory=dict)
    _unlistable: set[str] = field(default_factory=set)
    _subdirs_cache: dict[str, list[str]] = field(default_factory=dict)
    _hosts_cache: dict[str, list[str]] = field(default_factory=dict)
    _hidden: frozenset[str] = frozenset()

    # -- building ---------------------------------------------------------------------------
    def mount_host_dir(self, path: str, host_dir: str) -> None:
        """Make ``host_dir`` (a host folder) appear at the Windows path ``path``."""
        self._host_mounts.append((path_key(path), os.path.abspath(host_dir)))
        self._hosts_cache.clear()
        self._listing_cache.clear()
        self._listdir_cache.clear()
        self._subdirs_cache.clear()

    def hide_host_paths(self, paths: Iterable[str]) -> None:
        """Leave the host files and folders ``paths`` out of every mount, as if removed (what
        ``pip install`` would uninstall, judged without touching it)."""
        self._hidden = self._hidden | {_host_key(path) for path in paths}
        self._hosts_cache.clear()
        self._listing_cache.clear()
        self._listdir_cache.clear()
        self._subdirs_cache.clear()

    def add_file(self, path: str, entry: Entry) -> None:
        """Place one file at the Windows path ``path``; later additions win."""
        directory, name = split(path)
        self._files.setdefault(path_key(directory), {})[name.lower()] = (name, entry)
        self._listdir_cache.pop(path_key(directory), None)
        self._subdirs_cache.clear()

    def add_files(self, directory: str, entries: list[tuple[str, Entry]]) -> None:
        """Place many files in one folder (a wheel's members); later additions win."""
        folder = self._files.setdefault(path_key(directory), {})
        for name, entry in entries:
            folder[name.lower()] = (name, entry)
        self._listdir_cache.clear()
        self._subdirs_cache.clear()

    def archive(self, archive: str) -> zipfile.ZipFile:
        """The open zip file for ``archive``, opened once (closed by :meth:`close`)."""
        opened = self._archives.get(archive)
        if opened is None:
            opened = self._archives[archive] = zipfile.ZipFile(archive)
        return opened

    def close(self) -> None:
        for opened in self._archives.values():
            opened.close()
        self._archives.clear()

    # -- reading ------------------------------------------------------------------------------
    def listdir(self, path: str) -> dict[str, tuple[str, Entry]]:
        """The files directly in ``path``: lower-case name -> (name, entry). Empty if missing.

        Listings are cached: the tree describes one moment of the machine.
        """
        cache_key = path_key(path)
        cached = self._listdir_cache.get(cache_key)
        if cached is not None:
            return cached
        found: dict[str, tuple[str, Entry]] = {}
        for host in self._host_dirs(path):  # folders mounted at one place overlay, later wins
            for lower, (name, is_dir) in (self._host_listing(host) or {}).items():
                if not is_dir:
                    found[lower] = (name, HostFile(os.path.join(host, name)))
        found.update(self._files.get(cache_key, {}))
        self._listdir_cache[cache_key] = found
        return found

    def subdirs(self, path: str) -> list[str]:
        """Names of the directories directly in ``path`` (cached, as :meth:`listdir`)."""
        cache_key = path_key(path)
        cached = self._subdirs_cache.get(cache_key)
        if cached is None:
            cached = self._subdirs_cache[cache_key] = self._list_subdirs(path)
        return list(cached)

    def _list_subdirs(self, path: str) -> list[str]:
        names: dict[str, str] = {}
        for host in self._host_dirs(path):
            for lower, (name, is_dir) in (self._host_listing(host) or {}).items():
                if is_dir:
                    names.setdefault(lower, name)
        prefix = path_key(path).rstrip("\\") + "\\"
        for directory in self._files:
            if directory.startswith(prefix):
                first = directory[len(prefix) :].split("\\", 1)[0]
                if first:
                    names.setdefault(first, first)
        return sorted(names.values(), key=str.lower)

    def lookup(self, directory: str, name: str) -> tuple[str, Entry] | None:
        """The file ``name`` in ``directory``, case-insensitively: (its name, entry) or None.

        A host folder that cannot be listed (Microsoft Store Python's folder may deny it) is
        asked for the one file instead, so it never makes a present DLL look missing.
        """
        key, lower = path_key(directory), name.lower()
        listed = self._listdir_cache.get(key)
        if listed is not None:
            found = listed.get(lower)
        else:  # one name: no need to build the whole folder's entries (System32 has thousands)
            found = self._files.get(key, {}).get(lower) or self._host_file(directory, lower)
        if found is not None:
            return found
        for host in reversed(self._host_dirs(directory)):
            if self._host_listing(host) is None and host in self._unlistable:
                candidate = os.path.join(host, name)
                watch(candidate)
                if _host_key(candidate) not in self._hidden and os.path.isfile(candidate):
                    return (name, HostFile(candidate))
        return None

    def _host_file(self, directory: str, lower: str) -> tuple[str, Entry] | None:
        """``lower`` among the host files behind ``directory``, as :meth:`listdir` would
        find it: the last mount holding a file of that name wins."""
        for host in reversed(self._host_dirs(directory)):
            listing = self._host_listing(host)
            item = listing.get(lower) if listing else None
            if item is not None and not item[1]:
                return (item[0], HostFile(os.path.join(host, item[0])))
        return None

    def names(self, path: str) -> set[str]:
        """Lower-case names of the files directly in ``path`` (:meth:`listdir`'s keys, without
        building an entry for each)."""
        listed = self._listdir_cache.get(path_key(path))
        if listed is not None:
            return set(listed)
        found: set[str] = set()
        for host in self._host_dirs(path):
            found.update(
                lower
                for lower, (_, is_dir) in (self._host_listing(host) or {}).items()
                if not is_dir
            )
        found.update(self._files.get(path_key(path), {}))
        return found

    def entry(self, path: str) -> Entry | None:
        directory, name = split(path)
        found = self.lookup(directory, name)
        return found[1] if found else None

    def folder_state(self, path: str) -> str | None:
        """What changes when an entry is added to, removed from or renamed in the folder
        ``path``: the :func:`host_state` of each host folder behind it. None when part of it
        is held in memory (a wheel's members), when no host folder is behind it, or when one
        cannot be trusted now."""
        wanted = path_key(path).rstrip("\\")
        prefix = wanted + "\\"
        if any(d == wanted or d.startswith(prefix) for d in self._files):
            return None
        states: list[str] = []
        for host in self._host_dirs(path):
            if self._hides_within(host):
                return None  # not the folder as it is on the disk
            state = host_state(host)
            if state is None:
                return None
            states.append(state)
        return "|".join(states) if states else None

    def folder_identity(self, path: str) -> str:
        """Which folder ``path`` is on the host: the host folders behind it (an offline scan's
        site-packages is the same Windows path whatever folders are mounted there)."""
        hosts = [os.path.normcase(os.path.abspath(host)) for host in self._host_dirs(path)]
        return "|".join([path_key(path), *hosts])

    def file_state(self, path: str) -> str | None:
        """The :func:`host_state` of the host file behind ``path``, without listing its folder;
        None for a file held in memory or in a wheel, or one that cannot be trusted now."""
        directory, name = split(path)
        if name.lower() in self._files.get(path_key(directory), {}):
            return None
        hosts = self._host_dirs(directory)
        if not hosts or _host_key(os.path.join(hosts[-1], name)) in self._hidden:
            return None
        return host_state(os.path.join(hosts[-1], name))

    def is_dir(self, path: str) -> bool:
        hosts = self._host_dirs(path)
        for host in hosts:
            watch(host)
        if any(os.path.isdir(host) for host in hosts):
            return True
        wanted = path_key(path).rstrip("\\")
        prefix = wanted + "\\"
        return any(d == wanted or d.startswith(prefix) for d in self._files)

    def is_file(self, path: str) -> bool:
        return self.entry(path) is not None

    def read_bytes(self, path: str) -> bytes:
        """The content of a file; raises OSError when it is missing or only assumed."""
        entry = self.entry(path)
        if entry is None:
            raise FileNotFoundError(path)
        return self.read_entry(entry)

    def read_entry(self, entry: Entry) -> bytes:
        """The whole content of ``entry``; a zip member only within its inflate budget."""
        if isinstance(entry, HostFile):
            watch(entry.path)
            with open(entry.path, "rb") as handle:
                return handle.read()
        if isinstance(entry, ZipMember):
            try:
                archive = self.archive(entry.archive)
                info = archive.getinfo(entry.member)
                budget = inflate_budget(info.compress_size)
                if info.file_size <= budget:
                    return archive.read(entry.member)
            except ZIP_ERRORS as exc:
                if not zip_damage(exc):
                    raise
                raise DamagedMember(f"cannot read {entry.origin}: {exc}") from None
            raise OversizedMember(
                f"{entry.origin} inflates to {mib(info.file_size)} from "
                f"{mib(info.compress_size)}, more than the {mib(budget)} allowed"
            )
        if isinstance(entry, MemoryFile):
            return entry.data
        raise OSError(f"{entry.origin} is assumed to exist and cannot be read")

    def read_head(self, path: str, size: int) -> bytes | None:
        """The first ``size`` bytes of a file on the host or in a wheel; None when unreadable."""
        entry = self.entry(path)
        try:
            if isinstance(entry, HostFile):
                watch(entry.path)
                with open(entry.path, "rb") as handle:
                    return handle.read(size)
            if isinstance(entry, ZipMember):
                with self.archive(entry.archive).open(entry.member) as member:
                    return member.read(size)
        except (OSError, *ZIP_ERRORS):
            return None
        return None

    def host_sha256(self, path: str) -> bytes | None:
        """The SHA-256 of a file on the host (what a RECORD row states); None otherwise."""
        entry = self.entry(path)
        if not isinstance(entry, HostFile):
            return None
        digest = hashlib.sha256()
        watch(entry.path)
        try:
            with open(entry.path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return None
        return digest.digest()

    def read_text(self, path: str) -> str | None:
        try:
            return self.read_bytes(path).decode("utf-8", "replace")
        except OSError:
            return None

    def origin(self, path: str) -> str:
        entry = self.entry(path)
        if entry is not None:
            return entry.origin
        hosts = self._host_dirs(path)
        return hosts[-1] if hosts else path

    def _hides_within(self, host: str) -> bool:
        if not self._hidden:
            return False
        below = _host_key(host).rstrip(os.sep) + os.sep
        return any(hidden.startswith(below) for hidden in self._hidden)

    # -- host mapping ----------------------------------------------------------------------
    def _host_dirs(self, path: str) -> list[str]:
        """The host folders behind the Windows folder ``path``, in mount order.

        Every folder mounted at the deepest mount point above ``path`` counts (``--system32 A
        --system32 B``, or two site-packages folders, overlay), each resolved
        case-insensitively; a mount that lacks the subfolder adds nothing.
        """
        wanted = path_key(path).rstrip("\\")
        cached = self._hosts_cache.get(wanted)
        if cached is None:
            cached = self._hosts_cache[wanted] = self._find_host_dirs(path, wanted)
        return cached

    def _find_host_dirs(self, path: str, wanted: str) -> list[str]:
        matching = [
            (mount.rstrip("\\"), host)
            for mount, host in self._host_mounts
            if wanted == mount.rstrip("\\") or wanted.startswith(mount.rstrip("\\") + "\\")
        ]
        if not matching:
            return [path] if self.passthrough else []
        deepest = max(len(mount) for mount, _ in matching)
        found: list[str] = []
        for mount, host in matching:
            if len(mount) != deepest:
                continue
            resolved = self._resolve(host, wanted[len(mount) :].strip("\\"))
            if resolved is not None:
                found.append(resolved)
        return found

    def _resolve(self, host: str, rest: str) -> str | None:
        """``rest`` (a Windows relative path) below the host folder ``host``, any case."""
        current = host
        for part in rest.split("\\") if rest else ():
            listing = self._host_listing(current)
            if listing is None or part not in listing:
                return None
            current = os.path.join(current, listing[part][0])
        return current

    def _host_listing(self, host_dir: str) -> dict[str, tuple[str, bool]] | None:
        """lower-case name -> (name, is a directory), from one scandir (cached)."""
        if host_dir in self._listing_cache:
            return self._listing_cache[host_dir]
        watch(host_dir)  # an entry added, removed or renamed changes the folder's state
        listing: dict[str, tuple[str, bool]] = {}
        hidden = self._hidden
        try:
            with os.scandir(host_dir) as entries:
                for item in entries:  # directory order kept: torch's glob sees this order
                    if hidden and _host_key(os.path.join(host_dir, item.name)) in hidden:
                        continue
                    try:
                        is_dir = item.is_dir()
                    except OSError:
                        continue
                    listing.setdefault(item.name.lower(), (item.name, is_dir))
        except PermissionError:
            self._unlistable.add(host_dir)  # exists, but may only be asked file by file
            self._listing_cache[host_dir] = None
            return None
        except OSError:  # missing, or not a folder
            self._listing_cache[host_dir] = None
            return None
        self._listing_cache[host_dir] = listing
        return listing


def _host_key(path: str) -> str:
    """A host path compared as the host does (case-folded on Windows)."""
    return os.path.normcase(os.path.normpath(os.path.abspath(path)))
