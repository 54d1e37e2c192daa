"""torch's neighbours on Windows, read from their real wheels (issue 24): the genuine
ctranslate2 4.8.5 and onnxruntime-gpu 1.15.1 win_amd64 wheels (20 MB and 122 MB, cached under
~/.cache/torchguard-ci/wheels), scanned beside a fake CUDA torch. The names the replay loads
come from the binaries: ctranslate2.dll's ``LoadLibraryA`` name in its data, the provider's
import table (read here with pefile, independently of torchguard's reader)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pefile
import pytest
from fakes import TORCH_241_GRAPH, FakeTorch
from pe_builder import DEFAULT_SYMBOL, build_pe
from realwheels import wheel

from torchguard._binary.cache import user_cache
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import Finding

pytestmark = pytest.mark.realwheel

KERNEL = ("KERNEL32.dll",)
OPENMP = "libiomp5md.dll"
RUNTIME = ("a Visual C++ runtime", ("msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll"))
PROVIDER = "onnxruntime/capi/onnxruntime_providers_cuda.dll"
CT2_LIBRARY = "ctranslate2/ctranslate2.dll"


def ct2_wheel() -> Path:
    return wheel("ctranslate2", "4.8.5")


def cuda_torch(
    site: Path, cuda: str, lib: Sequence[str], exports: Mapping[str, Sequence[str]] | None = None
) -> Path:
    """A fake CUDA torch whose ``torch_cuda.dll`` imports ``lib``, all in ``torch\\lib``, each
    exporting ``exports[name]``. Without an OpenMP runtime: the real wheels' DLLs that import
    ``libiomp5md.dll`` would bind to torch's, whose exports a fake does not have."""
    graph = {
        name: tuple(i for i in imports if i != OPENMP)
        for name, imports in TORCH_241_GRAPH.items()
        if name != OPENMP
    }
    graph["torch_cuda.dll"] = (*lib, "torch_cpu.dll", *KERNEL)
    extra = {
        f"torch/lib/{name}": build_pe(
            KERNEL, exports=(*(exports or {}).get(name, ()), DEFAULT_SYMBOL)
        )
        for name in lib
    }
    tag = "cu" + cuda.replace(".", "")
    return FakeTorch(version=f"2.4.1+{tag}", cuda=cuda, graph=graph, extra=extra).write(site)


def scan(*targets: Path) -> list[Finding]:
    system = offline_windows([str(t) for t in targets], assumed_system32=[RUNTIME])
    try:
        report = analyze(system, cache=user_cache())
    finally:
        system.close()
    assert report.import_torch is not None and report.import_torch.ok
    return [f for f in report.findings if f.package in ("ctranslate2", "onnxruntime-gpu")]


def member(path: Path, name: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


def test_ctranslate2_loads_the_cublas_its_library_names(tmp_path: Path) -> None:
    data = member(ct2_wheel(), CT2_LIBRARY)
    image = pefile.PE(data=data, fast_load=True)
    image.parse_data_directories(
        directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]]
    )
    imported = [e.dll.decode().lower() for e in image.DIRECTORY_ENTRY_IMPORT]
    assert not any(name.startswith("cu") for name in imported)  # loaded by name, not imported
    named = sorted({m.decode() for m in re.findall(rb"\0(cublas64_\d+\.dll)\0", data)})
    assert named == ["cublas64_12.dll"]
    site = cuda_torch(tmp_path / "site", "12.4", ["cublas64_12.dll"])
    (finding,) = scan(site, ct2_wheel())
    assert (finding.code, finding.missing) == (Code.NEIGHBOUR_LOAD_ORDER, named[0])
    assert "torch\\lib" in finding.message
    other = cuda_torch(tmp_path / "cpu", "12.4", [])  # a torch that loads no cuBLAS
    (finding,) = scan(other, ct2_wheel())
    assert (finding.code, finding.missing) == (Code.MISSING_DLL, named[0])


def provider_cuda_imports(path: Path) -> dict[str, list[str]]:
    """The CUDA DLLs the real provider imports, in its import table's order, and the names it
    takes from each (read with pefile)."""
    image = pefile.PE(data=member(path, PROVIDER), fast_load=True)
    image.parse_data_directories(
        directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]]
    )
    return {
        e.dll.decode(): [i.name.decode() for i in e.imports if i.name]
        for e in image.DIRECTORY_ENTRY_IMPORT
        if e.dll.decode().lower().startswith("cu")
    }


def test_onnxruntime_1_15_provider_needs_its_cuda_11_imports(tmp_path: Path) -> None:
    ort = wheel("onnxruntime-gpu", "1.15.1")
    taken = provider_cuda_imports(ort)
    cuda = list(taken)
    assert "cublas64_11.dll" in cuda and all(re.search(r"64_\d+\.dll$", n) for n in cuda)
    # beside a CUDA 12 torch: found in neither order, the CUDA 12 release named
    site = cuda_torch(tmp_path / "cu12", "12.4", ["cublas64_12.dll"])
    (finding,) = scan(site, ort)
    assert (finding.code, finding.missing) == (Code.MISSING_DLL, cuda[0])
    assert "built for CUDA 11" in finding.message
    assert any('"onnxruntime-gpu>=1.19,<1.27"' in c for h in finding.hints for c in h.commands)
    # beside a CUDA 11 torch that ships every one of them: only torch's import loads them
    site = cuda_torch(tmp_path / "cu11", "11.8", cuda, taken)
    (finding,) = scan(site, ort)
    assert (finding.code, finding.missing) == (Code.NEIGHBOUR_LOAD_ORDER, cuda[0])
    assert all(name in finding.message for name in cuda)
    assert not any("preload_dlls" in c for h in finding.hints for c in h.commands)  # < 1.21
