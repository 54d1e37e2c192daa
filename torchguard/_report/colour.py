"""ANSI colour for the text report: on a terminal only, and never against the user's wishes.

``NO_COLOR`` (set and not empty, https://no-color.org) turns colour off and wins over
``FORCE_COLOR`` (set and not empty), which turns it on even when the output is piped, as in
CPython's own rule. Otherwise colour is used when the stream is a terminal and ``TERM`` is not
``dumb``; on Windows only if the console accepts ANSI sequences. Whether a stream wants colour
is asked by the front doors (``_frontends.colour``): it may ask the Windows console.
"""

from __future__ import annotations

import re

RESET = "\x1b[0m"
_STYLES = {
    "error": "\x1b[1;31m",
    "warning": "\x1b[1;33m",
    "ok": "\x1b[1;32m",
    "dll": "\x1b[1;35m",
    "command": "\x1b[36m",
    "dim": "\x1b[2m",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Paint:
    """Wraps text in a style's escape sequence, or leaves it alone when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, style: str, text: str) -> str:
        if not self.enabled or not text:
            return text
        return f"{_STYLES[style]}{text}{RESET}"

    def severity(self, severity: str, text: str) -> str:
        return self(severity if severity in ("error", "warning") else "dim", text)

    def mark(self, text: str, word: str | None, style: str = "dll") -> str:
        """``text`` with every case-insensitive occurrence of ``word`` in ``style``."""
        if not self.enabled or not word:
            return text
        return re.sub(re.escape(word), lambda m: self(style, m.group(0)), text, flags=re.I)


PLAIN = Paint(False)


def strip(text: str) -> str:
    """``text`` without ANSI colour sequences."""
    return _ANSI.sub("", text)
