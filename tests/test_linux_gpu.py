"""The NVIDIA driver and GPU on Linux: the driver from ``/proc/driver/nvidia/version`` against
NVIDIA's Linux minimums, ``libcuda.so.1`` as ld.so finds it (WSL2's ``/usr/lib/wsl/lib``), an
NVIDIA GPU on the PCI bus without a driver, and ``libtorch_cuda.so``'s fatbin against the GPU.
Fake system roots and built ELF files; nothing is loaded."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from elf_builder import build_elf
from linux_elf import write_so
from pe_builder import build_pe
from test_fatbin import container, entry
from test_linux_import import torch_site

import torchguard
from torchguard._facts.cuda_builds import (
    LINUX_FAMILY_FLOOR,
    format_linux_driver,
    linux_minimum_driver,
)
from torchguard._frontends.pipeline import analyze_linux
from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.nvidia import nvidia_on_pci
from torchguard._platforms.linux.system import LinuxSystem, offline_linux
from torchguard._platforms.linux.wsl import driver_store_dlls

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


STORE = "usr/lib/wsl/drivers"


def host_driver(root: Path, folder: str, version: tuple[int, int, int, int] | None) -> Path:
    """The host's NVIDIA driver-store folder as WSL2 mounts it: ``libcuda.so.1.1`` and the
    Windows driver's nvcuda64.dll with FileVersion ``version``."""
    store = root / STORE / folder
    write_so(store, "libcuda.so.1.1", soname="libcuda.so.1", defines=DRIVER_API)
    dll = store / "nvcuda64.dll"
    dll.write_bytes(build_pe(file_version=version))
    return dll


def test_wsl_host_driver_is_read_from_the_driver_store_and_judged_by_windows(
    tmp_path: Path,
) -> None:
    root = wsl_root(tmp_path)
    dll = host_driver(root, "nv_dispi.inf_amd64_31dab972145ae5a9", (31, 0, 15, 5161))
    wsl_lib = str(root / "usr/lib/wsl/lib")
    system = system_on(tmp_path, root, ld_library_path=(wsl_lib,))
    assert system.host_driver_store == str(root / STORE)
    assert driver_store_dlls(str(root / STORE)) == ((str(dll),),)
    (finding,) = analyze_linux(system).findings
    assert finding.code == "cuda-driver-too-old" and finding.severity == "warning"
    # 31.0.15.5161 is NVIDIA 551.61; CUDA 12.8's Windows minimum is 570.65 (Linux: 570.26)
    assert "551.61" in finding.message and "570.65, the Windows minimum" in finding.message
    assert str(dll) in finding.message
    assert "minor-version compatibility" in finding.message  # 551.61 >= 12.x's 527.41
    assert "on Windows" in finding.hints[0].summary
    assert "never install a Linux NVIDIA driver inside WSL" in finding.hints[0].summary
    dll.write_bytes(build_pe(file_version=(32, 0, 15, 7283)))  # 572.83: new enough
    assert codes(system_on(tmp_path, root, ld_library_path=(wsl_lib,))) == []


def test_wsl_host_driver_below_the_family_floor_leaves_cuda_unavailable(tmp_path: Path) -> None:
    root = wsl_root(tmp_path)
    host_driver(root, "nv_dispi.inf_amd64_1", (27, 21, 14, 5541))  # 455.41, CUDA 11.1's
    wsl_lib = str(root / "usr/lib/wsl/lib")
    (finding,) = analyze_linux(system_on(tmp_path, root, ld_library_path=(wsl_lib,))).findings
    assert finding.code == "cuda-driver-too-old" and "455.41" in finding.message
    assert "CUDA is unavailable" in finding.message


def test_wsl_host_driver_of_several_folders_the_newest_counts(tmp_path: Path) -> None:
    """Windows may keep an old driver's folder after an upgrade: trust the newest."""
    root = wsl_root(tmp_path)
    host_driver(root, "nv_dispi.inf_amd64_aaa", (31, 0, 15, 5161))  # 551.61, left behind
    host_driver(root, "nv_dispi.inf_amd64_bbb", (32, 0, 15, 7283))  # 572.83
    (root / STORE / "iigd_dch.inf_amd64_ccc").mkdir()  # Intel's: no libcuda.so.1.1
    (root / STORE / "iigd_dch.inf_amd64_ccc" / "nvcuda64.dll").write_bytes(b"MZ")
    wsl_lib = str(root / "usr/lib/wsl/lib")
    system = system_on(tmp_path, root, ld_library_path=(wsl_lib,))
    assert system.host_driver_store is not None
    assert len(driver_store_dlls(system.host_driver_store)) == 2
    assert codes(system) == []


