"""`pytest --torchguard`: pytest run on a small test folder, healthy and broken."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, system32, write_tree
from pe_builder import build_pe

import torchguard

TESTS = """
import pathlib
pathlib.Path(__file__).with_name("collected.flag").write_text("")

def test_one():
    assert True

def test_two():
    assert True
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "test_suite.py").write_text(TESTS)
    return root


def pytest_run(folder: Path, *args: str, pythonpath: Path | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "NO_COLOR")}
    env["PYTHONPATH"] = str(pythonpath) if pythonpath else ""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def header(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("torchguard ")]


def test_without_the_option_the_plugin_is_silent(folder: Path) -> None:
    status, output = pytest_run(folder)
    assert status == 0 and "2 passed" in output
    assert header(output) == [] and "torch-import-guard" in output  # listed among plugins only


@pytest.mark.skipif(sys.platform == "win32", reason="ensure() would judge the fake DLLs for real")
def test_healthy_environment_one_header_line_then_tests_run(
    folder: Path, tmp_path: Path, fake_torch: FakeTorch
) -> None:
    site = fake_torch.write(tmp_path / "site")  # torch findable by ensure(), never imported
    status, output = pytest_run(folder, "--torchguard", pythonpath=site)
    assert status == 0, output
    checks = (
        "no native library to check"
        if sys.platform.startswith("linux")  # the stand-in torch has no binaries
        else "not Windows, no DLL checks"
    )
    assert header(output) == [
        f"torchguard {torchguard.__version__}: torch 2.4.1+cpu found; {checks}"
    ], output
    assert "2 passed" in output and (folder / "collected.flag").exists()


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None or sys.platform == "win32",
    reason="needs a Python without torch",
)
def test_no_torch_stops_before_collection(folder: Path) -> None:
    status, output = pytest_run(folder, "--torchguard")
    assert status == 1, output
    assert header(output) == [
        f"torchguard {torchguard.__version__}: BROKEN, error[torch-not-found]: "
        "torch is not installed where this Python imports packages from"
    ]
    assert "python -m pip install torch" in output
    assert "no test collected" in output and "passed" not in output
    assert not (folder / "collected.flag").exists()


def test_broken_windows_install_stops_with_the_diagnosis(
    folder: Path, tmp_path: Path, fake_torch: FakeTorch
) -> None:
    site = fake_torch.write(tmp_path / "site")
    status, output = pytest_run(
        folder, "--torchguard", f"--torchguard-scan={site}", "--torchguard-clean-windows"
    )
    assert status == 1, output
    assert len(header(output)) == 1
    assert "BROKEN, error[missing-dll]: MSVCP140.dll is missing" in header(output)[0]
    assert "chain: c10.dll -> MSVCP140.dll" in output
    assert "winget install --id Microsoft.VCRedist.2015+.x64 --exact" in output
    assert "import torch would fail (missing-dll); no test collected" in output
    assert "passed" not in output and "failed" not in output
    assert not (folder / "collected.flag").exists()


def test_healthy_windows_install_by_scan(
    folder: Path, tmp_path: Path, fake_torch: FakeTorch
) -> None:
    site = fake_torch.write(tmp_path / "site")
    s32 = system32(tmp_path / "s32")
    status, output = pytest_run(
        folder, "--torchguard", f"--torchguard-scan={site}", f"--torchguard-system32={s32}"
    )
    assert status == 0, output
    assert header(output) == [
        f"torchguard {torchguard.__version__}: import torch 2.4.1+cpu succeeds"
    ]
    assert "2 passed" in output


def test_unreadable_scan_target_is_a_usage_error(folder: Path, tmp_path: Path) -> None:
    status, output = pytest_run(folder, "--torchguard", f"--torchguard-scan={tmp_path / 'nope'}")
    assert status == 4 and "--torchguard-scan:" in output and "no such file" in output


def test_scan_alone_judges_and_assumes_the_redistributable_like_torchguard_scan(
    folder: Path, tmp_path: Path, fake_torch: FakeTorch
) -> None:
    """--torchguard-scan is not ignored without --torchguard, and a plain torch wheel (which
    needs MSVCP140.dll) passes on the machine `torchguard check` assumes: the current VC++
    Redistributable, said under the verdict."""
    site = fake_torch.write(tmp_path / "site")
    status, output = pytest_run(folder, f"--torchguard-scan={site}")
    assert status == 0, output
    assert header(output) == [
        f"torchguard {torchguard.__version__}: import torch 2.4.1+cpu succeeds"
    ]
    assert (
        "assumed: Windows 10/11 x64 with the Visual C++ 2015-2022 Redistributable (current)"
        in output
    )
    assert "2 passed" in output


def test_scan_options_without_a_scan_are_a_usage_error(folder: Path, tmp_path: Path) -> None:
    status, output = pytest_run(folder, "--torchguard-clean-windows")
    assert status == 4, output
    assert "--torchguard-clean-windows describes a scan: give --torchguard-scan too" in output
    assert not (folder / "collected.flag").exists()


def test_a_broken_torchvision_does_not_stop_a_session_whose_torch_imports(
    folder: Path, tmp_path: Path, fake_torch: FakeTorch
) -> None:
    """Only torchvision is broken: the tests that import it will say so; the session runs."""
    site = fake_torch.write(tmp_path / "site")
    vision = {
        "torchvision/__init__.py": b"",
        "torchvision/_C.pyd": build_pe(["c10.dll", "nowhere.dll", *KERNEL]),
    }
    write_tree(site, companion("torchvision", "0.19.1", vision, {}))
    s32 = system32(tmp_path / "s32")
    assert not torchguard.scan([site], system32=[s32]).ok  # the sibling's error is real
    status, output = pytest_run(
        folder, "--torchguard", f"--torchguard-scan={site}", f"--torchguard-system32={s32}"
    )
    assert status == 0, output
    assert header(output) == [
        f"torchguard {torchguard.__version__}: import torch 2.4.1+cpu succeeds, 1 error(s) in "
        "torch's siblings or extensions"
    ]
    assert "2 passed" in output
