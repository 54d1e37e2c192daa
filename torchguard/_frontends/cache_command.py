"""``torchguard cache info|clean``: what ``check`` keeps on disk, and removing it.

``clean`` deletes only what ``check`` wrote: the wheels it downloaded (their names are listed
in the cache's marker file), its partial downloads, its remembered resolutions and digests. A folder
without the marker is refused, and a wheel that was already there (``--cache-dir`` pointed at
a folder of one's own wheels) is never listed, so it is never deleted.
"""

from __future__ import annotations

import os
import shutil
import sys

from torchguard._frontends.progress import human_size
from torchguard._frontends.wheel_cache import VERIFIED

MARKER = ".torchguard-wheel-cache"
RESOLUTIONS = ".resolutions"
HEADER = "wheels downloaded by `torchguard check` (one a line); `torchguard cache clean`\n"
_PARTIAL = ".torchguard-"
PIP_DOWNLOADS = "torchguard-dl-"


def mark(cache: str) -> None:
    """Make ``cache`` check's (its marker lists what ``clean`` may delete)."""
    path = os.path.join(cache, MARKER)
    if not os.path.exists(path):
        try:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(HEADER)
        except OSError:
            pass


def record(cache: str, filename: str) -> None:
    """Note that ``check`` wrote ``filename`` into ``cache`` (so ``clean`` may delete it)."""
    try:
        with open(os.path.join(cache, MARKER), "a", encoding="utf-8") as handle:
            handle.write(filename + "\n")
    except OSError:
        pass  # unlisted: `clean` leaves it, which loses nothing


def partial_name(filename: str) -> str:
    """The name a download is written under until its sha256 is checked."""
    return f"{_PARTIAL}{os.getpid()}-{filename}.part"


def _downloaded(cache: str) -> list[str]:
    """The wheels of ``cache`` that ``check`` downloaded and that are still there."""
    try:
        with open(os.path.join(cache, MARKER), encoding="utf-8") as handle:
            listed = dict.fromkeys(line.strip() for line in handle.readlines()[1:])
    except (OSError, ValueError):
        return []
    return [
        name
        for name in listed
        if name.endswith(".whl")
        and os.path.basename(name) == name
        and os.path.isfile(os.path.join(cache, name))
    ]


def _leftovers(cache: str) -> list[str]:
    """Partial downloads (an interrupted ``check``) and pip's download folders."""
    return [
        name
        for name in os.listdir(cache)
        if (name.startswith(_PARTIAL) and name.endswith(".part"))
        or (name.startswith(PIP_DOWNLOADS) and os.path.isdir(os.path.join(cache, name)))
    ]


def wheel_cache(explicit: str | None = None) -> str:
    """Where downloaded wheels are kept: ``explicit``, ``TORCHGUARD_WHEEL_CACHE``, or the
    platformdirs user cache folder's ``wheels``."""
    if explicit:
        return os.path.abspath(explicit)
    configured = os.environ.get("TORCHGUARD_WHEEL_CACHE")
    if configured:
        return os.path.abspath(configured)
    from platformdirs import user_cache_dir

    return os.path.join(user_cache_dir("torchguard", appauthor=False), "wheels")


def cache_command(action: str, explicit: str | None) -> int:
    cache = wheel_cache(explicit)
    if not os.path.isdir(cache):
        print(f"wheel cache: {cache} (empty: nothing downloaded yet)")
        return 0
    names = _downloaded(cache)
    size = sum(os.path.getsize(os.path.join(cache, n)) for n in names)
    if action == "info":
        print(f"wheel cache: {cache}")
        print(f"{len(names)} wheel(s), {human_size(size)}")
        biggest = sorted(names, key=lambda n: -os.path.getsize(os.path.join(cache, n)))[:5]
        for name in biggest:
            print(f"  {human_size(os.path.getsize(os.path.join(cache, name))):>9}  {name}")
        print("`torchguard cache clean` deletes them; `check` downloads again what it needs")
        others = [n for n in os.listdir(cache) if n.endswith(".whl") and n not in names]
        if others:
            print(f"{len(others)} other wheel(s) there were not downloaded by check: kept")
        return 0
    if not os.path.exists(os.path.join(cache, MARKER)):
        print(
            f"torchguard: error: {cache} was not created by `torchguard check` (no {MARKER}); "
            "nothing deleted",
            file=sys.stderr,
        )
        return 2
    for name in names:
        os.remove(os.path.join(cache, name))
    for name in _leftovers(cache):
        path = os.path.join(cache, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
    shutil.rmtree(os.path.join(cache, RESOLUTIONS), ignore_errors=True)
    shutil.rmtree(os.path.join(cache, VERIFIED), ignore_errors=True)
    with open(os.path.join(cache, MARKER), "w", encoding="utf-8") as handle:
        handle.write(HEADER)
    print(f"deleted {len(names)} wheel(s), {human_size(size)}, from {cache}")
    return 0