def test_wsl_host_driver_unreadable_or_unversioned_is_not_judged(tmp_path: Path) -> None:
    root = wsl_root(tmp_path)
    dll = host_driver(root, "nv_dispi.inf_amd64_1", None)  # no version resource
    wsl_lib = str(root / "usr/lib/wsl/lib")
    assert codes(system_on(tmp_path, root, ld_library_path=(wsl_lib,))) == []
    dll.write_bytes(b"MZ not a PE image")
    assert codes(system_on(tmp_path, root, ld_library_path=(wsl_lib,))) == []


def test_wsl_host_driver_is_read_once_per_file_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._binary.pe import image
    from torchguard._platforms.linux import cached as pipeline

    root = wsl_root(tmp_path)
    host_driver(root, "nv_dispi.inf_amd64_1", (31, 0, 15, 5161))
    wsl_lib = str(root / "usr/lib/wsl/lib")
    system = system_on(tmp_path, root, ld_library_path=(wsl_lib,))
    assert system.host_driver_store is not None
    # the store's state is remembered only once it is RACY seconds old (an installer may
    # still be writing it): a store changed just now is listed again by the next run
    cache = LinuxCache(tmp_path / "cache")
    assert codes(system, cache) == ["cuda-driver-too-old"]
    listed: list[str] = []
    real_listing = pipeline.driver_store_dlls
    monkeypatch.setattr(
        pipeline, "driver_store_dlls", lambda s: listed.append(s) or real_listing(s)
    )
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["cuda-driver-too-old"]
    assert listed == [system.host_driver_store]
    long_ago = time.time() - 3600
    os.utime(system.host_driver_store, (long_ago, long_ago))
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["cuda-driver-too-old"]

    def no_read(source: object) -> object:
        raise AssertionError("DLL read on a warm run")

    monkeypatch.setattr(image, "read_pe", no_read)
    monkeypatch.setattr(pipeline, "driver_store_dlls", no_read)  # nor the store listed again
    assert codes(system, LinuxCache(tmp_path / "cache")) == ["cuda-driver-too-old"]


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


def test_linux_hints_pin_torchvision_and_name_the_newest_build(tmp_path: Path) -> None:
    """A GTX 1080 under torch 2.9.1+cu128 (Volta and newer): 2.9.1's cu126 build with the
    installed torchvision kept, and the newest build for sm_61 (what `check --gpu` answers)
    with the torchvision made for it."""
    from test_linux_import import _dist

    site = torch_site(tmp_path)
    with_kernels(site, *(entry(2, arch, b"k" * 16) for arch in (70, 75, 80, 86, 90, 100, 120)))
    _dist(site, "torchvision", "0.24.1", "2.9.1")
    root = root_with_driver(tmp_path, "580.82.07")
    (finding,) = analyze_linux(
        system_on(tmp_path, root, gpus=("NVIDIA GeForce GTX 1080",))
    ).findings
    assert finding.code == "gpu-arch-unsupported"
    assert (
        finding.hints[0]
        .commands[0]
        .endswith(
            "torch==2.9.1 torchvision==0.24.1 --index-url https://download.pytorch.org/whl/cu126"
        )
    )
    assert "or the newest torch for sm_61" in finding.hints[1].summary
    assert (
        finding.hints[1]
        .commands[0]
        .endswith(
            "torch==2.14.1 torchvision==0.29.2 --index-url https://download.pytorch.org/whl/cu126"
        )
    )
    # doctor's hint and check's answer are one choice, word for word in the command
    from torchguard._frontends.gpu_answer import answer

    said = answer(["NVIDIA GeForce GTX 1080"], None, None, ["torch", "torchvision"], linux=True)
    assert said is not None and said.command == finding.hints[1].commands[0]


def test_a_warm_run_reads_no_fatbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = torch_site(tmp_path)
    with_kernels(site, *SM_80_86_90)
    system = system_on(tmp_path, root_with_driver(tmp_path, "575.57.08"))
    system = replace(system, gpus=("NVIDIA GeForce RTX 5090",))
    cache = LinuxCache(tmp_path / "cache")
    assert codes(system, cache) == ["gpu-arch-unsupported"]

    def no_read(path: object) -> None:
        raise AssertionError(f"read {path} on a warm run")

    monkeypatch.setattr("torchguard._platforms.linux.cached.read_fatbin_archs", no_read)
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
    # 2.9's other variant that compiles sm_120 is CUDA 13.0, which a 12.4 driver does not start;
    # 2.10's cu128 build (another build than the one installed) starts on it (CUDA 12.x's
    # minor-version compatibility) and carries sm_120
    assert arch.hints[0].commands == (
        "python -m pip install --force-reinstall torch==2.10.0 --index-url "
        "https://download.pytorch.org/whl/cu128",
    )
    assert "its full feature set needs NVIDIA driver 570.26 or newer" in arch.hints[0].summary
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

    monkeypatch.setattr("torchguard._platforms.linux.cached.nvidia_on_pci", no_read)
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


