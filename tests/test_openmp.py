"""openmp-conflict: OpenMP runtimes recognised by content, their users, the verdicts, the preload."""

from __future__ import annotations

import dataclasses
import os
import time
import types
from pathlib import Path

import pytest
from fakes import CONSTEXPR_MUTEX, KERNEL, MSVCP140_EXPORTS, FakeTorch, companion, write_tree
from pe_builder import DEFAULT_SYMBOL, build_pe

import torchguard
from torchguard._binary.cache import user_cache
from torchguard._binary.pe.image import read_image
from torchguard._binary.pe.openmp import SIBLING_HOOK, openmp_marks
from torchguard._binary.pe.symbols import read_symbols
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.system import System, offline_windows
from torchguard._platforms.windows.tree import join
from torchguard._report.report import Report

KMP_EXPORTS = (DEFAULT_SYMBOL, "__kmpc_fork_call", "omp_get_max_threads")
REGISTERED = b"__KMP_REGISTERED_LIB_"
HOOK = b"..\\compiler\\"


def kmp(exports: tuple[str, ...] = KMP_EXPORTS) -> bytes:
    return build_pe(list(KERNEL), exports=exports, strings=[REGISTERED])


def marks(image: bytes) -> tuple[str, ...]:
    return openmp_marks(image, read_symbols(image))


# -- recognising runtimes and users by content -------------------------------------------------
def test_runtimes_are_told_from_their_contents() -> None:
    assert marks(kmp()) == ("kmp",)
    # a renamed copy that exports the API but not __kmpc_fork_call: the string decides
    assert marks(build_pe(list(KERNEL), exports=["omp_get_max_threads"], strings=[REGISTERED])) == (
        "kmp",
    )
    assert marks(build_pe(list(KERNEL), exports=["omp_get_max_threads"])) == ("stubs",)
    assert marks(build_pe(list(KERNEL), exports=["_vcomp_fork"])) == ("vcomp",)
    assert marks(build_pe(list(KERNEL), exports=["GOMP_parallel"])) == ("gomp",)
    alias = build_pe(list(KERNEL), forwarders={"__kmpc_fork_call": "libomp.__kmpc_fork_call"})
    assert marks(alias) == ("alias:libomp.dll",)
    assert marks(build_pe(list(KERNEL))) == ()


def test_mkl_hook_needs_a_delay_import_and_the_compiler_path() -> None:
    hooked = build_pe(list(KERNEL), ["libiomp5md.dll"], strings=[HOOK])
    assert marks(hooked) == (SIBLING_HOOK,)
    assert marks(build_pe(list(KERNEL), ["libiomp5md.dll"])) == ()
    assert marks(build_pe(list(KERNEL), strings=[HOOK])) == ()  # no delay import: no hook


def test_marks_are_part_of_the_facts() -> None:
    assert read_image(kmp(), symbols=True).facts.openmp == ("kmp",)


# -- environments --------------------------------------------------------------------------
def torch_with_runtime(fake: FakeTorch) -> FakeTorch:
    fake.extra["torch/lib/libiomp5md.dll"] = kmp()
    fake.extra["torch/lib/libiompstubs5md.dll"] = build_pe(
        list(KERNEL), exports=["omp_get_max_threads"]
    )
    return fake


