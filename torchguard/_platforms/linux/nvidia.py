"""The NVIDIA kernel driver's version from ``/proc/driver/nvidia/version`` (no nvidia-smi).

The first line names the module and its version::

    NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023
    NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (...)

The file exists only where the kernel module is loaded: not in a container without the
driver mounted, and not under WSL2, whose driver is the Windows host's (see :mod:`.wsl`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

DEFAULT_PATH = "/proc/driver/nvidia/version"
_NVRM = re.compile(r"NVRM version:.*?Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")


@dataclass(frozen=True)
class NvidiaDriver:
    """The loaded NVIDIA kernel module."""

    version: str
    """As printed: ``535.104.05``."""
    open_module: bool
    """NVIDIA's open kernel module (required by Blackwell GPUs) rather than the proprietary."""

    @property
    def numbers(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))

    @property
    def driver(self) -> tuple[int, int]:
        """(major, minor) as the CUDA rules compare drivers: ``535.104.05`` -> (535, 104)."""
        numbers = self.numbers
        return numbers[0], numbers[1] if len(numbers) > 1 else 0


def parse_driver_version(text: str) -> NvidiaDriver | None:
    """The driver in the text of ``/proc/driver/nvidia/version``; None if it names none."""
    match = _NVRM.search(text)
    if match is None:
        return None
    return NvidiaDriver(match.group(1), "Open Kernel Module" in match.group(0))


def read_driver_version(path: str = DEFAULT_PATH) -> NvidiaDriver | None:
    """:func:`parse_driver_version` of the file; None when it is absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_driver_version(handle.read(4096))
    except OSError:
        return None


#: The driver installs ``libcuda.so.<its version>`` and links ``libcuda.so.1`` to it; NVIDIA's
#: ``cuda-compat`` packages do the same in ``/usr/local/cuda-X.Y/compat``. A first number of
#: three digits or more is a driver branch, never a soname version (``libcuda.so.1.1``: WSL2).
_LIBCUDA_FILE = re.compile(r"libcuda\.so\.(\d{3,}(?:\.\d+)+)$")
#: Folders of NVIDIA's forward-compatibility libraries (``cuda-compat-12-8`` installs into
#: ``/usr/local/cuda-12.8/compat``; conda-forge's ``cuda-compat`` into ``$PREFIX/cuda-compat``).
COMPAT_DIRS = ("compat", "cuda-compat")


def libcuda_version(path: str) -> str | None:
    """The driver version of the ``libcuda.so.1`` at ``path``, from the name of the file it
    is (``libcuda.so.535.104.05``, through its symbolic links); None when the name says none."""
    for candidate in (path, os.path.realpath(path)):
        match = _LIBCUDA_FILE.search(os.path.basename(candidate))
        if match is not None:
            return match.group(1)
    return None


def is_compat_dir(path: str) -> bool:
    """``path`` (a library's) lies in a CUDA forward-compatibility folder."""
    return os.path.basename(os.path.dirname(path)) in COMPAT_DIRS


PCI_DEVICES = "sys/bus/pci/devices"
_NVIDIA_VENDOR = 0x10DE
_DISPLAY_CLASS = 0x03


def nvidia_on_pci(root: str = "/") -> bool:
    """An NVIDIA display or 3D controller (vendor 0x10de, class 0x03xxxx) on the PCI bus,
    from sysfs: the GPU is there whether or not a driver is bound to it."""
    folder = os.path.join(root, PCI_DEVICES)
    try:
        devices = os.listdir(folder)
    except OSError:
        return False
    for device in devices:
        vendor = _hex_file(os.path.join(folder, device, "vendor"))
        if vendor != _NVIDIA_VENDOR:
            continue
        klass = _hex_file(os.path.join(folder, device, "class"))
        if klass is not None and klass >> 16 == _DISPLAY_CLASS:
            return True
    return False


def _hex_file(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read(64).strip(), 16)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


BOOT_ID = "proc/sys/kernel/random/boot_id"


def boot_id(root: str = "/") -> str | None:
    """This boot's id: the PCI devices of a boot are cached under it (a GPU does not come or
    go without a reboot, barring hot-plug)."""
    try:
        with open(os.path.join(root, BOOT_ID), encoding="ascii") as handle:
            return handle.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None
