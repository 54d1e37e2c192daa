"""The CPU a Python runs on, from its own image, never from the host.

``platform.machine()`` reports the host CPU (on Python 3.12+ the physical one): an x64 Python
on Windows on ARM would read as ARM64 and every x64 torch DLL would look like the wrong
architecture. The running interpreter's CPU is the machine field of its own PE header;
``sysconfig.get_platform()`` (``win-amd64``, ``win32``, ``win-arm64``) is the fallback, and for
an offline scan the platform tag of the wheel or of torch's ``_C`` extension decides.
"""

from __future__ import annotations

import struct

from torchguard._facts.vocab import Machine

X86 = Machine.X86
X64 = Machine.X64
ARM64 = Machine.ARM64

#: sysconfig platforms and wheel platform tags -> machine.
_PLATFORMS: dict[str, int] = {
    "win32": X86,
    "win-amd64": X64,
    "win_amd64": X64,
    "win-arm64": ARM64,
    "win_arm64": ARM64,
}

#: The CPU names users see (winget's --architecture values).
_LABELS: dict[int, str] = {X86: "x86", X64: "x64", ARM64: "arm64"}


def label(machine: int) -> str:
    return _LABELS.get(machine, hex(machine))


def image_machine(head: bytes) -> int | None:
    """The machine field of a PE image's header (``head``: its first bytes), or None."""
    if head[:2] != b"MZ" or len(head) < 0x40:
        return None
    (offset,) = struct.unpack_from("<I", head, 0x3C)
    if offset + 6 > len(head) or head[offset : offset + 4] != b"PE\0\0":
        return None
    (machine,) = struct.unpack_from("<H", head, offset + 4)
    return int(machine)


def file_machine(path: str) -> int | None:
    """:func:`image_machine` of a file; None when it cannot be read or is not a PE image."""
    try:
        with open(path, "rb") as handle:
            return image_machine(handle.read(4096))
    except OSError:
        return None


def platform_machine(platform: str | None) -> int | None:
    """The machine of a sysconfig platform or wheel platform tag; None for others."""
    return _PLATFORMS.get(platform.lower()) if platform else None


def interpreter_machine(images: list[str], platform: str) -> int:
    """The first readable image's machine, else ``platform``'s, else x64."""
    for image in images:
        machine = file_machine(image)
        if machine is not None:
            return machine
    found = platform_machine(platform)
    return found if found is not None else X64
