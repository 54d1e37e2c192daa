"""Wheels for Linux or macOS are refused (exit 2) with the `check` to run instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch, write_tree, write_wheel

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


def test_a_linux_wheel_is_refused_with_the_check_to_run(tmp_path: Path) -> None:
    linux = wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    result = scan_cli(linux)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "torchguard: error: torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl is a Linux "
        "wheel: Linux scanning is not supported by this version of torchguard, which judges "
        "Windows installs; to ask whether this release works on Windows, run: "
        "torchguard check torch==2.13.0 --python 3.11\n"
    )


def test_a_macos_wheel_is_refused_with_the_check_to_run(tmp_path: Path) -> None:
    mac = wheel(tmp_path, "torch_audio-2.4.1-cp312-none-macosx_11_0_arm64.whl")
    result = scan_cli(mac)
    assert result.returncode == 2
    assert "is a macOS wheel" in result.stderr
    assert result.stderr.endswith("run: torchguard check torch-audio==2.4.1 --python 3.12\n")


def test_the_api_refuses_too_and_compressed_tag_sets_count(tmp_path: Path) -> None:
    both = wheel(tmp_path, "torch-2.4.1-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    with pytest.raises(ValueError, match="is a Linux wheel"):
        torchguard.scan([both])


@pytest.mark.parametrize(
    "name",
    ["torch-2.4.1-cp311-cp311-win_amd64.whl", "torch-2.4.1-py3-none-any.whl"],
)
def test_windows_and_pure_wheels_are_scanned(tmp_path: Path, name: str) -> None:
    report = torchguard.scan([wheel(tmp_path, name)])
    assert report.torch is not None and report.torch.version == "2.13.0"


def other_install(root: Path, extension: str, head: bytes) -> Path:
    """A site-packages folder of a Linux or macOS torch 2.4.1: its `_C` is no PE file."""
    files = {
        "torch/__init__.py": b"",
        "torch/version.py": b"__version__ = '2.4.1'\ncuda = None\n",
        f"torch/{extension}": head + b"\0" * 60,
        "torch-2.4.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n",
    }
    write_tree(root, files)
    return root


def test_a_linux_install_folder_is_refused_by_its_contents(tmp_path: Path) -> None:
    site = other_install(tmp_path / "site", "_C.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
    result = scan_cli(site)
    assert result.returncode == 2 and result.stdout == ""
    assert "is a Linux install of torch (its _C.cpython-311-x86_64-linux-gnu.so is not a" in (
        result.stderr
    )
    assert result.stderr.endswith("run: torchguard check torch==2.4.1 --python 3.11\n")


def test_a_macos_install_folder_is_refused_and_a_windows_one_is_not(tmp_path: Path) -> None:
    mac = other_install(tmp_path / "mac", "_C.cpython-312-darwin.so", b"\xcf\xfa\xed\xfe")
    with pytest.raises(ValueError, match="is a macOS install of torch"):
        torchguard.scan([mac])
    # the same name holding a file of no known format is not judged by its name
    odd = other_install(tmp_path / "odd", "_C.cpython-312-darwin.so", b"\0\0\0\0")
    assert torchguard.scan([odd]).torch is not None
    windows = FakeTorch().write(tmp_path / "win")
    assert torchguard.scan([windows]).torch is not None
