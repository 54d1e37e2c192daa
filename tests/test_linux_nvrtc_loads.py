"""NVRTC's late loads: torch's lazy ``libnvrtc.so.N`` and nvrtc's ``libnvrtc-builtins``.

torch's ATen ``LazyNVRTC`` ``dlopen``s ``"libnvrtc.so." + <CUDA major>`` from
``libtorch_cuda.so`` at the first kernel it compiles at run time; ``libnvrtc.so.12`` keeps
``libnvrtc-builtins.so.12.8`` in its ``.rodata`` and ``dlopen``s it at the first compile, with
its RUNPATH ``$ORIGIN`` (both read from the real files; the real-loader tier judges the
builtins with a real compile, which needs no GPU). torch 2.6 to 2.9 preload both by path, so
a copy elsewhere is defused there.
"""

from __future__ import annotations

from pathlib import Path

from linux_elf import write_so
from test_linux_import import analyze, torch_site

from torchguard._platforms.linux.late_exact import torch_nvrtc_name

BUILTINS = "libnvrtc-builtins.so.12.8"
NVRTC = "libnvrtc.so.12"


def nvrtc_site(root: Path, *, preload: bool = True) -> Path:
    """:func:`torch_site` whose nvrtc names its builtins as the real one does; without
    ``preload``, torch 2.5.1 (no preload: every NVRTC load is a late one)."""
    site = torch_site(root)
    lib = site / "nvidia" / "cuda_nvrtc" / "lib"
    nvrtc = write_so(lib, NVRTC, runpath="$ORIGIN:")
    nvrtc.write_bytes(nvrtc.read_bytes() + b"\0" + BUILTINS.encode() + b"\0")
    write_so(lib, BUILTINS)
    if not preload:
        (site / "torch" / "__init__.py").write_text("# no preload\n")
        (site / "torch" / "version.py").write_text("__version__ = '2.5.1'\ncuda = '12.4'\n")
    return site


def test_torchs_nvrtc_name_follows_its_cuda_version() -> None:
    assert torch_nvrtc_name("12.8") == "libnvrtc.so.12"
    assert torch_nvrtc_name("13.0") == "libnvrtc.so.13"
    assert torch_nvrtc_name("11.8") == "libnvrtc.so.11.2"
    assert torch_nvrtc_name("11.1") == "libnvrtc.so.11.1"
    assert torch_nvrtc_name(None) is None and torch_nvrtc_name("x") is None


def test_healthy_nvrtc_has_no_finding(tmp_path: Path) -> None:
    assert analyze(nvrtc_site(tmp_path)).findings == ()
    assert analyze(nvrtc_site(tmp_path / "old", preload=False)).findings == ()


def test_missing_builtins_fail_the_first_compile(tmp_path: Path) -> None:
    site = nvrtc_site(tmp_path)
    (site / "nvidia" / "cuda_nvrtc" / "lib" / BUILTINS).unlink()
    report = analyze(site)
    assert report.errors == () and report.import_torch is not None and report.import_torch.ok
    (warning,) = report.warnings
    assert warning.code == "missing-dll" and warning.missing == BUILTINS
    assert warning.chain == (NVRTC, BUILTINS)
    assert f"nvrtc: error: failed to open {BUILTINS}." in warning.message
    assert "the first NVRTC compile" in warning.message
    assert "nvidia-cuda-nvrtc-cu12" in warning.hints[0].commands[0]


def test_a_missing_nvrtc_fails_torchs_first_runtime_compile(tmp_path: Path) -> None:
    site = nvrtc_site(tmp_path, preload=False)
    for path in (site / "nvidia" / "cuda_nvrtc" / "lib").iterdir():
        path.unlink()
    (warning,) = analyze(site).warnings
    assert warning.code == "missing-dll" and warning.chain == ("libtorch_cuda.so", NVRTC)
    assert "compiles at run time" in warning.message


def test_a_builtins_copy_first_on_ld_library_path_wins_without_the_preload(
    tmp_path: Path,
) -> None:
    site = nvrtc_site(tmp_path, preload=False)
    other = tmp_path / "cuda-12.4" / "lib64"
    write_so(other, BUILTINS)
    (warning,) = analyze(site, ld_library_path=(str(other),)).warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/{BUILTINS}"
    assert "the first NVRTC compile" in warning.message
    # torch 2.9's preload maps the wheel's builtins by path: the later dlopen reuses them
    new = nvrtc_site(tmp_path / "new")
    init = (new / "torch" / "__init__.py").read_text()
    builtins = '            _preload_cuda_deps("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]")\n'
    marker = '            _preload_cuda_deps("nvjitlink"'
    (new / "torch" / "__init__.py").write_text(init.replace(marker, builtins + marker, 1))
    assert analyze(new, ld_library_path=(str(other),)).findings == ()
