"""runtime-too-old: the VC++ runtime torch binds to against the toolset torch was built with."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import CONSTEXPR_MUTEX, RUNTIME_MUTEX, FakeTorch, system32
from pe_builder import build_pe

import torchguard
from torchguard._binary.pe.image import read_image
from torchguard._binary.pe.mutex import CONSTANT, NONE, RUNTIME, UNKNOWN
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.errors import error_for
from torchguard._report.findings import ERROR, WARNING
from torchguard._report.report import ImportOutcome

OLD = (14, 32, 31326, 0)
OLD_34 = (14, 34, 31931, 0)  # msvc-runtime 14.34.31931's msvcp140.dll
NEW = (14, 44, 35211, 0)
PY311 = (14, 38, 33130, 0)  # python.org CPython 3.11.9's vcruntime140.dll


def test_old_system_runtime_under_a_14_4x_torch_is_an_error(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD)])
    first = report.errors[0]
    assert (first.code, first.missing, first.dll) == ("runtime-too-old", "msvcp140.dll", "c10.dll")
    assert "14.32.31326 in System32" in first.message and "14.42" in first.message
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")
    assert "winget upgrade --id Microsoft.VCRedist.2015+.x64 --exact" in first.hints[0].commands
    assert isinstance(error_for(first, report), torchguard.RuntimeTooOldError)


def test_a_new_enough_runtime_is_clean(tmp_path: Path) -> None:
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
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
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
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
    torch = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX)
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
    site = FakeTorch(linker=(14, 44), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
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
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
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
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32")])
    assert report.ok and report.findings == ()


@pytest.mark.parametrize(
    ("taken", "expected"),
    [
        (("_Mtx_lock", "_Mtx_unlock"), CONSTANT),  # torch 2.9.0 to 2.14.1's c10.dll
        (("_Mtx_init_in_situ", "_Mtx_lock", "_Mtx_unlock"), RUNTIME),  # torch 2.15.0's
        (("_Mtx_init_in_situ", "_Mtx_lock", "_Cnd_wait"), CONSTANT),  # its condvars are not
        (("_Mtx_init_in_situ", "_Cnd_init_in_situ", "_Mtx_lock", "_Cnd_wait"), RUNTIME),
        (("_Mtx_init_in_situ", "?_Xlength_error@std@@YAXPEBD@Z"), NONE),
        (("_Mtx_lock", 1234), UNKNOWN),  # an ordinal could be any constructor
    ],
)
def test_how_a_binary_constructs_its_mutexes_is_read_from_its_imports(
    taken: tuple[str | int, ...], expected: str
) -> None:
    image = build_pe(["MSVCP140.dll", "KERNEL32.dll"], symbols={"MSVCP140.dll": taken})
    assert read_image(image, symbols=True).facts.mutex == expected


def test_mutexes_taken_from_another_dll_prove_nothing() -> None:
    image = build_pe(["KERNEL32.dll"], symbols={"KERNEL32.dll": ("_Mtx_lock",)})
    assert read_image(image, symbols=True).facts.mutex == NONE


def test_a_torch_that_constructs_its_mutexes_through_the_runtime_works_on_14_34(
    tmp_path: Path,
) -> None:
    """torch 2.15.0 (toolset 14.42, like 2.14.1) imports _Mtx_init_in_situ and imports with
    Microsoft's msvcp140.dll 14.34 (Wine, Microsoft's DLLs forced native): no error, and the
    prediction is a working import; the gap stays a warning that says what was read."""
    site = FakeTorch(linker=(14, 42), mutex=RUNTIME_MUTEX).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD_34)])
    assert report.ok and report.errors == ()
    assert report.import_torch == ImportOutcome(True)
    (warning,) = report.warnings
    assert (warning.code, warning.missing, warning.severity) == (
        "runtime-too-old",
        "msvcp140.dll",
        WARNING,
    )
    assert "c10.dll constructs its mutexes through the runtime" in warning.message
    assert "_Mtx_init_in_situ" in warning.message


def test_the_same_toolset_with_compiler_laid_out_mutexes_fails_on_14_34(tmp_path: Path) -> None:
    """torch 2.14.1's c10.dll locks mutexes it never constructs through the runtime: 1114."""
    site = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD_34)])
    (error,) = report.errors
    assert "it imports _Mtx_lock but not _Mtx_init_in_situ" in error.message
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")


def test_a_14_4x_torch_that_locks_no_mutex_of_the_runtime_is_no_proof(tmp_path: Path) -> None:
    """The linker version alone (the old rule) proves nothing: a warning, a working import."""
    site = FakeTorch(linker=(14, 44)).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", version=OLD_34)])
    assert report.ok and report.import_torch == ImportOutcome(True)
    assert [(f.code, f.severity) for f in report.findings] == [("runtime-too-old", WARNING)]


@pytest.mark.parametrize("mutex", [CONSTEXPR_MUTEX, RUNTIME_MUTEX])
def test_a_warm_run_keeps_the_mutex_verdict(
    tmp_path: Path, reads: list[str], mutex: tuple[str, ...]
) -> None:
    site = FakeTorch(linker=(14, 42), mutex=mutex).write(tmp_path / "site")
    runtime = system32(tmp_path / "s32", version=OLD_34)
    cold = torchguard.scan([site], system32=[runtime])
    reads.clear()
    warm = torchguard.scan([site], system32=[runtime])
    assert reads == []
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    assert warm.ok is (mutex == RUNTIME_MUTEX)
