"""Symbol level on genuine torch Windows wheels: lossless tables, mixed releases, no false alarm."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pefile
import pytest
from realwheels import unpack, vc_runtime_dir, wheel

import torchguard
from torchguard._binary.pe.image import read_image, read_image_stream

pytestmark = pytest.mark.realwheel


@pytest.fixture(scope="module")
def vc_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vc_runtime_dir(tmp_path_factory.mktemp("vcruntime"))


@pytest.fixture(scope="module")
def torch_241(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack(wheel("torch", "2.4.1"), tmp_path_factory.mktemp("torch241"))


def test_torch_cpu_exports_are_read_losslessly(torch_241: Path) -> None:
    """57,772 names; pefile (its caps lifted) is the judge, up to its 512-byte name cut."""
    dll = torch_241 / "torch" / "lib" / "torch_cpu.dll"
    tables = read_image(str(dll), symbols=True).symbols
    assert tables is not None
    ours = tables.exports.names
    assert len(ours) == 57_772
    pe = pefile.PE(
        str(dll), fast_load=True, max_symbol_exports=1 << 17, max_repeated_symbol=1 << 17
    )
    try:
        pe.parse_data_directories(
            directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"]]
        )
        theirs = {s.name for s in pe.DIRECTORY_ENTRY_EXPORT.symbols if s.name}
    finally:
        pe.close()
    assert {name[:512] for name in ours} == theirs
    assert max(len(name) for name in ours) > 512  # the comparison covers the long names


def test_torch_python_imports_are_read_losslessly(
    torch_241: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pefile's default cap drops 16 of 19 DLLs here; ours keeps every symbol."""
    dll = torch_241 / "torch" / "lib" / "torch_python.dll"
    tables = read_image(str(dll), symbols=True).symbols
    assert tables is not None
    monkeypatch.setattr(pefile, "MAX_IMPORT_SYMBOLS", 1 << 20)
    pe = pefile.PE(str(dll), fast_load=True)
    try:
        pe.parse_data_directories(
            directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]]
        )
        theirs = {
            entry.dll.decode().lower(): [
                s.ordinal if s.import_by_ordinal else s.name for s in entry.imports
            ]
            for entry in pe.DIRECTORY_ENTRY_IMPORT
        }
    finally:
        pe.close()
    ours = {
        dll: [s if isinstance(s, int) else s[:512] for s in symbols]  # pefile cuts at 512 B
        for dll, symbols in tables.imports.items()
    }
    assert ours == theirs
    assert len(tables.imports["torch_cpu.dll"]) > 4000


def test_the_wheel_member_and_the_file_give_the_same_tables(torch_241: Path) -> None:
    """The streaming read keeps only data sections; nothing it needs is in code."""
    with zipfile.ZipFile(wheel("torch", "2.4.1")) as archive:
        info = archive.getinfo("torch/lib/torch_cpu.dll")
        with archive.open(info) as stream:
            streamed = read_image_stream(stream, info.file_size, symbols=True)
    on_disk = read_image(str(torch_241 / "torch" / "lib" / "torch_cpu.dll"), symbols=True)
    assert streamed == on_disk


def test_another_releases_c10_is_a_missing_symbol(
    tmp_path: Path, torch_241: Path, vc_runtime: Path
) -> None:
    """torch 2.4.1 with torch 2.15.0's c10.dll: every DLL is there, and import torch fails."""
    site = tmp_path / "site"
    shutil.copytree(torch_241, site)
    newer = unpack(wheel("torch", "2.15.0"), tmp_path / "torch2150")
    shutil.copy(newer / "torch" / "lib" / "c10.dll", site / "torch" / "lib" / "c10.dll")
    report = torchguard.scan([site], system32=[vc_runtime])
    assert {f.code for f in report.errors} == {"missing-symbol"}
    by_importer = {f.chain[-2]: f for f in report.errors}
    assert set(by_importer) == {"torch_cpu.dll", "torch_python.dll"}
    assert all(f.missing == "c10.dll" for f in report.errors)
    assert report.import_torch is not None
    assert (report.import_torch.winerror, report.import_torch.dll) == (127, "shm.dll")
    text = report.render_text()
    assert "c10::TensorImpl::_generic_strides" in text
    assert "c10.dll is not the file torch==2.4.1 installed" in by_importer["torch_cpu.dll"].message
    assert "torch_cpu.dll is not the file" not in by_importer["torch_cpu.dll"].message
    commands = [c for f in report.errors for h in f.hints for c in h.commands]
    assert any("--force-reinstall" in c and "torch==2.4.1" in c for c in commands)


def test_older_fbgemm_in_a_newer_torch(tmp_path: Path, torch_241: Path, vc_runtime: Path) -> None:
    """torch 2.0.1's fbgemm.dll left in a 2.4.1 tree: torch_cpu.dll cannot bind to it."""
    site = tmp_path / "site"
    shutil.copytree(torch_241, site)
    older = unpack(wheel("torch", "2.0.1"), tmp_path / "torch201")
    shutil.copy(older / "torch" / "lib" / "fbgemm.dll", site / "torch" / "lib" / "fbgemm.dll")
    report = torchguard.scan([site], system32=[vc_runtime])
    codes = {(f.code, f.missing) for f in report.errors}
    assert ("missing-symbol", "fbgemm.dll") in codes


