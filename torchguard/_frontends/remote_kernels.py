"""Verify the kernels of a recommended torch build by reading its wheel, not the table.

``check --gpu`` recommends a (release, CUDA variant) from the build-policy table; where that
build's Linux wheel can be reached (PyPI carries each release's default variant, the variant's
own index on download.pytorch.org carries the rest), its ``libtorch_cuda.so`` is read over HTTP
range requests: the zip's central directory, ``torch/version.py`` and the first fatbin
containers of the library, inflated as a stream (each container is one translation unit built
for the whole architecture list), never the whole wheel. The Windows build of the same
(release, variant) is built from the same architecture list (PyTorch's CI scripts), so the
Linux wheel stands for both. The result is remembered per wheel URL in the wheel cache.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.error import URLError
from urllib.request import Request, urlopen

from torchguard._binary.fatbin import MAGIC, FatbinArchs, FatbinError, parse_fatbin_stream
from torchguard._facts.cuda_builds import index_url
from torchguard._facts.gpu_pick import Pick
from torchguard._facts.gpus import Capability

PYPI_SIMPLE = "https://pypi.org/simple"
#: Containers read per library: each is one translation unit built for the whole arch list.
SAMPLE = 64
TIMEOUT = 60.0
_NETWORK = (OSError, URLError, ValueError, zipfile.BadZipFile, KeyError, FatbinError, EOFError)


class RangeFile(io.RawIOBase):
    """A remote file read with HTTP range requests, so ``zipfile`` seeks instead of fetching."""

    def __init__(self, url: str, size: int, timeout: float = TIMEOUT) -> None:
        self.url, self.size, self.position, self.fetched = url, size, 0, 0
        self.timeout = timeout

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.size - self.position)
        if count <= 0:
            return 0
        last = self.position + count - 1
        request = Request(self.url, headers={"Range": f"bytes={self.position}-{last}"})
        with urlopen(request, timeout=self.timeout) as response:
            if response.status != 206:
                raise OSError(f"{self.url}: the server ignores range requests")
            data = response.read()
        buffer[: len(data)] = data
        self.position += len(data)
        self.fetched += len(data)
        return len(data)


@dataclass(frozen=True)
class RemoteWheel:
    filename: str
    url: str
    size: int


@dataclass(frozen=True)
class KernelReading:
    wheel: str
    cuda: str | None
    sass: frozenset[int]
    ptx: frozenset[int]
    fetched: int


def _wheel_pattern(version: str, local: str | None) -> re.Pattern[str]:
    tag = re.escape(version) + (re.escape(f"+{local}") if local else "")
    return re.compile(rf"^torch-{tag}(?:-\d+)?-cp(\d+)-cp\d+-manylinux[^-]*_x86_64\.whl$")


def find_linux_wheel(
    index: str, version: str, local: str | None = None, timeout: float = TIMEOUT
) -> RemoteWheel | None:
    """A CPython manylinux x86_64 wheel of torch ``version`` (``+local`` when given) on a PEP
    503/691 ``index``; the newest CPython's, whose library is the same build as the others'."""
    page = index.rstrip("/") + "/torch/"
    request = Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html"})
    with urlopen(request, timeout=timeout) as response:
        kind = response.headers.get("Content-Type", "")
        body = response.read()
    pattern = _wheel_pattern(version, local)
    found: list[tuple[int, RemoteWheel]] = []
    if "json" in kind:
        for item in json.loads(body)["files"]:
            match = pattern.match(item["filename"])
            if match and not item.get("yanked") and item.get("size"):
                found.append(
                    (int(match[1]), RemoteWheel(item["filename"], item["url"], int(item["size"])))
                )
    else:
        from urllib.parse import unquote, urljoin

        for href in re.findall(rb'href="([^"]+)"', body):
            url = urljoin(page, href.decode())
            name = unquote(url.split("#", 1)[0].rsplit("/", 1)[-1])
            match = pattern.match(name)
            if match:
                found.append((int(match[1]), RemoteWheel(name, url.split("#", 1)[0], 0)))
    if not found:
        return None
    wheel = max(found, key=lambda f: f[0])[1]
    if wheel.size == 0:
        with urlopen(Request(wheel.url, method="HEAD"), timeout=timeout) as response:
            wheel = RemoteWheel(wheel.filename, wheel.url, int(response.headers["Content-Length"]))
    return wheel


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


def _first_container(stream: io.BufferedIOBase) -> tuple[_Prefixed, int] | None:
    """The stream from the first fatbin container header, and that header's offset."""
    marker = struct.pack("<IHH", MAGIC, 1, 16)
    tail = b""
    consumed = 0
    while chunk := stream.read(4 << 20):
        buffer = tail + chunk
        at = buffer.find(marker)
        if at >= 0:
            return _Prefixed(buffer[at:], stream), consumed - len(tail) + at
        tail = buffer[-(len(marker) - 1) :]
        consumed += len(chunk)
    return None


def _cuda_version(text: str) -> str | None:
    found = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", text, re.MULTILINE)
    return found[1] if found else None


