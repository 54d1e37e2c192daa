"""Offline scans of manylinux wheels read the shared objects from the zip (streamed, never
unpacked), and key what they learn by the members' content, so a rescan is warm."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from test_linux_import import _wheel, torch_site

import torchguard
from torchguard._platforms.linux import wheel_files
from torchguard._platforms.linux.wheel_files import lay_out_wheels

TORCH_WHEEL = "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"
NVIDIA_WHEEL = "nvidia_libs-12.8-py3-none-manylinux2014_x86_64.whl"


def wheels(tmp: Path) -> list[Path]:
    site = torch_site(tmp)
    folder = tmp / "wheels"
    folder.mkdir()
    return [
        _wheel(site, folder / TORCH_WHEEL, "torch"),
        _wheel(site, folder / NVIDIA_WHEEL, "nvidia"),
    ]


def test_the_layout_holds_no_shared_objects_bytes(tmp_path: Path) -> None:
    targets = wheels(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    layout = lay_out_wheels([str(t) for t in targets], str(scratch))
    libcusparse = scratch / "nvidia" / "cusparse" / "lib" / "libcusparse.so.12"
    with zipfile.ZipFile(targets[1]) as archive:
        size = archive.getinfo("nvidia/cusparse/lib/libcusparse.so.12").file_size
    info = libcusparse.stat()
    assert info.st_size == size and info.st_blocks == 0  # a sparse name: no byte written
    assert libcusparse.read_bytes() == bytes(size)
    assert (scratch / "torch" / "version.py").read_text().startswith("__version__")
    members = {m.name for m in layout.members.values()}
    assert "nvidia/cusparse/lib/libcusparse.so.12" in members
    assert "torch/version.py" in members and len(layout.key) == 64


def test_a_wheel_scan_reads_members_from_the_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = wheels(tmp_path)
    read: list[str] = []
    original = wheel_files.read_elf_stream

    def spy(stream: object, size: int, **kwargs: object) -> object:
        read.append(str(size))
        return original(stream, size, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(wheel_files, "read_elf_stream", spy)
    report = torchguard.scan(targets)
    assert [f.code for f in report.errors] == []
    assert report.import_torch is not None and report.import_torch.ok
    assert len(read) >= 5  # global deps, cudart, cusparse, nvjitlink, _C ... all streamed


def test_a_rescan_of_the_same_wheels_reads_no_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(cache))
    targets = wheels(tmp_path)
    first = torchguard.scan(targets)
    from torchguard._binary.cache import scope_file

    path = scope_file(cache, "linux-wheels")  # wheels share one file: their scratch is new
    keys = set(json.loads(path.read_text())["entries"])
    assert any(k.startswith("linux-facts|wheel-member|torch/lib/libtorch_cuda.so|") for k in keys)
    assert not any("torchguard-wheels-" in k for k in keys)  # never the scratch folder

    def no_read(*args: object, **kwargs: object) -> object:
        raise AssertionError("a wheel member read on a warm rescan")

    monkeypatch.setattr(wheel_files.WheelFiles, "_image", no_read)
    monkeypatch.setattr(wheel_files.WheelFiles, "_materialise", no_read)
    again = torchguard.scan(targets)
    assert [f.code for f in again.findings] == [f.code for f in first.findings]
    assert set(json.loads(path.read_text())["entries"]) == keys


def test_a_broken_set_in_wheels_is_found_as_in_the_installed_tree(tmp_path: Path) -> None:
    from test_linux_import import nvjitlink

    site = torch_site(tmp_path)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)  # older than cuSPARSE needs
    folder = tmp_path / "wheels"
    folder.mkdir()
    targets = [
        _wheel(site, folder / TORCH_WHEEL, "torch"),
        _wheel(site, folder / NVIDIA_WHEEL, "nvidia"),
    ]
    installed = torchguard.scan([site])
    streamed = torchguard.scan(targets)
    assert [f.code for f in streamed.errors] == [f.code for f in installed.errors]
    assert [f.code for f in streamed.errors] == ["missing-symbol"]


def test_a_damaged_member_is_a_finding_not_a_traceback(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    cudart = site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12"
    cudart.write_bytes(b"not an ELF file at all, but long enough to be read" * 4)
    folder = tmp_path / "wheels"
    folder.mkdir()
    targets = [
        _wheel(site, folder / TORCH_WHEEL, "torch"),
        _wheel(site, folder / NVIDIA_WHEEL, "nvidia"),
    ]
    (finding,) = torchguard.scan(targets).errors
    assert finding.code == "corrupt-dll" and "invalid ELF header" in finding.message
    cudart.write_bytes(b"\x7fELF")  # cut short: glibc's "file too short"
    _wheel(site, folder / NVIDIA_WHEEL, "nvidia")
    (finding,) = torchguard.scan(targets).errors
    assert finding.code == "corrupt-dll" and "file too short" in finding.message


def test_a_wheel_whose_zip_is_damaged_is_a_target_error(tmp_path: Path) -> None:
    targets = wheels(tmp_path)
    data = bytearray(targets[1].read_bytes())
    targets[1].write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ValueError, match="cannot read the wheels"):
        torchguard.scan(targets)
    assert os.path.exists(targets[1])


def test_an_oversized_text_member_is_refused_before_it_is_written(tmp_path: Path) -> None:
    targets = wheels(tmp_path)
    with zipfile.ZipFile(targets[0], "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("torch-2.9.1.dist-info/RECORD", b"#" * (wheel_files.TEXT_LIMIT + 1))
    with pytest.raises(ValueError, match=r"RECORD claims .* bytes"):
        torchguard.scan(targets)


def test_a_table_outside_the_streamed_parts_is_read_from_the_written_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``NotKept``: the member is written into its placeholder and mapped (never held whole
    in memory), and the verdict is the same."""
    from torchguard._binary.elf import NotKept

    targets = wheels(tmp_path)
    expected = [f.code for f in torchguard.scan(targets).findings]

    def not_kept(*args: object, **kwargs: object) -> object:
        raise NotKept("a table was not kept")

    written: list[str] = []
    original = wheel_files.WheelFiles._materialise

    def spy(self: wheel_files.WheelFiles, path: str) -> None:
        original(self, path)
        member = self.member(path)
        assert member is not None
        with zipfile.ZipFile(member.wheel) as archive:
            assert Path(path).read_bytes() == archive.read(member.name)
        written.append(member.name)

    monkeypatch.setenv("TORCHGUARD_CACHE", "off")
    monkeypatch.setattr(wheel_files, "read_elf_stream", not_kept)
    monkeypatch.setattr(wheel_files.WheelFiles, "_materialise", spy)
    assert [f.code for f in torchguard.scan(targets).findings] == expected
    assert "torch/lib/libtorch_cuda.so" in written