#: One release of each minor version PyPI publishes for Windows (2.0 to 2.15), with the
#: wheels ``pip install`` adds that torch's DLLs import (2.3's MKL).
RELEASES = {
    "2.0.1": (),
    "2.1.2": (),
    "2.2.2": (),
    "2.3.1": (("mkl", "2021.4.0"), ("intel-openmp", "2021.4.0"), ("tbb", "2021.13.1")),
    "2.4.1": (),
    "2.5.1": (),
    "2.6.0": (),
    "2.7.1": (),
    "2.8.0": (),
    "2.9.1": (),
    "2.10.0": (),
    "2.11.0": (),
    "2.12.1": (),
    "2.13.0": (),
    "2.14.1": (),
    "2.15.0": (),
}


@pytest.mark.parametrize("version", list(RELEASES))
def test_healthy_releases_get_no_finding(version: str, vc_runtime: Path) -> None:
    """Every binding of a release as published, Microsoft's real VC++ runtime DLLs included:
    no missing symbol, and no finding at all."""
    wheels = [wheel("torch", version), *(wheel(p, v) for p, v in RELEASES[version])]
    report = torchguard.scan(wheels, system32=[vc_runtime])
    assert report.ok and not report.findings, report.render_text()


def test_siblings_built_for_another_torch_are_missing_symbols(vc_runtime: Path) -> None:
    """torchvision 0.19.1 and torchaudio 2.4.1 (built for torch 2.4.1) over torch 2.15.0."""
    report = torchguard.scan(
        [wheel("torch", "2.15.0"), wheel("torchvision", "0.19.1"), wheel("torchaudio", "2.4.1")],
        system32=[vc_runtime],
    )
    assert report.import_torch is not None and report.import_torch.ok
    symbol_errors = [f for f in report.errors if f.code == "missing-symbol"]
    assert {f.package for f in symbol_errors} == {"torchvision", "torchaudio"}
    assert {f.missing for f in symbol_errors} == {"c10.dll", "torch_cpu.dll"}
    assert {f.code for f in report.errors} == {"missing-symbol"}
    outcomes = {p.name: p for p in report.packages}
    assert outcomes["torchvision"].status == "fails" and outcomes["torchvision"].winerror == 127
    assert outcomes["torchaudio"].status == "fails" and outcomes["torchaudio"].winerror == 127
    vision = next(f for f in symbol_errors if f.package == "torchvision")
    (command,) = vision.hints[0].commands
    assert "torchvision" in command and "torch==2.15.0" in command
    mismatch = [f for f in report.warnings if f.code == "package-mismatch"]
    assert mismatch and all("fails" in f.message for f in mismatch)


def test_a_pair_pip_calls_mismatched_that_still_binds(vc_runtime: Path) -> None:
    """torchvision 0.19.0 pins torch 2.4.0, yet every symbol it needs is in torch 2.4.1."""
    report = torchguard.scan(
        [wheel("torch", "2.4.1"), wheel("torchvision", "0.19.0")], system32=[vc_runtime]
    )
    assert report.ok and not [f for f in report.findings if f.code == "missing-symbol"]
    assert {p.name: p.status for p in report.packages}["torchvision"] == "ok"
    (mismatch,) = [f for f in report.warnings if f.code == "package-mismatch"]
    assert "still bind" in mismatch.message
    assert "`import torchvision` may work, but its compiled operators" in mismatch.message


def test_a_pair_that_binds_is_not_said_to_work(vc_runtime: Path) -> None:
    """torchvision 0.19.1 (built for torch 2.4.1) binds every core symbol in torch 2.5.1, yet
    under Wine its ``nms`` raised NotImplementedError and one run page-faulted: the warning
    says binding is not working."""
    report = torchguard.scan(
        [wheel("torch", "2.5.1"), wheel("torchvision", "0.19.1")], system32=[vc_runtime]
    )
    assert report.ok and {p.name: p.status for p in report.packages}["torchvision"] != "fails"
    (mismatch,) = [f for f in report.warnings if f.code == "package-mismatch"]
    assert mismatch.message.startswith(
        "torchvision 0.19.1 requires torch==2.4.1, but torch 2.5.1+cpu is installed: its "
        "binaries still bind to this torch (checked symbol by symbol), so `import torchvision` "
        "may work, but its compiled operators, registered for another torch, fail when called "
        "(`torchvision.ops.nms` raises NotImplementedError"
    ), mismatch.message
    assert mismatch.message.endswith("or crash the process")


@pytest.mark.parametrize(
    ("torch_version", "vision", "audio"),
    [("2.5.1", "0.20.1", "2.5.1"), ("2.9.1", "0.24.1", "2.9.1"), ("2.14.1", "0.29.1", None)],
)
def test_siblings_released_together_get_no_finding(
    torch_version: str, vision: str, audio: str | None, vc_runtime: Path
) -> None:
    """torch with the torchvision (and torchaudio) released with it: every binding sound."""
    wheels = [wheel("torch", torch_version), wheel("torchvision", vision)]
    if audio:
        wheels.append(wheel("torchaudio", audio))
    report = torchguard.scan(wheels, system32=[vc_runtime])
    assert report.ok and not report.findings, report.render_text()
    assert {p.status for p in report.packages} == {"ok"}
