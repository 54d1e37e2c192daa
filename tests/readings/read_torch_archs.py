"""Read which GPU architectures torch's Linux wheels on PyPI carry, from the binaries.

Rerun it to check or extend ``torchguard/_facts/torch_archs.py``::

    python tests/readings/read_torch_archs.py 2.8.0 2.15.0     # chosen releases
    python tests/readings/read_torch_archs.py > tests/readings/torch_archs_readings.jsonl   # every release from 2.0

The recorded output, ``tests/readings/torch_archs_readings.jsonl``, is what the table's ``read`` releases
are checked against (``tests/test_torch_archs.py``).

Each wheel is read over HTTP range requests, never downloaded whole: the zip's central
directory, ``torch/version.py`` (its CUDA version), and ``torch/lib/libtorch_cuda.so`` inflated
as a stream only up to its first ``.nv_fatbin`` containers (about 60 MiB into the library, a
few tens of MiB over the network). The architectures come from torchguard's own fatbin reader
(``parse_fatbin_stream``), checked against NVIDIA's ``cuobjdump`` in ``tests/test_fatbin.py``.
PyPI's Linux wheel is each release's default CUDA variant only; the other variants live on
download.pytorch.org.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import struct
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from torchguard._binary.fatbin import MAGIC, parse_fatbin_stream
from torchguard._frontends.remote_kernels import RangeFile  # the same reader check uses

PYPI_SIMPLE = "https://pypi.org/simple/torch/"
TAG = re.compile(r"^torch-(\d+\.\d+\.\d+)(?:-\d+)?-cp311-cp311-manylinux[^-]*_x86_64\.whl$")
#: Containers read per library: each is one translation unit built for the whole arch list.
SAMPLE = 64


@dataclass(frozen=True)
class Wheel:
    version: str
    filename: str
    url: str
    size: int


@dataclass(frozen=True)
class Reading:
    version: str
    cuda: str | None
    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    containers: int
    fetched_mib: float
    wheel: str


def pypi_wheels() -> list[Wheel]:
    """Every CPython 3.11 x86_64 manylinux torch wheel on PyPI, newest build of a version last."""
    request = urllib.request.Request(
        PYPI_SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    wheels: dict[str, Wheel] = {}
    for item in index["files"]:
        found = TAG.match(item["filename"])
        if found and not item.get("yanked"):
            wheels[found[1]] = Wheel(found[1], item["filename"], item["url"], int(item["size"]))
    return list(wheels.values())


def pypi_versions() -> list[str]:
    """Every final torch release PyPI's simple index lists (any platform)."""
    request = urllib.request.Request(
        PYPI_SIMPLE, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    found = {
        match[1]
        for item in index["files"]
        if (match := re.match(r"^torch-(\d+\.\d+\.\d+)-", item["filename"]))
    }
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


class _Prefixed:
    """``head`` then the rest of ``stream``: a stream that starts at a found magic."""

    def __init__(self, head: bytes, stream: io.BufferedIOBase) -> None:
        self.head, self.stream = head, stream

    def read(self, size: int = -1, /) -> bytes:
        if self.head:
            size = len(self.head) if size < 0 else size
            taken, self.head = self.head[:size], self.head[size:]
            return taken
        return self.stream.read(size)


def _first_container(stream: io.BufferedIOBase) -> _Prefixed | None:
    """The stream from the first fatbin container header (magic, version 1, 16-byte header)."""
    marker = struct.pack("<IHH", MAGIC, 1, 16)
    tail = b""
    while chunk := stream.read(4 << 20):
        buffer = tail + chunk
        at = buffer.find(marker)
        if at >= 0:
            return _Prefixed(buffer[at:], stream)
        tail = buffer[-(len(marker) - 1) :]
    return None


class _Tee:
    """A stream that also writes what is read from it to ``sink`` (the sampled containers'
    raw bytes, for a second judge such as NVIDIA's cuobjdump)."""

    def __init__(self, stream: _Prefixed, sink: BinaryIO) -> None:
        self.stream, self.sink = stream, sink

    def read(self, size: int = -1, /) -> bytes:
        data = self.stream.read(size)
        self.sink.write(data)
        return data


def read_wheel(wheel: Wheel, sample: int = SAMPLE, keep: BinaryIO | None = None) -> Reading:
    """One wheel's reading; ``keep`` receives the raw bytes of the containers read."""
    raw = RangeFile(wheel.url, wheel.size)
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=8 << 20)) as archive:
        cuda = _cuda_version(archive.read("torch/version.py").decode())
        with archive.open("torch/lib/libtorch_cuda.so") as library:
            found = _first_container(library)  # type: ignore[arg-type]
            if found is None:
                raise SystemExit(f"{wheel.filename}: no fatbin container in libtorch_cuda.so")
            stream = found if keep is None else _Tee(found, keep)
            archs = parse_fatbin_stream(stream, 1 << 40, max_containers=sample)
    return Reading(
        wheel.version,
        cuda,
        tuple(sorted(archs.sass)),
        tuple(sorted(archs.ptx)),
        archs.containers,
        round(raw.fetched / 2**20, 1),
        wheel.filename,
    )


def _cuda_version(text: str) -> str | None:
    for node in ast.parse(text).body:  # cuda = '12.8' or cuda: Optional[str] = '12.8'
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "cuda" for t in targets):
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
    return None


def readings(versions: list[str], sample: int = SAMPLE) -> Iterator[Reading]:
    wheels = {w.version: w for w in pypi_wheels()}
    for version in versions or sorted(wheels, key=lambda v: tuple(map(int, v.split(".")))):
        if version in wheels and not version.startswith("1."):
            yield read_wheel(wheels[version], sample)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="torch releases (default: all from 2.0)")
    parser.add_argument("--sample", type=int, default=SAMPLE, help="containers per library")
    options = parser.parse_args(argv)
    for reading in readings(options.versions, options.sample):
        print(json.dumps(reading.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
