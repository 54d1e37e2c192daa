"""`torchguard check`: pip's resolver for a Windows CPython, then the offline scan.

The first tests run real pip against a local ``file://`` index of fake wheels (no network);
the ``realwheel`` ones resolve against PyPI and reuse the real-wheel tier's cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch, companion, write_wheel
from packaging.markers import Marker

from torchguard._frontends.pip_reasons import explain_failure
from torchguard._frontends.pip_windows import windows_markers

WINDOWS_ONLY = 'platform_system == "Windows"'
LINUX_ONLY = 'platform_system == "Linux" and platform_machine == "x86_64"'


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", "check", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull, **(env or {})},
    )


def test_windows_markers_are_windows() -> None:
    env = windows_markers("3.12")
    assert Marker(WINDOWS_ONLY).evaluate(env)
    assert not Marker(LINUX_ONLY).evaluate(env)
    assert Marker('python_version >= "3.12" and sys_platform == "win32"').evaluate(env)
    assert not Marker('python_version < "3.12"').evaluate(env)


def pip_reason(lines: list[str]) -> str:
    return "\n".join(explain_failure(lines, [], [], "3.11").lines)


def test_pip_reason_is_one_line() -> None:
    unresolvable = [
        "ERROR: Ignored the following versions that require a different python version: 3.7",
        "ERROR: Could not find a version that satisfies the requirement torch==1.0 (from versions: 2.0.0)",
        "ERROR: No matching distribution found for torch==1.0",
    ]
    # pip's own line kept (after a no-matching-wheel summary where the index's files say so)
    assert (
        "Could not find a version that satisfies the requirement torch==1.0 (from versions: 2.0.0)"
        in pip_reason(unresolvable).splitlines()[:2]
    )
    unreachable = [
        "Looking in indexes: https://127.0.0.1:9/simple",
        "WARNING: Retrying (Retry(total=0, connect=None)) after connection broken by "
        "'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: "
        "Failed to establish a new connection: [Errno 111] Connection refused')': /simple/torch/",
        "ERROR: Could not find a version that satisfies the requirement torch (from versions: none)",
    ]
    assert pip_reason(unreachable) == (
        "cannot reach the package index https://127.0.0.1:9/simple: "
        "Failed to establish a new connection: [Errno 111] Connection refused"
    )
    assert pip_reason([]) == "pip failed without a message"


def local_index(root: Path, fake: FakeTorch) -> str:
    """A PEP 503 ``file://`` index: a fake torch needing ``winhelper`` on Windows only and
    ``linuxonly`` (absent from the index) on Linux, as torch needs triton."""
    files = fake.files()
    info = f"torch-{fake.version}.dist-info"
    files[f"{info}/METADATA"] += (
        f"Requires-Dist: winhelper; {WINDOWS_ONLY}\nRequires-Dist: linuxonly; {LINUX_ONLY}\n"
    ).encode()
    helper = companion("winhelper", "1.0", {"winhelper/__init__.py": b""}, {})
    helper["winhelper-1.0.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nTag: py3-none-any\n"
    wheels = {
        "torch": (f"torch-{fake.version}-cp311-cp311-win_amd64.whl", files),
        "winhelper": ("winhelper-1.0-py3-none-any.whl", helper),
    }
    for project, (name, content) in wheels.items():
        folder = root / "simple" / project
        folder.mkdir(parents=True)
        write_wheel(folder / name, content)
        (folder / "index.html").write_text(f'<a href="{name}">{name}</a>\n')
    return (root / "simple").as_uri()


@pytest.fixture
def index(tmp_path: Path) -> str:
    return local_index(tmp_path / "index", FakeTorch(version="2.4.1"))


def test_resolves_for_windows_and_finds_the_missing_runtime(index: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = ["torch==2.4.1", "--python", "3.11", "--index-url", index, "--cache-dir", str(cache)]
    result = run(*args, "--clean-windows", "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert sorted(data["check"]["wheels"]) == [
        "torch-2.4.1-cp311-cp311-win_amd64.whl",
        "winhelper-1.0-py3-none-any.whl",  # a Windows-only dependency; none for Linux
    ]
    assert data["check"]["python"] == "3.11" and data["check"]["vc_redist"] is False
    assert data["findings"][0]["missing"] == "msvcp140.dll"
    # only the wheel that can hold Windows binaries is downloaded; the pure one is not
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "torch-2.4.1-cp311-cp311-win_amd64.whl"
    ]
    assert data["check"]["scanned"] == ["torch-2.4.1-cp311-cp311-win_amd64.whl"]

    default = run(*args)  # the current VC++ redistributable is assumed
    assert default.returncode == 0, default.stdout + default.stderr
    assert "no problems found" in default.stdout
    assert "assumed: Windows 10/11 x64 with the Visual C++ 2015-2022 Redistributable" in (
        default.stdout
    )
    assert default.stderr == ""  # no progress when stderr is not a terminal


def test_scan_of_the_wheels_check_downloaded_agrees_with_check(index: str, tmp_path: Path) -> None:
    """One default machine: `scan` of the very wheels `check` resolved gives the same verdict
    and the same `assumed:` line, with and without --clean-windows."""
    cache = tmp_path / "cache"
    args = ["torch==2.4.1", "--python", "3.11", "--index-url", index, "--cache-dir", str(cache)]
    for clean in ([], ["--clean-windows"]):
        checked = run(*args, *clean)
        wheels = [str(p) for p in sorted(cache.glob("*.whl"))]  # what check scanned
        scanned = subprocess.run(
            [sys.executable, "-m", "torchguard", "scan", *wheels, *clean],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert (checked.returncode, scanned.returncode) == ((1, 1) if clean else (0, 0))
        (check_assumed,) = [x for x in checked.stdout.splitlines() if x.startswith("assumed:")]
        (scan_assumed,) = [x for x in scanned.stdout.splitlines() if x.startswith("assumed:")]
        assert check_assumed == scan_assumed


def test_markdown_carries_what_was_checked(index: str, tmp_path: Path) -> None:
    result = run(
        "torch",
        "--python",
        "3.11",
        "--index-url",
        index,
        "--cache-dir",
        str(tmp_path / "c"),
        "--markdown",
        "--clean-windows",
    )
    assert result.returncode == 1
    assert result.stdout.startswith("### torchguard report")
    assert (
        "> checked: pip install torch for python.org CPython 3.11, win_amd64 (2 wheel(s): "
        "1 with binaries scanned, 1 pure-Python; downloaded"
    ) in result.stdout
    assert "#### error `missing-dll`" in result.stdout
    wheels = result.stdout[result.stdout.index("<details><summary>wheels pip would install (2)") :]
    assert "- `torch-2.4.1-cp311-cp311-win_amd64.whl`\n- `winhelper-1.0-py3-none-any.whl`" in wheels


def test_unresolvable_requirement_is_exit_2_in_one_line(index: str, tmp_path: Path) -> None:
    result = run("torch==9.9", "--index-url", index, "--cache-dir", str(tmp_path / "c"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "torch==9.9" in result.stderr and "Traceback" not in result.stderr


def test_requirements_file_after_a_double_dash(index: str, tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch==2.4.1\n")
    result = run(
        "--python",
        "3.11",
        "--index-url",
        index,
        "--cache-dir",
        str(tmp_path / "c"),
        "--",
        "-r",
        str(requirements),
    )
    assert result.returncode == 0, result.stderr
    assert f"checked: pip install -r {requirements} for python.org CPython 3.11" in result.stdout


def test_requirements_without_torch_are_exit_2(index: str, tmp_path: Path) -> None:
    result = run("winhelper", "--index-url", index, "--cache-dir", str(tmp_path / "c"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "torchguard: error: these requirements install no torch "
        "(pip resolved winhelper-1.0-py3-none-any.whl)\n"
    )


def test_unreachable_index_is_exit_2_with_the_reason(tmp_path: Path) -> None:
    result = run(
        "torch",
        "--index-url",
        "https://127.0.0.1:9/simple",
        "--cache-dir",
        str(tmp_path / "c"),
        env={"PIP_RETRIES": "1"},
    )
    assert result.returncode == 2
    assert result.stderr == (  # asked before pip runs: no retries to wait for
        "torchguard: error: cannot reach the package index https://127.0.0.1:9/simple: "
        "[Errno 111] Connection refused\n"
    )


def test_bad_python_version_is_exit_2() -> None:
    result = run("torch", "--python", "2.7")
    assert result.returncode == 2 and "expected a CPython version" in result.stderr


@pytest.fixture(scope="module")
def cache() -> Path:
    from realwheels import CACHE, wheel

    wheel("torch", "2.4.0")  # the real-wheel tier's own downloads, reused by check
    wheel("torch", "2.4.1")
    return CACHE


@pytest.mark.realwheel
class TestRealIndex:
    """Against PyPI; torch wheels come from (and stay in) the real-wheel tier's cache."""

    def test_torch_240_is_broken_even_with_the_redistributable(self, cache: Path) -> None:
        result = run("torch==2.4.0", "--python", "3.11", "--cache-dir", str(cache), "--json")
        assert result.returncode == 1, result.stderr
        data = json.loads(result.stdout)
        assert data["findings"][0]["missing"] == "libomp140.x86_64.dll"
        wheels = data["check"]["wheels"]
        assert "torch-2.4.0-cp311-cp311-win_amd64.whl" in wheels
        assert any(w.startswith("filelock-") for w in wheels)
        assert not any(w.startswith(("triton", "nvidia")) for w in wheels)

    def test_torch_241_reuses_the_cache_and_is_clean(self, cache: Path) -> None:
        torch = cache / "torch-2.4.1-cp311-cp311-win_amd64.whl"
        before = torch.stat().st_mtime_ns
        result = run("torch==2.4.1", "--python", "3.11", "--cache-dir", str(cache))
        assert result.returncode == 0, result.stdout + result.stderr
        assert torch.stat().st_mtime_ns == before
        clean = run(
            "torch==2.4.1", "--python", "3.11", "--cache-dir", str(cache), "--clean-windows"
        )
        assert clean.returncode == 1 and "error[missing-dll]: MSVCP140.dll" in clean.stdout

    def test_a_release_without_a_windows_wheel_is_no_matching_wheel(self, cache: Path) -> None:
        """torch 1.0.0 is on PyPI with Linux wheels only: `pip install` fails on Windows, so
        the answer is exit 1 with the nearest release that has a wheel, not a DLL error."""
        result = run("torch==1.0", "--python", "3.11", "--cache-dir", str(cache), "--no-verify")
        assert result.returncode == 1, result.stdout + result.stderr
        assert (
            "error[no-matching-wheel]: torch 1.0.0 publishes no wheel for CPython 3.11 on "
            "win_amd64 (no Windows wheel)" in result.stdout
        )
        assert "-m pip install torch==2.0.0\n" in result.stdout  # the first with cp311 wheels

    def test_unknown_version_is_exit_2(self, cache: Path) -> None:
        result = run("torch==1.99.5", "--python", "3.11", "--cache-dir", str(cache))
        assert result.returncode == 2, result.stdout + result.stderr
        assert "torch==1.99.5 (from versions: 2.0.0," in result.stderr

    @pytest.mark.skipif(sys.platform == "win32", reason="pty")
    def test_progress_on_a_terminal_stderr(self, cache: Path) -> None:
        import pty

        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torchguard",
                "check",
                "torch==2.4.1",
                "--python",
                "3.11",
                "--cache-dir",
                str(cache),
            ],
            stdout=subprocess.PIPE,
            stderr=slave,
            env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(master)
        stdout = proc.stdout.read().decode() if proc.stdout else ""
        assert proc.wait(timeout=600) == 0
        shown = b"".join(chunks).decode()
        assert "\r\x1b[Kresolving with pip..." in shown or "reused" in stdout
        assert "reading " in shown and shown.endswith("\r\x1b[K")
        assert "\x1b[" not in stdout and "no problems found" in stdout


