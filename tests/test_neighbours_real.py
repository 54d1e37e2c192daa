"""torch's neighbours judged for real (issue 24, Linux): glibc's own loader in both import
orders, on libraries gcc builds in the shapes onnxruntime-gpu and ctranslate2 ship, and the
genuine ctranslate2 4.8.5 (40 MB) and onnxruntime-gpu 1.31.1 (243 MB) manylinux wheels, cached
under ~/.cache/torchguard-ci/wheels/neighbours.

The stand-in for ctranslate2 really ``dlopen``s ``libcublas.so.12`` from its own code (so
glibc searches with its RPATH, as ctranslate2's does); the stand-in for onnxruntime's provider
needs it in ``DT_NEEDED``. torch's stand-in needs it from the NVIDIA wheel's folder. In a child
Python, each is loaded after torch's and alone, and the outcome is compared with the model's.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from realwheels import CACHE, download
from test_ldso_real import GCC, PYTHON, build, model
from test_linux_import import analyze
from test_neighbours import cublas_torch

from torchguard._binary.elf.strings import DlopenFacts, read_dlopen_facts
from torchguard._facts.vocab import Code
from torchguard._platforms.linux.neighbour_loads import Order, replay_order
from torchguard._platforms.linux.neighbours import find_neighbours

pytestmark = [
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
    pytest.mark.skipif(GCC is None, reason="gcc builds the libraries"),
]

PROBE = """
#include <dlfcn.h>
static const char *names[] = {"libcublas.so.12"};
int probe(void) { return dlopen(names[0], RTLD_NOW) != 0; }
"""


class Facts:
    """The late-load facts read straight from the files (no cache)."""

    def dlopen_facts(self, path: str, family: str) -> DlopenFacts:
        return read_dlopen_facts(path, family)

    def verdict(self, key: str) -> list[str] | None:
        return None

    def store_verdict(self, key: str, names: list[str]) -> None:
        pass


def layout(root: Path) -> tuple[Path, Path, Path]:
    """(torch's library, ctranslate2's, onnxruntime's provider), built by gcc."""
    site = root / "site"
    cublas = build(
        site / "nvidia" / "cublas" / "lib",
        "libcublas.so.12",
        "int cublasCreate_v2(void) { return 0; }\n",
    )
    torch = build(
        site / "torch" / "lib",
        "libtorch_cuda.so",
        "extern int cublasCreate_v2(void); int torch_init(void) { return cublasCreate_v2(); }\n",
        needed=[cublas],
        rpath="$ORIGIN/../../nvidia/cublas/lib",
    )
    ct2 = build(site / "ctranslate2.libs", "libctranslate2-a7a60d30.so.4", PROBE, rpath="$ORIGIN")
    capi = site / "onnxruntime" / "capi"
    build(capi, "libonnxruntime_providers_shared.so", "int Provider_GetHost(void) { return 0; }\n")
    provider = build(
        capi,
        "libonnxruntime_providers_cuda.so",
        "extern int cublasCreate_v2(void); extern int Provider_GetHost(void);\n"
        "int provider(void) { return cublasCreate_v2() + Provider_GetHost(); }\n",
        needed=[cublas],
        runpath="$ORIGIN",
    )
    return torch, ct2, provider


def real(first: Path | None, library: Path, probe: bool) -> tuple[bool, bool]:
    """(the library loads, its probe's dlopen succeeds) in a child Python."""
    code = "import ctypes\n"
    if first is not None:
        code += f"ctypes.CDLL({str(first)!r})\n"
    shared = library.parent / "libonnxruntime_providers_shared.so"
    if shared.exists():  # onnxruntime loads it RTLD_GLOBAL before its provider
        code += f"ctypes.CDLL({str(shared)!r}, mode=ctypes.RTLD_GLOBAL)\n"
    code += f"try:\n    lib = ctypes.CDLL({str(library)!r})\nexcept OSError:\n    print(0, 0); raise SystemExit\n"
    code += "print(1, lib.probe())\n" if probe else "print(1, 1)\n"
    done = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loads, found = done.stdout.split()
    return loads == "1", found == "1"


def predicted(first: Path | None, library: Path) -> Order:
    ldso = model()
    if first is not None:
        assert ldso.dlopen(str(first)).ok
    shared = library.parent / "libonnxruntime_providers_shared.so"
    globals_ = [str(shared)] if shared.exists() else []
    return replay_order(ldso, str(library), Facts(), globals_)


@pytest.mark.parametrize("torch_first", [True, False])
def test_glibc_agrees_on_both_orders(tmp_path: Path, torch_first: bool) -> None:
    torch, ct2, provider = layout(tmp_path)
    first = torch if torch_first else None
    loads, found = real(first, ct2, probe=True)
    order = predicted(first, ct2)
    assert loads and order.error is None
    assert [late.name for late in order.late] == ["libcublas.so.12"]
    assert (order.late[0].path is not None) == found == torch_first
    loads, _ = real(first, provider, probe=False)
    order = predicted(first, provider)
    assert (order.error is None) == loads == torch_first


CT2 = "4.8.5"
FOLDER = CACHE / "neighbours"


def ct2_wheel() -> Path:
    FOLDER.mkdir(parents=True, exist_ok=True)
    pattern = f"ctranslate2-{CT2}-cp311-cp311-manylinux*x86_64*.whl"
    found = sorted(FOLDER.glob(pattern))
    if not found:
        download(f"ctranslate2=={CT2}", FOLDER, platform="manylinux_2_28_x86_64")
        found = sorted(FOLDER.glob(pattern))
    return found[0]


def test_the_real_ctranslate2_library(tmp_path: Path) -> None:
    """Its library loads under glibc with or without torch, keeps ``libcublas.so.12`` to
    ``dlopen`` (and no cuDNN), and beside a CUDA 12 torch is found only after it."""
    if model().locate("libcublas.so.12") is not None:
        pytest.skip("this machine has a cuBLAS 12 on its library search: no order matters")
    site = cublas_torch(tmp_path)
    (site / "ctranslate2").mkdir()
    (site / "ctranslate2" / "__init__.py").write_text("")
    (site / f"ctranslate2-{CT2}.dist-info").mkdir()
    with zipfile.ZipFile(ct2_wheel()) as archive:
        for member in archive.namelist():
            if member.startswith("ctranslate2.libs/"):
                archive.extract(member, site)
    (neighbour,) = find_neighbours([str(site)])
    library = Path(neighbour.library)
    assert real(None, library, probe=False)[0]
    order = predicted(None, library)
    assert order.error is None and [late.name for late in order.late] == ["libcublas.so.12"]
    assert order.late[0].path is None  # alone: nowhere on this machine's search
    report = analyze(site)
    found = [f for f in report.findings if f.package == "ctranslate2"]
    assert [(f.code, f.missing) for f in found] == [(Code.NEIGHBOUR_LOAD_ORDER, "libcublas.so.12")]


ORT = "1.31.1"


def test_the_real_onnxruntime_provider_is_built_for_cuda_13(tmp_path: Path) -> None:
    """onnxruntime-gpu 1.31.1's CUDA provider (243 MB wheel) needs ``libcublasLt.so.13``: beside
    a CUDA 12 torch it loads in neither order, and the pin built for CUDA 12 is named."""
    if model().locate("libcublasLt.so.13") is not None:
        pytest.skip("this machine has a cuBLAS 13 on its library search")
    folder = FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"onnxruntime_gpu-{ORT}-cp311-cp311-manylinux*x86_64*.whl"
    if not list(folder.glob(pattern)):
        download(f"onnxruntime-gpu=={ORT}", folder, platform="manylinux_2_28_x86_64")
    site = cublas_torch(tmp_path)
    (site / f"onnxruntime_gpu-{ORT}.dist-info").mkdir()
    with zipfile.ZipFile(next(folder.glob(pattern))) as archive:
        for member in (
            "__init__.py",
            "capi/libonnxruntime_providers_cuda.so",
            "capi/libonnxruntime_providers_shared.so",
        ):
            archive.extract(f"onnxruntime/{member}", site)
    report = analyze(site)
    (finding,) = [f for f in report.findings if f.package == "onnxruntime-gpu"]
    assert finding.code == Code.MISSING_DLL and not finding.is_error
    assert finding.missing is not None and finding.missing.endswith(".so.13")
    assert "'onnxruntime-gpu>=1.19,<1.27'" in finding.hints[0].commands[0]
