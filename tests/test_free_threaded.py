"""A free-threaded CPython (3.13t) torch: its extensions import ``python313t.dll`` (and a
stable-ABI one ``python3t.dll``), which a python.org free-threaded install has beside
python.exe. Scanned offline, the assumed Python follows the wheel's ABI tag."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import KERNEL, TORCH_241_GRAPH, FakeTorch
from pe_builder import build_pe

import torchguard
from torchguard._platforms.windows.python_dlls import python_dlls, tag_free_threaded


def free_threaded_torch() -> FakeTorch:
    graph = dict(TORCH_241_GRAPH)
    graph["torch_python.dll"] = tuple(
        "python313t.dll" if n == "python311.dll" else n for n in graph["torch_python.dll"]
    )
    extra = {"torch/lib/stable_abi_ext.dll": build_pe(["python3t.dll", *KERNEL])}
    graph["shm.dll"] = (*graph["shm.dll"], "stable_abi_ext.dll")
    return FakeTorch(version="2.6.0+cpu", graph=graph, python_tag="cp313t", extra=extra)


def test_the_interpreter_dlls_follow_the_abi() -> None:
    assert python_dlls((3, 13)) == ("python313.dll", "python3.dll")
    assert python_dlls((3, 13), free_threaded=True) == ("python313t.dll", "python3t.dll")
    assert tag_free_threaded("cp313t") and not tag_free_threaded("cp313")
    assert not tag_free_threaded("abi3")


@pytest.mark.parametrize("form", ["wheel", "folder"])
def test_a_free_threaded_torch_scans_clean(tmp_path: Path, runtime_dir: Path, form: str) -> None:
    torch = free_threaded_torch()
    target = torch.wheel(tmp_path) if form == "wheel" else torch.write(tmp_path / "site")
    report = torchguard.scan([target], system32=[runtime_dir])
    assert report.findings == (), [(f.code, f.missing) for f in report.findings]
    assert report.import_torch is not None and report.import_torch.ok
    assert report.python is not None and report.python.get("version") == "3.13"


def test_a_regular_torch_still_misses_the_free_threaded_dll(
    tmp_path: Path, runtime_dir: Path
) -> None:
    """The same binaries tagged cp313: python313t.dll is no part of a regular 3.13."""
    torch = free_threaded_torch()
    torch.python_tag = "cp313"
    report = torchguard.scan([torch.write(tmp_path / "site")], system32=[runtime_dir])
    missing = {f.missing for f in report.errors}
    assert "python313t.dll" in missing
    hint = next(f for f in report.errors if f.missing == "python313t.dll").hints[0]
    assert "Python 3.13t" in hint.summary and any("py -3.13t" in c for c in hint.commands)
