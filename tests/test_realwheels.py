"""Real-wheel tier: genuine torch Windows wheels from PyPI, scanned offline.

Runs in CI (the wheels are cached under ~/.cache/torchguard-ci/wheels). Deselect locally
with ``-m "not realwheel"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from realwheels import unpack, vc_runtime_dir, wheel

import torchguard

pytestmark = pytest.mark.realwheel


@pytest.fixture(scope="module")
def vc_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vc_runtime_dir(tmp_path_factory.mktemp("vcruntime"))


def test_torch_240_needs_libomp140(vc_runtime: Path) -> None:
    report = torchguard.scan([wheel("torch", "2.4.0")], system32=[vc_runtime])
    (error,) = report.errors
    assert error.code == "missing-dll"
    assert error.missing is not None and error.missing.lower() == "libomp140.x86_64.dll"
    assert error.chain[0] in ("fbgemm.dll", "torch_cpu.dll") and error.chain[-1] == error.missing
    assert report.import_torch is not None and report.import_torch.dll == "fbgemm.dll"
    commands = [c for hint in error.hints for c in hint.commands]
    assert any("torch==2.4.1" in c for c in commands)
    assert not any("dll-files" in c or "dll4free" in c for c in commands)


def test_torch_241_with_vc_runtime_is_clean(vc_runtime: Path) -> None:
    report = torchguard.scan([wheel("torch", "2.4.1")], system32=[vc_runtime])
    assert report.ok, report.render_text()
    assert report.import_torch is not None and report.import_torch.ok


def test_torch_241_cli_exit_0(vc_runtime: Path) -> None:
    from torchguard._frontends.cli import main

    assert main(["scan", str(wheel("torch", "2.4.1")), "--system32", str(vc_runtime)]) == 0


def test_torch_2150_without_vc_runtime_misses_msvcp140() -> None:
    report = torchguard.scan([wheel("torch", "2.15.0")], clean_windows=True)
    missing = {f.missing.lower() for f in report.errors if f.missing}
    assert "msvcp140.dll" in missing
    first = report.errors[0]
    assert (first.missing or "").lower() == "msvcp140.dll" and first.dll == "c10.dll"
    assert first.hints[0].url == "https://aka.ms/vs/17/release/vc_redist.x64.exe"


def test_torch_2150_with_the_runtime_is_clean(vc_runtime: Path) -> None:
    report = torchguard.scan([wheel("torch", "2.15.0")], system32=[vc_runtime])
    assert report.ok, report.render_text()


def test_wheel_and_unpacked_tree_agree(
    tmp_path_factory: pytest.TempPathFactory, vc_runtime: Path
) -> None:
    torch_wheel = wheel("torch", "2.4.0")
    tree = unpack(torch_wheel, tmp_path_factory.mktemp("torch240"))
    from_wheel = torchguard.scan([torch_wheel], system32=[vc_runtime])
    from_tree = torchguard.scan([tree], system32=[vc_runtime])
    assert [f.to_dict() for f in from_wheel.findings] == [f.to_dict() for f in from_tree.findings]
    assert from_wheel.import_torch == from_tree.import_torch
    assert from_wheel.findings  # the comparison is not vacuous


def test_torch_2150_on_the_14_34_runtime_is_not_too_old(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """torch 2.15.0 is linked with 14.42 but constructs its mutexes through msvcp140
    (``_Mtx_init_in_situ``), so 14.34 initialises them (issue 21, finding 4): no
    runtime-too-old error; vcruntime140_threads.dll, which only 14.40+ ships, is missing."""
    old = vc_runtime_dir(tmp_path_factory.mktemp("vcruntime1434"), "14.34.31931")
    report = torchguard.scan([wheel("torch", "2.15.0")], system32=[old], clean_windows=True)
    codes = {(f.code, (f.missing or "").lower()) for f in report.errors}
    assert codes == {("missing-dll", "vcruntime140_threads.dll")}


def test_torchvision_0190_is_paired_with_240_not_241(vc_runtime: Path) -> None:
    torchvision = wheel("torchvision", "0.19.0")
    paired = torchguard.scan([wheel("torch", "2.4.1"), torchvision], system32=[vc_runtime])
    assert [(f.code, f.missing) for f in paired.findings] == [
        ("package-mismatch", "torchvision==0.19.0")
    ]
    assert "requires torch==2.4.0" in paired.findings[0].message
    matched = torchguard.scan([wheel("torch", "2.4.0"), torchvision], system32=[vc_runtime])
    assert "package-mismatch" not in {f.code for f in matched.findings}
