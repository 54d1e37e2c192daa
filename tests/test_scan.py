"""Offline scans of fake Windows installs: folders, wheels, overlays."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, system32, write_tree, write_wheel
from pe_builder import I386, build_pe

import torchguard
from torchguard._report.findings import ERROR, WARNING


def codes(report: torchguard.Report) -> list[tuple[str, str | None, str | None]]:
    return [(f.code, f.dll, f.missing) for f in report.findings]


def test_healthy_install_is_clean(tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path) -> None:
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    assert report.ok and report.findings == ()
    assert report.import_torch is not None and report.import_torch.ok
    assert report.torch is not None and report.torch.version == "2.4.1+cpu"
    assert report.torch.variant == "cpu"


def test_no_vc_runtime_names_msvcp140_via_c10(tmp_path: Path, fake_torch: FakeTorch) -> None:
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], clean_windows=True)
    first = report.errors[0]
    assert (first.code, first.dll, first.missing) == ("missing-dll", "c10.dll", "MSVCP140.dll")
    assert report.import_torch is not None
    assert (report.import_torch.winerror, report.import_torch.dll) == (126, "c10.dll")
    assert any("winget install" in c for h in first.hints for c in h.commands)
    assert first.hints[0].url == "https://aka.ms/vs/17/release/vc_redist.x64.exe"


def test_removed_openmp_names_fbgemm_and_the_leaf(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    del fake_torch.graph["libiomp5md.dll"]
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    assert codes(report) == [("missing-dll", "fbgemm.dll", "libiomp5md.dll")]
    assert report.findings[0].chain == ("fbgemm.dll", "libiomp5md.dll")
    assert report.import_torch is not None and report.import_torch.dll == "fbgemm.dll"


def test_removed_uv_is_reported_deep_below_shm(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    del fake_torch.graph["uv.dll"]
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    (finding,) = report.findings
    assert finding.missing == "uv.dll" and finding.dll == "shm.dll"
    assert finding.chain == ("shm.dll", "torch_cpu.dll", "uv.dll")
    assert "reinstall" in finding.hints[0].summary or "incomplete" in finding.hints[0].summary
    assert "--force-reinstall" in finding.hints[0].commands[0]
    assert "torch==2.4.1" in finding.hints[0].commands[0]


def test_truncated_fbgemm_is_corrupt(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    site = fake_torch.write(tmp_path / "site")
    dll = site / "torch" / "lib" / "fbgemm.dll"
    dll.write_bytes(dll.read_bytes()[:700])
    report = torchguard.scan([site], system32=[runtime_dir])
    first = report.errors[0]
    assert (first.code, first.missing) == ("corrupt-dll", "fbgemm.dll")
    assert first.path is not None and first.path.endswith("fbgemm.dll")
    assert report.import_torch is not None
    assert (report.import_torch.winerror, report.import_torch.dll) == (193, "fbgemm.dll")


def test_x86_dll_in_torch_lib_is_an_arch_mismatch(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    fake_torch.extra["torch/lib/asmjit.dll"] = build_pe(list(KERNEL), machine=I386)
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    first = report.errors[0]
    assert (first.code, first.missing) == ("arch-mismatch", "asmjit.dll")
    assert "x86" in first.message


def test_torch_not_found(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    report = torchguard.scan([tmp_path / "site"])
    assert [f.code for f in report.findings] == ["torch-not-found"]
    assert not report.ok


def test_missing_delay_import_is_a_warning(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    fake_torch.extra["torch/lib/torch_global_deps.dll"] = build_pe(
        list(KERNEL), ["nvToolsExt64_1.dll"]
    )
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    assert report.ok
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.missing) == (
        "missing-dll",
        WARNING,
        "nvToolsExt64_1.dll",
    )


def test_python_abi_mismatch_names_the_python_dll(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """torch_python.dll built for 3.12 inside a cp311 layout: python312.dll is missing."""
    fake_torch.graph["torch_python.dll"] = ("python312.dll", *KERNEL)
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    first = report.errors[0]
    assert first.missing == "python312.dll"
    assert "Python 3.12" in first.hints[0].summary


def test_wheel_and_its_unpacked_tree_agree(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    del fake_torch.graph["libiomp5md.dll"]
    from_dir = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    from_wheel = torchguard.scan([fake_torch.wheel(tmp_path)], system32=[runtime_dir])
    assert [f.to_dict() for f in from_dir.findings] == [f.to_dict() for f in from_wheel.findings]
    assert from_dir.import_torch == from_wheel.import_torch


def _target_openmp(
    tmp_path: Path, fake_torch: FakeTorch, recorded: str = "Library/bin/libiomp5md.dll"
) -> Path:
    """torch/lib without libiomp5md.dll; intel-openmp's DLL in the site's Library/bin.

    ``recorded`` is the path its RECORD gives for the DLL.
    """
    del fake_torch.graph["libiomp5md.dll"]
    site = fake_torch.write(tmp_path / "site")
    files = companion(
        "intel-openmp",
        "2024.2.1",
        {"Library/bin/libiomp5md.dll": build_pe(list(KERNEL))},
        {"Library/bin/libiomp5md.dll": recorded},
    )
    write_tree(site, files)
    return site


def test_companion_folder_torch_forgets_is_registered(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    report = torchguard.scan([_target_openmp(tmp_path, fake_torch)], system32=[runtime_dir])
    assert report.ok
    assert report.import_torch is not None and report.import_torch.ok
    plain = report.import_torch_without_torchguard
    assert plain is not None and (plain.ok, plain.dll) == (False, "fbgemm.dll")
    (finding,) = report.findings
    assert (finding.code, finding.missing) == ("needs-dll-directory", "libiomp5md.dll")
    assert [(d.name, d.version) for d in report.distributions] == [("intel-openmp", "2024.2.1")]
    added = [d for d in report.dll_directories if not d.by_torch]
    assert [d.path.lower() for d in added] == ["c:\\python\\lib\\site-packages\\library\\bin"]
    assert "intel-openmp" in added[0].provenance


def test_pip_target_layout_with_a_stale_record(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """pip --target puts Library/bin under the target but RECORD says ../../Library/bin."""
    site = _target_openmp(tmp_path, fake_torch, "../../Library/bin/libiomp5md.dll")
    report = torchguard.scan([site], system32=[runtime_dir])
    assert report.ok and report.import_torch is not None and report.import_torch.ok
    assert [f.code for f in report.findings] == ["needs-dll-directory"]


def test_wheels_overlay_into_one_site(tmp_path: Path, fake_torch: FakeTorch) -> None:
    """torch + a companion wheel whose DLLs install under the prefix (*.data/data)."""
    del fake_torch.graph["libiomp5md.dll"]
    torch_wheel = fake_torch.wheel(tmp_path)
    files = {
        "intel_openmp-2024.2.1.data/data/Library/bin/libiomp5md.dll": build_pe(list(KERNEL)),
        "intel_openmp-2024.2.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: intel-openmp\nVersion: 2024.2.1\n",
    }
    from fakes import record

    files["intel_openmp-2024.2.1.dist-info/RECORD"] = record(
        files, "intel_openmp-2024.2.1.dist-info"
    )
    omp = tmp_path / "intel_openmp-2024.2.1-py2.py3-none-win_amd64.whl"
    write_wheel(omp, files)
    report = torchguard.scan([torch_wheel, omp], system32=[system32(tmp_path / "s32")])
    assert report.ok and report.findings == ()
    assert any("Library\\bin" in d.path and d.by_torch for d in report.dll_directories)


def test_python_dir_replaces_the_assumed_layout(tmp_path: Path, fake_torch: FakeTorch) -> None:
    """python.org ships vcruntime140_1.dll; a --python-dir without it makes it missing."""
    fake_torch.graph["c10.dll"] = ("VCRUNTIME140_1.dll", *fake_torch.graph["c10.dll"])
    site = fake_torch.write(tmp_path / "site")
    s32 = system32(tmp_path / "s32", ["msvcp140.dll"])
    assumed = torchguard.scan([site], system32=[s32], clean_windows=True)
    assert assumed.ok
    python_dir = system32(tmp_path / "py", ["msvcp140.dll", "python311.dll", "vcruntime140.dll"])
    report = torchguard.scan([site], python_dir=python_dir, clean_windows=True)
    assert [(f.dll, f.missing) for f in report.errors] == [("c10.dll", "VCRUNTIME140_1.dll")]


def test_findings_are_sorted_errors_first(tmp_path: Path, fake_torch: FakeTorch) -> None:
    fake_torch.extra["torch/lib/torch_global_deps.dll"] = build_pe(list(KERNEL), ["late.dll"])
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], clean_windows=True)
    severities = [f.severity for f in report.findings]
    assert severities == sorted(severities, key=[ERROR, WARNING].index)


def test_bad_targets_raise_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        torchguard.scan([tmp_path / "nope.whl"])
    bogus = tmp_path / "bogus.whl"
    bogus.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable wheel"):
        torchguard.scan([bogus])
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(ValueError, match=r"not a \.whl"):
        torchguard.scan([text])
    with pytest.raises(TypeError):
        torchguard.scan(str(text))  # type: ignore[arg-type]


def test_damaged_wheel_member_is_a_corrupt_dll_finding(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """A wheel whose fbgemm.dll member fails to inflate: a finding, not a traceback."""
    import zipfile

    path = fake_torch.wheel(tmp_path)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("torch/lib/fbgemm.dll")
        offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data = bytearray(path.read_bytes())
    for index in range(offset + 10, offset + 60):
        data[index] ^= 0xFF
    path.write_bytes(bytes(data))
    report = torchguard.scan([path], system32=[runtime_dir])
    assert report.errors[0].code == "corrupt-dll"
    assert report.errors[0].missing == "fbgemm.dll"


def test_siblings_and_companions_are_listed(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    site = fake_torch.write(tmp_path / "site")
    for name, version in (
        ("torchvision", "0.19.1"),
        ("nvidia-cuda-runtime-cu12", "12.4.127"),
        ("requests", "2.0"),
    ):
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    report = torchguard.scan([site], system32=[runtime_dir])
    assert [(d.name, d.version) for d in report.distributions] == [
        ("nvidia-cuda-runtime-cu12", "12.4.127"),
        ("torchvision", "0.19.1"),
    ]
    assert "with: nvidia-cuda-runtime-cu12 12.4.127, torchvision 0.19.1" in report.render_text()


def test_brackets_in_the_path_make_torch_preload_nothing(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glob reads C:\\X\\[Goods]\\... as a pattern: no preloads, so _C is what fails."""
    from torchguard._platforms.windows import system as _system

    monkeypatch.setattr(_system, "OFFLINE_PREFIX", "C:\\X\\[Goods]\\Python")
    site = fake_torch.write(tmp_path / "site")
    report = torchguard.scan([site], system32=[runtime_dir])
    assert report.ok and [f.code for f in report.findings] == ["glob-unsafe-path"]
    (tmp_path / "site" / "torch" / "lib" / "uv.dll").unlink()
    report = torchguard.scan([site], system32=[runtime_dir])
    assert report.import_torch is not None
    assert (report.import_torch.winerror, report.import_torch.dll) == (
        126,
        "_C.cp311-win_amd64.pyd",
    )
    assert report.errors[0].missing == "uv.dll"
    assert report.errors[0].chain == (
        "_C.cp311-win_amd64.pyd",
        "torch_python.dll",
        "torch_cpu.dll",
        "uv.dll",
    )


