"""Registration is safe: ``ensure()`` adds a folder torch forgets only when the guarded replay
needs it to find a DLL that is otherwise missing, never one outside the environment, and never
one that makes a DLL name bind to another copy than plain ``import torch`` binds."""

from __future__ import annotations

from pathlib import Path

from fakes import CONSTEXPR_MUTEX, MSVCP140_EXPORTS, FakeTorch, companion, system32, write_tree
from pe_builder import build_pe

from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.report import ImportOutcome, Report

OMP = "libiomp5md.dll"
OLD = (14, 34, 31938, 0)  # msvc-runtime 14.34's msvcp140.dll
NEW = (14, 44, 35211, 0)
SITE = "C:\\Python\\Lib\\site-packages"


def _site(tmp_path: Path, files: dict[str, bytes], *, omp_in_torch: bool = False) -> Path:
    torch = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX)
    if not omp_in_torch:
        del torch.graph[OMP]  # fbgemm.dll and torch_cpu.dll import it
    site = torch.write(tmp_path / "site")
    write_tree(site, files)
    return site


def _scan(site: Path, s32: Path, mounts: dict[str, Path] | None = None) -> Report:
    system = offline_windows([str(site)], system32_dirs=[str(s32)])
    try:
        for where, host in (mounts or {}).items():
            system.tree.mount_host_dir(where, str(host))
        return analyze(system)
    finally:
        system.close()


def _registered(report: Report) -> list[str]:
    return [d.path for d in report.dll_directories if not d.by_torch]


def _dll(version: tuple[int, int, int, int] | None = None) -> bytes:
    return build_pe(["KERNEL32.dll"], file_version=version, exports=MSVCP140_EXPORTS)


def test_a_needed_folder_inside_the_environment_is_registered(tmp_path: Path) -> None:
    site = _site(tmp_path, companion("intel-openmp", "2024.0.0", {f"omp_rt/{OMP}": _dll()}, {}))
    report = _scan(site, system32(tmp_path / "s32", version=NEW))
    assert _registered(report) == [f"{SITE}\\omp_rt"]
    assert report.import_torch == ImportOutcome(True)
    assert report.import_torch_without_torchguard == ImportOutcome(False, 126, "fbgemm.dll")
    assert [f.code for f in report.findings] == ["needs-dll-directory"]


def test_a_folder_outside_the_environment_is_never_registered(tmp_path: Path) -> None:
    """A RECORD entry in C:\\Users\\Public\\Downloads (every user can write there)."""
    info = "intel_openmp-2024.0.0.dist-info"
    files = {
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: intel-openmp\nVersion: 2024.0.0\n",
        f"{info}/RECORD": f"../../../Users/Public/Downloads/{OMP},,\n{info}/RECORD,,\n".encode(),
    }
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / OMP).write_bytes(_dll())
    report = _scan(
        _site(tmp_path, files),
        system32(tmp_path / "s32", version=NEW),
        {"C:\\Users\\Public\\Downloads": downloads},
    )
    assert _registered(report) == []
    assert [(f.code, f.missing) for f in report.errors] == [("missing-dll", OMP)]
    assert report.import_torch == ImportOutcome(False, 126, "fbgemm.dll")


def test_a_runtime_folder_nothing_needs_is_not_registered(tmp_path: Path) -> None:
    """msvc-runtime's msvcp140.dll 14.34 where no loader step looks, System32's is 14.44:
    plain `import torch` works, and ensure() must not make it bind the old copy."""
    runtime = companion("msvc-runtime", "14.34.31931", {"msvc_rt/msvcp140.dll": _dll(OLD)}, {})
    report = _scan(
        _site(tmp_path, runtime, omp_in_torch=True), system32(tmp_path / "s32", version=NEW)
    )
    assert _registered(report) == []
    assert report.ok and report.findings == ()
    assert report.import_torch == ImportOutcome(True)


def test_a_needed_folder_that_would_rebind_another_dll_is_not_registered(tmp_path: Path) -> None:
    """The folder has the missing libiomp5md.dll, but also an older msvcp140.dll that would
    win over System32's: registering it changes what plain `import torch` binds."""
    files = {f"omp_rt/{OMP}": _dll(), "omp_rt/msvcp140.dll": _dll(OLD)}
    site = _site(tmp_path, companion("intel-openmp", "2024.0.0", files, {}))
    report = _scan(site, system32(tmp_path / "s32", version=NEW))
    assert _registered(report) == []
    assert [(f.code, f.missing) for f in report.errors] == [("missing-dll", OMP)]
    assert report.import_torch == report.import_torch_without_torchguard


def test_a_needed_runtime_folder_is_judged_as_registered(tmp_path: Path) -> None:
    """No Redistributable: msvc-runtime's folder is needed, and its 14.34 msvcp140.dll then
    fails torch's 14.42 code with WinError 1114. The prediction says so."""
    runtime = companion("msvc-runtime", "14.34.31931", {"msvc_rt/msvcp140.dll": _dll(OLD)}, {})
    s32 = system32(tmp_path / "s32", ["vcruntime140_1.dll"], NEW)
    report = _scan(_site(tmp_path, runtime, omp_in_torch=True), s32)
    assert _registered(report) == [f"{SITE}\\msvc_rt"]
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")
    assert report.import_torch_without_torchguard == ImportOutcome(False, 126, "c10.dll")
    assert [(f.code, f.missing) for f in report.errors] == [("runtime-too-old", "msvcp140.dll")]
