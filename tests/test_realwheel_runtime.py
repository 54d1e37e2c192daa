"""Real-wheel tier: torch 2.14.1 and 2.15.0 on Microsoft's msvcp140.dll 14.34.

Both releases are linked by the 14.42 toolset. Under Wine with Microsoft's runtime DLLs
forced native, 2.14.1 fails initialising c10.dll (WinError 998 there, 1114 on Windows) and
2.15.0 imports and computes (issue 21, finding 4). What tells them apart is in their import
tables: 2.14.1's c10.dll locks mutexes through msvcp140.dll and imports none of their
constructors (the 14.40 STL's ``constexpr`` constructor lays them out), 2.15.0's imports
``_Mtx_init_in_situ`` and ``_Cnd_init_in_situ`` too.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from realwheels import vc_runtime_dir, wheel

import torchguard
from torchguard._binary.pe.image import read_image
from torchguard._binary.pe.mutex import CONSTANT, RUNTIME
from torchguard._report.report import ImportOutcome

pytestmark = pytest.mark.realwheel

OLD_RUNTIME = "14.34.31931"


@pytest.fixture(scope="module")
def old_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Microsoft's 14.34 runtime as System32, with 14.44's vcruntime140_threads.dll (which
    torch_cpu.dll imports since 2.14.1 and the 14.34 Redistributable does not have)."""
    root = tmp_path_factory.mktemp("runtime")
    folder = vc_runtime_dir(root / "old", OLD_RUNTIME)
    threads = vc_runtime_dir(root / "new") / "vcruntime140_threads.dll"
    shutil.copy(threads, folder / threads.name)
    return folder


def _c10(version: str) -> bytes:
    with zipfile.ZipFile(wheel("torch", version)) as archive:
        return archive.read("torch/lib/c10.dll")


@pytest.mark.parametrize(("version", "mutex"), [("2.14.1", CONSTANT), ("2.15.0", RUNTIME)])
def test_the_same_toolset_constructs_its_mutexes_differently(version: str, mutex: str) -> None:
    facts = read_image(_c10(version), symbols=True).facts
    assert facts.linker_version == (14, 42)
    assert facts.mutex == mutex


def test_torch_2_14_1_on_msvcp140_14_34_is_the_proven_1114(old_runtime: Path) -> None:
    report = torchguard.scan([wheel("torch", "2.14.1")], system32=[old_runtime])
    (error,) = report.errors
    assert (error.code, error.missing, error.dll) == ("runtime-too-old", "msvcp140.dll", "c10.dll")
    assert "14.34.31931 in System32" in error.message
    assert "it imports _Mtx_lock but not _Mtx_init_in_situ" in error.message
    assert report.import_torch == ImportOutcome(False, 1114, "c10.dll")


def test_torch_2_15_0_on_msvcp140_14_34_is_a_warning_and_a_working_import(
    old_runtime: Path,
) -> None:
    report = torchguard.scan([wheel("torch", "2.15.0")], system32=[old_runtime])
    assert report.ok and report.errors == (), report.render_text()
    assert report.import_torch == ImportOutcome(True)
    msvcp = [f for f in report.warnings if f.missing == "msvcp140.dll"]
    assert [f.code for f in msvcp] == ["runtime-too-old"]
    assert "constructs its mutexes through the runtime" in msvcp[0].message
