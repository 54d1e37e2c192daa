"""xpu-driver-missing: an XPU build without the Intel driver's ze_loader.dll in System32."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fakes import FakeTorch, system32

import torchguard
from torchguard._binary.pe.image import read_pe


def scan(tmp_path: Path, version: str, names: tuple[str, ...]) -> torchguard.Report:
    site = FakeTorch(version=version).write(tmp_path / "site")
    return torchguard.scan([site], system32=[system32(tmp_path / "s32", names)])


def test_xpu_build_without_the_level_zero_loader(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.14.0+xpu", ("msvcp140.dll",))
    assert report.ok
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.missing) == (
        "xpu-driver-missing",
        "warning",
        "ze_loader.dll",
    )
    assert finding.hints[0].url and "intel.com" in finding.hints[0].url
    assert (
        finding.hints[1]
        .commands[0]
        .endswith("torch==2.14.0 --index-url https://download.pytorch.org/whl/cpu")
    )


def test_driver_present_or_other_builds_are_clean(tmp_path: Path) -> None:
    assert scan(tmp_path / "a", "2.14.0+xpu", ("msvcp140.dll", "ze_loader.dll")).findings == ()
    assert scan(tmp_path / "b", "2.14.0+cpu", ("msvcp140.dll",)).findings == ()


@pytest.mark.realwheel
def test_the_level_zero_adapter_loads_ze_loader_by_name() -> None:
    """The fact the rule rests on, read from Intel's real wheel: no static import, a name."""
    from realwheels import wheel

    with zipfile.ZipFile(wheel("intel-cmplr-lib-ur", "2025.3.1")) as archive:
        member = next(n for n in archive.namelist() if n.endswith("/ur_adapter_level_zero.dll"))
        data = archive.read(member)
    facts = read_pe(data)
    assert "ze_loader.dll" not in {name.lower() for name in (*facts.imports, *facts.delay_imports)}
    assert b"ze_loader" in data