def _head(segments: list[tuple[int, int, int, int]], shoff: int, shnum: int) -> bytes:
    """An ELF64 header and program headers (type, flags, offset, filesz), padded to 64 KiB."""
    import struct

    header = b"\x7fELF\x02\x01\x01" + bytes(9)
    header += struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, shoff, 0, 64, 56, len(segments), 64, shnum, 0
    )
    for kind, flags, offset, size in segments:
        header += struct.pack("<IIQQQQQQ", kind, flags, offset, offset, offset, size, size, 4096)
    return header + bytes((1 << 16) - len(header))


MIB = 1 << 20


def test_streaming_keeps_the_tables_of_classic_and_patchelf_layouts() -> None:
    """Measured on torch 2.9.1's NVIDIA set: cuDNN's and NVSHMEM's tables share the code
    segment that starts the file, cuSPARSELt's moved .dynstr lies in a segment just before
    .dynamic, cuFile's section headers lie between the two; all are kept."""
    from torchguard._binary.elf import _kept_ranges

    def kept(ranges: list[tuple[int, int]], start: int, stop: int) -> bool:
        return any(a <= start and stop <= b for a, b in ranges)

    size = 300 * MIB
    classic = _head(
        [(1, 5, 0, 100 * MIB), (1, 6, 200 * MIB, 99 * MIB), (2, 6, 250 * MIB, 600)], 299 * MIB, 30
    )
    ranges = _kept_ranges(classic, size)
    assert kept(ranges, 0, 32 * MIB) and kept(ranges, 250 * MIB, size)
    assert not kept(ranges, 40 * MIB, 41 * MIB)  # the code itself is never kept
    assert kept(_kept_ranges(classic, size, budget=10 * MIB), 0, 1 << 16)  # over budget: head
    assert not kept(_kept_ranges(classic, size, budget=10 * MIB), 0, 32 * MIB)

    moved = _head(
        [
            (1, 4, 0, 33 * MIB),
            (1, 5, 33 * MIB, 50 * MIB),
            (1, 6, 240 * MIB, 20 * MIB),
            (2, 6, 259 * MIB, 600),
        ],
        230 * MIB,
        40,
    )
    ranges = _kept_ranges(moved, size)
    assert kept(ranges, 0, 33 * MIB) and kept(ranges, 240 * MIB, size)  # the moved .dynstr
    assert kept(ranges, 230 * MIB - (1 << 16), 230 * MIB + 40 * 64)  # section headers, names
    assert not kept(ranges, 50 * MIB, 51 * MIB)


