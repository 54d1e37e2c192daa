"""Fetch the wheels that can hold Windows binaries into the wheel cache.

A file is written under a temporary name, checked against the sha256 pip's report gives, then
renamed: an interrupted or corrupt download never sits in the cache under a wheel's name. A
wheel already in the cache is reused without a request (index file names are immutable). When
the plain HTTP request fails (a proxy or certificate only pip is configured for), pip itself
downloads the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.error import HTTPError, URLError
from urllib.request import urlopen

from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress
from torchguard._frontends.resolve import Planned

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
    missing = [p for p in planned if not os.path.isfile(os.path.join(cache, p.filename))]
    for item in planned:
        path = os.path.join(cache, item.filename)
        if item in missing:
            label = f"downloading {missing.index(item) + 1}/{len(missing)} {item.filename}"
            result.downloaded_bytes += _download(item, path, label, python, progress)
            record(cache, item.filename)
        else:
            result.reused += 1
        result.paths.append(path)
    progress.clear()
    return result


def _download(item: Planned, path: str, label: str, python: str, progress: Progress) -> int:
    from torchguard._frontends.cache_command import partial_name

    partial = os.path.join(os.path.dirname(path), partial_name(item.filename))
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
    except (URLError, OSError):
        _remove(partial)
        return _with_pip(item, path, python, progress)
    except BaseException:
        _remove(partial)  # Ctrl-C: no half file left behind
        raise
    return _commit(item, partial, path) or size


def _http(item: Planned, partial: str, label: str, progress: Progress) -> int:
    started = time.monotonic()
    done = 0
    with urlopen(item.url, timeout=60) as response, open(partial, "wb") as out:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                break
            out.write(chunk)
            done += len(chunk)
            progress.transfer(label, done, total, started)
    return done


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
    return size


def _with_pip(item: Planned, path: str, python: str, progress: Progress) -> int:
    from torchguard._frontends.cache_command import PIP_DOWNLOADS
    from torchguard._frontends.pip_python import pip_interpreter

    progress.show(f"downloading {item.filename} with pip...", force=True)
    interpreter = pip_interpreter()
    with tempfile.TemporaryDirectory(prefix=PIP_DOWNLOADS, dir=os.path.dirname(path)) as tmp:
        done = subprocess.run(
            [
                interpreter.python,
                interpreter.runner,
                python,
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--progress-bar",
                "off",
                "-d",
                tmp,
                item.url,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
        )
        got = os.path.join(tmp, item.filename)
        if done.returncode != 0 or not os.path.isfile(got):
            from torchguard._frontends.pip_reasons import explain_failure

            raise explain_failure(
                (done.stdout + "\n" + done.stderr).splitlines(), [item.url], [], python
            )
        return _commit(item, got, path)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
