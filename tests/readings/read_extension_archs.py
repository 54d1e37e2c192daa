"""Read which GPU architectures CUDA extensions' PyPI wheels carry, from their binaries.

Rerun it to check or extend ``torchguard/_facts/extension_archs.py``::

    python tests/readings/read_extension_archs.py > tests/readings/extension_archs_readings.jsonl
    python tests/readings/read_extension_archs.py xformers --releases 2   # the newest two
    python tests/readings/read_extension_archs.py --skip 12 --releases 20 >> ...   # older ones
    python tests/readings/read_extension_archs.py --emit tests/readings/extension_archs_readings.jsonl

The packages whose CUDA wheels are on PyPI: xformers (a Linux and a Windows wheel per release,
``torch==`` pinned in its metadata), bitsandbytes (one library per CUDA version inside one
wheel) and onnxruntime-gpu (its CUDA execution provider library). flash-attn and SageAttention
have no binary wheel on PyPI (flash-attn publishes source distributions only, SageAttention
sources and a pure-Python 1.x wheel; their CUDA wheels live on GitHub releases), so there is
nothing to read for them here.

Each wheel is read over HTTP range requests, never downloaded whole: the zip's central
directory, the ``METADATA`` member (its ``Requires-Dist: torch``), and each CUDA binary member
inflated as a stream through its fatbin containers, of which only the headers are kept
(torchguard's own ``parse_fatbin_stream``, checked against NVIDIA's ``cuobjdump`` in
``tests/test_fatbin.py``). Releases are read newest first, from mid-2024 on, a bounded number
per package. Each output line is one binary member: package, release, platform, wheel file
name, member, upload date, the torch requirement, and the SASS/PTX lists.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from read_torch_archs import _first_container

from torchguard._binary.fatbin import FatbinError, parse_fatbin_stream
from torchguard._frontends.remote_kernels import RangeFile  # the same reader check uses

MODULE = Path(__file__).resolve().parents[2] / "torchguard" / "_facts" / "extension_archs.py"
SIMPLE = "https://pypi.org/simple/{}/"
#: Containers read per binary at most: more than any of these sections holds (onnxruntime-gpu's
#: CUDA provider, the largest, has about 600), so each section is read whole; its translation
#: units need not share one arch list (xformers' flash_attn_3 is sm_80/sm_90 only).
SAMPLE = 4096
#: Releases uploaded before this are not read (the brief: from about mid-2024).
SINCE = "2024-06-01"
RELEASES = 12
FINAL = re.compile(r"^\d+(?:\.\d+)+(?:\.post\d+)?$")

#: Package -> which members are its CUDA binaries.
BINARIES: dict[str, re.Pattern[str]] = {
    "xformers": re.compile(r"\.(so|pyd|dll)$"),
    "bitsandbytes": re.compile(r"libbitsandbytes_cuda\d+\.(so|dll)$"),
    "onnxruntime-gpu": re.compile(r"onnxruntime_providers_cuda\.(so|dll)$"),
}
#: Packages checked for binary wheels and found with none: flash-attn publishes source
#: distributions only, SageAttention sources and a pure-Python (Triton) 1.x wheel.
NO_BINARY_WHEELS = ("flash-attn", "sageattention")
#: Wheel tags read per platform, the first found wins (cp311 or a tag for every Python).
PLATFORMS = {
    "linux": re.compile(r"-(cp311-cp311|cp39-abi3|py3-none|py39-none)-[^-]*x86_64\.whl$"),
    "windows": re.compile(r"-(cp311-cp311|cp39-abi3|py3-none|py39-none)-win_amd64\.whl$"),
}


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    platform: str
    filename: str
    url: str
    size: int
    uploaded: str


@dataclass(frozen=True)
class Reading:
    package: str
    version: str
    platform: str
    wheel: str
    member: str
    uploaded: str
    requires_torch: str | None
    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    containers: int
    fetched_mib: float


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p.removeprefix("post")) for p in version.split("."))


def index(package: str) -> dict[str, object]:
    request = urllib.request.Request(
        SIMPLE.format(package), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        found: dict[str, object] = json.load(response)
    return found


def pypi_wheels(package: str, since: str = SINCE) -> list[Wheel]:
    """One wheel per (final release, platform) uploaded since ``since``, newest release first."""
    prefix = package.replace("-", "_")
    wheels: dict[tuple[str, str], Wheel] = {}
    files = index(package)["files"]
    assert isinstance(files, list)
    for item in files:
        name = item["filename"]
        if not name.endswith(".whl") or item.get("yanked"):
            continue
        version = name.split("-")[1]
        uploaded = str(item.get("upload-time", ""))[:10]
        if not FINAL.match(version) or uploaded < since or not name.startswith(prefix):
            continue
        for platform, tag in PLATFORMS.items():
            if tag.search(name) and (version, platform) not in wheels:
                wheels[version, platform] = Wheel(
                    package, version, platform, name, item["url"], int(item["size"]), uploaded
                )
    return sorted(wheels.values(), key=lambda w: (_key(w.version), w.platform), reverse=True)


def no_binary_wheel(package: str) -> bool:
    """Whether PyPI holds no platform wheel of ``package``: source distributions only
    (flash-attn) or pure-Python wheels (SageAttention 1.x, Triton kernels)."""
    files = index(package)["files"]
    assert isinstance(files, list)
    return not any(
        item["filename"].endswith(".whl") and not item["filename"].endswith("-none-any.whl")
        for item in files
    )


def _requires_torch(metadata: str) -> str | None:
    for line in metadata.splitlines():
        found = re.match(r"^Requires-Dist:\s*torch\s*(\(?[=<>!~][^;]*)?", line)
        if found:
            return (found[1] or "").strip().strip("()").replace(" ", "") or "any"
    return None


def read_wheel(wheel: Wheel, sample: int = SAMPLE) -> Iterator[Reading]:
    """One reading per CUDA binary member of ``wheel`` (members without a fatbin included,
    with empty lists: a release that dropped its kernels is a fact too)."""
    raw = RangeFile(wheel.url, wheel.size)
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=8 << 20)) as archive:
        names = archive.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        torch = _requires_torch(archive.read(meta).decode("utf-8", "replace"))
        binaries = sorted(n for n in names if BINARIES[wheel.package].search(n))
        for member in binaries or [""]:
            sass: tuple[int, ...] = ()
            ptx: tuple[int, ...] = ()
            containers = 0
            if member:
                before = raw.fetched
                with archive.open(member) as library:
                    found = _first_container(library)  # type: ignore[arg-type]
                    if found is not None:
                        try:
                            archs = parse_fatbin_stream(found, 1 << 40, max_containers=sample)
                        except FatbinError:  # the section ran to the end of the file
                            raise SystemExit(f"{wheel.filename} {member}: damaged fatbin") from None
                        sass, ptx = tuple(sorted(archs.sass)), tuple(sorted(archs.ptx))
                        containers = archs.containers
                fetched = raw.fetched - before
            else:
                fetched = 0
            yield Reading(
                wheel.package,
                wheel.version,
                wheel.platform,
                wheel.filename,
                member,
                wheel.uploaded,
                torch,
                sass,
                ptx,
                containers,
                round(fetched / 2**20, 1),
            )


def readings(
    packages: list[str], count: int = RELEASES, sample: int = SAMPLE, skip: int = 0
) -> Iterator[Reading]:
    """The newest ``count`` releases of each package since :data:`SINCE`, after the newest
    ``skip`` (to read a long history in parts)."""
    for package in packages:
        wheels = pypi_wheels(package)
        ordered = sorted({w.version for w in wheels}, key=_key, reverse=True)
        newest = ordered[skip : skip + count]
        for wheel in wheels:
            if wheel.version in newest:
                yield from read_wheel(wheel, sample)


def library_cuda(member: str) -> tuple[int, int] | None:
    """The CUDA version of one of bitsandbytes' per-version libraries (``cuda128`` -> 12.8)."""
    found = re.search(r"libbitsandbytes_cuda(\d\d)(\d+)\.", member)
    return (int(found[1]), int(found[2])) if found else None


