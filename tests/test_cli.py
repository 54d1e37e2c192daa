from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch

from torchguard._frontends.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", *args], capture_output=True, text=True, timeout=120
    )


def test_scan_clean_exits_0(tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path) -> None:
    site = fake_torch.write(tmp_path / "site")
    assert main(["scan", str(site), "--system32", str(runtime_dir)]) == 0


def test_scan_errors_exit_1_with_one_json_document(tmp_path: Path, fake_torch: FakeTorch) -> None:
    site = fake_torch.write(tmp_path / "site")
    result = run("scan", str(site), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == 1 and data["ok"] is False
    assert data["torch"]["version"] == "2.4.1+cpu"
    finding = data["findings"][0]
    assert finding["code"] == "missing-dll"
    assert finding["missing"] == "msvcp140.dll" and finding["chain"] == ["c10.dll", "msvcp140.dll"]
    assert set(finding) >= {"code", "severity", "dll", "missing", "chain", "message", "hints"}
    assert set(finding["hints"][0]) == {"summary", "commands", "url"}


def test_text_output_names_leaf_and_fix(tmp_path: Path, fake_torch: FakeTorch) -> None:
    result = run("scan", str(fake_torch.write(tmp_path / "site")))
    assert result.returncode == 1
    assert "error[missing-dll]: MSVCP140.dll is missing" in result.stdout
    assert 'import torch fails: [WinError 126] Error loading "...\\c10.dll"' in result.stdout


@pytest.mark.parametrize(
    "args", [["scan", "/definitely/not/here.whl"], ["scan"], ["frobnicate"], []]
)
def test_bad_usage_exits_2_without_traceback(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unreadable_wheel_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "torch-2.4.1-cp311-cp311-win_amd64.whl"
    bogus.write_bytes(b"PK\x03\x04 truncated")
    result = run("scan", str(bogus))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not a readable wheel" in result.stderr


def test_doctor_runs_here(tmp_path: Path) -> None:
    result = run("doctor", "--json")
    assert result.returncode in (0, 1)
    data = json.loads(result.stdout)
    mode = "live" if sys.platform.startswith("linux") else "non-windows"
    assert data["schema"] == 1 and data["mode"] == mode
