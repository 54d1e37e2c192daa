"""The files a package index lists for one project (PEP 503 simple HTML), to explain a
"no matching distribution": which releases, for which Pythons and platforms, wheels or not.
One request, only after pip has failed."""

from __future__ import annotations

import dataclasses
import html
import os
import re
from dataclasses import dataclass
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urljoin, urlparse
from urllib.request import Request, url2pathname, urlopen

from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

_HREF = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
PAGE_LIMIT = 64 << 20
"""The largest project page read (download.pytorch.org's torch page: a few MB)."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    version: Version | None
    wheel: bool
    pythons: frozenset[str]
    platforms: frozenset[str]
    url: str = ""
    """Where the index says the file is (absolute)."""
    tags: frozenset[Tag] = frozenset()
    """A wheel's tags (``cp313-cp313t-win_amd64``); empty for an sdist."""


def parse_filename(filename: str) -> IndexFile | None:
    """A wheel's or sdist's version and tags; None for anything else."""
    if filename.endswith(".whl"):
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        return IndexFile(
            filename,
            version,
            True,
            frozenset(t.interpreter for t in tags),
            frozenset(t.platform for t in tags),
            tags=frozenset(tags),
        )
    if filename.endswith((".tar.gz", ".zip")):
        try:
            _, version = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            return None
        return IndexFile(filename, version, False, frozenset(), frozenset())
    return None


def project_page(index: str, project: str, timeout: float = 20.0) -> str | None:
    """The index's page for ``project``; None when it cannot be read."""
    url = f"{index.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        if url.startswith("file:"):
            folder = url2pathname(urlparse(url).path)
            with open(os.path.join(folder, "index.html"), "rb") as handle:
                data = handle.read(PAGE_LIMIT + 1)
        else:
            request = Request(url, headers={"Accept": "text/html"})
            with urlopen(request, timeout=timeout) as response:
                data = response.read(PAGE_LIMIT + 1)
    except (OSError, ValueError):
        return None
    if len(data) > PAGE_LIMIT:  # not an index page: never hold an endless answer in memory
        return None
    return data.decode("utf-8", "replace")


def project_files(index: str, project: str) -> list[IndexFile] | None:
    """Every wheel and sdist the index lists for ``project``, oldest release first."""
    page = project_page(index, project)
    if page is None:
        return None
    files: list[IndexFile] = []
    page_url = f"{index.rstrip('/')}/{canonicalize_name(project)}/"
    for href in _HREF.findall(page):
        link = html.unescape(href)
        name = unquote(link.split("#", 1)[0].rsplit("/", 1)[-1])
        parsed = parse_filename(name)
        if parsed is not None:
            files.append(dataclasses.replace(parsed, url=urljoin(page_url, link)))
    files.sort(key=lambda f: (f.version or Version("0"), f.filename))
    return files


def index_reachable(index: str, timeout: float = 20.0) -> str | None:
    """None when the index answers; else why not (one short phrase)."""
    if index.startswith("file:"):
        folder = url2pathname(urlparse(index).path)
        return None if os.path.isdir(folder) else f"no folder {folder}"
    try:
        with urlopen(Request(index, method="HEAD"), timeout=timeout):
            return None
    except HTTPError as exc:
        return None if exc.code < 500 else f"HTTP {exc.code} {exc.reason}"
    except URLError as exc:
        return str(exc.reason)
    except (OSError, ValueError) as exc:
        return str(exc)
