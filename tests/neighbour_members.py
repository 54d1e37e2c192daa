"""Members of large neighbour wheels on PyPI, read over range requests and cached under
``~/.cache/torchguard-ci/wheels/neighbours/members`` keyed by project and version.

onnxruntime-gpu's Linux wheels are 250-300 MB, of which a CUDA torch's neighbour needs the
package's Python code, its core and its CUDA provider: those members are copied out of the
wheel as it stores them (about 252 MB for 1.24.1, never inflated in the cache: 413 MB
unpacked) and inflated into a scratch site per test.
"""

from __future__ import annotations

import io
import json
import struct
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from realwheels import CACHE, build_once

from torchguard._frontends.remote_kernels import RangeFile

MEMBERS = CACHE / "neighbours" / "members"
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")
_INDEX = "members.json"


def _wheel_url(project: str, version: str) -> tuple[str, int]:
    """The cp311 manylinux x86-64 wheel of ``project==version`` on PyPI, and its size."""
    with urllib.request.urlopen(f"https://pypi.org/pypi/{project}/json") as answer:
        base, listing = answer.geturl(), json.load(answer)
    wheel = next(
        f
        for f in listing["releases"][version]
        if "-cp311-" in f["filename"]
        and "manylinux" in f["filename"]
        and f["filename"].endswith("x86_64.whl")
    )
    return urllib.parse.urljoin(base, wheel["url"]), int(wheel["size"])


def _copy_stored(remote: io.BufferedReader, info: zipfile.ZipInfo, target: Path) -> None:
    """The member's bytes as the wheel stores them (deflated or not)."""
    remote.seek(info.header_offset)
    header = _LOCAL_HEADER.unpack(remote.read(_LOCAL_HEADER.size))
    if header[0] != b"PK\x03\x04":
        raise OSError(f"{info.filename}: no local header at {info.header_offset}")
    remote.seek(info.header_offset + _LOCAL_HEADER.size + header[9] + header[10])
    left = info.compress_size
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        while left:
            chunk = remote.read(min(left, 1 << 22))
            if not chunk:
                raise OSError(f"{info.filename}: the wheel ended early")
            out.write(chunk)
            left -= len(chunk)


def copy_members(source: io.BufferedReader, infos: Iterable[zipfile.ZipInfo], folder: Path) -> None:
    """Copy each of ``infos`` out of the wheel read by ``source`` as stored (deflated or not)
    into ``folder``, with the index (method, size, CRC) :func:`unpack_members` checks."""
    index = {}
    for info in infos:
        _copy_stored(source, info, folder / "stored" / info.filename)
        index[info.filename] = [info.compress_type, info.file_size, info.CRC]
    (folder / _INDEX).write_text(json.dumps(index))


def cached_members(project: str, version: str, keep: Callable[[str], bool]) -> Path:
    """A folder holding each member of ``project==version``'s cp311 manylinux x86-64 wheel
    that ``keep`` accepts, as stored, with an index (method, size, CRC); made once."""

    def fill(folder: Path) -> None:
        url, size = _wheel_url(project, version)
        with zipfile.ZipFile(io.BufferedReader(RangeFile(url, size), 1 << 20)) as archive:
            remote = io.BufferedReader(RangeFile(url, size), 1 << 22)
            kept = [i for i in archive.infolist() if not i.is_dir() and keep(i.filename)]
            copy_members(remote, kept, folder)

    return build_once(MEMBERS / f"{project}-{version}", fill)


def unpack_members(folder: Path, site: Path) -> list[Path]:
    """Inflate every cached member of ``folder`` under ``site`` (each checked against the
    wheel's CRC and size: a damaged cache entry fails loudly, never judges)."""
    index: dict[str, list[int]] = json.loads((folder / _INDEX).read_text())
    written = []
    for name, (method, size, crc) in index.items():
        target = site / name
        target.parent.mkdir(parents=True, exist_ok=True)
        inflate = zlib.decompressobj(-15) if method == zipfile.ZIP_DEFLATED else None
        seen, length = 0, 0
        with (folder / "stored" / name).open("rb") as source, target.open("wb") as out:
            while chunk := source.read(1 << 22):
                data = inflate.decompress(chunk) if inflate is not None else chunk
                seen, length = zlib.crc32(data, seen), length + len(data)
                out.write(data)
            if inflate is not None:
                tail = inflate.flush()
                seen, length = zlib.crc32(tail, seen), length + len(tail)
                out.write(tail)
        if (seen, length) != (crc, size):
            raise OSError(f"{folder / 'stored' / name}: CRC or size differs from the wheel's")
        written.append(target)
    return written
