"""Where ``libcuda.so.1`` lands, and whether it is a driver library CUDA can use.

Measured on torch 2.9.1+cu128 (LD_DEBUG=files): cuBLASLt's initialisation ``dlopen``s
``libcuda.so.1`` while ``import torch`` loads it, with cuBLASLt's own search; cudart does at
CUDA initialisation only when that found nothing. A copy without ``cuGetProcAddress`` is no
driver to cudart 12: torch then says "Found no NVIDIA driver on your system" (the real-loader
tier judges both with gcc-built copies).
"""

from __future__ import annotations

from pathlib import Path

from linux_elf import write_so
from test_linux_import import analyze, torch_site

DRIVER = "libcuda.so.1"
GOOD = ["cuInit", "cuGetProcAddress_v2", "cuDriverGetVersion"]


def blas_site(root: Path) -> Path:
    """:func:`torch_site` with libtorch_cuda NEEDing cuBLASLt (RUNPATH ``$ORIGIN``)."""
    site = torch_site(root)
    write_so(site / "nvidia" / "cublas" / "lib", "libcublasLt.so.12", runpath="$ORIGIN")
    rpath = (
        "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
        "$ORIGIN/../../nvidia/cuda_nvrtc/lib:"
        "$ORIGIN/../../nvidia/cublas/lib:$ORIGIN"
    )
    write_so(
        site / "torch" / "lib",
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12", "libcublasLt.so.12"],
        rpath=rpath,
        undefined=["cudaMalloc"],
        defines=["_ZN3c104cuda6deviceEv"],
    )
    return site


def test_no_driver_library_anywhere_is_no_finding(tmp_path: Path) -> None:
    assert analyze(blas_site(tmp_path)).findings == ()


def test_a_driver_library_on_ld_library_path_is_no_finding(tmp_path: Path) -> None:
    driver = tmp_path / "wsl" / "lib"
    write_so(driver, DRIVER, defines=GOOD)
    assert analyze(blas_site(tmp_path), ld_library_path=(str(driver),)).findings == ()


def test_a_libcuda_without_the_entry_points_is_no_driver(tmp_path: Path) -> None:
    stub = tmp_path / "stubs"
    write_so(stub, DRIVER, defines=["cuInit"])
    report = analyze(blas_site(tmp_path), ld_library_path=(str(stub),))
    (warning,) = report.findings
    assert warning.code == "cuda-driver-missing" and warning.severity == "warning"
    assert warning.path == f"{stub}/{DRIVER}" and warning.dll == "libcublasLt.so.12"
    assert warning.symbols == ("cuGetProcAddress", "cuGetProcAddress_v2")
    assert "Found no NVIDIA driver on your system" in warning.message
    assert "while torch imports" in warning.message


def test_cublaslt_loads_the_driver_before_cudart_with_its_own_search(tmp_path: Path) -> None:
    """A driver copy on torch's RPATH (beside cudart) is what cudart's search finds first;
    cuBLASLt's search (LD_LIBRARY_PATH first) finds the stub, and cuBLASLt loads first."""
    site = blas_site(tmp_path)
    write_so(site / "nvidia" / "cuda_runtime" / "lib", DRIVER, defines=GOOD)
    stub = tmp_path / "stubs"
    write_so(stub, DRIVER, defines=["cuInit"])
    (warning,) = analyze(site, ld_library_path=(str(stub),)).findings
    assert warning.path == f"{stub}/{DRIVER}"
    plain = torch_site(tmp_path / "no-cublas")  # cudart alone: torch's RPATH comes first
    write_so(plain / "nvidia" / "cuda_runtime" / "lib", DRIVER, defines=GOOD)
    assert analyze(plain, ld_library_path=(str(stub),)).findings == ()


def test_an_old_driver_without_the_entry_points_is_left_to_the_version_rules(
    tmp_path: Path,
) -> None:
    """A driver from before CUDA 11.3 has no cuGetProcAddress but is a driver: too old for
    cudart 12 (the driver-version rules say so), not "no driver"."""
    old = tmp_path / "driver-450"
    write_so(old, DRIVER, defines=["cuInit", "cuDeviceGet", "cuDriverGetVersion"])
    assert analyze(blas_site(tmp_path), ld_library_path=(str(old),)).findings == ()
