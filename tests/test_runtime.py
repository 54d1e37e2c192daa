"""runtime-too-old: the VC++ runtime torch binds to against the toolset torch was built with."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeTorch, system32

import torchguard
from torchguard._pipeline import analyze
from torchguard._report.errors import error_for
from torchguard._report.findings import ERROR, WARNING
from torchguard._windows.system import offline_windows

OLD = (14, 32, 31326, 0)
NEW = (14, 44, 35211, 0)


def test_old_system_runtime_under_a_14_4x_torch_is_an_error(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD)])
    first = report.errors[0]
    assert (first.code, first.missing, first.dll) == ("runtime-too-old", "msvcp140.dll", "c10.dll")
    assert "14.32.31326 in System32" in first.message and "14.42" in first.message
    assert "winget upgrade --id Microsoft.VCRedist.2015+.x64 --exact" in first.hints[0].commands
    assert isinstance(error_for(first, report), torchguard.RuntimeTooOldError)


def test_a_new_enough_runtime_is_clean(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=NEW)])
    assert report.ok and report.findings == ()


def test_an_older_minor_before_the_mutex_change_is_a_warning(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 29)).write(tmp_path / "site")
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32", version=(14, 16, 27012, 0))]
    )
    assert report.ok
    assert [(f.code, f.severity) for f in report.findings] == [("runtime-too-old", WARNING)]


def test_a_stale_copy_beside_python_shadows_system32(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    python_dir = system32(
        tmp_path / "py",
        ["msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll", "python311.dll"],
        OLD,
    )
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32", version=NEW)], python_dir=python_dir
    )
    by_name = {f.missing: f for f in report.errors}
    assert set(by_name) == {"msvcp140.dll", "vcruntime140.dll"}
    msvcp = by_name["msvcp140.dll"]
    assert "beside python.exe is older" in msvcp.message
    assert msvcp.path is not None and msvcp.path.endswith("msvcp140.dll")
    assert "found before System32's copy" in msvcp.hints[0].summary
    vcruntime = by_name["vcruntime140.dll"]  # python.exe itself loaded its own old copy
    assert "which loaded it at start-up" in vcruntime.message
    assert vcruntime.hints[0].commands == ("winget upgrade --id Python.Python.3.11 --exact",)


def test_an_old_runtime_already_loaded_by_another_package(tmp_path: Path) -> None:
    """PyQt5 imported first: its Qt5\\bin\\msvcp140.dll is in the process and wins."""
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    qt = system32(tmp_path / "Qt5" / "bin", ["msvcp140.dll"], OLD)
    system = offline_windows(
        [str(site)], system32_dirs=[str(system32(tmp_path / "s32", version=NEW))]
    )
    try:
        system.tree.mount_host_dir("C:\\Qt5\\bin", str(qt))
        system.loaded = {**system.loaded, "msvcp140.dll": "C:\\Qt5\\bin\\msvcp140.dll"}
        report = analyze(system)
    finally:
        system.close()
    (first,) = report.errors
    assert (
        first.severity == ERROR
        and "already loaded into this process from C:\\Qt5\\bin" in first.message
    )
    assert "import torch first" in first.hints[0].summary


def test_unknown_versions_are_not_judged(tmp_path: Path) -> None:
    """The assumed python.org vcruntime140.dll has no file to read: no finding."""
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32")])
    assert report.ok and report.findings == ()
