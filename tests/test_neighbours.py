"""torch's native neighbours on Linux (issue 24): onnxruntime-gpu's CUDA provider and
ctranslate2's library, replayed on the ld.so model after ``import torch`` and in a process
without torch; the order that works is named, and a CUDA major torch does not ship is said as
such with the release built for torch's."""

from __future__ import annotations

from pathlib import Path

from linux_elf import write_so
from test_linux_import import analyze, torch_site

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.neighbours import find_neighbours
from torchguard._report.findings import Finding


def cublas_torch(root: Path) -> Path:
    """:func:`torch_site` whose libtorch_cuda also needs cuBLAS 12 from the NVIDIA wheel."""
    site = torch_site(root)
    write_so(site / "nvidia" / "cublas" / "lib", "libcublas.so.12", defines=["cublasCreate_v2"])
    lib = site / "torch" / "lib"
    rpath = (
        "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
        "$ORIGIN/../../nvidia/cuda_nvrtc/lib:$ORIGIN/../../nvidia/cublas/lib:$ORIGIN"
    )
    write_so(
        lib,
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12", "libcublas.so.12"],
        rpath=rpath,
        undefined=["cudaMalloc"],
        defines=["_ZN3c104cuda6deviceEv"],
    )
    return site


def ctranslate2(site: Path, *names: str, version: str = "4.8.5") -> Path:
    """ctranslate2's wheel layout: its library in ``ctranslate2.libs`` (RPATH $ORIGIN) keeps
    the CUDA names it ``dlopen``s in its read-only data."""
    (site / "ctranslate2").mkdir(parents=True, exist_ok=True)
    (site / "ctranslate2" / "__init__.py").write_text("")
    (site / f"ctranslate2-{version}.dist-info").mkdir(exist_ok=True)
    path = write_so(site / "ctranslate2.libs", "libctranslate2-a7a60d30.so.4.8.5", rpath="$ORIGIN")
    path.write_bytes(path.read_bytes() + b"\0" + b"\0".join(n.encode() for n in names) + b"\0")
    return path


def onnxruntime(site: Path, needed: str, version: str = "1.22.0") -> Path:
    """onnxruntime-gpu's layout: its provider binds ``Provider_GetHost``, which no
    ``DT_NEEDED`` library defines, to ``libonnxruntime_providers_shared.so`` (loaded
    ``RTLD_GLOBAL`` first)."""
    capi = site / "onnxruntime" / "capi"
    capi.mkdir(parents=True, exist_ok=True)
    (site / "onnxruntime" / "__init__.py").write_text("")
    (site / f"onnxruntime_gpu-{version}.dist-info").mkdir(exist_ok=True)
    write_so(capi, "libonnxruntime_providers_shared.so", defines=["Provider_GetHost"])
    return write_so(
        capi,
        "libonnxruntime_providers_cuda.so",
        needed=[needed],
        runpath="$ORIGIN",
        undefined=["Provider_GetHost"],
    )


def neighbour_findings(site: Path) -> list[Finding]:
    report = analyze(site)
    assert report.import_torch is not None and report.import_torch.ok
    return [f for f in report.findings if f.package in ("ctranslate2", "onnxruntime-gpu")]


def test_ctranslate2_finds_cublas_only_after_torch(tmp_path: Path) -> None:
    site = cublas_torch(tmp_path)
    ctranslate2(site, "libcublas.so.12", "libnccl.so.2", "libcuda.so.1")
    (finding,) = neighbour_findings(site)
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert finding.missing == "libcublas.so.12" and "ctranslate2 4.8.5" in finding.message
    assert "nvidia/cublas/lib" in finding.message
    assert finding.hints[0].commands == ("import torch  # then: import ctranslate2",)
    assert "LD_LIBRARY_PATH" in finding.hints[-1].commands[0]


def test_ctranslate2_with_cublas_on_the_library_path_needs_no_order(tmp_path: Path) -> None:
    site = cublas_torch(tmp_path)
    ctranslate2(site, "libcublas.so.12")
    cublas = str(site / "nvidia" / "cublas" / "lib")
    report = analyze(site, ld_library_path=(cublas,))
    assert not [f for f in report.findings if f.package == "ctranslate2"]


