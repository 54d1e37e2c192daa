"""page-file-too-small and the commit estimate, on built images and on real NVIDIA binaries."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import build_pe
from pe_sections import READ_ONLY_DATA, WRITABLE_DATA, with_section

from torchguard._binary.cache import user_cache
from torchguard._binary.pe.commit import dll_commit
from torchguard._binary.pe.sections import HEAD_BYTES, section_table
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.report import Report

MIB = 1 << 20


def fat_dll(size: int, characteristics: int) -> bytes:
    """A DLL whose .nv_fatb maps ``size`` bytes (only its first page is in the file)."""
    return with_section(build_pe(["KERNEL32.dll"]), ".nv_fatb", bytes(16), characteristics, size)


def run(
    tmp_path: Path,
    commit: tuple[int, int] | None,
    extra: dict[str, bytes],
    env: dict[str, str] | None = None,
) -> Report:
    site = FakeTorch(version="2.0.1+cu118", cuda="11.8", extra=extra).write(tmp_path / "site")
    system = offline_windows([str(site)], system32_dirs=[str(system32(tmp_path / "s32"))])
    system.commit = commit
    if env:
        system.interpreter = dataclasses.replace(system.interpreter, environ=env)
    try:
        return analyze(system, cache=user_cache())
    finally:
        system.close()


def codes(report: Report) -> list[str]:
    return [f.code for f in report.findings if f.code == "page-file-too-small"]


def test_writable_sections_count_in_whole_pages_and_read_only_ones_not() -> None:
    image = with_section(fat_dll(300 * MIB, WRITABLE_DATA), ".data", bytes(10), WRITABLE_DATA, 5000)
    share = dll_commit("x.dll", section_table(image))
    assert share.writable_fatbin == 300 * MIB
    # .idata of pe_builder is writable too (one page); .data's 5000 bytes take two pages
    assert share.writable == 300 * MIB + 0x1000 + 0x2000
    read_only = dll_commit("y.dll", section_table(fat_dll(300 * MIB, READ_ONLY_DATA)))
    assert read_only.writable_fatbin == 0 and read_only.writable == 0x1000


def test_one_process_does_not_fit(tmp_path: Path) -> None:
    extra = {"torch/lib/cudnn_cnn_infer64_8.dll": fat_dll(900 * MIB, WRITABLE_DATA)}
    report = run(tmp_path, (16 << 30, 600 * MIB), extra)
    (finding,) = [f for f in report.findings if f.code == "page-file-too-small"]
    assert finding.severity == "warning"
    assert "import torch itself would fail with WinError 1455" in finding.message
    assert "cudnn_cnn_infer64_8.dll 900 MiB" in finding.message
    assert "900 MiB of it writable .nv_fatb" in finding.message
    assert "AutomaticManagedPagefile" in finding.hints[0].commands[0]
    assert "read-only" in finding.hints[-1].summary


def test_workers_that_do_not_fit_and_the_number_that_does(tmp_path: Path) -> None:
    extra = {"torch/lib/cusparse64_11.dll": fat_dll(1000 * MIB, WRITABLE_DATA)}
    report = run(tmp_path, (16 << 30, 3200 * MIB), extra)  # 3 processes of ~1 GB fit, 5 needed
    (finding,) = [f for f in report.findings if f.code == "page-file-too-small"]
    assert "only 3 processes importing torch fit" in finding.message
    assert "num_workers=4" in finding.message
    assert "num_workers=2 fits" in finding.hints[1].summary
    # the same machine is fine for a script that asks for two workers
    assert (
        codes(run(tmp_path / "b", (16 << 30, 3200 * MIB), extra, {"TORCHGUARD_WORKERS": "2"})) == []
    )


def test_read_only_fatbins_or_plenty_of_commit_or_offline_are_clean(tmp_path: Path) -> None:
    read_only = {"torch/lib/cusparse64_12.dll": fat_dll(1000 * MIB, READ_ONLY_DATA)}
    assert codes(run(tmp_path / "a", (16 << 30, 600 * MIB), read_only)) == []
    writable = {"torch/lib/cusparse64_11.dll": fat_dll(1000 * MIB, WRITABLE_DATA)}
    assert codes(run(tmp_path / "b", (64 << 30, 40 << 30), writable)) == []
    assert codes(run(tmp_path / "c", None, writable)) == []


def head_of(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith(suffix))
        with archive.open(member) as handle:
            return handle.read(HEAD_BYTES)


@pytest.mark.realwheel
def test_real_binaries_cuda_11_and_12() -> None:
    """NVIDIA's CUDA 11.8 and 12 DLLs map .nv_fatb read-only; a CUDA 11.8 build by others not."""
    from gpuwheels import nvidia_dlls
    from realwheels import wheel

    for project, version, name in [
        ("nvidia-cudnn-cu11", "8.9.4.25", "cudnn_cnn_infer64_8.dll"),  # CUDA 11.8
        ("nvidia-cusparse-cu12", "12.3.1.170", "cusparse64_12.dll"),  # CUDA 12.4
        ("nvidia-cusparse", "12.6.3.3", "cusparse64_12.dll"),  # CUDA 13.0
    ]:
        path = nvidia_dlls(project, version)[name]
        with path.open("rb") as handle:
            sections = section_table(handle.read(HEAD_BYTES))
        fatb = next(s for s in sections if s.name == ".nv_fatb")
        assert fatb.virtual_size > 100 * MIB and not fatb.writable
        share = dll_commit(name, sections)
        assert share.writable_fatbin == 0 and share.writable < 16 * MIB
    # onnxruntime-gpu 1.15.1, built with CUDA 11.8: its kernels' .nv_fatb is writable
    ort = section_table(
        head_of(wheel("onnxruntime-gpu", "1.15.1"), "onnxruntime_providers_cuda.dll")
    )
    share = dll_commit("onnxruntime_providers_cuda.dll", ort)
    assert share.writable_fatbin > 300 * MIB


def test_a_warm_estimate_reads_no_dll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"torch/lib/cudnn_cnn_infer64_8.dll": fat_dll(900 * MIB, WRITABLE_DATA)}
    first = run(tmp_path, (16 << 30, 600 * MIB), extra)
    from torchguard._platforms.windows.tree import WinTree

    def fail(tree: object, path: str, size: int) -> None:
        raise AssertionError(f"read {path} again")

    monkeypatch.setattr(WinTree, "read_head", fail)
    site = tmp_path / "site"
    system = offline_windows([str(site)], system32_dirs=[str(tmp_path / "s32")])
    system.commit = (16 << 30, 600 * MIB)
    try:
        again = analyze(system, cache=user_cache())
    finally:
        system.close()
    assert codes(again) == codes(first) == ["page-file-too-small"]