def test_what_follows_the_dynamic_section_is_not_kept_unless_it_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPU code after ``.dynamic`` (cuFFT's 260 MiB) is streamed past, not kept: only the
    tables ``.dynamic`` points to and the section headers are."""
    import io

    from elf_builder import build_elf

    import torchguard._binary.elf as elf

    data = build_elf(["libc.so.6"], code=b"\x90" * 300_000) + b"\xcc" * (4 * MIB)
    last: list[list[tuple[int, int]]] = []
    original = elf.keep_ranges

    def spy(stream: object, buffer: object, position: int, end: int, ranges: object) -> int:
        last.append(list(ranges))  # type: ignore[call-overload]
        return original(stream, buffer, position, end, ranges)  # type: ignore[arg-type]

    monkeypatch.setattr(elf, "keep_ranges", spy)
    streamed = elf.read_elf_stream(io.BytesIO(data), len(data), symbols=True)
    assert streamed == elf.read_elf_bytes(data, symbols=True)
    final = last[-1]
    assert sum(b - a for a, b in final) < 400_000  # not the 4 MiB after the file's tables
    assert not any(a <= len(data) - MIB < b for a, b in final)


def test_members_outside_the_site_are_not_placed() -> None:
    assert wheel_files.placed("torch/lib/libc10.so") == ["torch", "lib", "libc10.so"]
    assert wheel_files.placed("x.data/platlib/nvidia/lib/a.so") == ["nvidia", "lib", "a.so"]
    assert wheel_files.placed("x.data/scripts/tool") is None
    for hostile in ("../evil.so", "torch/../../evil.so", "/etc/evil.so", "torch/..", "torch/"):
        assert wheel_files.placed(hostile) is None


class Trickle:
    """A stream that hands out at most 7 bytes a read, as a slow inflate might."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        size = 7 if size < 0 else min(size, 7)
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk


def test_a_fatbin_streams_to_the_same_architectures() -> None:
    from test_fatbin import container, entry

    from torchguard._binary.fatbin import FatbinError, parse_fatbin, parse_fatbin_stream

    blob = (
        container(entry(2, 80, b"x" * 13), entry(2, 86, b"y" * 8), entry(1, 90, b"ptx"))
        + b"\0" * 8
        + container(entry(2, 100, b"z" * 5, header=112), entry(1, 120, b"p", header=80))
        + b"\0" * 64
    )
    assert parse_fatbin_stream(Trickle(blob), len(blob)) == parse_fatbin(blob)
    with pytest.raises(FatbinError):
        parse_fatbin_stream(Trickle(blob[:100]), len(blob))
    broken = bytearray(blob)
    broken[8:16] = (1 << 40).to_bytes(8, "little")  # a container larger than the section
    with pytest.raises(FatbinError, match="runs past the section"):
        parse_fatbin_stream(Trickle(bytes(broken)), len(broken))


def test_a_wheel_gpu_scan_reads_the_fatbin_from_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--gpu`` with a wheel: the kernels are read from the member as it inflates (never
    written out), and the verdict is the installed tree's."""
    from test_fatbin import entry
    from test_linux_gpu import root_with_driver, with_kernels

    site = torch_site(tmp_path)
    with_kernels(site, entry(2, 80, b"a" * 16), entry(2, 90, b"c" * 16))
    folder = tmp_path / "wheels"
    folder.mkdir()
    targets = [
        _wheel(site, folder / TORCH_WHEEL, "torch"),
        _wheel(site, folder / NVIDIA_WHEEL, "nvidia"),
    ]
    root = root_with_driver(tmp_path, "580.82.07")
    gpu = ["NVIDIA GeForce RTX 5090"]
    installed = torchguard.scan([site], sysroot=root, gpus=gpu)

    materialise = wheel_files.WheelFiles._materialise

    def no_write(self: wheel_files.WheelFiles, path: str) -> object:
        # late loads read the .rodata of nvrtc and cuDNN's dispatchers whole; the fatbin's
        # holder (915 MiB of kernels in torch 2.9.1) must never be written out
        if path.endswith("libtorch_cuda.so"):
            raise AssertionError("a member written out for its fatbin")
        return materialise(self, path)

    monkeypatch.setattr(wheel_files.WheelFiles, "_materialise", no_write)
    streamed = torchguard.scan(targets, sysroot=root, gpus=gpu)
    assert [f.code for f in streamed.findings] == ["gpu-arch-unsupported"]
    assert [f.message for f in streamed.findings] == [f.message for f in installed.findings]


def test_a_pure_python_wheel_joins_a_linux_wheel_set(tmp_path: Path) -> None:
    """``pip download torch -d wheels`` on Linux fetches pure-Python wheels too
    (``cuda_pathfinder-...-py3-none-any.whl``): they belong to every platform, so the set is
    scanned, and what they install is part of the site-packages."""
    targets = wheels(tmp_path)
    expected = [f.code for f in torchguard.scan(targets).findings]
    pure = tmp_path / "wheels" / "cuda_pathfinder-1.3.2-py3-none-any.whl"
    with zipfile.ZipFile(pure, "w") as archive:
        archive.writestr("cuda/pathfinder/__init__.py", "")
        archive.writestr(
            "cuda_pathfinder-1.3.2.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: cuda-pathfinder\nVersion: 1.3.2\n",
        )
    report = torchguard.scan([pure, *targets])
    assert [f.code for f in report.findings] == expected
    assert report.python["platform"] == "linux" and report.torch is not None
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lay_out_wheels([str(pure)], str(scratch))
    assert (scratch / "cuda_pathfinder-1.3.2.dist-info" / "METADATA").is_file()
    with pytest.raises(ValueError, match="not a Linux site-packages"):
        torchguard.scan([*targets, tmp_path / "wheels" / "other-1.0-py3-none-win_amd64.whl"])


def _written(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def test_a_metadata_bomb_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """300 KB of wheel whose text members inflate to 300 MiB: the layout would write them
    all; the budget its size allows refuses them first, and the scan says why."""
    from hostile import metadata_bomb_wheel

    bomb = metadata_bomb_wheel(tmp_path)
    assert bomb.stat().st_size < 1 << 20
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(OSError, match="deflate bomb"):
        lay_out_wheels([str(bomb)], str(scratch))
    assert list(scratch.iterdir()) == []
    with pytest.raises(ValueError, match=r"cannot read the wheels: .* more than the"):
        torchguard.scan([bomb])


def test_the_layout_writes_only_the_text_the_analysis_reads(tmp_path: Path) -> None:
    """A few bombs fit the budget's floor; the module no analysis reads is never written."""
    from hostile import metadata_bomb_wheel

    bomb = metadata_bomb_wheel(tmp_path, count=2)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    lay_out_wheels([str(bomb)], str(scratch))
    assert not (scratch / "torch" / "functional.py").exists()
    assert (scratch / "torch" / "__init__.py").is_file()
    assert _written(scratch) <= wheel_files.TEXT_FLOOR
    assert wheel_files.text_budget(0) == wheel_files.TEXT_FLOOR
    assert wheel_files.text_budget(1 << 40) == wheel_files.TEXT_LIMIT
