"""cuda-driver-missing and cuda-driver-too-old, read from System32's nvcuda.dll."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import build_pe

import torchguard
from torchguard._rules.cuda_driver import driver_version, minimum_driver


@pytest.mark.parametrize(
    ("file_version", "driver"),
    [
        ((32, 0, 15, 6094), (560, 94)),
        ((31, 0, 15, 3623), (536, 23)),
        ((30, 0, 14, 7141), (471, 41)),
        ((27, 21, 14, 5671), (456, 71)),
        ((9, 18, 13, 4788), (347, 88)),
        ((6, 14, 3, 100), None),
        (None, None),
    ],
)
def test_driver_number_from_the_file_version(
    file_version: tuple[int, int, int, int] | None, driver: tuple[int, int] | None
) -> None:
    assert driver_version(file_version) == driver


def test_minimum_driver_table_and_unlisted_minors() -> None:
    assert minimum_driver((12, 4)) == (551, 61)
    assert minimum_driver((12, 7)) == (560, 76)  # no 12.7 toolkit: the nearest below
    assert minimum_driver((13, 2)) == (580, 0)
    assert minimum_driver((10, 2)) is None


def cuda_site(tmp_path: Path) -> Path:
    return FakeTorch(version="2.5.1+cu124", cuda="12.4").write(tmp_path / "site")


def with_driver(tmp_path: Path, version: tuple[int, int, int, int]) -> Path:
    folder = system32(tmp_path / "s32")
    (folder / "nvcuda.dll").write_bytes(build_pe(["KERNEL32.dll"], file_version=version))
    return folder


def test_old_driver_is_a_warning_naming_the_driver_to_install(tmp_path: Path) -> None:
    report = torchguard.scan(
        [cuda_site(tmp_path)], system32=[with_driver(tmp_path, (31, 0, 15, 3623))]
    )
    assert report.ok
    (finding,) = report.findings
    assert finding.code == "cuda-driver-too-old"
    assert "536.23 is older than 551.61" in finding.message
    assert finding.hints[0].summary == "install the NVIDIA driver 551.61 or newer"
    assert (
        finding.hints[1].commands[0].endswith("--index-url https://download.pytorch.org/whl/cu121")
    )


def test_new_enough_driver_is_clean(tmp_path: Path) -> None:
    report = torchguard.scan(
        [cuda_site(tmp_path)], system32=[with_driver(tmp_path, (32, 0, 15, 6094))]
    )
    assert report.findings == ()


def test_no_driver_at_all(tmp_path: Path) -> None:
    report = torchguard.scan([cuda_site(tmp_path)], system32=[system32(tmp_path / "s32")])
    assert [(f.code, f.severity) for f in report.findings] == [("cuda-driver-missing", "warning")]
    assert report.findings[0].hints[-1].commands[0].endswith("/whl/cpu")


def test_cpu_builds_are_not_judged(tmp_path: Path) -> None:
    site = FakeTorch().write(tmp_path / "site")
    assert torchguard.scan([site], system32=[system32(tmp_path / "s32")]).findings == ()


def test_too_old_hint_stays_within_the_installed_release(tmp_path: Path) -> None:
    """torch 2.7.1 has cu118/cu126/cu128: driver 556.12 runs cu118 of 2.7.1, not a cu124."""
    site = FakeTorch(version="2.7.1+cu128", cuda="12.8").write(tmp_path / "site")
    report = torchguard.scan([site], system32=[with_driver(tmp_path, (32, 0, 15, 5612))])
    (finding,) = report.findings
    assert finding.code == "cuda-driver-too-old"
    assert (
        finding.hints[1]
        .commands[0]
        .endswith("torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118")
    )


def test_too_old_for_every_build_of_the_release_offers_the_cpu_build(tmp_path: Path) -> None:
    site = FakeTorch(version="2.9.1+cu128", cuda="12.8").write(tmp_path / "site")
    report = torchguard.scan([site], system32=[with_driver(tmp_path, (31, 0, 15, 3623))])
    (finding,) = report.findings
    assert (
        finding.hints[1]
        .commands[0]
        .endswith("torch==2.9.1 --index-url https://download.pytorch.org/whl/cpu")
    )
