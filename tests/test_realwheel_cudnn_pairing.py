"""onnxruntime issue 24266 replayed with NVIDIA's real Windows cuDNN DLLs: the NVIDIA wheel's
cuDNN preloaded by ``onnxruntime.preload_dlls()`` before ``import torch``, whose own
``torch\\lib`` sub-libraries then bind ``cudnn_graph64_9.dll`` by name to the wheel's copy.

torch's Windows CUDA wheels are not reachable here (download.pytorch.org), so two
nvidia-cudnn-cu12 releases stand in for the pair: 9.1.0.70 (what PyTorch's Windows builders
installed from June 2024, about torch 2.4-2.5 by date only: shared/gpu-facts.md) as torch's
``lib`` and 9.10.2.21 as the wheel, and the reverse. Three files of each (``cudnn64_9``, ``cudnn_graph64_9`` and ``cudnn_engines_runtime_compiled64_9``,
which imports only ``cudnn_graph64_9`` and ``KERNEL32``; ~17 MB of range reads, cached) are
the real ones; their export and import tables are read here with pefile, independently of
torchguard's reader, and say which names are missing: 9.1.0.70's sub-library takes 177 names
from cudnn_graph64_9.dll, 16 of which 9.10.2.21's does not export (and 9.10's 345, 113 missing
from 9.1's), so the load fails with WinError 127 (the loader's rule, measured on Windows in
that issue: "[WinError 127] ... Error loading ...\\torch\\lib\\cudnn_adv64_9.dll"). The outcomes
reported in onnxruntime issue 24266 for a torch with cuDNN 9.1.0 (9.0, 9.5, 9.6 preloaded: fails
on cudnn_cnn64_9.dll; 9.1.1: loads) are replayed with the real DLLs of those releases.
"""

from __future__ import annotations

from pathlib import Path

import pefile
import pytest
from fakes import FakeTorch, companion, write_tree
from pe_builder import build_pe
from range_members import wheel_files

from torchguard._binary.cache import user_cache
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import Finding

pytestmark = pytest.mark.realwheel

OLD, NEW = "9.1.0.70", "9.10.2.21"
BIN = "nvidia/cudnn/bin"
SUB = "cudnn_engines_runtime_compiled64_9.dll"
FILES = ("cudnn64_9.dll", "cudnn_graph64_9.dll", SUB)
RUNTIME = ("a Visual C++ runtime", ("msvcp140.dll", "vcruntime140.dll", "vcruntime140_1.dll"))


def cudnn(version: str) -> dict[str, Path]:
    found = wheel_files("nvidia-cudnn-cu12", version, tuple(f"{BIN}/{n}" for n in FILES))
    return {member.rsplit("/", 1)[1]: path for member, path in found.items()}


