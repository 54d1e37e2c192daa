"""Where ``check`` keeps a downloaded wheel, and whether a kept one is still the index's file.

The file name comes from the network (the URL's last segment, which ``packaging`` accepts with
a build tag such as ``1\\..\\..\\x``), so it is never joined as given: :func:`cache_name`
derives a name that is one plain component on Windows and POSIX alike, and
:func:`cache_path` checks that it stays in the cache folder. A kept wheel is reused only while
its content is the sha256 the index gave: the digest verified for its (size, mtime, ctime) is
remembered in ``.verified``, so a rescan costs a ``stat``, and a file changed since is hashed
again (and downloaded again when it is no longer the index's).
"""

from __future__ import annotations

import hashlib
import json
import ntpath
import os
import posixpath
import re

VERIFIED = ".verified"
"""The folder of the remembered digests (``torchguard cache clean`` removes it)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._+!-]")
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{d}{i}" for d in ("com", "lpt") for i in range(10)]
)
#: Longer names are shortened (Windows allows 255 characters a component).
_LONGEST = 180
_CHUNK = 1 << 20


class UnsafeName(ValueError):
    """A derived cache name that would leave the cache folder (never expected)."""


def cache_name(filename: str) -> str:
    """A name for the wheel ``filename`` that is one plain component on every OS: characters
    a wheel name may hold (others become ``_``), the same name, version and tags (the scan
    reads them), and, when anything had to change, a digest of the original so that two
    names never meet."""
    name = _UNSAFE.sub("_", filename)
    if name != filename or len(name) > _LONGEST:
        digest = hashlib.sha256(filename.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        parts = name.split("-")
        name = f"wheel_{digest}.whl"
        if len(parts) >= 5:  # the build tag (if any) is left out: nothing reads it
            kept = "-".join([f"{parts[0]}_{digest}", parts[1], *parts[-3:]])
            if len(kept) <= _LONGEST:
                name = kept
    if name.startswith(".") or name.split(".", 1)[0].lower() in _RESERVED:
        name = f"_{name}"
    return name


def cache_path(cache: str, filename: str) -> str:
    """Where the wheel ``filename`` is kept in ``cache``; :class:`UnsafeName` if the derived
    name could leave the folder (a separator of either OS, a drive, ``..``)."""
    name = cache_name(filename)
    if not confined(name):
        raise UnsafeName(f"{filename!r}: no safe file name in the wheel cache")
    return os.path.join(cache, name)


def confined(name: str) -> bool:
    """Whether ``name`` joined to a folder names a file directly in it, on any OS."""
    return (
        bool(name)
        and name not in (".", "..")
        and ntpath.basename(name) == name
        and posixpath.basename(name) == name
        and not ntpath.splitdrive(name)[0]
        and ":" not in name
        and "\0" not in name
    )


def _stamp_path(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, VERIFIED, f"{name}.json")


def _identity(status: os.stat_result) -> list[int]:
    """What changes when a file's content is replaced: its size, mtime and ctime (a file
    rewritten and its mtime set back still gets a new ctime)."""
    return [status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def remember(path: str, sha256: str) -> None:
    """Note that ``path`` (as it is now) has the content ``sha256``."""
    stamp = _stamp_path(path)
    try:
        status = os.stat(path)
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        temporary = f"{stamp}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump([*_identity(status), sha256], handle)
        os.replace(temporary, stamp)
    except OSError:
        pass  # unremembered: the next run hashes the file again


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def kept_intact(path: str, sha256: str | None) -> bool:
    """Whether the kept ``path`` may be reused: it exists and (when the index gave one) its
    content is ``sha256``, from the remembered digest while the file is unchanged,
    else hashed again (and remembered)."""
    try:
        status = os.stat(path)
    except OSError:
        return False
    if not os.path.isfile(path):
        return False
    if sha256 is None:
        return True  # the index gave no digest: nothing to hold the file to
    try:
        with open(_stamp_path(path), encoding="utf-8") as handle:
            *identity, known = json.load(handle)
        if identity == _identity(status) and known == sha256:
            return True
    except (OSError, ValueError, TypeError):
        pass
    try:
        actual = file_sha256(path)
    except OSError:
        return False
    if actual != sha256:
        return False
    remember(path, actual)
    return True
