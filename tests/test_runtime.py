"""runtime-too-old: the VC++ runtime torch binds to against the toolset torch was built with."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeTorch, system32

import torchguard
from torchguard._pipeline import analyze
from torchguard._report.errors import error_for
from torchguard._report.findings import ERROR, WARNING
from torchguard._report.report import ImportOutcome
from torchguard._windows.system import offline_windows

OLD = (14, 32, 31326, 0)
NEW = (14, 44, 35211, 0)
PY311 = (14, 38, 33130, 0)  # python.org CPython 3.11.9's vcruntime140.dll


def test_old_system_runtime_under_a_14_4x_torch_is_an_error(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD)])
    first = report.errors[0]
    assert (first.code, first.missing, first.dll) == ("runtime-too-old", "msvcp140.dll", "c10.dll")
    assert "14.32.31326 in System32" in first.message and "14.42" in first.message
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")
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
    """An old msvcp140.dll beside python.exe wins over System32's: a proven 1114."""
    site = FakeTorch(linker=(14, 42)).write(tmp_path / "site")
    python_dir = system32(
        tmp_path / "py",
        ["msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll", "python311.dll"],
        OLD,
    )
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32", version=NEW)], python_dir=python_dir
    )
    (msvcp,) = report.errors  # python.exe's own vcruntime140.dll is no proof: a warning
    assert msvcp.missing == "msvcp140.dll"
    assert [name.lower() for name in msvcp.chain] == ["c10.dll", "msvcp140.dll"]
    assert "beside python.exe is older than 14.40" in msvcp.message
    assert msvcp.path is not None and msvcp.path.endswith("msvcp140.dll")
    assert "found before System32's copy" in msvcp.hints[0].summary
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")
    assert report.import_torch_without_torchguard == ImportOutcome(False, 1114, "c10.dll")
    vcruntime = {f.missing: f for f in report.warnings}["vcruntime140.dll"]
    assert "loaded by python.exe at start-up" in vcruntime.message


def test_python_orgs_own_older_vcruntime_is_never_an_error(tmp_path: Path) -> None:
    """CPython 3.11.9 ships vcruntime140*.dll 14.38 beside python.exe; std::mutex lives in
    msvcp140.dll, which System32's current Redistributable provides: torch >= 2.9 imports."""
    torch = FakeTorch(linker=(14, 42))
    torch.graph["c10.dll"] = (*torch.graph["c10.dll"], "VCRUNTIME140_1.dll")
    site = torch.write(tmp_path / "site")
    python_dir = system32(
        tmp_path / "py", ["vcruntime140.dll", "vcruntime140_1.dll", "python311.dll"], PY311
    )
    s32 = system32(
        tmp_path / "s32", ["msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll"], NEW
    )
    report = torchguard.scan([site], system32=[s32], python_dir=python_dir)
    assert report.ok and report.errors == ()
    assert report.import_torch == ImportOutcome(True)
    warnings = {f.missing: f for f in report.warnings}
    assert set(warnings) == {"vcruntime140.dll", "vcruntime140_1.dll"}
    for warning in warnings.values():
        assert warning.code == "runtime-too-old" and warning.severity == WARNING
        assert "no failure of `import torch` is known" in warning.message
        (hint,) = warning.hints  # no winget upgrade of a Python without a newer installer,
        assert hint.commands == ()  # and never "remove Python's own DLL"
        assert "Do not delete" in hint.summary


def test_an_old_msvcp140_makes_the_prediction_fail_with_1114(tmp_path: Path) -> None:
    """msvcp140 14.34 under a 14.4x torch (torch 2.9.0's real 1114): the error and the
    predicted outcome tell one story, naming the DLL torch's own message names."""
    site = FakeTorch(linker=(14, 44)).write(tmp_path / "site")
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32", version=(14, 34, 31938, 0))]
    )
    (error,) = report.errors
    assert (error.code, error.missing, error.dll) == ("runtime-too-old", "msvcp140.dll", "c10.dll")
    assert "WinError 1114" in error.message
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")
    assert report.import_torch_without_torchguard == ImportOutcome(False, 1114, "c10.dll")


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
