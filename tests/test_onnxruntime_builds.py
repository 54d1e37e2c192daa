"""What onnxruntime-gpu releases were built with (the wheels' own text) and the cuDNN version a
Windows folder holds (``cudnn64_9.dll``'s version resource)."""

from __future__ import annotations

import pytest
from pe_builder import build_pe

from torchguard._facts.onnxruntime_builds import Build, built_with, parse_build_info
from torchguard._platforms.windows.cudnn import cudnn_version
from torchguard._platforms.windows.tree import MemoryFile, WinTree

# the two members as the 1.22.0 Windows wheel has them (CRLF line ends)
PACKAGE_INFO = (
    "package_name = 'onnxruntime-gpu'\r\n__version__ = '1.22.0'\r\ncuda_version = '12.2'\r\n"
)
VERSION_INFO = (
    'use_cuda = True\r\ncuda_version = "12.2.128"\r\ncudnn_version = "9"\r\nvs2019 = False\r\n'
)
LIB = "C:\\site\\torch\\lib"


def test_the_longer_cuda_version_and_the_cudnn_major_are_read() -> None:
    assert parse_build_info(PACKAGE_INFO, VERSION_INFO) == Build((12, 2, 128), (9,))
    assert parse_build_info(VERSION_INFO, PACKAGE_INFO) == Build((12, 2, 128), (9,))


def test_a_linux_wheel_gives_the_cuda_version_only() -> None:
    text = "package_name = 'onnxruntime-gpu'\n__version__ = '1.25.0'\ncuda_version = '12.8'\n"
    assert parse_build_info(text) == Build((12, 8), None)


def test_text_that_assigns_no_version_gives_nothing() -> None:
    assert parse_build_info("cuda_version = get()\nuse_cuda = True\n", "") == Build(None, None)


@pytest.mark.parametrize(
    ("version", "cuda", "cudnn"),
    [
        ("1.19.0", (12, 2), (9,)),
        ("1.23.2", (12, 2), (9,)),
        ("1.24.1", (12, 8), (9,)),
        ("1.26.0", (12, 8), (9,)),
        ("1.27.0", (13, 0), (9,)),
        ("1.31.1", (13, 0), None),
    ],
)
def test_releases_map_to_what_their_wheels_say(
    version: str, cuda: tuple[int, ...], cudnn: tuple[int, ...] | None
) -> None:
    assert built_with(version) == Build(cuda, cudnn)


@pytest.mark.parametrize("version", ["1.18.1", "1.28.0", "1.32.0", "nightly", "1"])
def test_releases_not_read_are_unknown(version: str) -> None:
    assert built_with(version) is None


def _tree(name: str, data: bytes) -> WinTree:
    tree = WinTree()
    tree.add_file(f"{LIB}\\{name}", MemoryFile(data, name))
    return tree


def test_the_cudnn_version_is_the_dlls_file_version() -> None:
    tree = _tree("cudnn64_9.dll", build_pe(["KERNEL32.dll"], file_version=(9, 1, 0, 70)))
    assert cudnn_version(tree, LIB) == (9, 1, 0, 70)


def test_a_resource_that_names_another_major_is_not_trusted() -> None:
    tree = _tree("cudnn64_9.dll", build_pe(["KERNEL32.dll"], file_version=(8, 9, 7, 29)))
    assert cudnn_version(tree, LIB) is None


def test_no_resource_no_dll_or_no_image_gives_no_version() -> None:
    assert cudnn_version(_tree("cudnn64_9.dll", build_pe(["KERNEL32.dll"])), LIB) is None
    assert cudnn_version(_tree("cudnn64_8.dll", build_pe(["KERNEL32.dll"])), LIB) is None
    assert cudnn_version(_tree("cudnn64_9.dll", b"MZ not an image"), LIB) is None


def test_the_major_asked_for_picks_the_dll() -> None:
    tree = _tree("CUDNN64_8.DLL", build_pe(["KERNEL32.dll"], file_version=(8, 9, 7, 29)))
    assert cudnn_version(tree, LIB, 8) == (8, 9, 7, 29)
    assert cudnn_version(tree, LIB) is None
