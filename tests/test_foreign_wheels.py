"""Wheels for macOS are refused (exit 2) with the `check` to run instead; Linux wheels are
judged by the Linux analysis (ld.so's rules), never as Windows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch, write_wheel

import torchguard


def scan_cli(*targets: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", "scan", *map(str, targets)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def wheel(tmp_path: Path, name: str) -> Path:
    """A torch wheel's contents under another platform's file name."""
    path = tmp_path / name
    write_wheel(path, FakeTorch(version="2.13.0").files())
    return path


def test_a_linux_wheel_is_judged_by_the_linux_analysis_not_as_windows(tmp_path: Path) -> None:
    linux = wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    result = scan_cli(linux)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "(Linux, glibc's ld.so)" in result.stdout and "assumed:" not in result.stdout
    # a torch wheel without Linux binaries is not called healthy: nothing was judged
    assert "no problems found" not in result.stdout
    assert "nothing native to judge" in result.stdout


def test_a_macos_wheel_is_refused_with_the_check_to_run(tmp_path: Path) -> None:
    mac = wheel(tmp_path, "torch_audio-2.4.1-cp312-none-macosx_11_0_arm64.whl")
    result = scan_cli(mac)
    assert result.returncode == 2
    assert "is a macOS wheel" in result.stderr
    assert result.stderr.endswith("run: torchguard check torch-audio==2.4.1 --python 3.12\n")


def test_the_api_takes_compressed_linux_tag_sets_as_linux(tmp_path: Path) -> None:
    both = wheel(tmp_path, "torch-2.4.1-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    report = torchguard.scan([both])
    assert report.python["platform"] == "linux" and report.torch is not None
    mac = wheel(tmp_path, "torch-2.4.1-cp39-none-macosx_11_0_arm64.whl")
    with pytest.raises(ValueError, match="is a macOS wheel"):
        torchguard.scan([mac])


@pytest.mark.parametrize(
    "name",
    ["torch-2.4.1-cp311-cp311-win_amd64.whl", "torch-2.4.1-py3-none-any.whl"],
)
def test_windows_and_pure_wheels_are_scanned(tmp_path: Path, name: str) -> None:
    report = torchguard.scan([wheel(tmp_path, name)])
    assert report.torch is not None and report.torch.version == "2.13.0"
