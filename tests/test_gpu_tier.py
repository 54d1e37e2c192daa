"""GPU tier: torch CUDA layouts made of genuine NVIDIA DLLs from their PyPI wheels.

The chains are NVIDIA's own import tables (cusparse64_12.dll -> nvJitLink_120_0.dll in CUDA 12,
-> nvJitLink_130_0.dll in CUDA 13; cuDNN 8's sub-libraries -> cudnn_ops_infer64_8.dll); the
driver is a System32 nvcuda.dll carrying the driver number, never loaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuwheels import VARIANTS, cuda_layout, driver_dir
from realwheels import vc_runtime_dir

import torchguard
from torchguard._facts.cuda_builds import MINIMUM_DRIVER

pytestmark = pytest.mark.realwheel


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vc_runtime_dir(tmp_path_factory.mktemp("vcruntime"))


def scan(
    tmp_path: Path,
    runtime: Path,
    tag: str,
    driver: tuple[int, int] | None,
    without: tuple[str, ...] = (),
) -> torchguard.Report:
    variant = VARIANTS[tag]
    site = cuda_layout(tmp_path / "site", variant, without=without)
    system32 = driver_dir(tmp_path / "s32", runtime, driver)
    return torchguard.scan([site], system32=[system32])


def minimum(tag: str) -> tuple[int, int]:
    cuda = VARIANTS[tag].cuda.split(".")
    return MINIMUM_DRIVER[(int(cuda[0]), int(cuda[1]))]


@pytest.mark.parametrize("tag", sorted(VARIANTS))
def test_complete_layout_with_the_minimum_driver_is_clean(
    tmp_path: Path, runtime: Path, tag: str
) -> None:
    report = scan(tmp_path, runtime, tag, minimum(tag))
    assert report.ok, report.render_text()
    assert report.findings == (), report.render_text()
    assert report.import_torch is not None and report.import_torch.ok


@pytest.mark.parametrize("tag", sorted(VARIANTS))
def test_driver_one_below_the_minimum_is_too_old(tmp_path: Path, runtime: Path, tag: str) -> None:
    need = minimum(tag)
    report = scan(tmp_path, runtime, tag, (need[0] - 1, 99))
    assert report.ok
    (finding,) = report.findings
    assert finding.code == "cuda-driver-too-old"
    assert f"{need[0]}.{need[1]:02d}" in finding.hints[0].summary


@pytest.mark.parametrize("tag", sorted(VARIANTS))
def test_newer_driver_is_clean_and_no_driver_is_reported(
    tmp_path: Path, runtime: Path, tag: str
) -> None:
    assert scan(tmp_path / "new", runtime, tag, (599, 99)).findings == ()
    report = scan(tmp_path / "none", runtime, tag, None)
    assert [f.code for f in report.findings] == ["cuda-driver-missing"]


@pytest.mark.parametrize(
    ("tag", "removed", "chain"),
    [
        ("cu124", "nvJitLink_120_0.dll", ["cusparse64_12.dll", "nvJitLink_120_0.dll"]),
        ("cu130", "nvJitLink_130_0.dll", ["cusparse64_12.dll", "nvJitLink_130_0.dll"]),
        (
            "cu118",
            "cudnn_ops_infer64_8.dll",
            ["cudnn_adv_infer64_8.dll", "cudnn_ops_infer64_8.dll"],
        ),
        ("cu118", "cudart64_110.dll", ["c10_cuda.dll", "cudart64_110.dll"]),
        ("cu124", "cudart64_12.dll", ["c10_cuda.dll", "cudart64_12.dll"]),
        ("cu130", "cusparse64_12.dll", ["torch_cuda.dll", "cusparse64_12.dll"]),
    ],
)
def test_each_bundled_dependency_missing_names_the_real_chain(
    tmp_path: Path, runtime: Path, tag: str, removed: str, chain: list[str]
) -> None:
    report = scan(tmp_path, runtime, tag, minimum(tag), without=(removed,))
    assert not report.ok
    first = report.errors[0]
    assert first.code == "missing-dll"
    assert first.missing == removed
    assert [c.lower() for c in first.chain] == [c.lower() for c in chain], report.render_text()
    assert report.import_torch is not None and report.import_torch.dll == chain[0]


def test_real_cpu_wheel_on_driver_560_94_gets_the_cu124_command(
    tmp_path: Path, runtime: Path
) -> None:
    from realwheels import wheel

    system32 = driver_dir(tmp_path / "s32", runtime, (560, 94))
    report = torchguard.scan([wheel("torch", "2.4.1")], system32=[system32])
    assert report.ok
    (finding,) = report.findings
    assert finding.code == "cpu-build-on-gpu"
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.4.1 --index-url https://download.pytorch.org/whl/cu124")
    )


def test_cudnn_8_without_zlibwapi_imports_then_fails_at_first_use(
    tmp_path: Path, runtime: Path
) -> None:
    """cuDNN 8.9.4 loads zlibwapi.dll by name: its absence is a warning, not an import error."""
    report = scan(tmp_path, runtime, "cu118", minimum("cu118"), without=("zlibwapi.dll",))
    assert report.ok, report.render_text()
    (finding,) = report.findings
    assert (finding.code, finding.missing) == ("cudnn-zlib-missing", "zlibwapi.dll")
    assert "cudnn64_8.dll" in finding.message
    # the cuDNN 8 sub-libraries in the layout are NVIDIA's own, and none imports zlibwapi.dll
    assert report.import_torch is not None and report.import_torch.ok
