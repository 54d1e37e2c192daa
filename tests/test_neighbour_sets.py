"""``check`` on the four requirement sets of issue 24 (``tests/neighbour_sets/``): the verdict
for Windows x64 and CPython 3.11, resolved against PyPI, every wheel from the real-wheel tier's
cache (``--cache-dir``; about 200 MB downloaded on a cache that has torch 2.9.1 and
onnxruntime-gpu 1.15.1: bitsandbytes, triton-windows, ctranslate2, av, numpy ...; what is not
pinned follows PyPI's newest release, so a new one is downloaded when it appears). The Wine tier judges these
verdicts with the real loader (``e2e/test_neighbour_sets_loader.py``)."""

from __future__ import annotations

import pytest
from neighbour_sets import PINNED, SETS, check, requirements, text
from realwheels import CACHE

pytestmark = pytest.mark.realwheel

#: What check says on each set: PyPI's Windows torch 2.9.1 is the CPU build, so no CUDA DLL is
#: loaded by torch for a neighbour to find, whichever is imported first.
EXPECTED = {
    "faster-whisper": (
        0,
        (("missing-dll", "warning", "ctranslate2", "cublas64_12.dll"),),
    ),
    "onnxruntime-gpu": (
        0,
        (("missing-dll", "warning", "onnxruntime-gpu", "cublaslt64_11.dll"),),
    ),
    "kohya-bitsandbytes": (0, ()),
    "comfyui-triton": (0, ()),
}


def test_every_set_names_the_project_it_is_modelled_on() -> None:
    for name in SETS:
        first = requirements(name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# modelled on: https://github.com/"), name
        assert "/blob/" in first, name  # a file at a commit


@pytest.mark.parametrize("name", SETS)
def test_check_verdict(name: str) -> None:
    verdict = check(name, CACHE)
    exit_code, findings = EXPECTED[name]
    assert (verdict.exit_code, verdict.findings) == (exit_code, findings), verdict.output
    torch = [w for w in verdict.wheels if w.startswith("torch-")]
    assert torch == ["torch-2.9.1-cp311-cp311-win_amd64.whl"], verdict.wheels
    assert verdict.torch == "2.9.1+cpu", verdict.output
    for project, version in PINNED[name]:  # what tests/prefetch.py fetches ahead
        prefix = f"{project.replace('-', '_')}-{version}-"
        assert any(w.startswith(prefix) for w in verdict.wheels), (prefix, verdict.wheels)


def test_the_providers_wheels_are_those_of_its_own_cuda() -> None:
    """The CPU torch has no CUDA major: the wheels for onnxruntime-gpu 1.15.1's cuDNN and cuFFT
    follow its cuBLAS' (CUDA 11), cuDNN pinned to the 8 its provider imports."""
    verdict = check("onnxruntime-gpu", CACHE)
    wanted = (
        'nvidia-cublas-cu11 "nvidia-cudnn-cu11==8.*" nvidia-cufft-cu11 nvidia-cuda-runtime-cu11'
    )
    assert any(c.endswith(f"pip install {wanted}") for c in verdict.commands), verdict.commands


def test_the_cpu_build_note_names_the_cuda_the_neighbour_needs() -> None:
    """torch 2.9.1's newest CUDA build is 13.0; ctranslate2 4.8.5 loads ``cublas64_12.dll``,
    which a CUDA 13 torch does not ship: the note names CUDA 12.8 and says why. No torch 2.9.1
    build serves onnxruntime-gpu 1.15.1's CUDA 11: the note keeps 13.0 and says so."""
    whisper = text("faster-whisper", CACHE)
    assert (
        "for an NVIDIA GPU install the CUDA 12.8 build, which also serves ctranslate2's "
        "cublas64_12.dll, NVIDIA driver"
    ) in whisper, whisper
    assert "torch==2.9.1 --index-url https://download.pytorch.org/whl/cu128" in whisper
    onnx = text("onnxruntime-gpu", CACHE)
    assert "the CUDA 13.0 build (onnxruntime-gpu needs CUDA 11: cublasLt64_11.dll; " in onnx, onnx
