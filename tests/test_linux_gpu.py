"""The NVIDIA driver and GPU on Linux: the driver from ``/proc/driver/nvidia/version`` against
NVIDIA's Linux minimums, ``libcuda.so.1`` as ld.so finds it (WSL2's ``/usr/lib/wsl/lib``), an
NVIDIA GPU on the PCI bus without a driver, and ``libtorch_cuda.so``'s fatbin against the GPU.
Fake system roots and built ELF files; nothing is loaded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from elf_builder import build_elf
from linux_elf import write_so
from test_fatbin import container, entry
from test_linux_import import torch_site

import torchguard
from torchguard._linux.nvidia import nvidia_on_pci
from torchguard._linux.system import LinuxSystem, offline_linux
from torchguard._model.linux_cache import LinuxCache
from torchguard._pipeline_linux import analyze_linux
from torchguard._rules.cuda_builds import (
    LINUX_FAMILY_FLOOR,
    format_linux_driver,
    linux_minimum_driver,
)

NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Sat Aug 19 01:15:15 UTC 2023\n"
WSL_KERNEL = "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@65c757a075e2) #1 SMP\n"
TRIPLET = "usr/lib/x86_64-linux-gnu"


#: What a driver's libcuda.so.1 offers cudart: its entry points come through cuGetProcAddress.
DRIVER_API = ["cuInit", "cuGetProcAddress_v2"]

def root_with_driver(tmp: Path, version: str | None, *, libcuda: bool = True) -> Path:
    """A system root whose kernel runs NVIDIA driver ``version`` (None: no driver), with the
    driver's ``libcuda.so.1`` in the default folder when ``libcuda``."""
    root = tmp / "root"
    (root / TRIPLET).mkdir(parents=True, exist_ok=True)
    if version is not None:
        proc = root / "proc" / "driver" / "nvidia"
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "version").write_text(NVRM.format(version))
    if libcuda:
        write_so(root / TRIPLET, "libcuda.so.1", defines=DRIVER_API)
    return root


def system_on(tmp: Path, root: Path, **kwargs: object) -> LinuxSystem:
    site = tmp / "site" if (tmp / "site").is_dir() else torch_site(tmp)
    return offline_linux([str(site)], sysroot=str(root), **kwargs)  # type: ignore[arg-type]


def codes(system: LinuxSystem, cache: LinuxCache | None = None) -> list[str]:
    return [f.code for f in analyze_linux(system, cache=cache).findings]


def test_the_linux_table_is_nvidias_linux_column() -> None:
    assert linux_minimum_driver((12, 8)) == (570, 26)
    assert linux_minimum_driver((13, 0)) == (580, 65, 6)
    assert linux_minimum_driver((12, 7)) == (560, 28, 3)  # no 12.7 toolkit: 12.6's
    assert linux_minimum_driver((14, 0)) is None
    assert format_linux_driver((535, 104, 5)) == "535.104.05"
    assert format_linux_driver(LINUX_FAMILY_FLOOR[11]) == "450.80.02"


def test_a_driver_below_the_cuda_family_is_too_old_and_cuda_is_unavailable(
    tmp_path: Path,
) -> None:
    system = system_on(tmp_path, root_with_driver(tmp_path, "470.82.01"))
    assert system.driver == "470.82.01" and system.driver_present
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-too-old" and finding.severity == "warning"
    assert "470.82.01" in finding.message and "570.26" in finding.message
    assert "CUDA is unavailable" in finding.message
    assert finding.hints[0].summary == "Install the NVIDIA driver 570.26 or newer"
    assert finding.hints[1].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 --index-url "
        "https://download.pytorch.org/whl/cpu",
    )


def test_an_older_driver_of_the_family_runs_through_minor_version_compatibility(
    tmp_path: Path,
) -> None:
    system = system_on(tmp_path, root_with_driver(tmp_path, "560.35.03"))
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-too-old"
    assert "minor-version compatibility" in finding.message
    assert "CUDA is unavailable" not in finding.message
    # 2.9.1 was published for CUDA 12.6, whose Linux minimum (560.28.03) this driver meets
    assert finding.hints[1].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 --index-url "
        "https://download.pytorch.org/whl/cu126",
    )
    assert all("whl/cpu" not in c for h in finding.hints for c in h.commands)


def test_a_new_enough_driver_and_a_cpu_build_are_not_judged(tmp_path: Path) -> None:
    system = system_on(tmp_path, root_with_driver(tmp_path, "570.172.08"))
    assert codes(system) == []
    version = tmp_path / "site" / "torch" / "version.py"
    version.write_text("__version__ = '2.9.1+cpu'\ncuda = None\n")
    (finding,) = analyze_linux(replace(system, driver="470.82.01")).findings
    assert finding.code == "cpu-build-on-gpu"  # the driver alone names the GPU machine
    assert "the NVIDIA driver 470.82.01" in finding.message


