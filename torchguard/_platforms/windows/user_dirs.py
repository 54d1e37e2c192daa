"""Folders the program registered with ``os.add_dll_directory``, and folders it may have.

Windows keeps a process's registered folders where no program can read them. What can be
known: the handles ``os.add_dll_directory`` returned since torchguard's observer wrapped it
(the start-up hook does at interpreter start, ``import torchguard`` otherwise). What cannot:
folders registered before that, or by native code. Such a folder is likely one the process
already loaded a module from (a delvewheel ``*.libs`` folder, onnxruntime's ``capi``), so a
DLL found nowhere else but present in one of those makes ``missing-dll`` a doubt, not a proof.
"""

from __future__ import annotations

import ntpath
import os
from collections.abc import Iterable
from types import ModuleType

from torchguard._binary.state import watch
from torchguard._platforms.windows.tree import path_key


def registered(os_module: ModuleType = os) -> tuple[str, ...]:
    """The folders registered since the observer started and not closed since, in order."""
    add = getattr(os_module, "add_dll_directory", None)
    handles = getattr(add, "torchguard_handles", None)
    if not isinstance(handles, list):
        return ()
    found: dict[str, str] = {}
    for handle in list(handles):
        path = getattr(handle, "path", None)
        if isinstance(path, str) and ntpath.isabs(path):
            found.setdefault(path_key(path), ntpath.normpath(path))
    return tuple(found.values())


def maybe_registered(
    loaded_paths: Iterable[str],
    library_dirs: Iterable[str],
    known: Iterable[str],
    ordinary: Iterable[str],
) -> tuple[str, ...]:
    """Folders that may be registered without torchguard knowing: those modules were loaded
    from and the ``*.libs`` folders beside packages (``library_dirs``), but the ``known``
    registered ones and the ``ordinary`` ones the loader searches anyway (System32, the
    application's folder)."""
    skip = {path_key(p) for p in (*known, *ordinary)}
    found: dict[str, str] = {}
    for folder in [*(ntpath.dirname(p) for p in loaded_paths), *library_dirs]:
        key = path_key(folder)
        if folder and ntpath.isabs(folder) and key not in skip:
            found.setdefault(key, folder)
    return tuple(found.values())


def library_dirs(site_dirs: Iterable[str]) -> tuple[str, ...]:
    """The ``<name>.libs`` folders delvewheel puts beside the packages it repaired."""
    found: list[str] = []
    for site in site_dirs:
        watch(site)
        try:
            names = sorted(os.listdir(site))
        except OSError:
            continue
        found += [
            os.path.join(site, n)
            for n in names
            if n.lower().endswith(".libs") and os.path.isdir(os.path.join(site, n))
        ]
    return tuple(found)
