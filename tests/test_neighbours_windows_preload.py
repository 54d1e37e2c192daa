"""onnxruntime's ``preload_dlls()`` on Windows, per release (issue 24): which folder it takes
(``torch\\lib`` when torch's version says a matching CUDA build, else the NVIDIA wheels), and
the other order of onnxruntime issue 24266: the NVIDIA wheels' cuDNN preloaded, then ``import
torch``, whose ``torch\\lib`` sub-libraries bind ``cudnn_graph64_9.dll`` by name to the wheel's
copy. Built images here; the same with NVIDIA's real DLLs in
tests/test_realwheel_cudnn_pairing.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, companion, system32, write_tree
from pe_builder import DEFAULT_SYMBOL, build_pe

from torchguard._binary.cache import user_cache
from torchguard._facts.onnxruntime_preload import picks_torch_lib, preload_list
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import Finding

KERNEL = ("KERNEL32.dll",)
GRAPH = "cudnn_graph64_9.dll"
BIN = "nvidia/cudnn/bin"


def cudnn_set(
    version: tuple[int, int, int, int], graph_exports: tuple[str, ...]
) -> dict[str, bytes]:
    """cuDNN's shape: ``cudnn64_9`` (kernel32 only, the version resource), the graph library and
    a sub-library that takes ``cudnnGraphA`` and ``cudnnGraphB`` from the graph library."""
    return {
        "cudnn64_9.dll": build_pe(KERNEL, file_version=version),
        GRAPH: build_pe(KERNEL, exports=(*graph_exports, DEFAULT_SYMBOL)),
        "cudnn_adv64_9.dll": build_pe(
            [GRAPH, *KERNEL], symbols={GRAPH: ["cudnnGraphA", "cudnnGraphB"]}
        ),
    }


def site_with(
    tmp_path: Path,
    wheel_graph: tuple[str, ...],
    torch_version: str = "2.5.1",
    release: str = "1.22.0",
    init: bytes = b"",
    cuda_major: int = 12,
) -> Path:
    ours = cudnn_set((9, 1, 0, 70), ("cudnnGraphA", "cudnnGraphB"))
    extra = {f"torch/lib/{name}": data for name, data in ours.items()}
    site = FakeTorch(version=torch_version, cuda="12.4", extra=extra).write(tmp_path / "site")
    theirs = cudnn_set((9, 10, 2, 21), wheel_graph)
    write_tree(site, {f"{BIN}/{name}": data for name, data in theirs.items()})
    provider = build_pe(["cudnn64_9.dll", f"cublas64_{cuda_major}.dll", *KERNEL])
    files = {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": provider,
        "onnxruntime/__init__.py": init,
    }
    write_tree(site, companion("onnxruntime-gpu", release, files, {}))
    return site


def preload_findings(site: Path) -> list[Finding]:
    system = offline_windows([str(site)], system32_dirs=[str(system32(site.parent / "s32"))])
    try:
        report = analyze(system, cache=user_cache())
    finally:
        system.close()
    assert report.import_torch is not None and report.import_torch.ok
    return [f for f in report.findings if "before `import torch`" in f.message]


def test_a_missing_export_in_the_preloaded_copy_fails_import_torch(tmp_path: Path) -> None:
    (finding,) = preload_findings(site_with(tmp_path, ("cudnnGraphA",)))
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert "does not export 1 of the names it imports (cudnnGraphB)" in finding.message
    assert '[WinError 127] Error loading "...\\cudnn_adv64_9.dll"' in finding.message
    assert "torch ships cuDNN 9.1.0, the NVIDIA wheel loaded first is 9.10.2" in finding.message


def test_only_another_version_is_a_warning_that_minors_are_mixed(tmp_path: Path) -> None:
    (finding,) = preload_findings(site_with(tmp_path, ("cudnnGraphA", "cudnnGraphB")))
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert "so `import torch` loads, but two cuDNN minors are mixed" in finding.message
    assert "WinError" not in finding.message
    assert finding.missing == GRAPH  # torch's sub-library bound it to the wheel's copy
    assert finding.path is not None and "nvidia" in finding.path
    assert "torch ships cuDNN 9.1.0, the NVIDIA wheel loaded first is 9.10.2" in finding.message


@pytest.mark.parametrize(("release", "cuda_major"), [("1.22.0", 12), ("1.24.1", 13)])
def test_the_cudnn_wheel_to_pin_is_the_one_built_for_the_providers_cuda(
    tmp_path: Path, release: str, cuda_major: int
) -> None:
    """The wheel in ``nvidia\\cudnn\\bin`` is the provider's CUDA major's (onnxruntime-gpu for
    CUDA 13 brings ``nvidia-cudnn-cu13``): the pin to torch's cuDNN build names that one."""
    site = site_with(tmp_path, ("cudnnGraphA",), release=release, cuda_major=cuda_major)
    (finding,) = preload_findings(site)
    commands = [command for hint in finding.hints for command in hint.commands]
    pins = [command for command in commands if "nvidia-cudnn-cu" in command]
    assert len(pins) == 1 and f'"nvidia-cudnn-cu{cuda_major}==9.1.0.70"' in pins[0]


