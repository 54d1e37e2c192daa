"""Which triton-windows minor pairs with which torch minor (Windows).

Source: the triton-windows README, section "3. PyTorch" ("Each PyTorch minor version is only
guaranteed to work with a specific Triton minor version"),
https://github.com/triton-lang/triton-windows/blob/8743423bf3a5c7be54804bb2d7704eb0d3f70bc1/README.md
(commit of 2026-07-24; the project moved there from https://github.com/woct0rdho/triton-windows,
whose last README, 2026-02-18, stops at torch 2.10), read on 2026-12-06. "PyTorch 2.3 and
older are not supported in this repo." A torch minor the table does not list is unknown:
no verdict. triton-windows numbers its releases after the triton they port
(``3.5.1.post21`` is triton 3.5), so its major and minor are triton's.

On Linux torch's own METADATA pins triton exactly (``Requires-Dist: triton==3.5.1;
platform_system == "Linux" and platform_machine == "x86_64"`` in torch 2.9.1's manylinux
wheel): that pin is the Linux fact, read from the installed torch, not kept here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

#: torch (major, minor) -> the triton-windows (major, minor) that pairs with it.
TRITON_WINDOWS: Final[Mapping[tuple[int, int], tuple[int, int]]] = {
    (2, 4): (3, 1),
    (2, 5): (3, 1),
    (2, 6): (3, 2),
    (2, 7): (3, 3),
    (2, 8): (3, 4),
    (2, 9): (3, 5),
    (2, 10): (3, 6),
    (2, 11): (3, 6),
    (2, 12): (3, 7),
    (2, 13): (3, 7),
}

_MINOR = re.compile(r"^\s*v?(\d+)\.(\d+)")


def minor(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string (``2.9.1+cu128`` -> ``(2, 9)``), None if none."""
    match = _MINOR.match(version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def paired_triton_windows(torch_version: str) -> tuple[int, int] | None:
    """The triton-windows minor that pairs with ``torch_version`` (None: not in the table)."""
    release = minor(torch_version)
    return None if release is None else TRITON_WINDOWS.get(release)


def pairs_on_windows(torch_version: str, triton_version: str) -> bool | None:
    """Whether this triton-windows pairs with this torch (None: unknown, no verdict)."""
    wanted = paired_triton_windows(torch_version)
    have = minor(triton_version)
    if wanted is None or have is None:
        return None
    return have == wanted
