"""Small hostile inputs that cost a naive reader far more memory than their own size.

Each builder returns a few MB (or less) that a reader without budgets inflates to GiBs.
:func:`peak_rss` runs a scan in a fresh process and returns that process's peak RSS, so a
test can assert that no input of N MB costs more than a small multiple of N.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

from fakes import FakeTorch, write_wheel
from pe_builder import build_pe

#: A hint/name entry this long, and as many thunks as the symbol reader allows, all pointing
#: at it: 4.2 MB of file, 262,142 copies of a 16,000-byte name (4 GiB) for a naive reader.
NAME_BYTES = 16_000
THUNKS = 262_142


def thunk_bomb(overlapping: bool = False) -> bytes:
    """A DLL whose every import thunk names the same 16,000-byte function.

    ``overlapping``: each thunk points one byte further into that name (wrapping around),
    so every name is a distinct suffix of it: 2 GiB of names for a naive reader.
    """
    ordinal = (1 << 63) | 1
    image = bytearray(
        build_pe(
            ["KERNEL32.dll"], symbols={"KERNEL32.dll": ["X" * NAME_BYTES] + [1] * (THUNKS - 1)}
        )
    )
    marker = struct.pack("<Q", ordinal)
    name_thunk: int | None = None
    position = image.find(marker)
    while position >= 0:
        if position % 8 == 0:
            if name_thunk is None:
                (name_thunk,) = struct.unpack_from("<Q", image, position - 8)
            shift = (position // 8) % NAME_BYTES if overlapping else 0
            image[position : position + 8] = struct.pack("<Q", name_thunk + shift)
        position = image.find(marker, position + 1)
    return bytes(image)


#: The inflated size of the deflate bomb's DLL: 1 GiB from about 1 MB of wheel.
BOMB_BYTES = 1 << 30
MEMBER = "torch/lib/asmjit.dll"


def deflate_bomb_wheel(directory: Path, layout: str = "overlay", size: int = BOMB_BYTES) -> Path:
    """A torch wheel whose ``torch/lib/asmjit.dll`` inflates to 1 GiB (mostly zeros).

    ``overlay``: a small valid DLL followed by zeros; ``section``: one data section that is
    1 GiB of zeros (every byte of it a section a reader keeps); ``headers``: a section table
    longer than 64 KB, so a streaming reader cannot tell what to keep and reads it all.
    """
    fake = FakeTorch()
    path = fake.wheel(directory)
    files = {name: data for name, data in fake.files().items() if name != MEMBER}
    write_wheel(path, files)
    dll = build_pe(["KERNEL32.dll"])
    if layout == "section":
        dll = _grow_last_section(dll, size - len(dll))
    elif layout == "headers":
        dll = _far_sections(dll)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        info = zipfile.ZipInfo(MEMBER)
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            member.write(dll)
            zeros = bytes(1 << 20)
            for _ in range((size - len(dll)) >> 20):
                member.write(zeros)
            member.write(bytes((size - len(dll)) % (1 << 20)))
    return path


#: A Linux wheel whose metadata inflates a thousandfold: 300 ``METADATA`` files of 1 MiB.
METADATA_BOMBS = 300


def metadata_bomb_wheel(directory: Path, count: int = METADATA_BOMBS) -> Path:
    """A manylinux wheel of about 300 KB whose text members (each a ``METADATA`` the Linux
    layout writes to disk) inflate to ``count`` MiB: 1 MiB of spaces each, deflated to 1 KB;
    plus a 1 MiB module no analysis reads."""
    path = directory / "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    filler = b" " * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("torch/__init__.py", b"")
        archive.writestr("torch/functional.py", filler)
        for index in range(count):
            archive.writestr(f"bomb{index}-1.0.dist-info/METADATA", filler)
    return path


def _far_sections(image: bytes, count: int = 1700, start: int = 0x20000) -> bytes:
    """``image`` with ``count`` section headers (the real one, then empty ones) and its
    section data moved to ``start``: its headers outgrow the first 64 KB."""
    header = struct.unpack_from("<I", image, 0x3C)[0]
    optional_size = struct.unpack_from("<H", image, header + 20)[0]
    table = header + 24 + optional_size
    raw_pointer = struct.unpack_from("<I", image, table + 20)[0]
    head = bytearray(image[:raw_pointer]) + bytes(start - raw_pointer)
    struct.pack_into("<H", head, header + 6, count)
    struct.pack_into("<I", head, table + 20, start)
    struct.pack_into("<I", head, header + 24 + 60, start)  # SizeOfHeaders
    return bytes(head) + image[raw_pointer:]


def _grow_last_section(image: bytes, extra: int) -> bytes:
    """``image`` with ``extra`` zero bytes appended to its (only) section's raw data."""
    data = bytearray(image)
    header = struct.unpack_from("<I", data, 0x3C)[0]
    optional_size = struct.unpack_from("<H", data, header + 20)[0]
    table = header + 24 + optional_size
    virtual_size, rva, raw_size = struct.unpack_from("<III", data, table + 8)
    extra -= extra % 0x1000
    struct.pack_into("<I", data, table + 8, virtual_size + extra)
    struct.pack_into("<I", data, table + 16, raw_size + extra)
    size_of_image = header + 24 + 56
    struct.pack_into("<I", data, size_of_image, rva + ((raw_size + extra + 0xFFF) & ~0xFFF))
    return bytes(data)  # the zeros themselves are written by the caller, streamed


_MEASURE = """
import json, resource, sys
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import torchguard
report = torchguard.scan(json.loads(sys.argv[1]), system32=json.loads(sys.argv[2]))
print(json.dumps([[f.code, f.severity, f.missing, f.message] for f in report.findings]))
"""

#: Runs the scan in a child and reports that child's peak RSS. The launcher is itself a fresh,
#: small process: a child forked straight from pytest starts with pytest's RSS on its books
#: (Linux keeps the pre-exec high-water mark in ``ru_maxrss``).
_LAUNCH = """
import json, resource, subprocess, sys
done = subprocess.run([sys.executable, "-c", *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(done.stderr)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
print(json.dumps({"rc": done.returncode, "peak": peak * scale, "out": done.stdout}))
"""


def peak_rss(
    sources: list[str], system32: list[str], limit: int = 2 << 30
) -> tuple[int, list[list[str]]]:
    """(peak RSS in bytes, findings as [code, severity, missing, message]) of a scan run in a
    fresh process whose address space is capped at ``limit`` (a safety net, not the test)."""
    arguments = [_MEASURE, json.dumps(sources), json.dumps(system32), str(limit)]
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH, *arguments], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise AssertionError(f"the launcher failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    if result["rc"] != 0:
        raise AssertionError(f"the scan failed:\n{done.stderr[-3000:]}")
    return int(result["peak"]), json.loads(result["out"].splitlines()[-1])
