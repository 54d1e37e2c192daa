"""The one error ``torchguard check`` exits 2 with."""

from __future__ import annotations

from collections.abc import Sequence


class CheckError(Exception):
    """Requirements pip cannot resolve, or an index it cannot reach (exit status 2).

    ``lines`` are pip's reasons (the first one a summary); ``kind`` is ``network``,
    ``resolution``, ``pip``, ``timeout`` (pip resolved past ``--resolve-timeout``), ``cache`` (the
    wheel cache cannot take a download) or ``usage``.
    """

    def __init__(self, lines: Sequence[str] | str, kind: str = "usage") -> None:
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))
        self.kind = kind
