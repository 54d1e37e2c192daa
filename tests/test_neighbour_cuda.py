"""A CPU build's CUDA advice prefers the variant whose CUDA major its native neighbours need:
ctranslate2 4.x loads ``cublas64_12.dll`` by name, which no CUDA 13 torch ships."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeTorch
from test_cuda_builds import gpu_machine
from test_neighbours_windows import ctranslate2, onnxruntime

import torchguard
from torchguard._facts.neighbours import library_cuda_major
from torchguard._facts.vocab import Code
from torchguard._frontends.check import _cpu_build_note
from torchguard._report.findings import ERROR, WARNING, Finding
from torchguard._report.report import Report, TorchSummary
from torchguard._rules.neighbour_cuda import neighbour_need

TORCH = TorchSummary("2.9.1+cpu", "C:\\site\\torch")


def _missing(package: str, name: str, code: Code = Code.MISSING_DLL) -> Finding:
    return Finding(
        code, WARNING, f"{package}: {name} is found nowhere", missing=name, package=package
    )


def _note(*findings: Finding, gpus: tuple[str, ...] = ()) -> str:
    notes = _cpu_build_note(Report(findings=findings, torch=TORCH), gpus, None)
    assert len(notes) == 1, notes
    return notes[0]


def test_the_cuda_major_of_a_library_name_on_both_platforms() -> None:
    assert library_cuda_major("cublas64_12.dll") == 12
    assert library_cuda_major("cudart64_110.dll") == 11
    assert library_cuda_major("libcublasLt.so.12") == 12
    assert library_cuda_major("libcudart.so.13.0.48") == 13
    assert library_cuda_major("cudnn64_9.dll") is None  # cuDNN's major, not CUDA's
    assert library_cuda_major("libcudnn.so.9") is None
    assert library_cuda_major("cufft64_11.dll") is None


def test_without_a_neighbour_the_newest_variant_is_named() -> None:
    assert "the CUDA 13.0 build," in _note()


def test_a_cuda_12_neighbour_gets_the_newest_cuda_12_build() -> None:
    note = _note(_missing("ctranslate2", "cublas64_12.dll"))
    assert "the CUDA 12.8 build, which also serves ctranslate2's cublas64_12.dll, " in note
    assert "https://download.pytorch.org/whl/cu128" in note
    assert "cu130" not in note


def test_a_linux_load_order_finding_counts_too() -> None:
    note = _note(_missing("onnxruntime-gpu", "libcublas.so.12", Code.NEIGHBOUR_LOAD_ORDER))
    assert "CUDA 12.8 build, which also serves onnxruntime-gpu's libcublas.so.12" in note


def test_the_named_gpu_keeps_a_build_with_its_kernels() -> None:
    """torch 2.9's CUDA 12.8 build has no sm_61 kernels: a GTX 1080 gets CUDA 12.6."""
    note = _note(_missing("ctranslate2", "cublas64_12.dll"), gpus=("NVIDIA GeForce GTX 1080",))
    assert "the CUDA 12.6 build, which also serves ctranslate2's cublas64_12.dll" in note
    assert "whl/cu126" in note


def test_a_major_the_release_lacks_keeps_the_choice_and_says_so() -> None:
    note = _note(_missing("onnxruntime-gpu", "cublas64_11.dll"))
    assert "the CUDA 13.0 build (onnxruntime-gpu needs CUDA 11: cublas64_11.dll; " in note
    assert "whl/cu130" in note


def test_what_is_not_a_neighbour_finding_or_disagrees_names_no_major() -> None:
    torch_own = Finding(Code.MISSING_DLL, ERROR, "x", missing="cublas64_12.dll")
    assert neighbour_need([torch_own]) is None
    assert neighbour_need([_missing("ctranslate2", "cudnn64_9.dll")]) is None
    both = [
        _missing("ctranslate2", "cublas64_12.dll"),
        _missing("onnxruntime-gpu", "cublas64_11.dll"),
    ]
    assert neighbour_need(both) is None
    assert "the CUDA 13.0 build, NVIDIA" in _note(*both)


def _hint(tmp_path: Path, *, cublas: str) -> str:
    site = FakeTorch(version="2.9.1+cpu").write(tmp_path / "site")
    if cublas == "cublas64_12.dll":
        ctranslate2(site, cublas)
    else:
        onnxruntime(site, [cublas], version="1.18.1")
    report = torchguard.scan([site], system32=[gpu_machine(tmp_path, (32, 0, 15, 8157))])
    (finding,) = [f for f in report.findings if f.code == "cpu-build-on-gpu"]
    assert any(f.package and f.missing == cublas for f in report.findings)
    return "\n".join(f"{h.summary} {' '.join(h.commands)}" for h in finding.hints)


def test_the_cpu_build_hint_prefers_the_build_ctranslate2_s_cublas_needs(
    tmp_path: Path,
) -> None:
    """Driver 581.57 runs torch 2.9.1's CUDA 13.0 build, but ctranslate2 4.8.5 loads
    ``cublas64_12.dll``: the hint names CUDA 12.8 and says why."""
    hint = _hint(tmp_path, cublas="cublas64_12.dll")
    assert (
        "install the CUDA 12.8 build of torch 2.9.1, which also serves ctranslate2's "
        "cublas64_12.dll: the newest CUDA 12 variant"
    ) in hint
    assert "torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128" in hint
    assert "whl/cu130" not in hint.split("\n")[0]


def test_the_cpu_build_hint_says_what_no_variant_serves(tmp_path: Path) -> None:
    hint = _hint(tmp_path, cublas="cublas64_11.dll")
    assert "install the CUDA 13.0 build of torch 2.9.1 (onnxruntime-gpu needs CUDA 11" in hint


def _linux_hint(tmp_path: Path, gpu: str) -> str:
    from test_linux_gpu import root_with_driver, system_on
    from test_linux_import import torch_site
    from test_neighbours import ctranslate2 as linux_ctranslate2

    from torchguard._frontends.pipeline import analyze_linux

    site = torch_site(tmp_path)
    (site / "torch" / "version.py").write_text("__version__ = '2.9.1+cpu'\ncuda = None\n")
    linux_ctranslate2(site, "libcublas.so.12")
    system = system_on(tmp_path, root_with_driver(tmp_path, "580.82.07"), gpus=(gpu,))
    report = analyze_linux(system)
    assert any(f.package == "ctranslate2" for f in report.findings), report.findings
    (finding,) = [f for f in report.findings if f.code == "cpu-build-on-gpu"]
    return "\n".join(f"{h.summary} {' '.join(h.commands)}" for h in finding.hints)


def test_the_linux_cpu_build_hint_prefers_the_cuda_ctranslate2_loads(tmp_path: Path) -> None:
    hint = _linux_hint(tmp_path, "NVIDIA GeForce RTX 4090")
    first = hint.split("\n")[0]
    assert (
        "Install torch 2.9.1 built for CUDA 12.8, the newest variant of this release with sm_89 "
        "kernels and CUDA 12 (it also serves ctranslate2's libcublas.so.12)"
    ) in first, hint
    assert first.endswith("torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128")


def test_the_linux_hint_keeps_a_build_with_the_gpu_s_kernels(tmp_path: Path) -> None:
    """torch 2.9's CUDA 12.8 builds have no sm_61 kernels: a GTX 1080 gets CUDA 12.6."""
    first = _linux_hint(tmp_path, "NVIDIA GeForce GTX 1080").split("\n")[0]
    assert "built for CUDA 12.6" in first and "ctranslate2's libcublas.so.12" in first, first
    assert first.endswith("whl/cu126")
