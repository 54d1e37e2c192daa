"""torch's legacy retry after WinError 126: ``LoadLibraryW``'s standard search order.

When the retry loads, the first attempt's failure never reaches the user: no ``missing-dll``
error, only the ``path-fallback`` warning, and ``ensure()`` does not raise. The retry searches
python.exe's folder, System32, the Windows folder, the current directory and PATH (with
torch's own folders in front), never the ``os.add_dll_directory`` folders.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import build_pe

from torchguard._binary.pe.image import PEFacts
from torchguard._frontends import api as _api
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.loader import LoaderModel, legacy_order
from torchguard._platforms.windows.system import offline_windows
from torchguard._platforms.windows.tree import WinTree
from torchguard._report.report import ImportOutcome, Report

OMP = "libiomp5md.dll"


def _torch_without_omp(tmp_path: Path) -> Path:
    torch = FakeTorch()
    del torch.graph[OMP]  # fbgemm.dll and torch_cpu.dll still import it
    return torch.write(tmp_path / "site")


def _folder_with_omp(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / OMP).write_bytes(build_pe(["KERNEL32.dll"]))
    return path


def _analyse(
    tmp_path: Path,
    *,
    mount: str,
    path_dirs: tuple[str, ...] = (),
    cwd: str | None = None,
) -> Report:
    system = offline_windows(
        [str(_torch_without_omp(tmp_path))],
        system32_dirs=[str(system32(tmp_path / "s32"))],
    )
    try:
        system.tree.mount_host_dir(mount, str(_folder_with_omp(tmp_path / "elsewhere")))
        system.interpreter = replace(system.interpreter, path_dirs=path_dirs)
        return analyze(system, cwd=cwd)
    finally:
        system.close()


def _assert_found_by_the_retry(report: Report, where: str) -> None:
    assert report.errors == ()
    assert report.import_torch == ImportOutcome(True)
    assert report.import_torch_without_torchguard == ImportOutcome(True)
    (warning,) = report.warnings
    assert (warning.code, warning.missing, warning.dll) == ("path-fallback", OMP, "fbgemm.dll")
    assert where in warning.message
    assert {m.name.lower(): m.via for m in report.modules}[OMP] in (
        "path_fallback",
        "current_dir",
        "windows_dir",
    )


def test_a_dll_only_on_path_is_a_warning_not_an_error(tmp_path: Path) -> None:
    report = _analyse(tmp_path, mount="D:\\tools\\bin", path_dirs=("D:\\tools\\bin",))
    _assert_found_by_the_retry(report, "only on PATH (D:\\tools\\bin)")


def test_a_dll_only_in_the_current_directory_is_found_by_the_retry(tmp_path: Path) -> None:
    report = _analyse(tmp_path, mount="D:\\work", cwd="D:\\work")
    _assert_found_by_the_retry(report, "only in the current directory (D:\\work)")


def test_a_relative_path_entry_is_read_from_the_current_directory(tmp_path: Path) -> None:
    report = _analyse(tmp_path, mount="D:\\work\\bin", path_dirs=("bin",), cwd="D:\\work")
    _assert_found_by_the_retry(report, "only on PATH (D:\\work\\bin)")


def test_a_dll_only_in_the_windows_folder_is_found_by_the_retry(tmp_path: Path) -> None:
    report = _analyse(tmp_path, mount="C:\\Windows")
    _assert_found_by_the_retry(report, "only in the Windows folder (C:\\Windows)")


def test_nowhere_at_all_stays_a_missing_dll(tmp_path: Path) -> None:
    report = _analyse(tmp_path, mount="D:\\unlisted")
    assert [(f.code, f.missing) for f in report.errors] == [("missing-dll", OMP)]
    assert report.import_torch == ImportOutcome(False, 126, "fbgemm.dll")


def test_ensure_does_not_raise_when_the_retry_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = _analyse(tmp_path, mount="D:\\tools\\bin", path_dirs=("D:\\tools\\bin",))
    monkeypatch.setattr(_api, "_live_report", lambda: report)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr("torchguard._platforms.windows.register.register", lambda paths: None)
    assert _api.ensure() is report


def _no_facts(path: str) -> PEFacts:
    raise AssertionError(f"the search order reads no file ({path})")


def test_the_retry_searches_what_loadlibraryw_does() -> None:
    """SafeDllSearchMode's order after KnownDLLs; the add_dll_directory folders are not in it."""
    model = LoaderModel(
        tree=WinTree(),
        facts=_no_facts,
        machine=0x8664,
        app_dir="C:\\Python",
        system32="C:\\Windows\\System32",
        user_dirs=("C:\\registered",),
        known_dlls=frozenset(),
    )
    order = legacy_order(model, ("C:\\site\\torch\\lib", "D:\\tools"), cwd="D:\\work")
    assert [(folder, str(via)) for folder, via in order] == [
        ("C:\\Python", "app_dir"),
        ("C:\\Windows\\System32", "system32"),
        ("C:\\Windows\\System", "windows_dir"),
        ("C:\\Windows", "windows_dir"),
        ("D:\\work", "current_dir"),
        ("C:\\site\\torch\\lib", "path_fallback"),
        ("D:\\tools", "path_fallback"),
    ]
