"""Forward-only byte streams (a wheel member as it inflates), shared by the PE and ELF readers."""

from __future__ import annotations

from typing import Protocol


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
