"""Forward-only byte streams (a wheel member as it inflates), shared by the PE and ELF readers."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Protocol

#: Inflate this much at a time: a chunk is the only copy of what is not kept.
CHUNK = 1 << 20


class Readable(Protocol):
    """A forward-only byte stream (a zip member's, through ``tree.MemberStream``)."""

    def read(self, size: int = -1, /) -> bytes: ...


def read_exactly(stream: Readable, count: int) -> bytes:
    """Up to ``count`` bytes: fewer only when the stream ends first."""
    parts: list[bytes] = []
    remaining = count
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def keep_ranges(
    stream: Readable,
    buffer: mmap.mmap,
    position: int,
    end: int,
    ranges: Sequence[tuple[int, int]],
) -> int:
    """Read ``stream`` from ``position`` to ``end``, copying into ``buffer`` only ``ranges``.

    Returns where the stream stopped: ``end``, or less when it ends first (a cut-short file,
    which each format words itself).
    """
    while position < end:
        chunk = stream.read(min(CHUNK, end - position))
        if not chunk:
            break
        for start, stop in ranges:
            low, high = max(start, position), min(stop, position + len(chunk))
            if low < high:
                buffer[low:high] = chunk[low - position : high - position]
        position += len(chunk)
    return position
