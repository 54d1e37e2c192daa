"""cudnn-zlib-missing on built layouts: which cuDNN counts, where zlibwapi.dll may be."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeTorch, system32
from pe_builder import build_pe

import torchguard

#: A stand-in for cuDNN 8's dispatcher: a PE that names zlibwapi.dll in its data, as the real
#: cudnn64_8.dll (8.9.4) does for its run-time LoadLibrary.
DISPATCHER = build_pe(["KERNEL32.dll"]) + b"\0zlibwapi.dll\0"


def scan(
    tmp_path: Path, extra: dict[str, bytes], s32: tuple[str, ...] = ("msvcp140.dll",)
) -> list[str]:
    site = FakeTorch(version="2.0.1+cu118", cuda="11.8", extra=extra).write(tmp_path / "site")
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32", s32)])
    return [f.code for f in report.findings if f.code == "cudnn-zlib-missing"]


def test_dispatcher_naming_zlib_without_zlib(tmp_path: Path) -> None:
    assert scan(tmp_path, {"torch/lib/cudnn64_8.dll": DISPATCHER}) == ["cudnn-zlib-missing"]


def test_zlib_in_torch_lib_or_system32(tmp_path: Path) -> None:
    zlib = build_pe(["KERNEL32.dll"])
    bundled = {"torch/lib/cudnn64_8.dll": DISPATCHER, "torch/lib/zlibwapi.dll": zlib}
    assert scan(tmp_path / "a", bundled) == []
    system = scan(tmp_path / "b", {"torch/lib/cudnn64_8.dll": DISPATCHER}, ("zlibwapi.dll",))
    assert system == []


def test_cudnn_that_links_zlib_statically_is_not_judged(tmp_path: Path) -> None:
    modern = {"torch/lib/cudnn64_9.dll": build_pe(["KERNEL32.dll"])}  # 9.2+: no zlibwapi name
    assert scan(tmp_path, modern) == []