def test_a_cuda_11_ctranslate2_beside_a_cuda_12_torch(tmp_path: Path) -> None:
    site = cublas_torch(tmp_path)
    ctranslate2(site, "libcublas.so.11", version="3.24.0")
    (finding,) = neighbour_findings(site)
    assert finding.code == Code.MISSING_DLL and not finding.is_error
    assert finding.missing == "libcublas.so.11" and "whether torch is imported first or not" in (
        finding.message
    )
    assert "built for CUDA 11" in finding.message and "CUDA 12 build" in finding.message
    assert "'ctranslate2>=4.5'" in finding.hints[0].commands[0]
    assert "nvidia-cublas-cu11" in finding.hints[1].commands[0]


def test_onnxruntime_provider_loads_only_after_torch(tmp_path: Path) -> None:
    site = cublas_torch(tmp_path)
    onnxruntime(site, "libcublas.so.12")
    (finding,) = neighbour_findings(site)
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and finding.package == "onnxruntime-gpu"
    assert "CUDAExecutionProvider" in finding.message
    assert "cannot open shared object file" in finding.message
    assert any("preload_dlls" in c for h in finding.hints for c in h.commands)


def test_the_provider_binds_provider_get_host_to_the_shared_library(tmp_path: Path) -> None:
    """onnxruntime loads ``libonnxruntime_providers_shared.so`` ``RTLD_GLOBAL`` first: the
    provider's undefined ``Provider_GetHost`` binds there (the real 1.24.1 provider, replayed
    without it, was wrongly said not to load after torch); without that file neither order
    loads the provider, as onnxruntime's own load fails on it."""
    site = cublas_torch(tmp_path)
    onnxruntime(site, "libcublas.so.12")
    assert [f.code for f in neighbour_findings(site)] == [Code.NEIGHBOUR_LOAD_ORDER]
    (site / "onnxruntime" / "capi" / "libonnxruntime_providers_shared.so").unlink()
    (finding,) = neighbour_findings(site)
    assert finding.code == Code.MISSING_DLL and finding.package == "onnxruntime-gpu"
    assert finding.missing == str(
        site / "onnxruntime" / "capi" / "libonnxruntime_providers_shared.so"
    )
    assert "does not load even after `import torch`" in finding.message


def test_onnxruntime_built_for_cuda_11_fails_in_either_order(tmp_path: Path) -> None:
    site = cublas_torch(tmp_path)
    onnxruntime(site, "libcublasLt.so.11", version="1.18.1")
    (finding,) = neighbour_findings(site)
    assert finding.code == Code.MISSING_DLL and not finding.is_error
    assert "does not load even after `import torch`" in finding.message
    assert "libcublasLt.so.11" in finding.message
    assert "'onnxruntime-gpu>=1.19,<1.27'" in finding.hints[0].commands[0]
    assert not any("preload_dlls" in c for h in finding.hints for c in h.commands)


def test_the_first_site_folder_decides(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    (first / "ctranslate2").mkdir(parents=True)  # a CPU-only build: no library
    ctranslate2(second, "libcublas.so.12")
    assert find_neighbours([str(first), str(second)]) == []
    (found,) = find_neighbours([str(tmp_path / "none"), str(second)])
    assert found.version == "4.8.5" and found.library.endswith("libctranslate2-a7a60d30.so.4.8.5")


def test_names_of_other_majors_are_alternatives(tmp_path: Path) -> None:
    """A binary keeping two majors of one library (onnxruntime-gpu 1.31's provider keeps
    libcudart.so.12 and .so.13) tries them in turn: one found is enough."""
    site = cublas_torch(tmp_path)
    ctranslate2(site, "libcublas.so.11", "libcublas.so.12")
    (finding,) = neighbour_findings(site)  # .12 found only after torch; .11 is no finding
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and finding.missing == "libcublas.so.12"
    cublas = str(site / "nvidia" / "cublas" / "lib")
    report = analyze(site, ld_library_path=(cublas,))
    assert not [f for f in report.findings if f.package == "ctranslate2"]