def data_file(name: str, version: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """A wheel whose files install to ``<prefix>/Library/bin`` (RECORD: ``../../Library/bin``)."""
    return companion(name, version, files, {k: f"../../{k}" for k in files})


def mkl(sibling: bytes | None = None) -> dict[str, bytes]:
    files = data_file(
        "mkl",
        "2021.4.0",
        {
            "Library/bin/mkl_intel_thread.1.dll": build_pe(
                list(KERNEL), ["libiomp5md.dll"], strings=[HOOK]
            )
        },
    )
    if sibling is not None:
        files.update(data_file("intel-openmp", "2021.4.0", {"Library/bin/libiomp5md.dll": sibling}))
    return files


def site(tmp_path: Path, fake: FakeTorch, *extras: dict[str, bytes]) -> Path:
    root = torch_with_runtime(fake).write(tmp_path / "site")
    for files in extras:
        write_tree(root, files)
    return root


def system(root: Path, runtime_dir: Path, **environ: str) -> System:
    found = offline_windows([str(root)], system32_dirs=[str(runtime_dir)])
    found.interpreter = dataclasses.replace(found.interpreter, environ=environ)  # type: ignore[misc]
    return found


def run(found: System) -> Report:
    try:
        return analyze(found, cache=user_cache())
    finally:
        found.close()


def openmp(report: Report) -> list[torchguard.Finding]:
    return [f for f in report.findings if f.code == "openmp-conflict"]


def test_torch_alone_with_its_stubs_has_no_conflict(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    report = torchguard.scan([site(tmp_path, fake_torch)], system32=[runtime_dir])
    assert report.findings == () and report.preloads == ()


def test_vcomp_users_never_conflict(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    sklearn = companion(
        "scikit-learn",
        "1.9.1",
        {
            "sklearn/.libs/vcomp140.dll": build_pe(
                list(KERNEL), exports=["_vcomp_fork", DEFAULT_SYMBOL]
            ),
            "sklearn/_k.cp311-win_amd64.pyd": build_pe(["vcomp140.dll", *KERNEL]),
        },
        {},
    )
    report = torchguard.scan([site(tmp_path, fake_torch, sklearn)], system32=[runtime_dir])
    assert report.findings == ()


def test_mkl_without_its_own_runtime_binds_to_torchs(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    report = torchguard.scan([site(tmp_path, fake_torch, mkl())], system32=[runtime_dir])
    assert openmp(report) == [] and report.preloads == ()


def test_mkl_sibling_runtime_is_a_warning_and_preloaded(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    report = torchguard.scan([site(tmp_path, fake_torch, mkl(kmp()))], system32=[runtime_dir])
    (finding,) = openmp(report)
    assert finding.severity == "warning" and finding.package == "mkl"
    assert finding.path is not None and finding.path.lower().endswith(
        "library\\bin\\libiomp5md.dll"
    )
    assert (
        "intel-openmp==2021.4.0" in finding.message
        and "torch\\lib\\libiomp5md.dll" in finding.message
    )
    assert (
        "import torch starts" in finding.message
        and "MKL running before torch works" in finding.message
    )
    assert finding.hints[0].summary.startswith("automatic: torchguard.ensure()")
    assert any("MKL_THREADING_LAYER=SEQUENTIAL" in c for h in finding.hints for c in h.commands)
    assert not any("KMP_DUPLICATE_LIB_OK" in h.summary + "".join(h.commands) for h in finding.hints)
    (preload,) = report.preloads
    assert preload.path == finding.path and not preload.done
    assert report.ok  # import torch itself works
    assert report.to_dict()["preloads"][0]["switch"] == "TORCHGUARD_OPENMP=keep"


def test_no_preload_when_torch_would_not_bind_to_the_sibling(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """The sibling lacks a name torch_cpu imports from it: preloading it would break torch."""
    lacking = kmp(exports=("__kmpc_fork_call", "omp_get_max_threads"))
    report = torchguard.scan([site(tmp_path, fake_torch, mkl(lacking))], system32=[runtime_dir])
    (finding,) = openmp(report)
    assert report.preloads == ()
    assert "does not preload" in finding.message and DEFAULT_SYMBOL in finding.message
    assert not finding.hints[0].summary.startswith("automatic")


def test_switches_keep_sequential_and_masked(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    root = site(tmp_path, fake_torch, mkl(kmp()))
    kept = run(system(root, runtime_dir, TORCHGUARD_OPENMP="keep"))
    assert kept.preloads == () and len(openmp(kept)) == 1
    sequential = run(system(root, runtime_dir, MKL_THREADING_LAYER="sequential"))
    assert openmp(sequential) == [] and sequential.preloads == ()
    masked = run(system(root, runtime_dir, KMP_DUPLICATE_LIB_OK="TRUE"))
    (finding,) = openmp(masked)
    assert "KMP_DUPLICATE_LIB_OK is set" in finding.message


def faiss_like(runtime: bytes) -> dict[str, bytes]:
    """A delvewheel-repaired package carrying LLVM's runtime under a mangled name."""
    return companion(
        "faiss-cpu",
        "1.9.0",
        {
            "faiss_cpu.libs/libomp-a1b2c3d4.dll": runtime,
            "faiss/_swigfaiss.cp311-win_amd64.pyd": build_pe(["libomp-a1b2c3d4.dll", *KERNEL]),
        },
        {},
    )


def test_two_differently_named_runtimes_are_an_error_of_the_package(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    llvm = build_pe(
        list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL], strings=[REGISTERED]
    )
    report = torchguard.scan([site(tmp_path, fake_torch, faiss_like(llvm))], system32=[runtime_dir])
    (finding,) = openmp(report)
    assert finding.severity == "error" and finding.package == "faiss-cpu"
    assert "libomp-a1b2c3d4.dll" in finding.message and "in either order" in finding.message
    assert report.import_torch is not None and report.import_torch.ok
    assert report.preloads == ()


def test_one_package_with_two_runtimes_and_four_users_is_one_finding(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """faiss-cpu 1.8.0's shape: LLVM's libomp140 (both _swigfaiss builds) and libomp (flang's
    two DLLs). One cause, one finding, every runtime and user folded under it."""
    llvm = build_pe(
        list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL], strings=[REGISTERED]
    )
    libs = "faiss_cpu.libs/"
    files = {
        f"{libs}libomp140.x86_64-21fc.dll": llvm,
        f"{libs}libomp-2625.dll": llvm,
        "faiss/_swigfaiss.cp311-win_amd64.pyd": build_pe(["libomp140.x86_64-21fc.dll", *KERNEL]),
        "faiss/_swigfaiss_avx2.cp311-win_amd64.pyd": build_pe(
            ["libomp140.x86_64-21fc.dll", *KERNEL]
        ),
        f"{libs}flang-d389.dll": build_pe(["libomp-2625.dll", *KERNEL]),
        f"{libs}flangrti-5bba.dll": build_pe(["libomp-2625.dll", *KERNEL]),
    }
    faiss = companion("faiss-cpu", "1.8.0", files, {})
    report = torchguard.scan([site(tmp_path, fake_torch, faiss)], system32=[runtime_dir])
    (finding,) = openmp(report)
    for name in (
        "libomp140.x86_64-21fc.dll",
        "libomp-2625.dll",
        "_swigfaiss.cp311-win_amd64.pyd",
        "_swigfaiss_avx2.cp311-win_amd64.pyd",
        "flang-d389.dll",
        "flangrti-5bba.dll",
    ):
        assert finding.message.count(name) >= 1, name
    assert finding.message.count("two different OpenMP runtimes") == 1
    assert finding.hints[0].commands == ("py -3.11 -m pip install --upgrade faiss-cpu",)


def test_a_renamed_stub_is_not_a_runtime(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    stubs = build_pe(list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL])
    report = torchguard.scan(
        [site(tmp_path, fake_torch, faiss_like(stubs))], system32=[runtime_dir]
    )
    assert openmp(report) == []


def test_live_runtime_already_started_is_an_error_of_torch(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    llvm = build_pe(
        list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL], strings=[REGISTERED]
    )
    found = system(site(tmp_path, fake_torch, faiss_like(llvm)), runtime_dir)
    started = join(found.interpreter.site_dirs[0], "faiss_cpu.libs", "libomp-a1b2c3d4.dll")
    found.kmp_started = started
    report = run(found)
    first = openmp(report)[0]
    assert first.severity == "error" and first.package is None and first.path == started
    assert report.blocking and report.blockers[0] == first  # ensure() raises it
    assert report.import_torch is not None and report.import_torch.abort == "OMP: Error #15"
    assert "aborts the process" in report.render_text()
    masked = system(
        site(tmp_path, fake_torch, faiss_like(llvm)), runtime_dir, KMP_DUPLICATE_LIB_OK="1"
    )
    masked.kmp_started = started
    allowed = run(masked)
    assert not allowed.blocking and openmp(allowed)[0].severity == "warning"


def test_live_runtime_torch_binds_to_is_no_conflict(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """MKL already started its sibling and it is loaded: torch binds to it by name."""
    found = system(site(tmp_path, fake_torch, mkl(kmp())), runtime_dir)
    sibling = join(
        found.interpreter.prefix, "Lib", "site-packages", "Library", "bin", "libiomp5md.dll"
    )
    found.loaded = {**found.loaded, "libiomp5md.dll": sibling}
    found.kmp_started = sibling
    report = run(found)
    assert openmp(report) == [] and report.preloads == ()


def test_a_warm_analysis_reads_no_binary(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    root = site(tmp_path, fake_torch, mkl(kmp()))
    cold = torchguard.scan([root], system32=[runtime_dir])
    reads.clear()
    warm = torchguard.scan([root], system32=[runtime_dir])
    assert reads == []
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    assert warm.preloads == cold.preloads


def test_ensure_preloads_the_sibling_before_torch(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from torchguard._frontends import api as _api
    from torchguard._platforms.windows import live, register

    root = site(tmp_path, fake_torch, mkl(kmp()))
    loaded: list[str] = []
    monkeypatch.setattr(_api, "sys", types.SimpleNamespace(platform="win32", modules=sys.modules))
    monkeypatch.setattr(live, "live_windows", lambda: system(root, runtime_dir))
    monkeypatch.setattr(live, "preload", loaded.append)
    monkeypatch.setattr(register, "register", lambda folders: None)
    report = torchguard.ensure()
    (record,) = report.preloads
    assert record.done and loaded == [record.path]
    assert "preloaded" in report.render_text()

    _api._reset_for_tests()
    loaded.clear()
    monkeypatch.setattr(
        live, "live_windows", lambda: system(root, runtime_dir, TORCHGUARD_OPENMP="keep")
    )
    assert torchguard.ensure().preloads == () and loaded == []


def test_owners_from_absolute_record_paths(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """pip writes absolute Windows paths in RECORD when the prefix is on another drive."""
    where = "C:\\Python\\Lib\\site-packages\\Library\\bin\\"
    files = companion(
        "mkl",
        "2021.4.0",
        {
            "Library/bin/mkl_intel_thread.1.dll": build_pe(
                list(KERNEL), ["libiomp5md.dll"], strings=[HOOK]
            )
        },
        {"Library/bin/mkl_intel_thread.1.dll": where + "mkl_intel_thread.1.dll"},
    )
    files.update(
        companion(
            "intel-openmp",
            "2021.4.0",
            {"Library/bin/libiomp5md.dll": kmp()},
            {"Library/bin/libiomp5md.dll": where + "libiomp5md.dll"},
        )
    )
    report = torchguard.scan([site(tmp_path, fake_torch, files)], system32=[runtime_dir])
    (finding,) = openmp(report)
    assert finding.package == "mkl" and "intel-openmp==2021.4.0" in finding.message


def test_conda_runtime_overwritten_by_llvms_gets_intel_openmp_reinstalled(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """conda-forge's llvm-openmp ships a libiomp5md.dll forwarding to libomp.dll, without the
    ordinals torch <= 2.2 imports (WinError 182): reinstall intel-openmp, never delete it."""
    import json

    graph = dict(fake_torch.graph)
    del fake_torch.graph["libiomp5md.dll"]
    fake_torch.extra["torch/lib/torch_cpu.dll"] = build_pe(
        graph["torch_cpu.dll"], symbols={"libiomp5md.dll": [41]}
    )
    root = fake_torch.write(tmp_path / "site")
    prefix = tmp_path / "prefix"
    files = {
        "python311.dll": build_pe(list(KERNEL)),
        "vcruntime140.dll": build_pe(["KERNEL32.dll"]),
        "vcruntime140_1.dll": build_pe(["KERNEL32.dll"]),
        "Library/bin/libiomp5md.dll": build_pe(
            list(KERNEL), forwarders={"__kmpc_fork_call": "libomp.__kmpc_fork_call"}
        ),
        "Library/bin/libomp.dll": kmp(),
    }
    for package, version in (("intel-openmp", "2023.1.0"), ("llvm-openmp", "17.0.6")):
        record = {"name": package, "version": version, "files": ["Library/bin/libiomp5md.dll"]}
        files[f"conda-meta/{package}-{version}-0.json"] = json.dumps(record).encode()
    write_tree(prefix, files)
    found = offline_windows([str(root)], system32_dirs=[str(runtime_dir)], python_dir=str(prefix))
    found.interpreter = dataclasses.replace(found.interpreter, is_conda=True)  # type: ignore[misc]
    report = run(found)
    (error,) = [f for f in report.errors if f.code == "missing-symbol"]
    assert error.symbols == ("#41",)
    (hint,) = error.hints
    assert hint.commands == ("conda install --force-reinstall intel-openmp",)
    assert "llvm-openmp" in hint.summary and "remove" not in hint.summary


# -- a stale VC++ runtime that another package loads first ------------------------------------
def pyqt5_like(version: tuple[int, int, int, int] = (14, 26, 28720, 3)) -> dict[str, bytes]:
    """PyQt5 5.15: Qt5\\bin holds msvcp140.dll 14.26, which Qt5Core.dll imports."""
    return companion(
        "PyQt5",
        "5.15.11",
        {
            "PyQt5/Qt5/bin/msvcp140.dll": build_pe(
                ["KERNEL32.dll"], file_version=version, exports=MSVCP140_EXPORTS
            ),
            "PyQt5/Qt5/bin/Qt5Core.dll": build_pe(["MSVCP140.dll", *KERNEL]),
            "PyQt5/QtCore.pyd": build_pe(["Qt5Core.dll", *KERNEL]),
        },
        {},
    )


def test_the_warning_names_the_importer_the_package_loads(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """PyQt5-Qt5 has 20 binaries importing msvcp140.dll: Qt5Bluetooth.dll comes first, but
    importing PyQt5 loads Qt5Core.dll, which all the others import."""
    files = {
        "PyQt5/Qt5/bin/Qt5Bluetooth.dll": build_pe(["MSVCP140.dll", "Qt5Core.dll", *KERNEL]),
        "PyQt5/Qt5/bin/Qt5Core.dll": build_pe(["MSVCP140.dll", *KERNEL]),
        "PyQt5/Qt5/bin/Qt5Gui.dll": build_pe(["MSVCP140.dll", "Qt5Core.dll", *KERNEL]),
        "PyQt5/Qt5/bin/msvcp140.dll": build_pe(["KERNEL32.dll"], file_version=(14, 26, 28720, 3)),
    }
    qt = companion("PyQt5-Qt5", "5.15.2", files, {})
    report = torchguard.scan(
        [site(tmp_path, FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX), qt)],
        system32=[runtime_dir],
    )
    (finding,) = stale(report)
    assert "(Qt5Core.dll imports it)" in finding.message, finding.message


def stale(report: Report) -> list[torchguard.Finding]:
    return [f for f in report.findings if f.code == "runtime-too-old" and f.package]


def test_a_package_shipping_an_older_msvcp140_is_a_warning(
    tmp_path: Path, runtime_dir: Path
) -> None:
    fake = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX)
    report = torchguard.scan([site(tmp_path, fake, pyqt5_like())], system32=[runtime_dir])
    (finding,) = stale(report)
    assert finding.severity == "warning" and finding.package == "pyqt5"
    assert finding.path is not None and finding.path.lower().endswith("qt5\\bin\\msvcp140.dll")
    assert "14.26.28720" in finding.message and "Qt5Core.dll" in finding.message
    assert finding.hints[0].summary.startswith("import torch before pyqt5")
    assert report.ok and report.preloads == ()  # System32's copy has no version to compare


def test_ensure_loads_system32s_newer_runtime_first(tmp_path: Path) -> None:
    from fakes import system32

    fake = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX)
    newer = system32(tmp_path / "s32", version=(14, 44, 35112, 1))
    root = site(tmp_path, fake, pyqt5_like())
    report = torchguard.scan([root], system32=[newer])
    (preload,) = report.preloads
    assert preload.path.lower().endswith("system32\\msvcp140.dll")
    assert preload.switch == "TORCHGUARD_VCRUNTIME=keep"
    assert stale(report)[0].hints[0].summary.startswith("automatic")
    kept = run(system(root, newer, TORCHGUARD_VCRUNTIME="keep"))
    assert kept.preloads == () and len(stale(kept)) == 1


def test_no_preload_when_system32s_copy_is_not_newer(tmp_path: Path) -> None:
    from fakes import system32

    fake = FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX)
    older = system32(tmp_path / "s32", version=(14, 29, 30133, 0))
    report = torchguard.scan([site(tmp_path, fake, pyqt5_like())], system32=[older])
    assert report.preloads == ()


def test_an_old_runtime_is_fine_for_an_older_toolset(tmp_path: Path, runtime_dir: Path) -> None:
    report = torchguard.scan(
        [site(tmp_path, FakeTorch(linker=(14, 29)), pyqt5_like())], system32=[runtime_dir]
    )
    assert stale(report) == []


def test_live_already_loaded_copy_is_judged_once(tmp_path: Path, runtime_dir: Path) -> None:
    """PyQt5 imported already: the existing runtime-too-old error about the loaded copy."""
    found = system(
        site(tmp_path, FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX), pyqt5_like()), runtime_dir
    )
    qt = join(found.interpreter.site_dirs[0], "PyQt5", "Qt5", "bin", "msvcp140.dll")
    found.loaded = {**found.loaded, "msvcp140.dll": qt}
    report = run(found)
    assert stale(report) == []
    (error,) = report.errors
    assert error.code == "runtime-too-old" and error.path == qt


def test_warm_runs_keep_every_verdict_and_read_nothing(
    tmp_path: Path, runtime_dir: Path, reads: list[str]
) -> None:
    """Distributions' summaries come from the cache: the stale runtime and MKL verdicts stay."""
    from fakes import system32

    newer = system32(tmp_path / "s32", version=(14, 44, 35112, 1))
    root = site(
        tmp_path, FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX), pyqt5_like(), mkl(kmp())
    )
    cold = torchguard.scan([root], system32=[newer])
    reads.clear()
    warm = torchguard.scan([root], system32=[newer])
    assert reads == []
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    assert {f.code for f in warm.findings} == {"openmp-conflict", "runtime-too-old"}
    assert warm.preloads == cold.preloads and len(warm.preloads) == 2


def test_a_warm_run_lists_and_hashes_no_distribution(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution without binaries has no summary to cache: it is skipped before its RECORD
    is hashed, rather than hashed, missed in the cache and listed again on every warm run."""
    from torchguard._platforms.windows import dists as records
    from torchguard._platforms.windows import openmp as model

    pure = companion("pure", "1.0", {"pure/__init__.py": b"x = 1\n"}, {})
    root = site(tmp_path, fake_torch, mkl(kmp()), pure)
    torchguard.scan([root], system32=[runtime_dir])
    listed: list[str] = []
    hashed: list[bytes] = []
    real_list, real_sha1 = model._data_binaries, records.hashlib.sha1

    def listing(dist: InstalledDist) -> list[str]:
        listed.append(dist.name)
        return real_list(dist)

    def sha1(data: bytes) -> object:
        hashed.append(data)
        return real_sha1(data)

    monkeypatch.setattr(model, "_data_binaries", listing)
    monkeypatch.setattr(records, "hashlib", types.SimpleNamespace(sha1=sha1))
    warm = torchguard.scan([root], system32=[runtime_dir])
    assert listed == []
    assert len(hashed) == 2 and not any(b"pure/__init__.py" in text for text in hashed)
    assert len(openmp(warm)) == 1


def test_a_runtime_unreadable_for_a_moment_is_read_on_the_next_run(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that failed now (a virus scanner holding the file) is never cached: the
    distribution's summary is not kept without that runtime, so the next run reads it."""
    from torchguard._binary.pe.errors import FileUnreadable
    from torchguard._platforms.windows import binaries as _binaries

    root = site(tmp_path, fake_torch, mkl(kmp()))
    real = _binaries._read

    def held(tree: object, path: str) -> object:
        if path.lower().endswith("library\\bin\\libiomp5md.dll"):
            return FileUnreadable.from_error(PermissionError(13, "held by a scanner"))
        return real(tree, path)  # type: ignore[arg-type]

    monkeypatch.setattr(_binaries, "_read", held)
    assert openmp(torchguard.scan([root], system32=[runtime_dir])) == []
    monkeypatch.setattr(_binaries, "_read", real)
    assert len(openmp(torchguard.scan([root], system32=[runtime_dir]))) == 1


def test_a_runtime_replaced_behind_pips_back_is_seen_on_a_warm_run(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    root = site(tmp_path, fake_torch, mkl(build_pe(list(KERNEL))))  # not a runtime yet
    assert openmp(torchguard.scan([root], system32=[runtime_dir])) == []
    (root / "Library" / "bin" / "libiomp5md.dll").write_bytes(kmp())  # RECORD unchanged
    assert len(openmp(torchguard.scan([root], system32=[runtime_dir]))) == 1


def test_a_second_environment_with_the_same_distribution_gets_its_own_paths(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """Two environments holding the same wheel have the same RECORD. While the first one still
    exists, the summary cached for it must not stand for the second: its paths, owners and
    runtimes are the first one's files (seen live, and under Wine, as a wrong package name)."""
    from fakes import write_tree

    from torchguard._binary.cache import user_cache
    from torchguard._platforms.windows.binaries import Binaries
    from torchguard._platforms.windows.dists import find_dists
    from torchguard._platforms.windows.openmp import _briefs, candidate_files
    from torchguard._platforms.windows.tree import WinTree

    llvm = build_pe(
        list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL], strings=[REGISTERED]
    )
    tree = WinTree()
    for env in ("A", "B"):
        folder = tmp_path / env
        write_tree(folder, faiss_like(llvm))
        tree.mount_host_dir(f"C:\\{env}\\Lib\\site-packages", str(folder))
    cache = user_cache()
    seen = {}
    for env in ("A", "B"):
        site_dir = f"C:\\{env}\\Lib\\site-packages"
        binaries = Binaries(tree, cache)
        files = candidate_files(
            binaries, site_dir + "\\torch\\lib", find_dists(tree, [site_dir]), None
        )
        seen[env] = {brief.path for brief in _briefs(binaries, files)}
    assert seen["B"] and all(path.startswith("C:\\B\\") for path in seen["B"]), seen


# -- warm runs: what a distribution's cached summary holds ------------------------------------
def aged(root: Path, seconds: float = 3600.0) -> Path:
    """Date everything under ``root`` ``seconds`` ago: an install that settled."""
    when = time.time() - seconds
    for item in [*root.rglob("*"), root]:
        os.utime(item, (when, when))
    return root


def plain_dists(count: int) -> list[dict[str, bytes]]:
    """Distributions of ordinary extensions and DLLs: no OpenMP runtime, no user of one."""
    return [
        companion(
            f"plain{index}",
            "1.0",
            {
                f"plain{index}/_ext.cp311-win_amd64.pyd": build_pe(["helper.dll", *KERNEL]),
                f"plain{index}/helper.dll": build_pe(list(KERNEL)),
            },
            {},
        )
        for index in range(count)
    ]


def llvm_runtime() -> bytes:
    return build_pe(
        list(KERNEL), exports=["omp_get_max_threads", DEFAULT_SYMBOL], strings=[REGISTERED]
    )


def spy_on_cache(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the cache entries this process looks up from now on."""
    from torchguard._binary.cache import FactsCache

    looked: list[str] = []
    real = FactsCache.found

    def found(self: FactsCache, kind: str, key: str | None) -> object:
        looked.append(kind)
        return real(self, kind, key)

    monkeypatch.setattr(FactsCache, "found", found)
    return looked


def test_a_warm_run_reads_no_plain_briefs_and_no_plain_dll(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Binaries that are no runtime and import none stay undecoded on a warm run, and their
    DLLs are judged by their folders' states, not one identity each."""
    from torchguard._platforms.windows import binaries as _binaries

    root = aged(site(tmp_path, fake_torch, *plain_dists(12)))
    cold = torchguard.scan([root], system32=[runtime_dir])
    torchguard.scan([root], system32=[runtime_dir])
    looked = spy_on_cache(monkeypatch)
    identities: list[str] = []
    real = _binaries._identity

    def identity(tree: object, path: str) -> object:
        identities.append(path)
        return real(tree, path)  # type: ignore[arg-type]

    monkeypatch.setattr(_binaries, "_identity", identity)
    warm = torchguard.scan([root], system32=[runtime_dir])
    assert warm.findings == cold.findings
    # the folder's answers kept whole: one entry, no distribution's own summary
    assert looked.count("site-answers") == 1 and "openmp-dist-v2" not in looked
    assert "openmp-dist-rest" not in looked and "dist-records" not in looked
    assert not [p for p in identities if "plain" in p.lower()], identities


def test_a_user_in_another_distribution_is_found_on_a_warm_run(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain binary importing a runtime another distribution ships: its briefs are read
    from the cache when that runtime is there, and the warm answer is the cold one."""
    runtime = companion("llvm-omp", "1.0", {"llvm_omp/libomp.dll": llvm_runtime()}, {})
    user = companion(
        "uses-omp",
        "1.0",
        {"uses_omp/_c.cp311-win_amd64.pyd": build_pe(["libomp.dll", *KERNEL])},
        {},
    )
    root = aged(site(tmp_path, fake_torch, runtime, user, *plain_dists(3)))
    cold = torchguard.scan([root], system32=[runtime_dir])
    assert [f.package for f in openmp(cold)] == ["uses-omp"]
    looked = spy_on_cache(monkeypatch)
    for _ in range(2):
        warm = torchguard.scan([root], system32=[runtime_dir])
        assert warm.findings == cold.findings
    assert looked.count("openmp-dist-rest") == 2  # the user's distribution's only


def test_summaries_with_names_kept_as_lists_still_serve_a_warm_run(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution summary keeps the names its binaries import as one joined string; one
    holding them as a list (as written before) gives the same answer, read from the cache."""
    import json
    import os

    from torchguard._binary.cache import FOLDER

    runtime = companion("llvm-omp", "1.0", {"llvm_omp/libomp.dll": llvm_runtime()}, {})
    user = companion(
        "uses-omp",
        "1.0",
        {"uses_omp/_c.cp311-win_amd64.pyd": build_pe(["libomp.dll", *KERNEL])},
        {},
    )
    root = aged(site(tmp_path, fake_torch, runtime, user, *plain_dists(2)))
    cold = torchguard.scan([root], system32=[runtime_dir])
    torchguard.scan([root], system32=[runtime_dir])
    folder = Path(os.environ["TORCHGUARD_CACHE_DIR"], FOLDER)
    (hot,) = [p for p in folder.glob("*.json") if not p.name.endswith(".cold.json")]
    document = json.loads(hot.read_text())
    summaries = [v[1] for k, v in document["entries"].items() if k.startswith("openmp-dist-v2|")]
    assert "libomp.dll" in [n for s in summaries for n in s[1].split("|")]
    for summary in summaries:
        summary[1] = summary[1].split("|") if summary[1] else []
    hot.write_text(json.dumps(document))
    before = hot.read_bytes()
    looked = spy_on_cache(monkeypatch)
    warm = torchguard.scan([root], system32=[runtime_dir])
    assert warm.findings == cold.findings and [f.package for f in openmp(warm)] == ["uses-omp"]
    assert looked.count("openmp-dist-rest") == 1  # the user's, found by the names it imports
    assert hot.read_bytes() == before  # nothing read again


def test_a_user_whose_cached_briefs_were_dropped_is_read_again(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    import json

    from torchguard._binary.cache import scope_file

    root = aged(site(tmp_path, fake_torch, faiss_like(llvm_runtime())))
    cold = torchguard.scan([root], system32=[runtime_dir])
    assert len(openmp(cold)) == 1
    cache = user_cache()
    torchguard.scan([root], system32=[runtime_dir])
    folder = scope_file(cache.directory, "x").parent  # type: ignore[arg-type]
    dropped = 0
    for path in folder.glob("*.json"):
        document = json.loads(path.read_text())
        kept = {
            k: v for k, v in document["entries"].items() if not k.startswith("openmp-dist-rest")
        }
        dropped += len(document["entries"]) - len(kept)
        document["entries"] = kept
        path.write_text(json.dumps(document))
    assert dropped == 1
    assert torchguard.scan([root], system32=[runtime_dir]).findings == cold.findings


def test_a_dll_replaced_by_an_installer_is_seen_on_a_warm_run(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """An installer (or a user's copy tool) that removes a file and writes a new one changes
    its folder: the plain DLL that became a runtime is read again, RECORD unchanged."""
    files = faiss_like(build_pe(list(KERNEL)))  # libomp-a1b2c3d4.dll: no runtime yet
    root = aged(site(tmp_path, fake_torch, files))
    assert openmp(torchguard.scan([root], system32=[runtime_dir])) == []
    assert openmp(torchguard.scan([root], system32=[runtime_dir])) == []
    dll = root / "faiss_cpu.libs" / "libomp-a1b2c3d4.dll"
    dll.unlink()
    dll.write_bytes(llvm_runtime())
    aged(dll.parent, seconds=1800)  # settled, but at another time than the cached state
    assert len(openmp(torchguard.scan([root], system32=[runtime_dir]))) == 1