def read_linux_wheel(
    wheel: RemoteWheel, sample: int = SAMPLE, cuda_wanted: str | None = None
) -> KernelReading:
    """``torch/version.py``'s CUDA and the first ``sample`` fatbin containers' architectures;
    no architectures when the wheel is not the ``cuda_wanted`` build (nothing more is read)."""
    raw = RangeFile(wheel.url, wheel.size)
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 20)) as archive:
        cuda = _cuda_version(archive.read("torch/version.py").decode("utf-8", "replace"))
        if cuda_wanted is not None and cuda != cuda_wanted:
            return KernelReading(wheel.filename, cuda, frozenset(), frozenset(), raw.fetched)
        member = archive.getinfo("torch/lib/libtorch_cuda.so")
        with archive.open(member) as library:
            found = _first_container(library)  # type: ignore[arg-type]
            if found is None:
                archs = FatbinArchs(frozenset(), frozenset(), 0, 0)
            else:
                stream, offset = found
                left = member.file_size - offset
                archs = parse_fatbin_stream(stream, left, max_containers=sample)
    return KernelReading(wheel.filename, cuda, archs.sass, archs.ptx, raw.fetched)


def _remembered(cache: str | None, wheel: RemoteWheel) -> KernelReading | None:
    if cache is None:
        return None
    try:
        with open(os.path.join(cache, "kernels.json"), encoding="utf-8") as handle:
            raw = json.load(handle)[f"{wheel.url} {wheel.size}"]
        return KernelReading(
            str(raw["wheel"]),
            raw["cuda"],
            frozenset(int(a) for a in raw["sass"]),
            frozenset(int(a) for a in raw["ptx"]),
            0,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(cache: str | None, wheel: RemoteWheel, reading: KernelReading) -> None:
    if cache is None:
        return
    path = os.path.join(cache, "kernels.json")
    try:
        with open(path, encoding="utf-8") as handle:
            known = json.load(handle)
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    known[f"{wheel.url} {wheel.size}"] = {
        "wheel": reading.wheel,
        "cuda": reading.cuda,
        "sass": sorted(reading.sass),
        "ptx": sorted(reading.ptx),
    }
    try:
        os.makedirs(cache, exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(known, handle)
        os.replace(temporary, path)
    except OSError:
        pass  # not remembered: read again next time


@dataclass(frozen=True)
class KernelCheck:
    verified: bool
    line: str


def _runs(reading: KernelReading, capability: Capability) -> bool:
    return FatbinArchs(reading.sass, reading.ptx, 0, 0).runs_on(capability)


def _names(archs: frozenset[int]) -> str:
    return ", ".join(f"sm_{a}" for a in sorted(archs)) or "none"


def verify_kernels(
    chosen: Pick,
    capabilities: Sequence[Capability],
    command: str,
    *,
    cache: str | None = None,
    pypi: str = PYPI_SIMPLE,
    variant_index: str | None = None,
) -> KernelCheck:
    """Read the recommended build's Linux wheel (its variant's index first, then PyPI when
    PyPI's wheel of that release is that variant) and judge the GPUs by what it carries."""
    from torchguard._frontends.index_probe import probe

    tag = f"cu{chosen.cuda[0]}{chosen.cuda[1]}"
    wanted = f"{chosen.cuda[0]}.{chosen.cuda[1]}"
    own = variant_index or index_url(chosen.cuda)
    why: list[str] = []
    sources: list[tuple[str, str | None]] = []
    problem = probe(own)
    if problem is None:
        sources.append((own, tag))
    else:
        why.append(f"its index {own} {problem}")
    sources.append((pypi, None))
    for index, local in sources:
        try:
            wheel = find_linux_wheel(index, chosen.version, local)
            if wheel is None:
                why.append(f"{index} has no Linux wheel of torch {chosen.version}")
                continue
            reading = _remembered(cache, wheel)
            if reading is None:
                reading = read_linux_wheel(wheel, cuda_wanted=wanted)
                _remember(cache, wheel, reading)
        except _NETWORK as exc:
            why.append(f"{index}: {exc}")
            continue
        if reading.cuda != wanted:
            why.append(
                f"PyPI's Linux wheel of torch {chosen.version} is its CUDA {reading.cuda} "
                f"build, not the {tag} one"
            )
            continue
        if not (reading.sass or reading.ptx):
            why.append(f"{wheel.filename}: no fatbin container found in libtorch_cuda.so")
            continue
        arch = ", ".join(f"sm_{c[0]}{c[1]}" for c in capabilities)
        kernels = f"SASS {_names(reading.sass)}" + (
            f", PTX {_names(reading.ptx)}" if reading.ptx else ""
        )
        if all(_runs(reading, c) for c in capabilities):
            return KernelCheck(
                True,
                f"fix (verified): {command}: {wheel.filename}'s libtorch_cuda.so, read from "
                f"{index} (its first {SAMPLE} fatbin containers), has {kernels}: it runs {arch}",
            )
        return KernelCheck(
            False,
            f"fix (not enough): {command}: {wheel.filename}'s libtorch_cuda.so, read from "
            f"{index}, has {kernels}: no kernels for {arch}, unlike torchguard's table",
        )
    return KernelCheck(
        False, f"fix (not verified: {'; '.join(why)}): {command} (kernels as the table says)"
    )


__all__ = ["KernelCheck", "RangeFile", "find_linux_wheel", "read_linux_wheel", "verify_kernels"]
