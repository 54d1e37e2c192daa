"""The ``preload_dlls()`` table (:mod:`torchguard._facts.onnxruntime_preload`) against the real
onnxruntime-gpu wheels: each release's own ``onnxruntime/__init__.py`` (read over range
requests, ~100 kB a release, cached) has its ``_get_nvidia_dll_paths`` and helpers compiled
from the real source and run for Windows with the build's CUDA version, and its torch test read
from the source; both must say what the table says."""

from __future__ import annotations

import ast
import platform
from typing import Any
from unittest import mock

import pytest
from range_members import wheel_members

from torchguard._facts.onnxruntime_preload import (
    agrees_with_source,
    picks_torch_lib,
    preload_list,
)

pytestmark = pytest.mark.realwheel

INIT = "onnxruntime/__init__.py"
_HELPERS = ("_get_nvidia_dll_paths", "_extract_cuda_major_version", "_get_cufft_version")


def _real_list(source: str, cuda_version: str) -> list[tuple[str, ...]]:
    """The release's own ``_get_nvidia_dll_paths(is_windows=True)`` for an x64 machine, run
    from its source with ``cuda_version`` set as its ``capi`` module would set it."""
    tree = ast.parse(source)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _HELPERS]
    namespace: dict[str, Any] = {"cuda_version": cuda_version}
    exec(compile(ast.Module(functions, []), INIT, "exec"), namespace)
    with mock.patch.object(platform, "machine", return_value="AMD64"):
        return list(namespace["_get_nvidia_dll_paths"](True))


@pytest.mark.parametrize(
    ("release", "cuda"),
    [
        ("1.21.0", "12.2"),
        ("1.22.0", "12.2"),
        ("1.24.1", "12.8"),
        ("1.27.0", "13.0"),
        ("1.28.0", "13.0"),
        ("1.28.0", "12.8"),
    ],
)
def test_the_list_is_the_releases_own(release: str, cuda: str) -> None:
    source = wheel_members("onnxruntime-gpu", release, (INIT,))[INIT].decode()
    real = _real_list(source, cuda)
    table = preload_list(release, int(cuda.split(".")[0]))
    assert [(*folder, name) for folder, name in table] == real
    # what torchguard checks of the installed file: its cuDNN literals are the table's
    assert agrees_with_source(release, int(cuda.split(".")[0]), source)


@pytest.mark.parametrize("release", ["1.21.0", "1.23.2", "1.26.0"])
def test_the_torch_folder_rule_is_the_releases_own(release: str) -> None:
    """The release's test of torch's version, as its source writes it: 1.21-1.23 look for
    ``"+cu12"`` in it, 1.24+ compare the two digits after ``+cu`` with the build's major."""
    source = wheel_members("onnxruntime-gpu", release, (INIT,))[INIT].decode()
    old = '"+cu12" in torch_version' in source
    new = "int(cu_part[:2])" in source and "torch_cuda_major == ort_cuda_major" in source
    assert old != new, "the release tests torch's version another way: read it again"
    assert picks_torch_lib(release, 12, "2.5.1+cu124")
    assert not picks_torch_lib(release, 12, "2.5.1+cpu")
    assert not picks_torch_lib(release, 12, "2.5.1")
    # a CUDA 13 torch: 1.21-1.23 only ask for "+cu12", 1.24+ compare majors (both say no)
    assert not picks_torch_lib(release, 12, "2.9.0+cu130")
    assert picks_torch_lib(release, 13, "2.9.0+cu130") == new


def test_no_preload_before_1_21() -> None:
    source = wheel_members("onnxruntime-gpu", "1.20.2", (INIT,))[INIT].decode()
    assert "def preload_dlls" not in source
    assert preload_list("1.20.2", 12) == ()
