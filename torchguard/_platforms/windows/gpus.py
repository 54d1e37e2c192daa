"""Which NVIDIA GPU a Windows machine has: its display adapters.

The GPU comes from the display adapter's registry entry (PCI hardware id and driver
description, read by ``_platforms.windows.live`` without initialising CUDA or loading a driver DLL);
what it can run is platform-neutral data in :mod:`torchguard._facts.gpus`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchguard._facts.gpus import compute_capability

NVIDIA_VENDOR = 0x10DE


@dataclass(frozen=True)
class DisplayAdapter:
    """A display adapter as Windows lists it: driver description and PCI hardware id."""

    name: str
    hardware_id: str = ""

    @property
    def pci_ids(self) -> tuple[int, int] | None:
        """(vendor, device) from ``PCI\\VEN_10DE&DEV_2684&...``; None for other buses."""
        match = re.search(r"VEN_([0-9A-F]{4})&DEV_([0-9A-F]{4})", self.hardware_id, re.IGNORECASE)
        return (int(match[1], 16), int(match[2], 16)) if match else None

    @property
    def is_nvidia(self) -> bool:
        ids = self.pci_ids
        if ids is not None:
            return ids[0] == NVIDIA_VENDOR
        return self.name.upper().startswith("NVIDIA")


def named_adapter(name: str) -> str:
    """A GPU named by a user ("RTX 4090", "GeForce RTX 5090") as Windows lists it, with the
    vendor first, so that a known NVIDIA model counts as an NVIDIA adapter."""
    text = " ".join(name.split())
    if text.upper().startswith("NVIDIA"):
        return text
    for candidate in (text, f"GeForce {text}"):  # "RTX 4090" is how people say it
        if compute_capability(candidate) is not None:
            return f"NVIDIA {candidate}"
    return text


__all__ = ["DisplayAdapter", "named_adapter"]
