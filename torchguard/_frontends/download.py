"""Fetch the wheels that can hold Windows binaries into the wheel cache.

A file is written under a temporary name, checked against the sha256 pip's report gives, then
renamed: an interrupted or corrupt download never sits in the cache under a wheel's name. Its
name is derived from the URL's, never joined as given (:mod:`.wheel_cache`). A wheel already in
the cache is reused without a request while its content is still the index's sha256 (checked
by a remembered digest per size and mtime; a changed file is downloaded again). When
the plain HTTP request fails (a proxy or certificate only pip is configured for), pip itself
downloads the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO
from urllib.error import HTTPError, URLError
from urllib.request import urlopen

from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress, human_size
from torchguard._frontends.resolve import Planned
from torchguard._frontends.wheel_cache import UnsafeName, cache_path, kept_intact, remember

_CHUNK = 1 << 20


@dataclass
class Fetched:
    paths: list[str]
    downloaded_bytes: int = 0
    reused: int = 0


def fetch(planned: Sequence[Planned], cache: str, python: str, progress: Progress) -> Fetched:
    """The local paths of ``planned`` (in order), downloading what the cache lacks."""
    from torchguard._frontends.cache_command import mark, record

    os.makedirs(cache, exist_ok=True)
    mark(cache)
    result = Fetched([])
    paths = [_kept_at(cache, item) for item in planned]
    missing = [p for p, path in zip(planned, paths) if not kept_intact(path, p.sha256)]
    for item, path in zip(planned, paths):
        if item in missing:
            _refuse_foreign(cache, item, path)
            label = f"downloading {missing.index(item) + 1}/{len(missing)} {item.filename}"
            result.downloaded_bytes += _download(item, path, label, python, progress)
            record(cache, os.path.basename(path))
        else:
            result.reused += 1
        result.paths.append(path)
    progress.clear()
    return result


def _kept_at(cache: str, item: Planned) -> str:
    try:
        return cache_path(cache, item.filename)
    except UnsafeName as exc:
        raise PipFailure([f"{item.url}: {exc}"], "network") from None


def _refuse_foreign(cache: str, item: Planned, path: str) -> None:
    """A file ``check`` did not download (``--cache-dir`` on one's own wheels) whose content
    is not the index's is the user's: never replaced."""
    from torchguard._frontends.cache_command import _downloaded

    if os.path.exists(path) and os.path.basename(path) not in _downloaded(cache):
        raise PipFailure(
            [
                f"{path} is not the file the index serves as {item.filename} (another sha256), "
                "and torchguard check did not download it, so it is left as it is",
                "move it away, or choose another folder with --cache-dir",
            ],
            "cache",
        )


def _download(item: Planned, path: str, label: str, python: str, progress: Progress) -> int:
    from torchguard._frontends.cache_command import partial_name

    partial = os.path.join(os.path.dirname(path), partial_name(os.path.basename(path)))
    if item.url.startswith("file:"):
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        source = url2pathname(urlparse(item.url).path)
        shutil.copyfile(source, partial)
        return _commit(item, partial, path)
    try:
        size = _http(item, partial, label, progress)
    except HTTPError as exc:
        _remove(partial)
        raise PipFailure(
            [f"cannot download {item.url}: HTTP {exc.code} {exc.reason}"], "network"
        ) from None
    except _CacheWriteError as exc:  # a full disk is no network failure: pip would fail too
        _remove(partial)
        raise _cache_failure(item, os.path.dirname(path), exc.reason) from None
    except (URLError, OSError):
        _remove(partial)
        return _with_pip(item, path, python, progress)
    except BaseException:
        _remove(partial)  # Ctrl-C: no half file left behind
        raise
    return _commit(item, partial, path) or size


class _CacheWriteError(Exception):
    """The wheel cache cannot take the download (full disk, no rights), unlike the network."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _cache_failure(item: Planned, cache: str, reason: str) -> PipFailure:
    return PipFailure(
        [
            f"cannot write {item.filename} into the wheel cache {cache}: {reason}",
            "free some disk space, or choose another folder with --cache-dir",
        ],
        "cache",
    )


def _http(item: Planned, partial: str, label: str, progress: Progress) -> int:
    with urlopen(item.url, timeout=60) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        _check_room(os.path.dirname(partial), total)
        try:
            out = open(partial, "wb")  # noqa: SIM115 (closed below: a failed close is the cache's)
        except OSError as exc:
            raise _CacheWriteError(exc.strerror or str(exc)) from exc
        try:
            return _copy(response, out, label, total, progress)
        finally:
            try:
                out.close()
            except OSError as exc:  # the last buffered write failing (ENOSPC)
                raise _CacheWriteError(exc.strerror or str(exc)) from exc


def _check_room(cache: str, total: int | None) -> None:
    """Refuse a download the disk cannot hold before writing a byte of it."""
    try:
        free = shutil.disk_usage(cache).free
    except OSError:
        return
    if total is not None and total > free:
        raise _CacheWriteError(
            f"{human_size(total)} needed, {human_size(free)} free (nothing written)"
        )


def _copy(
    response: IO[bytes], out: IO[bytes], label: str, total: int | None, progress: Progress
) -> int:
    """Copy the body; a read fails as the network (OSError), a write as the cache."""
    started = time.monotonic()
    done = 0
    while True:
        chunk = response.read(_CHUNK)
        if not chunk:
            return done
        try:
            out.write(chunk)
        except OSError as exc:
            raise _CacheWriteError(exc.strerror or str(exc)) from exc
        done += len(chunk)
        progress.transfer(label, done, total, started)


def _commit(item: Planned, partial: str, path: str) -> int:
    digest = hashlib.sha256()
    size = 0
    with open(partial, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
            size += len(block)
    if item.sha256 and digest.hexdigest() != item.sha256:
        _remove(partial)
        raise PipFailure(
            [f"{item.filename}: downloaded file does not match the index's sha256"], "network"
        )
    os.replace(partial, path)
    remember(path, digest.hexdigest())
    return size


def _with_pip(item: Planned, path: str, python: str, progress: Progress) -> int:
    from torchguard._frontends.cache_command import PIP_DOWNLOADS
    from torchguard._frontends.pip_python import pip_interpreter

    progress.show(f"downloading {item.filename} with pip...", force=True)
    with tempfile.TemporaryDirectory(prefix=PIP_DOWNLOADS, dir=os.path.dirname(path)) as tmp:
        arguments = ["download", "--no-deps", "--only-binary=:all:", "--progress-bar", "off"]
        done = pip_interpreter().run(python, [*arguments, "-d", tmp, item.url])
        wheels = [n for n in os.listdir(tmp) if n.endswith(".whl")]  # named as pip names it
        got = os.path.join(tmp, wheels[0]) if len(wheels) == 1 else ""
        if done.returncode != 0 or not os.path.isfile(got):
            from torchguard._frontends.pip_reasons import explain_failure

            raise explain_failure(
                (done.stdout + "\n" + done.stderr).splitlines(), [item.url], [], python
            )
        return _commit(item, got, path)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
