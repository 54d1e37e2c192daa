"""How much memory reading one file may cost, derived from the file itself.

A zip member is held (in part or whole) only up to :func:`inflate_budget` of what it takes
up in the archive: real DLLs deflate 2-5 fold, a deflate bomb a thousandfold (1 MB of wheel,
1 GiB of member). A PE image's names are bounded by :func:`name_budget` of its size: a linker
writes each name once, a hostile table points thousands of entries at one long name.
"""

from __future__ import annotations

#: A member may cost this many times its compressed size ...
INFLATE_RATIO = 32
#: ... and never less than this (small members) ...
INFLATE_FLOOR = 16 << 20
#: ... nor more than this, however large the archive claims it to be.
INFLATE_CAP = 4 << 30
#: Bytes of names one image may yield beyond its own size (names are stored once).
NAME_SLACK = 1 << 20

MIB = 1 << 20


def inflate_budget(compressed: int) -> int:
    """The bytes a zip member of ``compressed`` bytes in its archive may cost when read."""
    return min(INFLATE_CAP, max(INFLATE_FLOOR, INFLATE_RATIO * max(compressed, 0)))


def name_budget(size: int) -> int:
    """The bytes of distinct names an image of ``size`` bytes may yield."""
    return size + NAME_SLACK


def mib(count: int) -> str:
    """``count`` bytes, in MiB for a message."""
    return f"{count / MIB:.1f} MiB"


def over_budget(kept: int, size: int, budget: int) -> str:
    """Why a member is not read: keeping ``kept`` of ``size`` bytes would pass ``budget``."""
    return (
        f"reading it would hold {mib(kept)} of its {mib(size)}, more than the "
        f"{mib(budget)} its size in the archive allows (a deflate bomb, not a build's binary)"
    )
