"""Whether text written to a stream should be coloured: the user's wishes, then the terminal.

``NO_COLOR`` wins over ``FORCE_COLOR``; otherwise a terminal whose ``TERM`` is not ``dumb``, and
on Windows only if the console accepts ANSI sequences (asked of the console itself, which is
why this lives with the front doors and not with the report's renderers).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO


def wanted(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether text written to ``stream`` should be coloured."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False
    if not tty or env.get("TERM") == "dumb":
        return False
    if sys.platform == "win32":
        from torchguard._platforms.windows.live import enable_ansi

        return enable_ansi(stream)
    return True
