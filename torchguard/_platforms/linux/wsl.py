"""Whether Linux runs under WSL, and which NVIDIA libraries the Windows host provides there.

Under WSL2 the GPU driver is the Windows host's: ``libcuda.so.1`` and ``libnvidia-ml.so.1``
are mounted in ``/usr/lib/wsl/lib`` (listed in ``/etc/ld.so.conf.d/ld.wsl.conf``), and
``/proc/driver/nvidia`` does not exist. WSL1 has no GPU support at all. The kernel says which
it is in ``/proc/version``: ``...-microsoft-standard-WSL2`` for WSL2, ``4.4.0-19041-Microsoft``
for WSL1; a custom WSL2 kernel may say neither, and then the library folder decides.

The driver's version is not in ``/proc`` there. WSL2 mounts the host's driver store folders in
``/usr/lib/wsl/drivers`` (``nv_dispi.inf_amd64_<hash>/`` ...); NVIDIA's is the one holding
``libcuda.so.1.1`` (NVIDIA's container toolkit finds it the same way), beside the Windows
driver's own DLLs, whose FileVersion is the display driver's version (``32.0.15.6094``: NVIDIA
560.94). Those DLLs are read as files, never loaded, and no process is started.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

LIB_DIR = "/usr/lib/wsl/lib"
DRIVERS_DIR = "/usr/lib/wsl/drivers"
PROC_VERSION = "/proc/version"
#: The library that marks NVIDIA's folder in the driver store (the host's real libcuda).
DRIVER_STORE_MARK = "libcuda.so.1.1"
#: The Windows driver's DLLs whose FileVersion is the display driver's, best first: the CUDA
#: driver itself (``System32\\nvcuda.dll`` is installed from it), then the PTX JIT compiler
#: and the Direct3D driver every NVIDIA display driver ships.
DRIVER_DLLS = ("nvcuda64.dll", "nvptxJitCompiler64.dll", "nvwgf2umx.dll")


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


def driver_store(root: str = "/") -> str:
    """Where WSL2 mounts the host's driver store, under ``root``."""
    return os.path.join(root, DRIVERS_DIR.lstrip("/"))


def driver_store_dlls(drivers: str) -> tuple[tuple[str, ...], ...]:
    """For each NVIDIA folder of the host's driver store ``drivers`` (:func:`driver_store`;
    the folder holding ``libcuda.so.1.1``), the
    paths of its :data:`DRIVER_DLLS` that exist, best first; () when there is none.

    Windows may keep an older driver's folder after an upgrade: every NVIDIA folder is
    listed, and the caller decides (the newest is the one a warning may trust)."""
    try:
        folders = sorted(os.listdir(drivers))
    except OSError:
        return ()
    found: list[tuple[str, ...]] = []
    for folder in folders:
        path = os.path.join(drivers, folder)
        try:
            names = {n.lower(): n for n in os.listdir(path)}  # Windows names: any case
        except OSError:
            continue
        if DRIVER_STORE_MARK not in names:
            continue
        dlls = tuple(
            os.path.join(path, names[n.lower()]) for n in DRIVER_DLLS if n.lower() in names
        )
        if dlls:
            found.append(dlls)
    return tuple(found)
