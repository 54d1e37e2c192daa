"""What changes when a file or folder on disk changes: the key of facts kept by its state.

Both platforms keep facts about a folder (a site-packages folder's RECORDs, its extensions,
torch's pins) by the folder's state, so a warm run lists nothing. A state is trusted only once
it is :data:`RACY` seconds old: a second change within the same tick of a coarse clock would
leave the state as it was, and an installer may still be writing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Seconds after a change within which a file or folder is not trusted to stay as it is: a
#: second change in the same tick of a coarse clock (FAT keeps 2 s) would go unseen, and an
#: installer may still be writing it.
RACY = 2.0

watched: set[str] | None = None
"""While an analysis is watched (:func:`watching`): every file and folder whose state it
validated, for the verdict memo (:mod:`torchguard._binary.memo`) to check next time."""


def watch(path: str) -> None:
    """Note that the analysis depends on ``path``'s state (kept only while watched)."""
    if watched is not None:
        watched.add(path)


@contextmanager
def watching() -> Iterator[set[str]]:
    """Collect the paths :func:`watch` is given meanwhile (one analysis at a time)."""
    global watched
    seen: set[str] = set()
    watched = seen
    try:
        yield seen
    finally:
        watched = None


def host_state(path: str) -> str | None:
    """What changes when the host file or folder ``path`` is replaced or rewritten, or (a
    folder) gains, loses or renames an entry: its size, times and file id. None when it
    cannot be stat-ed or changed less than :data:`RACY` seconds ago."""
    watch(path)
    try:
        info = os.stat(path)
    except OSError:
        return None
    if time.time() - info.st_mtime < RACY:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"
