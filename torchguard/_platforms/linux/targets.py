"""Offline Linux targets: site-packages folders and manylinux wheels, recognised by content.

A folder is a Linux install when its ``torch`` holds ELF shared objects; a wheel when its
platform tag is ``manylinux``/``musllinux``/``linux``. A pure-Python wheel (platform tag
``any``) belongs to every platform: it joins a Linux set (``pip download torch`` fetches
several). Wheels are read in place (:mod:`.wheel_files`); the user's wheels are only read.
"""

from __future__ import annotations

import os

_LINUX_TAGS = ("manylinux", "musllinux", "linux_")


def is_linux_wheel(path: str) -> bool:
    name = os.path.basename(path)
    if not name.endswith(".whl"):
        return False
    platform = name[:-4].rsplit("-", 1)[-1]
    return any(tag in platform for tag in _LINUX_TAGS)


def is_pure_wheel(path: str) -> bool:
    """A ``.whl`` file whose every platform tag is ``any``: installable on any OS."""
    name = os.path.basename(path)
    if not name.endswith(".whl") or not os.path.isfile(path):
        return False
    parts = name[:-4].split("-")
    return len(parts) >= 5 and all(tag == "any" for tag in parts[-1].lower().split("."))


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def is_linux_site(path: str) -> bool:
    """A folder whose ``torch`` package holds ELF binaries (``_C`` or ``lib/*.so``)."""
    torch = os.path.join(path, "torch")
    try:
        candidates = [os.path.join(torch, n) for n in os.listdir(torch) if n.startswith("_C.")]
        lib = os.path.join(torch, "lib")
        if os.path.isdir(lib):
            candidates += [os.path.join(lib, n) for n in sorted(os.listdir(lib))[:8]]
    except OSError:
        return False
    return any(_is_elf(c) for c in candidates if c.endswith(".so") or ".so." in c)


def is_linux_target(path: str) -> bool:
    return is_linux_wheel(path) if os.path.isfile(path) else is_linux_site(path)
