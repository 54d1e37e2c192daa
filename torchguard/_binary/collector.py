"""The cyclic garbage collector, paused while a warm analysis runs.

A warm run reads no binary and builds only acyclic values (strings, tuples, small records)
that reference counting frees; yet the tens of thousands of objects it allocates make the
collector walk every tracked object of the process several times per run (about a tenth of
a warm analysis). :func:`paused` holds the collector off for one analysis; the first cold
read (:func:`resume`, called by the PE and ELF readers before they parse a file) turns it
back on, so a cold scan collects pefile's reference cycles as it goes, as before.

Only a collector this module paused is ever turned back on: one the program disabled
itself stays off. The collector's switch is the process's: another thread that allocates
during the few milliseconds of a warm run collects after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = 0  # analyses running with the collector held off by this module


@contextmanager
def paused() -> Iterator[None]:
    """Hold the collector off until the block ends or a binary is read (:func:`resume`)."""
    global _paused
    if not gc.isenabled() and not _paused:
        yield  # the program turned it off itself: none of ours to switch
        return
    gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if not _paused:
            gc.enable()


def resume() -> None:
    """A binary is about to be read: collect as usual from now on (pefile builds cycles)."""
    if _paused and not gc.isenabled():
        gc.enable()
