"""Whether Linux runs under WSL, and which NVIDIA libraries the Windows host provides there.

Under WSL2 the GPU driver is the Windows host's: ``libcuda.so.1`` and ``libnvidia-ml.so.1``
are mounted in ``/usr/lib/wsl/lib`` (listed in ``/etc/ld.so.conf.d/ld.wsl.conf``), and
``/proc/driver/nvidia`` does not exist. WSL1 has no GPU support at all. The kernel says which
it is in ``/proc/version``: ``...-microsoft-standard-WSL2`` for WSL2, ``4.4.0-19041-Microsoft``
for WSL1; a custom WSL2 kernel may say neither, and then the library folder decides.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

LIB_DIR = "/usr/lib/wsl/lib"
PROC_VERSION = "/proc/version"


@dataclass(frozen=True)
class Wsl:
    """A WSL environment."""

    version: int
    """1 or 2."""
    lib_dir: str | None
    """``/usr/lib/wsl/lib`` when it exists."""
    libraries: tuple[str, ...] = ()
    """The file names in ``lib_dir`` (``libcuda.so.1``, ``libnvidia-ml.so.1`` ...), sorted."""

    @property
    def has_cuda_driver(self) -> bool:
        return "libcuda.so.1" in self.libraries or "libcuda.so" in self.libraries


def detect_wsl(
    proc_version: str | None, lib_entries: Collection[str] | None, lib_dir: str = LIB_DIR
) -> Wsl | None:
    """WSL from the text of ``/proc/version`` and the names in ``lib_dir`` (None: absent)."""
    text = proc_version or ""
    lowered = text.lower()
    libraries = tuple(sorted(lib_entries)) if lib_entries is not None else ()
    folder = lib_dir if lib_entries is not None else None
    if "microsoft" in lowered or "wsl" in lowered:
        wsl2 = "wsl2" in lowered or "microsoft-standard" in lowered
        return Wsl(2 if wsl2 or folder is not None else 1, folder, libraries)
    if folder is not None:
        return Wsl(2, folder, libraries)
    return None


def read_wsl(root: str = "/") -> Wsl | None:
    """:func:`detect_wsl` for the machine whose root is ``root`` (a sysroot offline)."""
    try:
        with open(os.path.join(root, PROC_VERSION.lstrip("/")), encoding="utf-8") as handle:
            proc_version: str | None = handle.read(4096)
    except (OSError, UnicodeDecodeError):
        proc_version = None
    lib_dir = os.path.join(root, LIB_DIR.lstrip("/"))
    try:
        entries: list[str] | None = os.listdir(lib_dir)
    except OSError:
        entries = None
    return detect_wsl(proc_version, entries, lib_dir)
