"""The interpreter's own DLLs on Windows, named by its ABI.

CPython 3.X's DLL is ``python3X.dll``; a free-threaded build's (``python3.13t.exe``, wheels
tagged ``cp313t``) is ``python313t.dll``. Extensions
built for the stable ABI import ``python3.dll`` (``python3t.dll`` for a free-threaded
build), which the installer puts beside them. A verdict about these names must follow the
ABI an extension was built for, or a free-threaded torch gets ``missing-dll python313t.dll``.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"^cp(\d)(\d+)(t?)$")


def python_dlls(version: tuple[int, int], *, free_threaded: bool = False) -> tuple[str, str]:
    """(the version's DLL, the stable ABI's DLL) for this ABI."""
    suffix = "t" if free_threaded else ""
    return f"python{version[0]}{version[1]}{suffix}.dll", f"python{version[0]}{suffix}.dll"


def tag_free_threaded(tag: str) -> bool:
    """Whether a CPython tag names a free-threaded build: ``cp313t`` yes, ``cp313`` no."""
    match = _TAG.match(tag.lower())
    return bool(match and match[3])


def live_free_threaded() -> bool:
    """Whether the running interpreter is a free-threaded build."""
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
