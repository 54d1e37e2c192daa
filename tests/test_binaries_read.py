"""Reading one binary of a tree: damage is PEReadError, a fault of torchguard's propagates.

A wheel member is inflated by zipfile/zlib while the PE reader runs; only the errors of that
inflating may become a damaged file. A KeyError or RuntimeError (RecursionError is one) from
inside the reader is a bug of ours and must not turn into a ``corrupt-dll`` finding.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from pe_builder import build_pe

from torchguard import _binaries, _symbols
from torchguard._fs import WinTree, ZipMember
from torchguard._pe import PEImage, PEReadError

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
