"""``LD_LIBRARY_PATH`` as ld.so read it at start, asked of glibc's loader itself.

``/proc/self/environ`` shows the memory the start-up environment was written to, and a
process that renames itself (``setproctitle``: Ray workers, gunicorn, celery, uWSGI)
overwrites that memory. ld.so kept its own copy: ``dlinfo(handle, RTLD_DI_SERINFO)`` lists
the folders it searches for ``handle``'s dependencies, in order: the executable's
``DT_RPATH``, then ``LD_LIBRARY_PATH`` as read at start, then the default folders (the
handle used here, libc's, has no ``RPATH`` or ``RUNPATH`` of its own). glibc gives every
entry the same flags, so the two known ends are cut off to leave ``LD_LIBRARY_PATH``.

Only asked when the environment cannot be read (``ctypes`` costs milliseconds to import).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

RTLD_DI_SERINFO = 4
RTLD_DI_SERINFOSIZE = 5
_MAX_ENTRIES = 4096
_MAX_SIZE = 1 << 20

_SYSTEM_DIR = re.compile(r"(/usr)?/lib(64|32|x32)?(/[A-Za-z0-9_]+-linux-[A-Za-z0-9_]+)?")
"""The default folders glibc is configured with, on any distribution (``/lib64``,
``/usr/lib/x86_64-linux-gnu``, ``/usr/lib``...)."""


def library_path_of(search: Sequence[str], rpath: Sequence[str]) -> tuple[str, ...]:
    """``LD_LIBRARY_PATH``'s folders within ld.so's search list for libc: without the
    executable's ``DT_RPATH`` folders in front (``rpath``, as ld.so expanded them; it keeps
    a folder once) and the default folders behind (the longest run of distinct system
    folders ending the list: a system folder ``LD_LIBRARY_PATH`` also names stays in it)."""
    entries = list(search)[len(dict.fromkeys(rpath)) :]
    seen: set[str] = set()
    tail = 0
    for entry in reversed(entries):
        if entry in seen or not _SYSTEM_DIR.fullmatch(entry):
            break
        seen.add(entry)
        tail += 1
    return tuple(entries[: len(entries) - tail])


def loader_search_list(soname: str = "libc.so.6") -> tuple[str, ...] | None:
    """ld.so's search list for the loaded object ``soname`` (``dlinfo``'s
    ``RTLD_DI_SERINFO``); None when it cannot be asked (not glibc, not loaded, a failure)."""
    try:
        return _ask(soname)
    except (ImportError, OSError, AttributeError, ValueError, TypeError):
        return None  # ImportError: a Python built without ctypes


def _ask(soname: str) -> tuple[str, ...] | None:
    import ctypes as ct

    class Serpath(ct.Structure):
        _fields_ = (("name", ct.c_void_p), ("flags", ct.c_uint))

    class Serinfo(ct.Structure):
        _fields_ = (("size", ct.c_size_t), ("count", ct.c_uint), ("paths", Serpath * 1))

    noload = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
    handle = ct.CDLL(soname, mode=noload)._handle  # RTLD_NOLOAD: never loads anything new
    dlinfo = _dlinfo()
    if dlinfo is None:
        return None
    head = Serinfo()
    if dlinfo(handle, RTLD_DI_SERINFOSIZE, ct.byref(head)) != 0:
        return None
    size, count = int(head.size), int(head.count)
    if not ct.sizeof(Serinfo) <= size <= _MAX_SIZE or count > _MAX_ENTRIES:
        return None
    buffer = ct.create_string_buffer(max(size, Serinfo.paths.offset + ct.sizeof(Serpath) * count))
    ct.memmove(buffer, ct.byref(head), ct.sizeof(Serinfo))
    if dlinfo(handle, RTLD_DI_SERINFO, buffer) != 0:
        return None
    start = ct.addressof(buffer)
    paths = (Serpath * count).from_buffer(buffer, Serinfo.paths.offset)
    found: list[str] = []
    for entry in paths:
        address = entry.name or 0
        if not start <= address < start + len(buffer):  # glibc writes the names in the buffer
            return None
        raw = ct.string_at(address)
        found.append(raw.decode("utf-8", "surrogateescape"))
    return tuple(found)


def _dlinfo() -> Any:
    """``dlinfo`` from libc (glibc 2.34+) or ``libdl.so.2`` (older glibc)."""
    import ctypes

    for name in (None, "libdl.so.2"):
        try:
            function = getattr(ctypes.CDLL(name), "dlinfo", None)
        except OSError:
            continue
        if function is not None:
            function.restype = ctypes.c_int
            function.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
            return function
    return None


def startup_library_path(executable: str | None) -> tuple[str, ...] | None:
    """``LD_LIBRARY_PATH``'s folders as ld.so read them at start (None: ld.so cannot be
    asked), with the executable's ``DT_RPATH`` (its ``$ORIGIN`` expanded) cut off."""
    search = loader_search_list()
    if search is None:
        return None
    return library_path_of(search, _executable_rpath(executable))


def _executable_rpath(executable: str | None) -> tuple[str, ...]:
    if executable is None:
        return ()
    from torchguard._binary.elf import ElfReadError, read_elf_file

    try:
        entries = read_elf_file(executable).facts.rpath_entries
    except ElfReadError:
        return ()
    origin = os.path.dirname(executable)
    return tuple(
        e.replace("${ORIGIN}", origin).replace("$ORIGIN", origin).rstrip("/") or "/"
        for e in entries
    )