def test_a_kernel_driver_without_libcuda_is_missing_its_library(tmp_path: Path) -> None:
    system = system_on(tmp_path, root_with_driver(tmp_path, "570.172.08", libcuda=False))
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-missing"
    assert "libcuda.so.1 is found nowhere ld.so looks" in finding.message
    assert "--gpus" in finding.hints[0].summary


def test_an_nvidia_gpu_on_the_pci_bus_without_a_driver(tmp_path: Path) -> None:
    root = root_with_driver(tmp_path, None, libcuda=False)
    device = root / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x8086\n")
    (device / "class").write_text("0x030000\n")
    system = replace(system_on(tmp_path, root), pci_root=str(root))
    assert not nvidia_on_pci(str(root)) and codes(system) == []
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x040300\n")  # the GPU's HDMI audio function
    assert not nvidia_on_pci(str(root))
    (device / "class").write_text("0x030200\n")  # a 3D controller (data-centre GPUs)
    assert nvidia_on_pci(str(root))
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-missing"
    assert "no NVIDIA kernel driver is loaded" in finding.message
    assert finding.hints[0].summary == "Install the NVIDIA driver 570.26 or newer"
    assert codes(replace(system, pci_root=None)) == []  # offline: sysfs is not read


def wsl_root(tmp: Path) -> Path:
    root = root_with_driver(tmp, None, libcuda=False)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "version").write_text(WSL_KERNEL)
    write_so(root / "usr" / "lib" / "wsl" / "lib", "libcuda.so.1", defines=DRIVER_API)
    return root


def test_wsl_libcuda_that_ld_so_cannot_find_is_a_warning(tmp_path: Path) -> None:
    root = wsl_root(tmp_path)
    system = system_on(tmp_path, root)
    assert system.wsl and system.driver is None and system.driver_present
    assert system.wsl_libcuda == str(root / "usr/lib/wsl/lib/libcuda.so.1")
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-missing" and finding.severity == "warning"
    assert "ld.so does not search /usr/lib/wsl/lib" in finding.message
    assert finding.hints[0].commands[-1] == "sudo ldconfig"
    assert "never install a Linux NVIDIA driver inside WSL" in finding.hints[0].summary
    # on LD_LIBRARY_PATH (or in the cache) it is found: no driver version to judge, no finding
    found = system_on(tmp_path, root, ld_library_path=(str(root / "usr/lib/wsl/lib"),))
    assert codes(found) == []


def test_wsl_without_the_hosts_cuda_library_is_not_judged(tmp_path: Path) -> None:
    root = wsl_root(tmp_path)
    (root / "usr" / "lib" / "wsl" / "lib" / "libcuda.so.1").unlink()
    (root / "usr" / "lib" / "wsl" / "lib" / "libd3d12.so").write_bytes(b"")
    system = system_on(tmp_path, root)
    assert system.wsl and not system.driver_present
    assert codes(system) == []  # an AMD or Intel GPU on the host: no NVIDIA driver wanted


def test_a_cpu_build_under_wsl_names_the_hosts_driver(tmp_path: Path) -> None:
    root = wsl_root(tmp_path)
    torch_site(tmp_path)
    version = tmp_path / "site" / "torch" / "version.py"
    version.write_text("__version__ = '2.9.1+cpu'\ncuda = None\n")
    (finding,) = analyze_linux(system_on(tmp_path, root)).findings
    assert finding.code == "cpu-build-on-gpu"
    assert "the Windows host's NVIDIA driver" in finding.message


def with_kernels(site: Path, *entries: bytes) -> Path:
    """libtorch_cuda.so rebuilt with a ``.nv_fatbin`` holding ``entries``."""
    rpath = "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:$ORIGIN"
    path = site / "torch" / "lib" / "libtorch_cuda.so"
    path.write_bytes(
        build_elf(
            ["libcusparse.so.12", "libcudart.so.12"],
            soname="libtorch_cuda.so",
            rpath=rpath,
            defined=["_ZN3c104cuda6deviceEv"],
            fatbin=container(*entries),
        )
    )
    return path


SM_80_86_90 = (entry(2, 80, b"a" * 16), entry(2, 86, b"b" * 16), entry(2, 90, b"c" * 16))


