"""Real-wheel tier: OpenMP runtimes and their users in genuine Windows wheels from PyPI.

torch ships Intel's runtime in torch\\lib; the ``mkl`` wheel's threading layer loads the
``intel-openmp`` wheel's copy beside it by full path (a second runtime: OMP: Error #15 when
torch started first). pip's numpy (OpenBLAS) and scikit-learn (MSVC's vcomp140) use no KMP
runtime and must never be flagged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from realwheels import vc_runtime_dir, wheel

import torchguard

pytestmark = pytest.mark.realwheel

MKL = (("mkl", "2021.4.0"), ("intel-openmp", "2021.4.0"))


@pytest.fixture(scope="module")
def vc_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vc_runtime_dir(tmp_path_factory.mktemp("vcruntime"))


def openmp(report: torchguard.Report) -> list[torchguard.Finding]:
    return [f for f in report.findings if f.code == "openmp-conflict"]


@pytest.mark.parametrize("version", ["2.4.1", "2.14.1"])
def test_pip_mkl_beside_torch_is_the_sibling_conflict_and_preloaded(
    version: str, vc_runtime: Path
) -> None:
    wheels = [wheel("torch", version), *(wheel(p, v) for p, v in MKL)]
    report = torchguard.scan(wheels, system32=[vc_runtime])
    (finding,) = openmp(report)
    assert finding.severity == "warning" and finding.package == "mkl"
    assert finding.path is not None and finding.path.lower().endswith(
        "library\\bin\\libiomp5md.dll"
    )
    assert "intel-openmp==2021.4.0" in finding.message and f"torch=={version}" in finding.message
    assert "mkl_intel_thread.1.dll" in finding.message
    # every name torch_cpu/fbgemm import from libiomp5md.dll is exported by the 2021.4 runtime
    (preload,) = report.preloads
    assert preload.path == finding.path
    assert report.ok and report.import_torch is not None and report.import_torch.ok


def test_torch_23_uses_mkls_runtime_itself(vc_runtime: Path) -> None:
    """2.3.1 starts no runtime of its own: MKL's sibling is the only one that runs."""
    wheels = [wheel("torch", "2.3.1"), *(wheel(p, v) for p, v in MKL), wheel("tbb", "2021.13.1")]
    report = torchguard.scan(wheels, system32=[vc_runtime])
    assert openmp(report) == [] and report.preloads == ()


@pytest.mark.parametrize(("project", "version"), [("numpy", "1.26.4"), ("scikit-learn", "1.5.2")])
def test_no_false_alarm_for_openblas_and_vcomp140_users(
    project: str, version: str, vc_runtime: Path
) -> None:
    report = torchguard.scan(
        [wheel("torch", "2.4.1"), wheel(project, version)], system32=[vc_runtime]
    )
    assert openmp(report) == [] and report.preloads == ()
    assert report.ok and not report.findings, report.render_text()


def test_pyqt5_qt5s_older_msvcp140_is_a_warning_and_system32s_is_loaded_first(
    vc_runtime: Path,
) -> None:
    """PyQt5-Qt5 5.15.2 ships msvcp140.dll 14.26 in Qt5\\bin, which its Qt DLLs import; torch
    2.14.1 is built with the 14.4x toolset. System32 here holds Microsoft's 14.44 runtime."""
    report = torchguard.scan(
        [wheel("torch", "2.14.1"), wheel("PyQt5-Qt5", "5.15.2")], system32=[vc_runtime]
    )
    (finding,) = [f for f in report.findings if f.package == "pyqt5-qt5"]
    assert finding.code == "runtime-too-old" and finding.severity == "warning"
    assert finding.path is not None and finding.path.lower().endswith("qt5\\bin\\msvcp140.dll")
    assert "14.26" in finding.message
    (preload,) = report.preloads
    assert preload.path.lower().endswith("system32\\msvcp140.dll")
    assert report.ok
