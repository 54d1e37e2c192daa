"""Repair commands on Linux fit the install: torch's own pins, CUDA 13's wheel names, the
LD_LIBRARY_PATH entry to drop (not the whole variable), several absent wheels at once."""

from __future__ import annotations

import shutil
from pathlib import Path

from test_linux_import import analyze, nvjitlink, torch_site

from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.requirements import (
    TorchRequirements,
    parse_pins,
    torch_requirements,
)
from torchguard._rules.linux_hints import LinuxHints, nvidia_wheel

TORCH_291 = """Metadata-Version: 2.1
Name: torch
Version: 2.9.1
Requires-Dist: filelock
Requires-Dist: setuptools; python_version >= "3.12"
Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: nvidia-nvjitlink-cu12==12.8.93; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: nvidia-cusparse-cu12==12.5.8.93; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: triton==3.5.1; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"
Requires-Dist: pywin32==311; platform_system == "Windows"
"""

TORCH_2141 = """Metadata-Version: 2.1
Name: torch
Version: 2.14.1
Requires-Dist: cuda-toolkit[cublas,cudart,nvjitlink]==13.0.3; platform_system == "Linux"
Requires-Dist: nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"
"""


def _metadata(site: Path, text: str, version: str = "2.9.1") -> None:
    info = site / f"torch-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(text)


def _installed(site: Path, *names: str) -> None:
    for name in names:
        (site / f"{name}-1.0.dist-info").mkdir()


def test_only_linux_pins_are_read() -> None:
    pins, extras = parse_pins(TORCH_291 + TORCH_2141.split("\n", 3)[3])
    assert pins["nvidia-cudnn-cu12"] == "9.10.2.21"
    assert pins["triton"] == "3.5.1"
    assert "pywin32" not in pins and "opt-einsum" not in pins and "setuptools" not in pins
    assert pins["cuda-toolkit"] == "13.0.3"
    assert extras == {"cuda-toolkit": ("cublas", "cudart", "nvjitlink")}


def test_cuda_13_toolkit_wheels_have_no_suffix() -> None:
    assert nvidia_wheel("libcublas.so.13", "13") == "nvidia-cublas"
    assert nvidia_wheel("libnvJitLink.so.13", None) == "nvidia-nvjitlink"
    assert nvidia_wheel("libcudnn.so.9", "13") == "nvidia-cudnn-cu13"
    assert nvidia_wheel("libnccl.so.2", "13") == "nvidia-nccl-cu13"
    assert nvidia_wheel("libcublas.so.12", "12") == "nvidia-cublas-cu12"


def test_hints_pin_what_torch_pins() -> None:
    pins, extras = parse_pins(TORCH_2141)
    hints = LinuxHints(requirements=TorchRequirements(pins, extras))
    assert hints.spec("nvidia-cudnn-cu13") == "nvidia-cudnn-cu13==9.24.0.43"
    assert hints.spec("nvidia-cublas") == "'cuda-toolkit[cublas]==13.0.3'"
    assert hints.spec("nvidia-cufft") == "nvidia-cufft"  # not among torch's extras: unpinned
    assert LinuxHints().spec("nvidia-cudnn-cu13") == "nvidia-cudnn-cu13"


def test_only_the_culprit_entry_leaves_ld_library_path() -> None:
    hints = LinuxHints(ld_library_path=("/opt/app/lib", "/usr/local/cuda/lib64/", "/x y"))
    assert hints.without("/usr/local/cuda/lib64") == "export LD_LIBRARY_PATH='/opt/app/lib:/x y'"
    assert LinuxHints(ld_library_path=("/a",)).without("/a") == "unset LD_LIBRARY_PATH"


def test_an_old_nvjitlink_wheel_is_reinstalled_at_torchs_pin(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    (finding,) = analyze(site).errors
    assert finding.hints[0].commands == (
        "python -m pip install --force-reinstall nvidia-nvjitlink-cu12==12.8.93",
    )


def test_a_pin_older_than_the_symbols_cuda_minor_is_not_offered(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291.replace("nvjitlink-cu12==12.8.93", "nvjitlink-cu12==12.6.85"))
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    (finding,) = analyze(site).errors
    assert "'nvidia-nvjitlink-cu12>=12.8'" in finding.hints[0].commands[0]


def test_several_absent_wheels_are_installed_together(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    _installed(site, "nvidia_nvjitlink_cu12", "nvidia_cusparse_cu12")
    shutil.rmtree(site / "nvidia" / "cuda_runtime")
    (finding,) = analyze(site).errors
    assert finding.hints[0].commands == (
        "python -m pip install nvidia-cuda-runtime-cu12==12.8.90 nvidia-cudnn-cu12==9.10.2.21",
    )
    assert "2 of the NVIDIA wheels torch pins are not installed" in finding.hints[0].summary


def test_one_absent_wheel_is_reinstalled_alone(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    _installed(site, "nvidia_nvjitlink_cu12", "nvidia_cusparse_cu12", "nvidia_cudnn_cu12")
    shutil.rmtree(site / "nvidia" / "cuda_runtime")
    (finding,) = analyze(site).errors
    assert finding.hints[0].commands == (
        "python -m pip install --force-reinstall nvidia-cuda-runtime-cu12==12.8.90",
    )


def test_requirements_are_cached_per_state_of_the_folder(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    found = torch_requirements(str(site / "torch"))
    assert found.pins["nvidia-cudnn-cu12"] == "9.10.2.21" and "torch" in found.installed
    cache = LinuxCache(tmp_path / "cache")
    cache.store_requirements("k", found)
    cache.save()
    again = LinuxCache(tmp_path / "cache").requirements("k")
    assert again == found


def test_unreadable_metadata_gives_unpinned_hints(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, "")
    (site / "torch-2.9.1.dist-info" / "METADATA").write_bytes(b"\xff\xfe broken")
    assert torch_requirements(str(site / "torch")).pins == {}
    assert torch_requirements(str(tmp_path / "nowhere" / "torch")) == TorchRequirements()


def test_x86_64_only_pins_do_not_apply_on_aarch64() -> None:
    """torch 2.9.1 pins triton and the NVIDIA wheels for x86-64 only: on aarch64 a hint must
    not cite them (issue 24)."""
    pins, _ = parse_pins(TORCH_291, "aarch64")
    assert "triton" not in pins and "nvidia-cudnn-cu12" not in pins
    assert "pywin32" not in pins
    x86, _ = parse_pins(TORCH_291, "x86_64")
    assert x86["triton"] == "3.5.1"
    unmarked, _ = parse_pins(TORCH_2141, "aarch64")  # no machine clause: every machine
    assert unmarked["nvidia-cudnn-cu13"] == "9.24.0.43"
    other = 'Requires-Dist: foo==1.0; platform_system == "Linux" and platform_machine != "aarch64"'
    assert parse_pins(other, "aarch64")[0] == {}
    assert parse_pins(other, "x86_64")[0] == {"foo": "1.0"}


def test_the_pins_read_follow_the_machine_judged(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    _metadata(site, TORCH_291)
    assert "triton" not in torch_requirements(str(site / "torch"), "aarch64").pins
    assert torch_requirements(str(site / "torch"), "x86_64").pins["triton"] == "3.5.1"
    cache = LinuxCache(str(tmp_path / "cache"))
    from torchguard._platforms.linux.cached import requirements

    arm = requirements(str(site / "torch"), cache, machine="aarch64")
    intel = requirements(str(site / "torch"), cache, machine="x86_64")
    assert arm is not None and intel is not None
    assert "triton" not in arm.pins and intel.pins["triton"] == "3.5.1"