def test_a_gpu_the_fatbin_has_no_kernels_for(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    with_kernels(site, *SM_80_86_90)
    root = root_with_driver(tmp_path, "580.82.07")
    assert codes(system_on(tmp_path, root, gpus=("NVIDIA GeForce RTX 4090",))) == []
    system = system_on(tmp_path, root, gpus=("NVIDIA GeForce RTX 5090",))
    (finding,) = analyze_linux(system).findings
    assert finding.code == "gpu-arch-unsupported" and finding.severity == "warning"
    assert "sm_120" in finding.message and "sm_80, sm_86, sm_90" in finding.message
    assert "carry no PTX" in finding.message
    assert finding.hints[0].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 --index-url "
        "https://download.pytorch.org/whl/cu130",
    )
    assert "needs NVIDIA driver" not in finding.hints[0].summary  # 580.82.07 runs CUDA 13.0
    with_kernels(site, *SM_80_86_90, entry(1, 90, b"ptx\0"))  # PTX the driver can JIT
    assert codes(system_on(tmp_path, root, gpus=("NVIDIA GeForce RTX 5090",))) == []


def test_a_warm_run_reads_no_fatbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = torch_site(tmp_path)
    with_kernels(site, *SM_80_86_90)
    system = system_on(tmp_path, root_with_driver(tmp_path, "575.57.08"))
    system = replace(system, gpus=("NVIDIA GeForce RTX 5090",))
    cache = LinuxCache(tmp_path / "cache")
    assert codes(system, cache) == ["gpu-arch-unsupported"]

    def no_read(path: object) -> None:
        raise AssertionError(f"read {path} on a warm run")

    monkeypatch.setattr("torchguard._pipeline_linux.read_fatbin_archs", no_read)
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["gpu-arch-unsupported"]


def test_a_damaged_kernel_library_is_not_judged(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    path = with_kernels(site, *SM_80_86_90)
    data = path.read_bytes()
    # cut the fatbin container's length so it runs past the section
    start = data.index(b"\x50\xed\x55\xba")
    path.write_bytes(data[: start + 8] + b"\xff" * 8 + data[start + 16 :])
    system = system_on(tmp_path, root_with_driver(tmp_path, "575.57.08"))
    report = analyze_linux(replace(system, gpus=("NVIDIA GeForce RTX 5090",)))
    assert "gpu-arch-unsupported" not in [f.code for f in report.findings]


def test_scan_describes_a_linux_machine_with_gpu_and_cuda(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    with_kernels(site, *SM_80_86_90)
    root = tmp_path / "empty-root"
    root.mkdir()
    report = torchguard.scan([site], sysroot=root, gpus=["NVIDIA GeForce RTX 5090"], cuda="12.4")
    assert sorted(f.code for f in report.findings) == [
        "cuda-driver-too-old",
        "gpu-arch-unsupported",
    ]
    too_old = next(f for f in report.findings if f.code == "cuda-driver-too-old")
    assert "--cuda 12.4" in too_old.message and "minor-version compatibility" in too_old.message
    arch = next(f for f in report.findings if f.code == "gpu-arch-unsupported")
    # 2.9's other variant that compiles sm_120 is CUDA 13.0, which a 12.4 driver does not start
    assert arch.hints[0].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 --index-url "
        "https://download.pytorch.org/whl/cu130",
    )
    assert "after installing NVIDIA driver 580.65.06 or newer" in arch.hints[0].summary
    assert torchguard.scan([site], sysroot=root).findings == ()


def test_the_pci_bus_is_read_once_per_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = root_with_driver(tmp_path, None, libcuda=False)
    device = root / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030000\n")
    (root / "proc" / "sys" / "kernel" / "random").mkdir(parents=True)
    (root / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("b-1\n")
    system = replace(system_on(tmp_path, root), pci_root=str(root))
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["cuda-driver-missing"]

    def no_read(root: str) -> bool:
        raise AssertionError("sysfs read on a warm run")

    monkeypatch.setattr("torchguard._pipeline_linux.nvidia_on_pci", no_read)
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["cuda-driver-missing"]
    (root / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("b-2\n")
    with pytest.raises(AssertionError, match="sysfs read"):
        codes(system, LinuxCache(tmp_path / "cache"))  # another boot: looked at again


def test_a_libcuda_already_mapped_is_the_one_cudart_reuses(tmp_path: Path) -> None:
    system = system_on(tmp_path, root_with_driver(tmp_path, "570.172.08", libcuda=False))
    odd = write_so(tmp_path / "opt" / "driver", "libcuda.so.1", defines=DRIVER_API)
    assert codes(system) == ["cuda-driver-missing"]
    assert codes(replace(system, mapped=(str(odd),))) == []


def test_libcuda_is_searched_as_cudarts_own_dlopen(tmp_path: Path) -> None:
    """cudart has no RUNPATH, so its ``dlopen("libcuda.so.1")`` searches the RPATH of the
    library that loaded it (libtorch_global_deps): a driver library there is found."""
    system = system_on(tmp_path, root_with_driver(tmp_path, "570.172.08", libcuda=False))
    assert codes(system) == ["cuda-driver-missing"]
    write_so(
        tmp_path / "site" / "nvidia" / "cuda_runtime" / "lib", "libcuda.so.1", defines=DRIVER_API
    )
    assert codes(system) == []
