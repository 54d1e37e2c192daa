"""Pure readers of the Linux machine: /proc/self/maps, the NVIDIA driver version, WSL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from torchguard._platforms.linux.maps import MappedFile, parse_maps, read_maps
from torchguard._platforms.linux.nvidia import parse_driver_version, read_driver_version
from torchguard._platforms.linux.wsl import LIB_DIR, detect_wsl, read_wsl

MAPS = """\
55d0c1a00000-55d0c1a2a000 r--p 00000000 fe:00 26723                      /opt/conda/bin/python3.11
55d0c1a2a000-55d0c1c00000 r-xp 0002a000 fe:00 26723                      /opt/conda/bin/python3.11
55d0c3000000-55d0c3100000 rw-p 00000000 00:00 0                          [heap]
7f10a0000000-7f10a0021000 rw-p 00000000 00:00 0
7f10a2000000-7f10a2200000 r--p 00000000 fe:00 1001                       /opt/conda/lib/libstdc++.so.6.0.32
7f10a2200000-7f10a2300000 r-xp 00200000 fe:00 1001                       /opt/conda/lib/libstdc++.so.6.0.32
7f10a3000000-7f10a3001000 r--p 00000000 fe:00 2002                       /home/me/my env/lib/libgomp.so.1
7f10a4000000-7f10a4001000 r-xp 00000000 00:05 3003                       /tmp/libold.so (deleted)
7f10a5000000-7f10a5100000 r--p 00000000 fe:00 4004                       /usr/lib/locale/locale-archive
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0                          [stack]
7ffd1c1f0000-7ffd1c1f2000 r-xp 00000000 00:00 0                          [vdso]
garbage line
"""


def test_maps_lists_each_file_once_in_address_order() -> None:
    found = parse_maps(MAPS)
    assert [m.path for m in found] == [
        "/opt/conda/bin/python3.11",
        "/opt/conda/lib/libstdc++.so.6.0.32",
        "/home/me/my env/lib/libgomp.so.1",
        "/tmp/libold.so",
        "/usr/lib/locale/locale-archive",
    ]
    by_path = {m.path: m for m in found}
    assert by_path["/opt/conda/lib/libstdc++.so.6.0.32"] == MappedFile(
        "/opt/conda/lib/libstdc++.so.6.0.32", "fe:00", 1001, False, True
    )
    assert by_path["/tmp/libold.so"].deleted
    assert not by_path["/usr/lib/locale/locale-archive"].executable
    assert not by_path["/home/me/my env/lib/libgomp.so.1"].executable


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no procfs here")
def test_this_process_maps_its_interpreter() -> None:
    found = read_maps()
    assert os.path.realpath(sys.executable) in {m.path for m in found}
    assert any(m.executable for m in found)


def test_unreadable_maps_are_empty(tmp_path: Path) -> None:
    assert read_maps(str(tmp_path / "nope")) == ()


@pytest.mark.parametrize(
    ("text", "version", "open_module", "driver"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
            "535.104.05",
            False,
            (535, 104),
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n",
            "550.54.14",
            True,
            (550, 54),
        ),
        (
            "NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15  Wed Jan 22 2025\n",
            "570.86.15",
            False,
            (570, 86),
        ),
        (
            "NVRM version: NVIDIA UNIX x86 Kernel Module  304.137  Tue Nov 14 2017\n",
            "304.137",
            False,
            (304, 137),
        ),
    ],
)
def test_driver_versions(
    text: str, version: str, open_module: bool, driver: tuple[int, int]
) -> None:
    found = parse_driver_version(text)
    assert found is not None
    assert (found.version, found.open_module, found.driver) == (version, open_module, driver)


def test_no_driver(tmp_path: Path) -> None:
    assert parse_driver_version("") is None
    assert parse_driver_version("NVRM version: something else") is None
    assert read_driver_version(str(tmp_path / "version")) is None
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  x\n"
    )
    assert read_driver_version(str(tmp_path / "version")).numbers == (580, 65, 6)  # type: ignore[union-attr]


WSL2 = (
    "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) 11.2.0) #1 SMP"
)
WSL1 = "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0 (GCC) ) #1237-Microsoft"
PLAIN = "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) (x86_64-linux-gnu-gcc-13) #45-Ubuntu SMP"


def test_wsl_detection() -> None:
    wsl = detect_wsl(WSL2, ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libd3d12.so"])
    assert wsl is not None and wsl.version == 2 and wsl.lib_dir == LIB_DIR and wsl.has_cuda_driver
    assert detect_wsl(WSL2, None) == detect_wsl(WSL2, None)
    without = detect_wsl(WSL2, None)
    assert without is not None and without.version == 2 and without.lib_dir is None
    assert not without.has_cuda_driver
    old = detect_wsl(WSL1, None)
    assert old is not None and old.version == 1
    custom_kernel = detect_wsl("Linux version 6.6.36-custom", ["libdxcore.so"])
    assert (
        custom_kernel is not None
        and custom_kernel.version == 2
        and not custom_kernel.has_cuda_driver
    )
    assert detect_wsl(PLAIN, None) is None
    assert detect_wsl(None, None) is None


def test_wsl_from_a_sysroot(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text(WSL2)
    lib = tmp_path / "usr" / "lib" / "wsl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1").write_bytes(b"")
    wsl = read_wsl(str(tmp_path))
    assert wsl is not None and wsl.version == 2 and wsl.has_cuda_driver
    assert wsl.lib_dir == str(lib)
    assert read_wsl(str(tmp_path / "empty")) is None


def test_environ_takes_the_first_entry_of_a_name() -> None:
    from torchguard._platforms.linux.process import parse_environ

    raw = (
        b"LD_LIBRARY_PATH=/usr/local/cuda/lib64:/opt\0HOME=/root\0LD_LIBRARY_PATH=/late\0junk\0=x\0"
    )
    assert parse_environ(raw) == {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/opt", "HOME": "/root"}
    assert parse_environ(b"") == {}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no procfs here")
def test_this_process_environ_and_auxv() -> None:
    from torchguard._platforms.linux.process import read_environ, read_secure

    environ = read_environ()
    assert environ is not None and environ.get("PATH") == os.environ.get("PATH")
    assert read_secure() is False


def test_auxv_secure_bit(tmp_path: Path) -> None:
    import struct

    from torchguard._platforms.linux.process import AT_SECURE, parse_auxv, read_secure

    raw = struct.pack("<6Q", 6, 4096, AT_SECURE, 1, 0, 0)
    assert parse_auxv(raw, wide=True, little=True)[AT_SECURE] == 1
    assert parse_auxv(struct.pack(">4I", AT_SECURE, 0, 0, 0), wide=False, little=False) == {
        AT_SECURE: 0
    }
    assert parse_auxv(b"\x01\x02") == {}
    (tmp_path / "auxv").write_bytes(struct.pack("=4Q", AT_SECURE, 1, 0, 0))
    assert read_secure(str(tmp_path / "auxv")) is True
    assert read_secure(str(tmp_path / "none")) is None


def test_live_linux_starts_from_mapped_code_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A locale file or gconv cache is mapped as data: read as ELF on every warm run it fails
    again each time, and it is no loaded object ld.so could reuse."""
    from torchguard._platforms.linux import system

    files = parse_maps(MAPS)
    monkeypatch.setattr(system, "read_maps", lambda: files)
    mapped = system.live_linux(None).mapped
    assert "/opt/conda/lib/libstdc++.so.6.0.32" in mapped
    assert "/usr/lib/locale/locale-archive" not in mapped
    assert "/home/me/my env/lib/libgomp.so.1" not in mapped  # its code not mapped (yet)
    assert "/tmp/libold.so" not in mapped