def test_a_failing_extension_reads_like_pythons_own_error() -> None:
    from torchguard._report.report import ImportOutcome

    assert ImportOutcome(False, 126, "_C.cp311-win_amd64.pyd").describe() == (
        'fails: "DLL load failed while importing _C" (WinError 126)'
    )
    assert ImportOutcome(True).describe() == "succeeds"


def test_folders_mounted_at_one_place_overlay(tmp_path: Path, fake_torch: FakeTorch) -> None:
    """Every --system32 folder counts, in any order."""
    site = fake_torch.write(tmp_path / "site")
    with_msvcp = system32(tmp_path / "a", ("msvcp140.dll",))
    with_vcruntime = system32(tmp_path / "b", ("vcruntime140_1.dll",))
    for order in ([with_msvcp, with_vcruntime], [with_vcruntime, with_msvcp]):
        report = torchguard.scan([site], system32=order, clean_windows=True)
        assert report.ok, report.render_text()
    alone = torchguard.scan([site], system32=[with_vcruntime], clean_windows=True)
    assert {f.missing for f in alone.errors} == {"MSVCP140.dll"}


def test_two_folder_targets_overlay_as_one_site_packages(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """torch in one folder, a file torch needs in another: scanned together, nothing missing."""
    site = fake_torch.write(tmp_path / "site")
    other = tmp_path / "other" / "torch" / "lib"
    other.mkdir(parents=True)
    (site / "torch" / "lib" / "uv.dll").replace(other / "uv.dll")
    assert not torchguard.scan([site], system32=[runtime_dir]).ok
    together = torchguard.scan([site, tmp_path / "other"], system32=[runtime_dir])
    assert together.ok, together.render_text()


def test_a_pure_python_wheel_joins_a_windows_wheel_set(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    """``pip download torch -d wheels`` on Windows fetches pure-Python wheels too."""
    torch_wheel = fake_torch.wheel(tmp_path)
    s32 = system32(tmp_path / "s32")
    expected = codes(torchguard.scan([torch_wheel], system32=[s32]))
    pure = tmp_path / "filelock-3.16.1-py3-none-any.whl"
    write_wheel(pure, companion("filelock", "3.16.1", {"filelock/__init__.py": b""}, {}))
    report = torchguard.scan([pure, torch_wheel], system32=[s32])
    assert codes(report) == expected and report.torch is not None