def rows(lines: list[dict[str, object]]) -> list[tuple[object, ...]]:
    """The table's rows from the readings: one per (package, release, platform), the union of
    its binaries' lists, or per library where the package loads one by torch's CUDA version
    (bitsandbytes); packages in :data:`BINARIES` order, newest release first."""
    grouped: dict[tuple[str, str, str, tuple[int, int] | None], dict[str, object]] = {}
    for line in lines:
        cuda = library_cuda(str(line["member"]))
        key = (str(line["package"]), str(line["version"]), str(line["platform"]), cuda)
        row = grouped.setdefault(key, {**line, "sass": set(), "ptx": set()})
        row["sass"].update(line["sass"])  # type: ignore[attr-defined]
        row["ptx"].update(line["ptx"])  # type: ignore[attr-defined]
    order = list(BINARIES)
    keys = sorted(grouped, key=lambda k: (_key(k[1]), k[2] == "linux", k[3] or ()), reverse=True)
    keys.sort(key=lambda k: order.index(k[0]))  # stable: newest first within a package
    return [
        (
            *key[:3],
            tuple(sorted(grouped[key]["sass"])),  # type: ignore[call-overload]
            tuple(sorted(grouped[key]["ptx"])),  # type: ignore[call-overload]
            grouped[key]["requires_torch"],
            grouped[key]["wheel"],
            grouped[key]["uploaded"],
            key[3],
        )
        for key in keys
    ]


def emit(readings_path: Path, module: Path) -> None:
    """Rewrite the rows between the ``readings`` markers of the facts module."""
    lines = [json.loads(line) for line in readings_path.read_text(encoding="utf-8").splitlines()]
    body = "".join(f"    {row!r},\n" for row in rows(lines))
    text = module.read_text(encoding="utf-8")
    start = text.index("_ROWS: tuple[Row, ...] = (")
    end = text.index("# /readings")
    table = "_ROWS: tuple[Row, ...] = (\n" + body + ")\n"
    module.write_text(text[:start] + table + text[end:], encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "-q", str(module)], check=True
    )  # the project's style


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=list(BINARIES))
    parser.add_argument("--releases", type=int, default=RELEASES, help="newest N per package")
    parser.add_argument("--skip", type=int, default=0, help="after the newest N per package")
    parser.add_argument("--sample", type=int, default=SAMPLE, help="containers per binary")
    parser.add_argument("--emit", type=Path, help="readings to write the facts module from")
    options = parser.parse_args(argv)
    if options.emit:
        emit(options.emit, MODULE)
        return 0
    started = time.monotonic()
    for package in NO_BINARY_WHEELS:
        if no_binary_wheel(package):
            print(f"{package}: no binary wheel on PyPI", file=sys.stderr)
    for reading in readings(options.packages, options.releases, options.sample, options.skip):
        print(json.dumps(reading.__dict__), flush=True)
        print(
            f"{reading.package} {reading.version} {reading.platform} {reading.member}: "
            f"{reading.fetched_mib} MiB, {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
