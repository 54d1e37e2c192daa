"""``check --resolver``: uv answers what pip install would install, pip where uv cannot."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch
from test_check import local_index, run

from torchguard._frontends import resolve as resolve_module
from torchguard._frontends import uv_resolve
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.resolve import Planned
from torchguard._frontends.uv_resolve import (
    Resolver,
    UvFallback,
    choose,
    parse_pylock,
    parse_settings,
    uv_command,
)

# uv 0.13.9's `uv pip compile --format pylock.toml` for markupsafe and six, CPython 3.12,
# x86_64-pc-windows-msvc (recorded), and a torch whose lock lists wheels for other targets too
# (PEP 751 allows it): the one pip would pick for the target is taken.
RECORDED = """\
lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.12"

[[packages]]
name = "markupsafe"
version = "3.0.4"
wheels = [{ url = "https://files.pythonhosted.org/packages/3f/bf/62495e180b7000aaf30000fff849e933f74264638057176cf46852500adc/markupsafe-3.0.4-cp312-cp312-win_amd64.whl", upload-time = 2026-10-02T23:05:06Z, size = 14303, hashes = { sha256 = "11935df9bf455ed0c04eb87bcd720f02b1fe5e02128a9430f23aed6f93336fc7" } }]

[[packages]]
name = "six"
version = "1.17.0"
wheels = [{ url = "https://files.pythonhosted.org/packages/b7/ce/149a00dd41f10bc29e5921b496af8b574d8413afcd5e30dfa0ed46c2cc5e/six-1.17.0-py2.py3-none-any.whl", upload-time = 2024-12-04T17:35:26Z, size = 11050, hashes = { sha256 = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274" } }]

[[packages]]
name = "torch"
version = "2.9.0+cpu"
wheels = [
    { url = "https://download.pytorch.org/whl/cpu/torch-2.9.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl", hashes = { sha256 = "aa" } },
    { url = "https://download.pytorch.org/whl/cpu/torch-2.9.0%2Bcpu-cp312-cp312-win_arm64.whl", hashes = { sha256 = "bb" } },
    { url = "https://download.pytorch.org/whl/cpu/torch-2.9.0%2Bcpu-cp312-cp312-win_amd64.whl", hashes = { sha256 = "cc" } },
]
"""


def _toml_available() -> bool:
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        try:
            import tomli  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        except ImportError:
            return False
    return True


needs_toml = pytest.mark.skipif(
    not _toml_available(), reason="reading uv's lock needs tomllib (Python 3.11+) or tomli"
)


@needs_toml
def test_a_recorded_lock_gives_the_rows_pips_report_gives() -> None:
    planned = [Planned(*row) for row in parse_pylock(RECORDED, "3.12", "win_amd64")]
    assert [(p.name, p.version, p.filename) for p in planned] == [
        ("markupsafe", "3.0.4", "markupsafe-3.0.4-cp312-cp312-win_amd64.whl"),
        ("six", "1.17.0", "six-1.17.0-py2.py3-none-any.whl"),
        ("torch", "2.9.0+cpu", "torch-2.9.0+cpu-cp312-cp312-win_amd64.whl"),
    ]
    markupsafe, six, torch = planned
    assert markupsafe.url.endswith("/markupsafe-3.0.4-cp312-cp312-win_amd64.whl")
    assert markupsafe.sha256 == "11935df9bf455ed0c04eb87bcd720f02b1fe5e02128a9430f23aed6f93336fc7"
    assert not markupsafe.pure and six.pure and not torch.pure
    assert (
        torch.url.endswith("torch-2.9.0%2Bcpu-cp312-cp312-win_amd64.whl") and torch.sha256 == "cc"
    )
    torch_alone = RECORDED[RECORDED.index('[[packages]]\nname = "torch"') :]
    (arm,) = parse_pylock(torch_alone, "3.12", "win_arm64")
    assert arm.filename == "torch-2.9.0+cpu-cp312-cp312-win_arm64.whl" and arm.sha256 == "bb"


@needs_toml
def test_a_package_without_a_wheel_for_the_target_goes_to_pip() -> None:
    lock = RECORDED.replace("cp312-cp312-win_amd64.whl", "cp312-cp312-manylinux_2_28_x86_64.whl")
    with pytest.raises(UvFallback, match=r"markupsafe 3\.0\.4 to no wheel"):
        parse_pylock(lock, "3.12", "win_amd64")
    source = '[[packages]]\nname = "x"\nversion = "1"\nsdist = { url = "https://h/x-1.tar.gz" }\n'
    with pytest.raises(UvFallback, match="x 1 to no wheel"):
        parse_pylock(source, "3.12", "win_amd64")


def _no_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uv_resolve.shutil, "which", lambda name: None)
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)


def test_auto_takes_uv_where_it_is_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uv_resolve.shutil, "which", lambda name: f"/somewhere/{name}")
    assert choose(None, {}) == Resolver("auto", "/somewhere/uv")
    assert choose("auto", {}).uv == "/somewhere/uv"
    assert choose(None, {"TORCHGUARD_RESOLVER": "uv"}) == Resolver("uv", "/somewhere/uv")
    # pip asked for, by the flag or the environment: uv is not even looked for
    assert choose("pip", {}) == Resolver("pip", None)
    assert choose(None, {"TORCHGUARD_RESOLVER": "PIP"}) == Resolver("pip", None)
    # the flag wins over the environment
    assert choose("uv", {"TORCHGUARD_RESOLVER": "pip"}).uv == "/somewhere/uv"


def test_auto_takes_pip_without_uv_and_uv_asked_for_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_uv(monkeypatch)
    assert choose(None, {}) == Resolver("auto", None)
    with pytest.raises(CheckError, match="--resolver uv: no uv found"):
        choose("uv", {})
    with pytest.raises(CheckError, match="TORCHGUARD_RESOLVER uv: no uv found"):
        choose(None, {"TORCHGUARD_RESOLVER": "uv"})
    with pytest.raises(CheckError, match="TORCHGUARD_RESOLVER poetry: expected one of auto"):
        choose(None, {"TORCHGUARD_RESOLVER": "poetry"})


def test_uv_of_the_uv_package_is_found_off_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import types

    monkeypatch.setattr(uv_resolve.shutil, "which", lambda name: None)
    package = types.ModuleType("uv")
    package.find_uv_bin = lambda: "/venv/bin/uv"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uv", package)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert uv_resolve.find_uv() == "/venv/bin/uv"


def test_pips_question_is_put_to_uv(tmp_path: Path) -> None:
    file = tmp_path / "requirements.in"
    arguments = ["torch==2.4.1", "-c", "/c.txt", "--extra-index-url=https://x/simple", "--pre"]
    arguments += ['numpy>=2; sys_platform == "win32"', "--only-binary", ":all:"]
    settings = {
        "constraint": ["/etc/pip/c.txt"],
        "index-url": ["https://mirror/simple"],
        "find-links": ["/opt/wheels"],
        "cert": ["/ca.pem"],
    }
    command = uv_command("uv", arguments, "3.11", "win_arm64", [], settings, str(file))
    assert command[:6] == ["uv", "pip", "compile", str(file), "--format", "pylock.toml"]
    words = " ".join(command)
    assert "--python-platform aarch64-pc-windows-msvc --python-version 3.11" in words
    assert "--index-strategy unsafe-best-match" in words and "--only-binary :all:" in words
    assert f"--python {sys.executable} --no-python-downloads" in words  # no search for a 3.11
    assert "-c /c.txt --extra-index-url https://x/simple --prerelease allow" in words
    assert "-c /etc/pip/c.txt --index-url https://mirror/simple --find-links /opt/wheels" in words
    assert file.read_text() == 'torch==2.4.1\nnumpy>=2; sys_platform == "win32"\n'
    # an index given to check replaces the one of pip's configuration, as for pip
    command = uv_command(
        "uv", ["torch"], "3.12", "win_amd64", ["https://i/simple"], settings, str(file)
    )
    assert command.count("--index-url") == 1 and "https://i/simple" in command
    assert "x86_64-pc-windows-msvc" in command


def test_what_uv_cannot_be_told_goes_to_pip(tmp_path: Path) -> None:
    file = str(tmp_path / "r.in")
    with pytest.raises(UvFallback, match=r"free-threaded CPython \(3.13t\)"):
        uv_command("uv", ["torch"], "3.13t", "win_amd64", [], {}, file)
    with pytest.raises(UvFallback, match="pip's option -r"):
        uv_command("uv", ["-r", "missing.txt"], "3.12", "win_amd64", [], {}, file)
    with pytest.raises(UvFallback, match="pip's configuration sets upgrade-strategy"):
        uv_command("uv", ["torch"], "3.12", "win_amd64", [], {"upgrade-strategy": ["eager"]}, file)


def test_pips_configuration_is_read_as_pip_install_reads_it() -> None:
    listed = (
        ":env:.extra-index-url='https://env/simple'\n"
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        "global.constraint='/etc/xdg/pip/constraints.txt'\n"
        "install.constraint='/install.txt'\n"
        "download.pre='1'\n"
    )
    assert parse_settings(listed) == {
        "extra-index-url": ["https://env/simple"],
        "constraint": ["/install.txt"],
    }


def _fake_uv(folder: Path, stderr: str, status: int) -> str:
    script = folder / "uv"
    script.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{stderr}\nEOF\nexit {status}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.skipif(sys.platform == "win32", reason="a shell script stands in for uv")
def test_uv_failing_on_an_index_sends_check_to_pip_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchguard._frontends.cli import main

    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    uv = _fake_uv(
        tmp_path,
        "error: Request failed after 3 retries in 4.8s\n"  # uv 0.13.9's words, recorded
        "  cause: Failed to fetch: https://download.pytorch.org/whl/cpu/torch/\n"
        "  cause: dns error\n"
        "  cause: failed to lookup address information: Name or service not known",
        2,
    )
    monkeypatch.setattr(uv_resolve, "find_uv", lambda: uv)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    pip_runs: list[object] = []
    real = resolve_module.run_watched

    def counted(command: object, **options: object) -> object:
        pip_runs.append(command)
        return real(command, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(resolve_module, "run_watched", counted)
    options = ["--python", "3.11", "--index-url", index, "--cache-dir", str(tmp_path / "c")]
    status = main(["check", *options, "--resolver", "uv", "--clean-windows", "torch==2.4.1"])
    out = capsys.readouterr().out
    assert status == 1, out  # pip's verdict: msvcp140.dll missing on a clean Windows
    assert "missing-dll" in out
    assert len(pip_runs) >= 1
    checked = next(line for line in out.splitlines() if line.startswith("checked:"))
    assert "resolved by pip)" in checked and "uv" not in checked
    assert (
        "note: resolved by pip, not uv: uv failed: Request failed after 3 retries in 4.8s; "
        "Failed to fetch: https://download.pytorch.org/whl/cpu/torch/ (failed to lookup "
        "address information: Name or service not known)\n" in out
    )


def test_a_conflict_uv_reports_is_said_in_one_line() -> None:
    said = uv_resolve._first_error(
        "  \u00d7 No solution found when resolving dependencies:\n"
        "  ╰─▶ Because torchvision==0.19.0 depends on torch==2.4.0 and you require "
        "torch==2.5.0, we can conclude that your requirements are unsatisfiable.\n"
    )
    assert said.startswith("No solution found when resolving dependencies; Because torchvision")


def test_a_free_threaded_target_is_resolved_by_pip_with_a_note(tmp_path: Path) -> None:
    chosen = Resolver("uv", "/bin/false")
    chosen._settings = {}
    with pytest.raises(Exception):  # noqa: B017 (pip then fails: no torch on this index)
        resolve_module.resolve(
            ["torch"],
            python="3.13t",
            index_urls=[(tmp_path / "empty").as_uri()],
            resolver=chosen,
            timeout=120,
        )
    assert chosen.notes == [
        "note: resolved by pip, not uv: uv cannot resolve for a free-threaded CPython (3.13t)"
    ]
    assert chosen.used == {"pip"}


uv_installed = pytest.mark.skipif(
    uv_resolve.find_uv() is None, reason="uv is not installed (pip install uv)"
)


@uv_installed
@needs_toml
def test_uv_and_pip_resolve_a_local_index_alike(tmp_path: Path) -> None:
    """The real uv, no network: the same wheels and the same verdict as pip, said by whom."""
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    results = {}
    for resolver in ("pip", "uv"):
        cache = tmp_path / resolver
        args = ["torch==2.4.1", "--python", "3.11", "--index-url", index, "--cache-dir", str(cache)]
        done = run(*args, "--clean-windows", "--no-verify", "--json", "--resolver", resolver)
        assert done.returncode == 1, done.stderr
        results[resolver] = json.loads(done.stdout)
        assert results[resolver]["check"]["resolved_by"] == resolver
        text = run(*args, "--clean-windows", "--no-verify", "--resolver", resolver).stdout
        assert f"resolved by {resolver}" in text and "not uv" not in text
    assert sorted(results["uv"]["check"]["wheels"]) == sorted(results["pip"]["check"]["wheels"])
    assert results["uv"]["findings"] == results["pip"]["findings"]


@pytest.mark.realwheel
@uv_installed
@needs_toml
def test_uv_resolves_the_windows_wheels_from_pypi(monkeypatch: pytest.MonkeyPatch) -> None:
    """uv against PyPI (two small wheels): markupsafe's Windows x64 wheel for CPython 3.12."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # PyPI alone, as a user without one has
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    chosen = choose("uv")
    planned, reused = resolve_module.resolve(
        ["markupsafe==3.0.2", "six==1.17.0"],
        python="3.12",
        index_urls=["https://pypi.org/simple"],
        resolver=chosen,
    )
    assert chosen.used == {"uv"} and chosen.notes == [] and not reused
    rows = {p.name: p for p in planned}
    assert rows["markupsafe"].filename.lower() == "markupsafe-3.0.2-cp312-cp312-win_amd64.whl"
    assert rows["markupsafe"].url.startswith("https://files.pythonhosted.org/")
    assert rows["markupsafe"].url.endswith(f"/{rows['markupsafe'].filename}")
    assert rows["markupsafe"].sha256 and len(rows["markupsafe"].sha256) == 64
    assert rows["six"].filename == "six-1.17.0-py2.py3-none-any.whl"
