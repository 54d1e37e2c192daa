"""smart-app-control: Smart App Control enforcing, and torch's import loads unsigned DLLs
(WinError 4551). The signature is read from the PE security directory."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import build_pe
from realwheels import wheel

from torchguard._binary.cache import user_cache
from torchguard._binary.pe.signature import HEAD, signature_size
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.report import Report


def signed(data: bytes, size: int = 0x2000) -> bytes:
    """``data`` with a security directory of ``size`` bytes (its table itself not appended:
    only the headers are read)."""
    out = bytearray(data)
    (e_lfanew,) = struct.unpack_from("<I", out, 0x3C)
    optional = e_lfanew + 24
    (magic,) = struct.unpack_from("<H", out, optional)
    directories = optional + (112 if magic == 0x20B else 96)
    struct.pack_into("<II", out, directories + 8 * 4, len(out), size)
    return bytes(out)


def test_the_security_directory_says_signed_or_not() -> None:
    image = build_pe(["KERNEL32.dll"])
    assert signature_size(image) == 0
    assert signature_size(signed(image)) == 0x2000
    assert signature_size(b"MZ" + b"\0" * 10) is None and signature_size(b"garbage" * 100) is None
    assert signature_size(image[:0x80]) is None  # headers cut short: unknown, not unsigned


def run(tmp_path: Path, state: int | None, *, sign: bool = False) -> Report:
    site = FakeTorch().write(tmp_path / "site")
    if sign:
        for path in (site / "torch").rglob("*"):
            if path.suffix in (".dll", ".pyd"):
                path.write_bytes(signed(path.read_bytes()))
    system = offline_windows([str(site)], system32_dirs=[str(system32(tmp_path / "s32"))])
    system.smart_app_control = state
    try:
        return analyze(system, cache=user_cache())
    finally:
        system.close()


def test_enforcing_with_unsigned_torch_dlls(tmp_path: Path) -> None:
    report = run(tmp_path, 1)
    (finding,) = [f for f in report.findings if f.code == Code.SMART_APP_CONTROL]
    assert not finding.is_error and "WinError 4551" in finding.message
    assert "c10.dll" in finding.message and "more" in finding.message
    assert "msvcp140.dll" not in finding.message  # System32's: catalog-signed, not judged
    assert finding.hints[0].url


@pytest.mark.parametrize("state", [None, 0, 2])
def test_off_evaluation_or_unknown_says_nothing(tmp_path: Path, state: int | None) -> None:
    assert not [f for f in run(tmp_path, state).findings if f.code == Code.SMART_APP_CONTROL]


def test_signed_dlls_pass(tmp_path: Path) -> None:
    assert not [f for f in run(tmp_path, 1, sign=True).findings if f.code == Code.SMART_APP_CONTROL]


@pytest.mark.realwheel
def test_real_dlls_signed_and_not() -> None:
    """ctranslate2 4.8.5's Windows wheel: NVIDIA's cudnn64_9.dll and Intel's libiomp5md.dll
    carry a signature, ctranslate2.dll does not."""
    with zipfile.ZipFile(wheel("ctranslate2", "4.8.5")) as archive:
        sizes = {
            name: signature_size(archive.open(f"ctranslate2/{name}").read(HEAD))
            for name in ("cudnn64_9.dll", "libiomp5md.dll", "ctranslate2.dll")
        }
    assert sizes["ctranslate2.dll"] == 0
    assert sizes["cudnn64_9.dll"] and sizes["libiomp5md.dll"], sizes
