from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch

import torchguard
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
    result = run("scan", "--clean-windows", str(site), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == 1 and data["ok"] is False and data["blocking"] is True
    assert data["torch"]["version"] == "2.4.1+cpu"
    finding = data["findings"][0]
    assert finding["code"] == "missing-dll"
    assert finding["missing"] == "msvcp140.dll" and finding["chain"] == ["c10.dll", "msvcp140.dll"]
    assert set(finding) >= {"code", "severity", "dll", "missing", "chain", "message", "hints"}
    assert set(finding["hints"][0]) == {"summary", "commands", "url"}


def test_scan_assumes_the_current_redistributable_and_says_so(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    """The default `check` uses: a torch needing MSVCP140.dll imports on a usual Windows PC."""
    site = str(fake_torch.write(tmp_path / "site"))
    usual = run("scan", site)
    assert usual.returncode == 0, usual.stdout + usual.stderr
    assert usual.stdout.splitlines()[-1] == (
        "assumed: Windows 10/11 x64 with the Visual C++ 2015-2022 Redistributable (current); "
        "--clean-windows assumes none"
    )
    clean = run("scan", site, "--clean-windows", "--system32", str(tmp_path))
    assert clean.returncode == 1
    assert clean.stdout.splitlines()[-1] == (
        "assumed: a clean Windows 10/11 x64 (no Visual C++ redistributable); "
        f"System32 also holds the DLLs of {tmp_path}"
    )
    data = json.loads(run("scan", site, "--json").stdout)
    assert data["ok"] is True and data["scan"] == {"vc_redist": True}


def test_text_output_names_leaf_and_fix(tmp_path: Path, fake_torch: FakeTorch) -> None:
    result = run("scan", "--clean-windows", str(fake_torch.write(tmp_path / "site")))
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


def test_a_closed_pipe_is_not_an_internal_error(tmp_path: Path, fake_torch: FakeTorch) -> None:
    """``torchguard scan ... | head`` exited 3 with "internal error" (issue 13.9): the reader
    closing the pipe ends the output quietly, and the exit status is still the verdict."""
    site = fake_torch.write(tmp_path / "site")
    process = subprocess.Popen(
        [sys.executable, "-m", "torchguard", "scan", str(site), "--clean-windows"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # like `head` after its lines: nobody reads any more
    status = process.wait(timeout=120)
    errors = process.stderr.read().decode()
    process.stderr.close()
    assert status == 1 and errors == ""  # errors found (no VC++ runtime), said nothing else


MACOS = (
    "import platform, sys; sys.platform = 'darwin'; platform.system = lambda: 'Darwin'; "
    "from torchguard._frontends.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_on_macos(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process that takes itself for macOS (CI runs on Linux, which replays ld.so)."""
    command = [sys.executable, "-m", "torchguard"]
    if sys.platform != "darwin":
        command = [sys.executable, "-c", MACOS]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None, reason="needs a Python without torch"
)
def test_doctor_off_windows_says_what_it_can_do_instead_of_an_error() -> None:
    result = run_on_macos("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "this is macOS" in result.stdout
    assert "error" not in result.stdout and "pip install torch" not in result.stdout
    assert "no problems found" not in result.stdout  # nothing was checked
    assert "`doctor` judges the Windows environment it runs in" in result.stdout
    assert "torchguard check torch==2.4.1 --python 3.11" in result.stdout
    assert "torchguard scan PATH..." in result.stdout
    markdown = run_on_macos("doctor", "--markdown").stdout
    assert "**Verdict:** not Windows: no Windows DLLs to check here" in markdown


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout == f"torchguard {torchguard.__version__} (torch-import-guard)\n"