def missing(importer: Path, exporter: Path) -> list[str]:
    """What ``importer`` takes from cudnn_graph64_9.dll that ``exporter`` does not export."""
    wanted = pefile.PE(str(importer), fast_load=True)
    wanted.parse_data_directories([pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]])
    names = [
        i.name.decode()
        for entry in wanted.DIRECTORY_ENTRY_IMPORT
        if entry.dll.decode().lower() == "cudnn_graph64_9.dll"
        for i in entry.imports
        if i.name
    ]
    given = pefile.PE(str(exporter), fast_load=True)
    given.parse_data_directories([pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"]])
    exported = {s.name.decode() for s in given.DIRECTORY_ENTRY_EXPORT.symbols if s.name}
    return [n for n in names if n not in exported]


def site_with(tmp_path: Path, torch_cudnn: str, wheel_cudnn: str, torch_version: str) -> Path:
    """A fake CUDA 12 torch with the real cuDNN files of ``torch_cudnn`` in ``torch\\lib``,
    the NVIDIA wheel's of ``wheel_cudnn`` in ``nvidia\\cudnn\\bin``, and onnxruntime-gpu
    1.22.0 whose provider imports cuDNN 9 and cuBLAS 12 (a CUDA 12 build)."""
    extra = {f"torch/lib/{n}": p.read_bytes() for n, p in cudnn(torch_cudnn).items()}
    site = FakeTorch(version=torch_version, cuda="12.4", extra=extra).write(tmp_path / "site")
    write_tree(site, {f"{BIN}/{n}": p.read_bytes() for n, p in cudnn(wheel_cudnn).items()})
    kernel = ("KERNEL32.dll",)
    provider = build_pe(["cudnn64_9.dll", "cublas64_12.dll", *kernel])
    files = {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": provider,
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", "1.22.0", files, {}))
    return site


def preload_findings(site: Path) -> list[Finding]:
    system = offline_windows([str(site)], assumed_system32=[RUNTIME])
    try:
        report = analyze(system, cache=user_cache())
    finally:
        system.close()
    assert report.import_torch is not None and report.import_torch.ok  # torch alone loads
    return [f for f in report.findings if "before `import torch`" in f.message]


@pytest.mark.parametrize(("ours", "theirs"), [(OLD, NEW), (NEW, OLD)])
def test_another_minor_preloaded_breaks_import_torch(
    tmp_path: Path, ours: str, theirs: str
) -> None:
    gap = missing(cudnn(ours)[SUB], cudnn(theirs)["cudnn_graph64_9.dll"])
    assert gap, "these two minors' tables agree: pick another pair"
    (finding,) = preload_findings(site_with(tmp_path, ours, theirs, "2.4.1"))
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and not finding.is_error
    assert finding.missing == "cudnn_graph64_9.dll"
    assert finding.path is not None and "nvidia" in finding.path
    assert f"does not export {len(gap)} of the names" in finding.message
    assert gap[0] in finding.message
    assert f'[WinError 127] Error loading "...\\{SUB}"' in finding.message
    assert f"torch ships cuDNN {ours.rsplit('.', 1)[0]}" in finding.message
    assert f"the NVIDIA wheel loaded first is {theirs.rsplit('.', 1)[0]}" in finding.message
    # torch 2.4.1 without "+cu12": plain preload_dlls() takes the wheels too
    assert "onnxruntime.preload_dlls() (here it takes the NVIDIA wheels" in finding.message
    commands = [c for h in finding.hints for c in h.commands]
    assert any(c.startswith("import torch") for c in commands)
    assert any("preload_dlls(directory=r" in c and "torch" in c for c in commands)
    assert any(f'"nvidia-cudnn-cu12=={ours}"' in c for c in commands)


def test_with_cu12_in_torchs_version_only_directory_empty_takes_the_wheels(
    tmp_path: Path,
) -> None:
    (finding,) = preload_findings(site_with(tmp_path, OLD, NEW, "2.4.1+cu124"))
    assert finding.message.split(":", 1)[1].startswith(' onnxruntime.preload_dlls(directory="")')


def test_the_same_cudnn_preloaded_is_silent(tmp_path: Path) -> None:
    assert missing(cudnn(OLD)[SUB], cudnn(OLD)["cudnn_graph64_9.dll"]) == []
    assert preload_findings(site_with(tmp_path, OLD, OLD, "2.4.1")) == []


CNN = "cudnn_cnn64_9.dll"
#: onnxruntime issue 24266, measured on Windows with a torch shipping cuDNN 9.1.0: preloading
#: the NVIDIA wheel's cuDNN 9.0, 9.5 or 9.6 made `import torch` fail on cudnn_cnn64_9.dll;
#: 9.1.1 let torch load.
ISSUE_24266 = {"9.0.0.312": True, "9.5.0.50": True, "9.6.0.74": True, "9.1.1.17": False}


def taken(importer: Path, dll: str) -> list[str]:
    image = pefile.PE(str(importer), fast_load=True)
    image.parse_data_directories([pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]])
    return [
        i.name.decode()
        for entry in image.DIRECTORY_ENTRY_IMPORT
        if entry.dll.decode().lower() == dll
        for i in entry.imports
        if i.name
    ]


@pytest.mark.parametrize(("wheel", "fails"), sorted(ISSUE_24266.items()))
def test_the_minors_of_issue_24266_as_reported(tmp_path: Path, wheel: str, fails: bool) -> None:
    """torch's side is 9.1.0.70's real ``cudnn64_9``, ``cudnn_graph64_9`` and
    ``cudnn_cnn64_9``; ``cudnn_ops64_9.dll`` (80 MB compressed, imported by cnn for 10 names
    that play no part here) is a built stand-in exporting exactly the names cnn's import table
    takes from it. The wheel's side is each reported release's real ``cudnn64_9`` and
    ``cudnn_graph64_9`` (~1.3 MB each)."""
    ours = wheel_files("nvidia-cudnn-cu12", OLD, tuple(f"{BIN}/{n}" for n in (*FILES[:2], CNN)))
    lib = {member.rsplit("/", 1)[1]: path.read_bytes() for member, path in ours.items()}
    cnn = ours[f"{BIN}/{CNN}"]
    lib["cudnn_ops64_9.dll"] = build_pe(["KERNEL32.dll"], exports=taken(cnn, "cudnn_ops64_9.dll"))
    extra = {f"torch/lib/{n}": data for n, data in lib.items()}
    site = FakeTorch(version="2.4.1", cuda="12.4", extra=extra).write(tmp_path / "site")
    theirs = wheel_files("nvidia-cudnn-cu12", wheel, tuple(f"{BIN}/{n}" for n in FILES[:2]))
    write_tree(site, {m: p.read_bytes() for m, p in theirs.items()})
    provider = build_pe(["cudnn64_9.dll", "cublas64_12.dll", "KERNEL32.dll"])
    files = {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": provider,
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", "1.22.0", files, {}))
    gap = missing(cnn, theirs[f"{BIN}/cudnn_graph64_9.dll"])
    assert bool(gap) is fails  # the tables say what the issue saw
    (finding,) = preload_findings(site)
    assert (f'[WinError 127] Error loading "...\\{CNN}"' in finding.message) is fails
    assert ("two cuDNN minors are mixed" in finding.message) is not fails
    assert f"the NVIDIA wheel loaded first is {wheel.rsplit('.', 1)[0]}" in finding.message
