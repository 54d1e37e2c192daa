"""The running process as ld.so saw it at start: its environment and its secure-execution bit.

ld.so reads ``LD_LIBRARY_PATH`` and ``LD_PRELOAD`` once, at process start; a later change of
``os.environ`` reaches only child processes. ``/proc/self/environ`` shows the start-up
environment (NUL-separated ``NAME=value`` entries), unless the process overwrote that memory
to rename itself (``setproctitle`` pads it with NUL bytes). In secure-execution mode (setuid or
file capabilities; ``AT_SECURE`` in the auxiliary vector, ``/proc/self/auxv``) ld.so ignores
``LD_LIBRARY_PATH`` altogether.
"""

from __future__ import annotations

import struct
import sys

ENVIRON = "/proc/self/environ"
PRELOAD_FILE = "/etc/ld.so.preload"
AUXV = "/proc/self/auxv"
AT_NULL = 0
AT_SECURE = 23


def parse_environ(raw: bytes) -> dict[str, str]:
    """``NAME=value`` entries separated by NUL bytes; the first of a repeated name wins.

    glibc's ``getenv`` (and ld.so) take the first entry of a name.
    """
    found: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if not equals or not name:
            continue
        key = name.decode("utf-8", "surrogateescape")
        if key not in found:
            found[key] = value.decode("utf-8", "surrogateescape")
    return found


def intact(raw: bytes) -> bool:
    """Whether ``raw`` reads as an environment the kernel laid out: ``NAME=value`` entries,
    each ended by one NUL. A renamed process's title and NUL padding are not."""
    if not raw:
        return True  # started with an empty environment (``env -i``)
    if not raw.endswith(b"\0") or b"\0\0" in raw:
        return False
    return all(b"=" in entry[1:] for entry in raw[:-1].split(b"\0"))


def read_environ(path: str = ENVIRON) -> dict[str, str] | None:
    """:func:`parse_environ` of the process's start-up environment; None when unreadable
    or overwritten (:func:`intact`)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return parse_environ(raw) if intact(raw) else None


def parse_auxv(
    raw: bytes, wide: bool = True, little: bool = sys.byteorder == "little"
) -> dict[int, int]:
    """The auxiliary vector's (type -> value) pairs, up to AT_NULL."""
    entry = struct.Struct(("<" if little else ">") + ("QQ" if wide else "II"))
    found: dict[int, int] = {}
    for offset in range(0, len(raw) - entry.size + 1, entry.size):
        kind, value = entry.unpack_from(raw, offset)
        if kind == AT_NULL:
            break
        found.setdefault(kind, value)
    return found


def read_secure(path: str = AUXV) -> bool | None:
    """Whether the process runs in secure-execution mode; None when ``auxv`` is unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return bool(parse_auxv(raw, wide=struct.calcsize("P") == 8).get(AT_SECURE, 0))


def split_preload(value: str | None) -> tuple[str, ...]:
    """``LD_PRELOAD`` as ld.so splits it: on spaces and colons, empty entries dropped."""
    if not value:
        return ()
    return tuple(e for e in value.replace(":", " ").split(" ") if e)


def read_preload_file(path: str = PRELOAD_FILE) -> tuple[str, ...]:
    """``/etc/ld.so.preload``'s entries (whitespace or colons apart); none when absent."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(1 << 16)
    except OSError:
        return ()
    text = raw.decode("utf-8", "surrogateescape")
    for separator in ":\t\n\r":
        text = text.replace(separator, " ")
    return tuple(e for e in text.split(" ") if e)
