"""torch's native neighbours on Windows (issue 24): onnxruntime-gpu's CUDA provider and
ctranslate2's library, replayed on the Windows loader model after ``import torch`` and in a
process without torch. A load by base name binds to a module torch already loaded; alone, the
provider's imports are searched in its folder, System32 and PATH (``LOAD_WITH_ALTERED_SEARCH_PATH``)
and ctranslate2's ``LoadLibraryA`` names in python.exe's folder, ``%CUDA_PATH%\\bin``, System32
and PATH, never in ``os.add_dll_directory`` folders."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import TORCH_241_GRAPH, FakeTorch, companion, system32, write_tree
from pe_builder import build_pe

from torchguard._binary.cache import user_cache
from torchguard._binary.pe.names import cuda_dll_names
from torchguard._facts.neighbours import windows_cuda_major, windows_wheel
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._platforms.windows.tree import join
from torchguard._report.findings import Finding
from torchguard._report.report import Report

KERNEL = ("KERNEL32.dll",)
PROVIDER = "onnxruntime/capi/onnxruntime_providers_cuda.dll"


def cuda_torch(site: Path, *, cublas: bool = True, version: str = "2.4.1+cu124") -> Path:
    """A CUDA 12 torch whose ``torch_cuda.dll`` imports cuBLAS 12 from ``torch\\lib``
    (``version``: what its metadata says; without ``+cu12`` onnxruntime's ``preload_dlls()``
    does not take torch's folder)."""
    graph = dict(TORCH_241_GRAPH)
    graph["torch_cuda.dll"] = ("cublas64_12.dll", "torch_cpu.dll", *KERNEL)
    graph["cublas64_12.dll"] = ("cublasLt64_12.dll", *KERNEL)
    graph["cublasLt64_12.dll"] = KERNEL
    if not cublas:
        for name in ("torch_cuda.dll", "cublas64_12.dll", "cublasLt64_12.dll"):
            del graph[name]
    return FakeTorch(version=version, cuda="12.4", graph=graph).write(site)


def onnxruntime(site: Path, imports: Sequence[str], version: str = "1.22.0") -> None:
    files = {
        PROVIDER: build_pe([*imports, "onnxruntime_providers_shared.dll", *KERNEL]),
        "onnxruntime/capi/onnxruntime_providers_shared.dll": build_pe(KERNEL),
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", version, files, {}))


def ctranslate2(site: Path, *names: str, version: str = "4.8.5") -> None:
    """ctranslate2's layout: ``ctranslate2.dll`` imports no CUDA DLL and keeps the names it
    ``LoadLibraryA``s as string constants."""
    strings = [b"\0" + n.encode() + b"\0" for n in names]
    files = {
        "ctranslate2/ctranslate2.dll": build_pe(KERNEL, strings=strings),
        "ctranslate2/__init__.py": b"",
    }
    write_tree(site, companion("ctranslate2", version, files, {}))


def run(
    site: Path, tmp_path: Path, path: Sequence[str] = (), environ: dict[str, str] | None = None
) -> Report:
    system = offline_windows([str(site)], system32_dirs=[str(system32(tmp_path / "s32"))])
    site_dir = system.interpreter.site_dirs[0]
    system.interpreter = dataclasses.replace(
        system.interpreter,
        path_dirs=tuple(join(site_dir, *p.split("/")) for p in path),
        environ=environ or {},
    )
    try:
        return analyze(system, cache=user_cache())
    finally:
        system.close()


def of(report: Report, package: str) -> list[Finding]:
    assert report.import_torch is not None and report.import_torch.ok
    return [f for f in report.findings if f.package == package]


def test_the_provider_loads_only_after_torch(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    onnxruntime(site, ["cublas64_12.dll", "cublasLt64_12.dll"])
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert finding.missing == "cublas64_12.dll"
    assert "torch\\lib" in finding.message and "WinError 126" in finding.message
    assert "Failed to create CUDAExecutionProvider" in finding.message
    commands = [c for h in finding.hints for c in h.commands]
    assert any("import torch" in c for c in commands)
    assert any("preload_dlls()" in c for c in commands)
    (preload,) = [h for h in finding.hints if "preload_dlls()" in " ".join(h.commands)]
    assert "torch's own copies in" in preload.summary and "torch\\lib" in preload.summary
    assert "provider then loads (replayed)" in preload.summary
    assert finding.path is not None and finding.path.endswith("onnxruntime_providers_cuda.dll")


def test_without_cu12_in_torchs_version_the_preload_takes_the_wheels(tmp_path: Path) -> None:
    """onnxruntime 1.21-1.23 take ``torch\\lib`` only when torch's version says ``+cu12``:
    a torch whose metadata has no local tag is not chosen, and with no NVIDIA wheel installed
    the preload finds nothing: the hint installs the wheels."""
    site = cuda_torch(tmp_path / "site", version="2.4.1")
    onnxruntime(site, ["cublas64_12.dll", "cublasLt64_12.dll"])
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    commands = [c for h in finding.hints for c in h.commands]
    assert any("nvidia-cublas-cu12" in c for c in commands)
    assert not any("torch's own copies" in h.summary for h in finding.hints)


def test_no_preload_hint_before_onnxruntime_1_21(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    onnxruntime(site, ["cublas64_12.dll"], version="1.19.2")
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    assert not any("preload_dlls" in c for h in finding.hints for c in h.commands)


def test_on_path_the_provider_loads_in_either_order(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    onnxruntime(site, ["cublas64_12.dll"])
    bin_dir = "nvidia/cublas/bin"
    write_tree(site, {f"{bin_dir}/cublas64_12.dll": build_pe(["cublasLt64_12.dll", *KERNEL])})
    write_tree(site, {f"{bin_dir}/cublasLt64_12.dll": build_pe(KERNEL)})
    assert of(run(site, tmp_path, path=[bin_dir]), "onnxruntime-gpu") == []


def test_add_dll_directory_folders_do_not_help_the_provider(tmp_path: Path) -> None:
    """torch registers ``torch\\lib`` with ``os.add_dll_directory``; the provider's loader
    call does not search such folders: without torch loaded first, it still fails."""
    site = cuda_torch(tmp_path / "site")
    onnxruntime(site, ["cublas64_12.dll"])
    report = run(site, tmp_path)
    assert any(d.path.lower().endswith("torch\\lib") for d in report.dll_directories)
    assert [f.code for f in of(report, "onnxruntime-gpu")] == [Code.NEIGHBOUR_LOAD_ORDER]


def test_a_cuda_11_provider_beside_a_cuda_12_torch(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    onnxruntime(site, ["cublas64_11.dll", "cudart64_110.dll"], version="1.15.1")
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    assert finding.code == Code.MISSING_DLL and not finding.is_error
    assert finding.missing == "cublas64_11.dll"
    assert "built for CUDA 11" in finding.message and "CUDA 12 build" in finding.message
    commands = [c for h in finding.hints for c in h.commands]
    assert any('"onnxruntime-gpu>=1.19,<1.27"' in c for c in commands)
    assert any("nvidia-cublas-cu11 nvidia-cuda-runtime-cu11" in c for c in commands)


def test_ctranslate2_finds_cublas_only_after_torch(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    ctranslate2(site, "cublas64_12.dll")
    (finding,) = of(run(site, tmp_path), "ctranslate2")
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER
    assert finding.missing == "cublas64_12.dll"
    assert "first CUDA call cannot find cublas64_12.dll" in finding.message
    assert "torch\\lib" in finding.message
    assert not any("preload_dlls" in c for h in finding.hints for c in h.commands)


def test_ctranslate2_searches_cuda_path(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    ctranslate2(site, "cublas64_12.dll")
    write_tree(site, {"toolkit/bin/cublas64_12.dll": build_pe(["cublasLt64_12.dll", *KERNEL])})
    write_tree(site, {"toolkit/bin/cublasLt64_12.dll": build_pe(KERNEL)})
    probe = offline_windows([str(site)])
    toolkit = join(probe.interpreter.site_dirs[0], "toolkit")
    probe.close()
    assert of(run(site, tmp_path, environ={"CUDA_PATH": toolkit}), "ctranslate2") == []


def test_ctranslate2_3_beside_a_cuda_12_torch(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    ctranslate2(site, "cublas64_11.dll", version="3.24.0")
    (finding,) = of(run(site, tmp_path), "ctranslate2")
    assert finding.code == Code.MISSING_DLL and finding.missing == "cublas64_11.dll"
    assert "built for CUDA 11" in finding.message
    assert any('"ctranslate2>=4.5"' in c for h in finding.hints for c in h.commands)


def test_a_torch_without_cublas_leaves_both_missing(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site", cublas=False)
    onnxruntime(site, ["cublas64_12.dll"])
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    assert finding.code == Code.MISSING_DLL and finding.missing == "cublas64_12.dll"
    assert "whether torch is imported first or not" in finding.message


def test_wheels_are_judged_like_folders(tmp_path: Path) -> None:
    """``scan`` of wheels: the names are read from a wheel member as from a file."""
    site = cuda_torch(tmp_path / "site")
    ctranslate2(site, "cublas64_12.dll")
    folder = of(run(site, tmp_path), "ctranslate2")
    import zipfile

    wheel = tmp_path / "ctranslate2-4.8.5-cp311-cp311-win_amd64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in (site / "ctranslate2").rglob("*"):
            archive.write(path, path.relative_to(site).as_posix())
        for path in (site / "ctranslate2-4.8.5.dist-info").rglob("*"):
            archive.write(path, path.relative_to(site).as_posix())
    torch_wheel = FakeTorch(version="2.4.1+cu124", cuda="12.4", graph=dict(TORCH_241_GRAPH))
    torch_wheel.graph["torch_cuda.dll"] = ("cublas64_12.dll", *KERNEL)
    torch_wheel.graph["cublas64_12.dll"] = KERNEL
    system = offline_windows(
        [str(torch_wheel.wheel(tmp_path)), str(wheel)],
        system32_dirs=[str(system32(tmp_path / "s32"))],
    )
    try:
        report = analyze(system, cache=user_cache())
    finally:
        system.close()
    assert [f.code for f in of(report, "ctranslate2")] == [f.code for f in folder]


def test_names_are_read_from_the_data_not_the_code() -> None:
    image = build_pe(KERNEL, strings=[b"\0cublas64_12.dll\0cudnn_ops64_9.dll\0xcublas.dll\0"])
    assert cuda_dll_names(image) == ("cublas64_12.dll", "cudnn_ops64_9.dll")
    assert cuda_dll_names(b"not a PE image") == ()


@pytest.mark.parametrize(
    ("name", "major", "wheel"),
    [
        ("cublas64_12.dll", 12, "nvidia-cublas-cu12"),
        ("cublasLt64_11.dll", 11, "nvidia-cublas-cu11"),
        ("cudart64_110.dll", 11, "nvidia-cuda-runtime-cu11"),
        ("cudnn_ops64_9.dll", None, "nvidia-cudnn-cu12"),
    ],
)
def test_names_and_wheels(name: str, major: int | None, wheel: str) -> None:
    assert windows_cuda_major(name) == major
    assert windows_wheel(name, "11" if major == 11 else "12") == wheel
    assert windows_wheel("cublas64_13.dll", "13") == "nvidia-cublas"


def test_a_copy_torch_loaded_that_lacks_a_symbol_breaks_the_torch_first_order(
    tmp_path: Path,
) -> None:
    """The reverse order: alone the provider binds to the cuBLAS on PATH; after torch, to
    torch's copy, which lacks what it takes (WinError 127)."""
    site = cuda_torch(tmp_path / "site")
    files = {
        PROVIDER: build_pe(
            ["cublas64_12.dll", *KERNEL], symbols={"cublas64_12.dll": ["cublasNewerCall"]}
        ),
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", "1.22.0", files, {}))
    newer = build_pe(["cublasLt64_12.dll", *KERNEL], exports=("cublasNewerCall",))
    write_tree(site, {"nvidia/cublas/bin/cublas64_12.dll": newer})
    write_tree(site, {"nvidia/cublas/bin/cublasLt64_12.dll": build_pe(KERNEL)})
    finding, other = of(run(site, tmp_path, path=["nvidia/cublas/bin"]), "onnxruntime-gpu")
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert "not after `import torch`: WinError 127 on cublas64_12.dll" in finding.message
    assert "torch\\lib" in finding.message
    # and the same pair the other way: the wheel's copy preloaded lacks what torch takes
    assert other.code == Code.NEIGHBOUR_LOAD_ORDER and not other.is_error
    assert other.message.startswith(
        'onnxruntime-gpu 1.22.0: onnxruntime.preload_dlls(directory="") before `import torch`'
    )
    assert "torch's own torch_cuda.dll then binds cublas64_12.dll" in other.message


def test_preload_dlls_is_replayed_from_the_nvidia_wheels_installed(tmp_path: Path) -> None:
    """onnxruntime 1.21+'s ``preload_dlls()`` loads ``nvidia\\<part>\\bin`` files by full path:
    with the NVIDIA wheel installed (not on PATH) the provider then loads without torch."""
    site = cuda_torch(tmp_path / "site", version="2.4.1")
    onnxruntime(site, ["cublas64_12.dll"])
    bin_dir = "nvidia/cublas/bin"
    write_tree(site, {f"{bin_dir}/cublas64_12.dll": build_pe(["cublasLt64_12.dll", *KERNEL])})
    write_tree(site, {f"{bin_dir}/cublasLt64_12.dll": build_pe(KERNEL)})
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER  # alone, without the preload, still 126
    summaries = [h.summary for h in finding.hints]
    assert any("the NVIDIA wheels' copies installed here" in s for s in summaries)
    assert any("provider then loads (replayed)" in s for s in summaries)
    assert not any("pip" in c for h in finding.hints for c in h.commands)


def test_without_the_wheels_the_preload_hint_installs_them_first(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site", version="2.4.1")
    onnxruntime(site, ["cublas64_12.dll"])
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    (preload,) = [h for h in finding.hints if "preload_dlls()" in " ".join(h.commands)]
    assert "none is installed here now" in preload.summary
    assert preload.commands[0].endswith("pip install nvidia-cublas-cu12")


def test_a_damaged_library_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    site = cuda_torch(tmp_path / "site")
    files = {"ctranslate2/ctranslate2.dll": b"MZ" + b"\0" * 100, "ctranslate2/__init__.py": b""}
    write_tree(site, companion("ctranslate2", "4.8.5", files, {}))
    (finding,) = of(run(site, tmp_path), "ctranslate2")
    assert finding.code == Code.CORRUPT_DLL and not finding.is_error
    assert "WinError 193 (ctranslate2.dll)" in finding.message


def test_the_wheels_hinted_are_those_of_the_providers_own_cuda_and_cudnn(tmp_path: Path) -> None:
    """onnxruntime-gpu 1.15.1's provider imports CUDA 11's cuBLAS and runtime with cuDNN 8 and
    cuFFT 10 (read from the real wheel: tests/test_neighbours_windows_real.py). The names
    without a CUDA major of their own take the provider's (its cuBLAS'), not torch's: NVIDIA's
    CUDA 12 wheels ship cufft64_11.dll and cuDNN 9, which would leave it failing. The cuDNN
    wheel is pinned to the major the name asks for (nvidia-cudnn-cu11 9.x ships cudnn64_9.dll)."""
    site = cuda_torch(tmp_path / "site")
    imports = ["cublas64_11.dll", "cudart64_110.dll", "cudnn64_8.dll", "cufft64_10.dll"]
    onnxruntime(site, imports, version="1.15.1")
    (finding,) = of(run(site, tmp_path), "onnxruntime-gpu")
    (command,) = [c for h in finding.hints for c in h.commands if "nvidia-" in c]
    wheels = command.split("install ", 1)[1].split()
    assert sorted(wheels) == sorted(
        [
            "nvidia-cublas-cu11",
            "nvidia-cuda-runtime-cu11",
            '"nvidia-cudnn-cu11==8.*"',
            "nvidia-cufft-cu11",
        ]
    ), command
