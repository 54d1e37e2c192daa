"""Faults of torchguard's own, kept apart from findings about the user's files.

A finding says something about a file or the environment; an :class:`InternalError` says
torchguard itself is broken. Mixing the two is the worst failure a guard can have: a bug in
the reader would blame every healthy DLL. Only what a damaged file really causes becomes a
finding (see ``_binary.pe.image`` and ``_platforms.windows.tree.ZIP_ERRORS``); anything else
surfaces here, unchanged, as the ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

BUG_REPORT = "please report this as a torchguard bug"


class InternalError(Exception):
    """torchguard failed by a fault of its own, not because of your files; please report it.

    Deliberately not an ``ImportError`` nor a :class:`~torchguard.TorchDllError`: code that
    handles a diagnosis must not mistake a torchguard bug for one. The original exception is
    ``__cause__``.
    """


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def internal_error(exc: BaseException, during: str) -> InternalError:
    from torchguard._version import __version__

    return InternalError(
        f"torchguard {__version__} failed in {during} ({describe(exc)}); this is a fault in "
        f"torchguard, not a finding about your files: {BUG_REPORT} "
        f"(with this message and torchguard {__version__})"
    )


def guarded(during: str, work: Callable[[], T], passes: tuple[type[BaseException], ...]) -> T:
    """Run ``work``; exceptions other than ``passes`` become :class:`InternalError`."""
    try:
        return work()
    except InternalError:
        raise
    except passes:
        raise
    except Exception as exc:
        raise internal_error(exc, during) from exc
