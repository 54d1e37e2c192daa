"""``torchguard cache info|clean``: what ``check`` keeps on disk, and removing it.

``clean`` deletes only what ``check`` wrote (wheels, partial downloads, remembered
resolutions) and only in a folder ``check`` marked as its cache, so ``--cache-dir`` pointed at a
folder of one's own wheels by mistake loses nothing.
"""

from __future__ import annotations

import os
import shutil
import sys

from torchguard._frontends.progress import human_size

MARKER = ".torchguard-wheel-cache"
RESOLUTIONS = ".resolutions"


def mark(cache: str) -> None:
    """Record that ``cache`` is check's (so ``clean`` may empty it)."""
    path = os.path.join(cache, MARKER)
    if not os.path.exists(path):
        try:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("wheels downloaded by `torchguard check`; `torchguard cache clean`\n")
        except OSError:
            pass


def _ours(name: str) -> bool:
    return name.endswith((".whl", ".part"))


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
    names = [n for n in os.listdir(cache) if _ours(n) and os.path.isfile(os.path.join(cache, n))]
    size = sum(os.path.getsize(os.path.join(cache, n)) for n in names)
    if action == "info":
        print(f"wheel cache: {cache}")
        print(f"{len(names)} wheel(s), {human_size(size)}")
        biggest = sorted(names, key=lambda n: -os.path.getsize(os.path.join(cache, n)))[:5]
        for name in biggest:
            print(f"  {human_size(os.path.getsize(os.path.join(cache, name))):>9}  {name}")
        print("`torchguard cache clean` deletes them; `check` downloads again what it needs")
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
    shutil.rmtree(os.path.join(cache, RESOLUTIONS), ignore_errors=True)
    print(f"deleted {len(names)} wheel(s), {human_size(size)}, from {cache}")
    return 0