def test_a_python_without_pip_is_one_error_line() -> None:
    code = (
        "import runpy, sys; sys.modules['pip'] = None; sys.argv = ['x', '3.11', 'download', 'torch']; "
        "runpy.run_module('torchguard._frontends.pip_windows', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert (
        pip_reason(result.stdout.splitlines())
        == f"{sys.executable} has no pip (install it with: -m ensurepip)"
    )


def test_a_fix_that_leaves_only_a_siblings_error_does_not_say_torch_still_fails() -> None:
    """After the fix torch imports and torchvision does not: the note says so, not that torch
    "still fails" (the one answer to "does import torch fail?" is Report.blocking)."""
    from torchguard._facts.vocab import Code
    from torchguard._frontends.verify import verify_fix
    from torchguard._report.findings import ERROR, Finding, RepairHint
    from torchguard._report.report import ImportOutcome, Report, TorchSummary

    fix = RepairHint("upgrade torch", ('py -3.11 -m pip install --upgrade "torch>=2.4.1"',))
    broken = Report(findings=(Finding(Code.MISSING_DLL, ERROR, "libomp missing", hints=(fix,)),))
    vision = Finding(Code.MISSING_DLL, ERROR, "nowhere.dll missing", package="torchvision")
    after = Report(
        findings=(vision,),
        torch=TorchSummary("2.4.1", "site/torch"),
        import_torch=ImportOutcome(ok=True),
    )
    notes: list[str] = []
    result = verify_fix(["torch==2.4.0"], broken, notes, lambda r, i: after, [])
    assert result is not None and result["verified"] is False
    assert "which still fails" not in notes[0]
    assert "installs torch 2.4.1, but import torchvision fails: missing-dll" in notes[0]
