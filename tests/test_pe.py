from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
from pe_builder import ARM64, I386, build_pe

from torchguard._binary.pe.errors import PEReadError
from torchguard._binary.pe.image import read_pe


def test_reads_imports_and_delay_imports_in_order() -> None:
    facts = read_pe(build_pe(["KERNEL32.dll", "c10.dll", "MSVCP140.dll"], ["nvcuda.dll"]))
    assert facts.imports == ("KERNEL32.dll", "c10.dll", "MSVCP140.dll")
    assert facts.delay_imports == ("nvcuda.dll",)
    assert facts.machine_name == "x64"
    assert facts.is_dll


def test_linker_version_and_machine_types() -> None:
    assert read_pe(build_pe(["a.dll"], linker=(14, 42))).linker_version == (14, 42)
    assert read_pe(build_pe(["a.dll"], machine=I386)).machine_name == "x86"
    assert read_pe(build_pe(["a.dll"], machine=ARM64)).machine_name == "arm64"
    assert not read_pe(build_pe(["a.dll"], dll=False)).is_dll


def test_many_imports_are_all_kept() -> None:
    """pefile's symbol caps drop DLL names silently; names-only parsing must keep all 300."""
    names = [f"dep{i}.dll" for i in range(300)]
    delayed = [f"late{i}.dll" for i in range(40)]
    facts = read_pe(build_pe(names, delayed))
    assert facts.imports == tuple(names)
    assert facts.delay_imports == tuple(delayed)


def test_duplicate_names_collapse_case_insensitively() -> None:
    facts = read_pe(build_pe(["KERNEL32.dll", "kernel32.DLL"], ["kernel32.dll", "x.dll"]))
    assert facts.imports == ("KERNEL32.dll",)
    assert facts.delay_imports == ("x.dll",)


def test_reads_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "x.dll"
    path.write_bytes(build_pe(["uv.dll"]))
    assert read_pe(str(path)).imports == ("uv.dll",)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"hello world", "no MZ"),
        (b"MZ" + bytes(10), "truncated"),
        (build_pe(["a.dll"])[:300], "truncated"),
        (build_pe(["a.dll"])[:0x200], "truncated"),
        (build_pe(["a.dll"])[:4096][:-1], "truncated"),
    ],
)
def test_bad_images_raise_pe_read_error(data: bytes, reason: str) -> None:
    with pytest.raises(PEReadError, match=reason):
        read_pe(data)


def test_a_missing_file_is_unreadable_not_damaged(tmp_path: Path) -> None:
    from torchguard._binary.pe.errors import FileUnreadable

    with pytest.raises(FileUnreadable, match="cannot read"):
        read_pe(str(tmp_path / "nope.dll"))


def test_corrupt_pe_signature() -> None:
    data = bytearray(build_pe(["a.dll"]))
    data[0x40:0x44] = b"XX\0\0"
    with pytest.raises(PEReadError, match="no PE signature"):
        read_pe(bytes(data))


def test_random_corruption_never_escapes_as_another_exception() -> None:
    """Flip bytes all over a valid image: the reader returns facts or PEReadError, nothing else."""
    original = build_pe(["KERNEL32.dll", "c10.dll"], ["late.dll"])
    rng = random.Random(1234)
    for _ in range(400):
        data = bytearray(original)
        for _ in range(rng.randint(1, 12)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        with contextlib.suppress(PEReadError):
            read_pe(bytes(data))


def test_streaming_reader_matches_the_full_reader() -> None:
    import io

    from torchguard._binary.pe.image import read_image_stream

    data = build_pe(["KERNEL32.dll", "c10.dll"], ["late.dll"], linker=(14, 42))
    assert read_image_stream(io.BytesIO(data), len(data)).facts == read_pe(data)


def test_streaming_reader_reports_a_short_stream() -> None:
    import io

    from torchguard._binary.pe.image import read_image_stream

    data = build_pe(["KERNEL32.dll"])
    with pytest.raises(PEReadError, match="truncated"):
        read_image_stream(io.BytesIO(data[:700]), len(data))
