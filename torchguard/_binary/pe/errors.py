"""The errors of reading an image, shared by the header and the symbol readers.

Two kinds, kept apart: what the file's own bytes cause (:class:`PEReadError`, a finding that
may be cached) and what this moment's environment causes (:class:`FileUnreadable`, never
cached, never taken for damage).
"""

from __future__ import annotations


class ImageUnavailable(Exception):
    """No facts can be had for a file: its own damage, or this moment's environment."""


class PEReadError(ImageUnavailable):
    """A file that the Windows loader would reject as an image (WinError 193).

    Only what the file's own bytes cause: the same file gives the same error on every run,
    so it may be cached.
    """


class FileUnreadable(ImageUnavailable):
    """The file could not be read here and now: says nothing about the file itself.

    An ``OSError`` (an antivirus scan holding it, a sharing violation, access denied, an
    offline OneDrive file) or a ``MemoryError`` while reading. The loader may well map the
    file: it is never cached, never reported as damage (WinError 5 or 32 is not 193), and
    never blocks ``import torch`` on its own.
    """

    def __init__(self, message: str, winerror: int | None = None) -> None:
        super().__init__(message)
        self.winerror = winerror

    @classmethod
    def from_error(cls, exc: BaseException) -> FileUnreadable:
        """The environment's error ``exc`` (an ``OSError`` or a ``MemoryError``), worded."""
        if isinstance(exc, MemoryError):
            return cls("out of memory while reading it")
        if isinstance(exc, OSError):
            winerror = getattr(exc, "winerror", None)
            reason = exc.strerror or str(exc) or type(exc).__name__
            code = f"WinError {winerror}: " if winerror else ""
            return cls(f"cannot read it now ({code}{reason})", winerror)
        return cls(f"cannot read it now ({exc})")


class OverBudget(FileUnreadable):
    """Reading the file would cost more memory than its own size allows (a hostile file).

    Budgets come from the file itself (its size, a zip member's compressed size), so no
    input of N MB costs more than a small multiple of N. Not the loader's verdict, so never
    damage; not cached either: finding it out again costs no more than the budget.
    """