def driver_library(folder: Path, version: str) -> Path:
    """``libcuda.so.<version>`` and the ``libcuda.so.1`` link to it, as the driver (or a
    ``cuda-compat`` package) installs them."""
    write_so(folder, f"libcuda.so.{version}", soname="libcuda.so.1", defines=DRIVER_API)
    link = folder / "libcuda.so.1"
    link.symlink_to(f"libcuda.so.{version}")
    return link


def mismatch(system: LinuxSystem) -> list[object]:
    return [f for f in analyze_linux(system).findings if f.code == "cuda-driver-mismatch"]


def test_a_driver_upgraded_without_a_reboot_is_a_libcuda_module_mismatch(
    tmp_path: Path,
) -> None:
    root = root_with_driver(tmp_path, "570.124.06", libcuda=False)
    driver_library(root / TRIPLET, "570.124.06")
    assert codes(system_on(tmp_path, root)) == []  # user space and kernel module agree
    (root / TRIPLET / "libcuda.so.1").unlink()
    driver_library(root / TRIPLET, "575.57.08")  # the upgrade; the old module still runs
    (finding,) = analyze_linux(system_on(tmp_path, root)).findings
    assert finding.code == "cuda-driver-mismatch" and finding.severity == "warning"
    assert "(found through the default folders), driver 575.57.08" in finding.message
    assert "but the NVIDIA kernel module is 570.124.06" in finding.message
    assert "CUDA error 803" in finding.message and "torch imports" in finding.message
    assert "Driver/library version mismatch" in finding.message
    assert finding.hints[0].summary.startswith("Reboot")


def test_an_older_cuda_compat_libcuda_on_ld_library_path_gives_error_803(
    tmp_path: Path,
) -> None:
    root = root_with_driver(tmp_path, "580.65.06", libcuda=False)
    driver_library(root / TRIPLET, "580.65.06")
    compat = tmp_path / "usr" / "local" / "cuda-12.8" / "compat"
    driver_library(compat, "570.124.06")
    system = system_on(tmp_path, root, ld_library_path=(str(compat),))
    (finding,) = mismatch(system)
    assert "found through LD_LIBRARY_PATH" in finding.message  # type: ignore[attr-defined]
    assert "forward-compatibility libcuda older" in finding.message  # type: ignore[attr-defined]
    assert "CUDA error 803" in finding.message  # type: ignore[attr-defined]
    (hint,) = finding.hints  # type: ignore[attr-defined]
    assert f"Drop {compat} from LD_LIBRARY_PATH" in hint.summary
    assert codes(system_on(tmp_path, root)) == []  # without it, the driver's own loads


def test_a_newer_cuda_compat_libcuda_is_judged_only_on_a_consumer_gpu(tmp_path: Path) -> None:
    root = root_with_driver(tmp_path, "570.124.06", libcuda=False)
    driver_library(root / TRIPLET, "570.124.06")
    compat = tmp_path / "usr" / "local" / "cuda-12.9" / "compat"
    driver_library(compat, "575.57.08")
    search = (str(compat),)
    # forward compatibility as NVIDIA intends it (a data-centre GPU, or none named): no finding
    assert mismatch(system_on(tmp_path, root, ld_library_path=search)) == []
    named = system_on(tmp_path, root, ld_library_path=search, gpus=("NVIDIA H100 80GB HBM3",))
    assert mismatch(named) == []
    consumer = system_on(tmp_path, root, ld_library_path=search, gpus=("NVIDIA GeForce RTX 3090",))
    (finding,) = mismatch(consumer)
    assert "CUDA error 804" in finding.message  # type: ignore[attr-defined]
    assert "GeForce RTX 3090" in finding.message  # type: ignore[attr-defined]


def test_a_compat_folder_in_the_ld_so_cache_is_taken_out_of_the_configuration(
    tmp_path: Path,
) -> None:
    from ldcache_builder import X86_64, build_cache

    root = root_with_driver(tmp_path, "580.65.06", libcuda=False)
    driver_library(root / TRIPLET, "580.65.06")
    compat = root / "usr" / "local" / "cuda-13.0" / "compat"
    driver_library(compat, "575.57.08")
    (root / "etc").mkdir()
    (root / "etc" / "ld.so.cache").write_bytes(
        build_cache([("libcuda.so.1", "/usr/local/cuda-13.0/compat/libcuda.so.1", X86_64, None)])
    )
    (finding,) = mismatch(system_on(tmp_path, root))
    assert "found through ld.so.cache" in finding.message  # type: ignore[attr-defined]
    assert finding.hints[0].commands[-1] == "sudo ldconfig"  # type: ignore[attr-defined]
