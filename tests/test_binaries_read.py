"""Reading one binary of a tree: damage is PEReadError, a fault of torchguard's propagates.

A wheel member is inflated by zipfile/zlib while the PE reader runs; only the errors of that
inflating may become a damaged file. A KeyError or RuntimeError (RecursionError is one) from
inside the reader is a bug of ours and must not turn into a ``corrupt-dll`` finding.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest
from pe_builder import build_pe

from torchguard._binary.pe import symbols as _symbols
from torchguard._binary.pe.errors import PEReadError
from torchguard._binary.pe.image import PEImage, read_image, read_image_stream
from torchguard._binary.pe.symbols import NotKept
from torchguard._platforms.windows import binaries as _binaries
from torchguard._platforms.windows.tree import WinTree, ZipMember

PATH = "C:\\site\\torch\\lib\\c10.dll"
MEMBER = "torch/lib/c10.dll"


def tree_with_member(tmp_path: Path, data: bytes) -> tuple[WinTree, Path]:
    archive = tmp_path / "torch.whl"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        handle.writestr(MEMBER, data)
    tree = WinTree()
    tree.add_file(PATH, ZipMember(str(archive), MEMBER, len(data)))
    return tree, archive


@pytest.mark.parametrize("fault", [KeyError("a bug"), RuntimeError("a bug"), RecursionError()])
def test_a_fault_inside_the_reader_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: Exception
) -> None:
    tree, _ = tree_with_member(tmp_path, build_pe(["KERNEL32.dll"], exports=["a"]))

    def broken(image: object) -> object:
        raise fault

    monkeypatch.setattr(_symbols, "_exports", broken)
    with pytest.raises(type(fault)):
        _binaries._read(tree, PATH)


def test_a_corrupt_deflate_stream_is_a_damaged_file(tmp_path: Path) -> None:
    data = build_pe(["KERNEL32.dll"], exports=["a"]) + bytes(200_000)
    tree, archive = tree_with_member(tmp_path, data)
    assert isinstance(_binaries._read(tree, PATH), PEImage)
    raw = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as handle:
        info = handle.getinfo(MEMBER)
    start = info.header_offset + 30 + len(MEMBER.encode()) + len(info.extra)
    raw[start + 10 : start + 60] = bytes(range(50))  # garble the compressed bytes
    archive.write_bytes(bytes(raw))
    tree.close()  # reopened, damaged
    found = _binaries._read(tree, PATH)
    assert isinstance(found, PEReadError)


def split_in_two(image: bytes, at: int) -> bytes:
    """``image`` (one section) as two: the second, from body offset ``at``, marked as code."""
    data = bytearray(image)
    header = struct.unpack_from("<I", data, 0x3C)[0]
    optional_size = struct.unpack_from("<H", data, header + 20)[0]
    table = header + 24 + optional_size
    _, virtual_size, rva, raw_size, raw_pointer = struct.unpack_from("<8sIIII", data, table)
    struct.pack_into("<I", data, table + 8, at)
    struct.pack_into("<I", data, table + 16, at)
    second = bytearray(data[table : table + 40])
    struct.pack_into(
        "<8sIIII", second, 0, b".text", virtual_size - at, rva + at, raw_size - at, raw_pointer + at
    )
    struct.pack_into("<I", second, 36, 0x60000020)  # code: a streaming read does not keep it
    data[table + 40 : table + 80] = second
    struct.pack_into("<H", data, header + 6, 2)
    struct.pack_into("<I", data, header + 24 + 32, 0x200)  # SectionAlignment = FileAlignment
    return bytes(data)


def test_names_in_a_code_section_are_read_from_the_whole_member(tmp_path: Path) -> None:
    """c10.dll's name and symbols lie in a code section past the first 64 KB: the streaming
    read says NotKept, and the member is inflated whole, with the same tables as on disk."""
    image = build_pe(
        ["KERNEL32.dll", "c10.dll"],
        symbols={
            "KERNEL32.dll": [f"k{index:040d}" for index in range(2000)],
            "c10.dll": [f"c{index:040d}" for index in range(50)],
        },
        exports=[],
    )
    two = split_in_two(image, 0x1F400)  # after KERNEL32's tables, before c10.dll's name
    with pytest.raises(NotKept):
        read_image_stream(io.BytesIO(two), len(two), symbols=True)
    on_disk = read_image(two, symbols=True)
    assert on_disk.symbols is not None and len(on_disk.symbols.imports["c10.dll"]) == 50
    tree, _ = tree_with_member(tmp_path, two)
    assert _binaries._read(tree, PATH) == on_disk


def test_a_kept_error_is_raised_as_a_fresh_copy() -> None:
    """Raised again, a kept error is a copy of it (same type, message and fields), so the kept
    one never holds a traceback (whose frames hold the analysis)."""
    from torchguard._binary.pe.errors import FileUnreadable, OverBudget, PEReadError
    from torchguard._platforms.windows.binaries import _again

    for kept in (PEReadError("bad"), FileUnreadable("busy", 32), OverBudget("too big")):
        raised = _again(kept)
        assert raised is not kept and type(raised) is type(kept)
        assert raised.args == kept.args and vars(raised) == vars(kept)
        assert kept.__traceback__ is None
