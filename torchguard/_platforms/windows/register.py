"""Register DLL directories once per process, thread-safely, keeping the handles alive.

``os.add_dll_directory`` handles have no ``__del__``: dropping one does not unregister the
folder. They are kept anyway, so tests (or a caller undoing a failed setup) can close them, and
they are never used as context managers around ``import torch``: torch loads DLLs lazily later.
"""

from __future__ import annotations

import ntpath
import os
import threading
from collections.abc import Iterable
from typing import Any

from torchguard._binary import memo
from torchguard._platforms.windows.tree import path_key

_lock = threading.Lock()
_handles: dict[str, Any] = {}


def register(paths: Iterable[str]) -> list[str]:
    """Add each absolute, existing folder not yet registered; return the ones added now."""
    add = getattr(os, "add_dll_directory", None)
    if add is None:
        return []
    added: list[str] = []
    with _lock:
        for folder, handle in memo.replayed:  # the start-up hook's memo registered these
            _handles.setdefault(path_key(folder), handle)
        for path in paths:
            key = path_key(path)
            if key in _handles or not ntpath.isabs(path) or not os.path.isdir(path):
                continue
            try:
                _handles[key] = add(path)
            except OSError:
                continue
            added.append(path)
    return added


def registered() -> list[str]:
    with _lock:
        return list(_handles)
