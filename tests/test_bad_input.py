"""Bad input gets a finding or a clear error, never a traceback from deep inside."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
from fakes import FakeTorch, system32

import torchguard

GARBAGE = [
    b"",
    b"\xff\xfe\x00garbage\x00",
    b"\x00" * 64,
    "ünïcödé = ['x'\n".encode(),
    b'a,b,c\n"unterminated',
]


@pytest.mark.parametrize(
    "target",
    [
        "torch-2.4.1+cpu.dist-info/METADATA",
        "torch-2.4.1+cpu.dist-info/RECORD",
        "torch-2.4.1+cpu.dist-info/INSTALLER",
        "torch/version.py",
        "torch/lib/c10.dll",
        "torch/_C.cp311-win_amd64.pyd",
    ],
)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_files_never_raise(tmp_path: Path, target: str, garbage: bytes) -> None:
    site = FakeTorch().write(tmp_path / "site")
    (site / target).write_bytes(garbage)
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32")])
    report.to_json()
    report.render_text()
    if target.endswith((".dll", ".pyd")):
        assert any(f.code == "corrupt-dll" for f in report.errors)


def test_random_byte_damage_to_a_whole_wheel_never_raises(tmp_path: Path) -> None:
    """Flip bytes anywhere in a wheel: scan reports or refuses it (ValueError), nothing else."""
    original = FakeTorch().wheel(tmp_path).read_bytes()
    rng = random.Random(7)
    for round_ in range(60):
        data = bytearray(original)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"torch-2.4.1-cp311-cp311-win_amd64-{round_}.whl"
        path.write_bytes(bytes(data))
        with contextlib.suppress(ValueError):  # unreadable: the CLI exits 2 with one line
            torchguard.scan([path]).to_json()


def test_odd_paths(tmp_path: Path) -> None:
    """Spaces, brackets (glob metacharacters), non-ASCII and a deep folder."""
    folder = tmp_path / "my [env] ñ" / ("deep" * 10) / "site packages"
    site = FakeTorch().write(folder)
    report = torchguard.scan([site], system32=[system32(tmp_path / "s 32")])
    assert report.ok, report.render_text()


def test_random_header_damage_is_a_read_error_never_another_exception() -> None:
    """Damage in the headers and directories gives facts or PEReadError, nothing else.

    Anything else would be either a reader bug or damage the reader misses; since any other
    exception is reported as torchguard's own fault, the reader must classify all of it.
    """
    from pe_builder import I386, build_pe

    from torchguard._binary.pe.errors import PEReadError
    from torchguard._binary.pe.image import read_pe

    images = [
        build_pe(["a.dll", "b.dll"], ["c.dll"], file_version=(1, 2, 3, 4)),
        build_pe(["kernel32.dll"], ["d.dll"], machine=I386),
    ]
    rng = random.Random(11)
    outcomes = {"facts": 0, "error": 0}
    for _ in range(1500):
        data = bytearray(rng.choice(images))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(0x200)] = rng.randrange(256)  # headers and section table
        try:
            read_pe(bytes(data))
            outcomes["facts"] += 1
        except PEReadError:
            outcomes["error"] += 1
    assert min(outcomes.values()) > 100, outcomes
