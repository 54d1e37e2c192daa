"""One self-overwriting status line on a terminal: size, speed and time left, cut to fit the
terminal's width so it never wraps (a wrapped line cannot be overwritten and leaves debris)."""

from __future__ import annotations

import shutil
import time
from typing import IO


def human_size(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def eta(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Writes to ``stream`` (a terminal) at most ten times a second; :meth:`clear` at the end."""

    def __init__(self, stream: IO[str] | None) -> None:
        self.stream = stream
        self._last = 0.0

    def width(self) -> int:
        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

    def show(self, text: str, *, force: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        width = self.width()
        if len(text) > width:
            text = text[: width - 3] + "..."
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()

    def transfer(self, label: str, done: int, total: int | None, started: float) -> None:
        elapsed = max(time.monotonic() - started, 1e-6)
        speed = done / elapsed
        parts = [human_size(done) + (f"/{human_size(total)}" if total else "")]
        parts.append(f"{human_size(speed)}/s")
        if total and speed > 0:
            parts.append(f"ETA {eta((total - done) / speed)}")
        numbers = "  ".join(parts)
        room = self.width() - len(numbers) - 2
        if room < 12:
            self.show(numbers, force=done == total)  # too narrow for a name: numbers only
            return
        if len(label) > room:
            label = "..." + label[-(room - 3) :]
        self.show(f"{label}  {numbers}", force=done == total)

    def clear(self) -> None:
        if self.stream is not None:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
