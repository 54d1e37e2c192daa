"""Offline Linux targets: site-packages folders and manylinux wheels, recognised by content.

A folder is a Linux install when its ``torch`` holds ELF shared objects; a wheel when its
platform tag is ``manylinux``/``musllinux``/``linux``. Wheels are unpacked (their ``.data``
folders laid out as pip installs them) into one scratch site-packages, which the caller owns
and removes: ELF facts need the files on disk, and the user's wheels are only read.
"""

from __future__ import annotations

import errno
import os
import shutil
import zipfile
from collections.abc import Sequence

_LINUX_TAGS = ("manylinux", "musllinux", "linux_")


def is_linux_wheel(path: str) -> bool:
    name = os.path.basename(path)
    if not name.endswith(".whl"):
        return False
    platform = name[:-4].rsplit("-", 1)[-1]
    return any(tag in platform for tag in _LINUX_TAGS)


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


def _placed(name: str) -> list[str] | None:
    """Where pip puts a wheel member, as path parts (None: not installed, or unsafe)."""
    parts = name.split("/")
    if any(p in ("..", "") for p in parts[:-1]) or name.startswith("/") or name.endswith("/"):
        return None
    if len(parts) > 2 and parts[0].endswith(".data"):
        return parts[2:] if parts[1] in ("purelib", "platlib") else None
    return parts


def unpack_wheels(wheels: Sequence[str], site: str) -> None:
    """Install ``wheels`` into ``site`` as pip would lay them out (no scripts, no data).

    A CUDA torch with its NVIDIA wheels unpacks to several GB (in RAM where the temporary
    folder is a tmpfs): the space the members declare is checked first, so a folder too small
    is a clear error instead of a full disk. A member never yields more than it declares
    (``zipfile`` stops there and checks the CRC)."""
    plan: dict[str, list[tuple[zipfile.ZipInfo, list[str]]]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            placed = [(m, _placed(m.filename)) for m in archive.infolist()]
        plan[wheel] = [(member, parts) for member, parts in placed if parts is not None]
    need = sum(member.file_size for members in plan.values() for member, _ in members)
    free = shutil.disk_usage(site).free
    if need > free:
        raise OSError(
            errno.ENOSPC,
            f"the wheels unpack to {-(-need >> 20)} MiB and {site} has {free >> 20} MiB free "
            "(point TMPDIR at a larger folder)",
        )
    for wheel, members in plan.items():
        with zipfile.ZipFile(wheel) as archive:
            for member, parts in members:
                target = os.path.join(site, *parts)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with archive.open(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