def test_before_1_21_there_is_no_preload_to_replay(tmp_path: Path) -> None:
    assert preload_findings(site_with(tmp_path, ("cudnnGraphA",), release="1.20.2")) == []


def test_the_list_follows_the_release() -> None:
    """1.21-1.23 preload CUDA 12 builds only; 1.24+ any major from 12; 1.27 adds tensor_ir;
    1.28 takes a CUDA 13 build's DLLs from the consolidated nvidia\\cu13 wheel."""
    old = preload_list("1.22.0", 12)
    assert [n for _, n in old][:4] == [
        "cublasLt64_12.dll",
        "cublas64_12.dll",
        "cufft64_11.dll",
        "cudart64_12.dll",
    ]
    assert [n for _, n in old][-2:] == [GRAPH, "cudnn64_9.dll"]  # sub-libraries first
    assert preload_list("1.22.0", 13) == () and preload_list("1.26.0", 11) == ()
    assert preload_list("1.27.0", 13)[2][0] == ("nvidia", "cufft", "bin")
    assert preload_list("1.27.0", 13)[2][1] == "cufft64_12.dll"
    assert preload_list("1.27.0", 12)[-1][1] == "cudnn_engines_tensor_ir64_9.dll"
    assert preload_list("1.28.0", 13)[0][0] == ("nvidia", "cu13", "bin", "x86_64")
    assert preload_list("1.28.0", 12)[0][0] == ("nvidia", "cublas", "bin")


@pytest.mark.parametrize(
    ("release", "major", "torch", "picked"),
    [
        ("1.22.0", 12, "2.5.1+cu124", True),
        ("1.22.0", 12, "2.5.1", False),
        ("1.22.0", 12, "2.5.1+cpu", False),
        ("1.24.1", 12, "2.7.0+cu128", True),
        ("1.24.1", 13, "2.7.0+cu128", False),
        ("1.27.0", 13, "2.9.0+cu130", True),
        ("1.23.2", 12, "2.9.0+cu130", False),
    ],
)
def test_torchs_folder_is_taken_as_the_release_decides(
    release: str, major: int, torch: str, picked: bool
) -> None:
    assert picks_torch_lib(release, major, torch) is picked


def _init(*cudnn: str) -> bytes:
    """An ``onnxruntime/__init__.py`` whose ``preload_dlls()`` lists ``cudnn`` for Windows."""
    rows = "".join(f'            ("nvidia", "cudnn", "bin", "{name}"),\n' for name in cudnn)
    return (
        "def _get_nvidia_dll_paths(is_windows, cuda=True, cudnn=True):\n"
        f"        cudnn_dll_paths = [\n{rows}        ]\n"
        "def preload_dlls(cuda=True, cudnn=True, msvc=True, directory=None):\n    pass\n"
    ).encode()


def test_an_installed_list_the_table_does_not_know_is_not_replayed(tmp_path: Path) -> None:
    """The installed ``__init__.py`` is read: a release that lists other cuDNN DLLs than the
    table says is not replayed (not guessed); the table's own list is."""
    same = [name for _, name in preload_list("1.22.0", 12) if name.startswith("cudnn")]
    (finding,) = preload_findings(site_with(tmp_path / "a", ("cudnnGraphA",), init=_init(*same)))
    assert "WinError 127" in finding.message
    other = _init(*same, "cudnn_engines_future64_9.dll")
    assert preload_findings(site_with(tmp_path / "b", ("cudnnGraphA",), init=other)) == []
