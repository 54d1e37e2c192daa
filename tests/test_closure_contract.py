"""What each closure finding carries, field by field (mutation testing found them unguarded).

``exc.dll``, ``exc.missing``, ``exc.chain``, the path, the rank that orders errors and the
hints are public: a finding that names the wrong DLL or loses its chain is a wrong diagnosis.
"""

from __future__ import annotations

from pathlib import Path

from fakes import KERNEL, FakeTorch, companion, system32, write_tree
from pe_builder import I386, build_pe

import torchguard
from torchguard._rules.closure import RANK


def _scan(site: Path, tmp_path: Path) -> torchguard.Report:
    return torchguard.scan([site], system32=[system32(tmp_path / "s32")])


def _one(report: torchguard.Report, code: str, missing: str) -> torchguard.Finding:
    (finding,) = [f for f in report.findings if (f.code, f.missing) == (code, missing)]
    return finding


def test_corrupt_dll_names_root_chain_path_rank_and_the_owner_to_reinstall(
    tmp_path: Path,
) -> None:
    """A damaged DLL of a companion (intel-openmp): reinstall that package, not torch."""
    fake = FakeTorch()
    del fake.graph["libiomp5md.dll"]
    site = fake.write(tmp_path / "site")
    bad = build_pe(list(KERNEL))[:700]
    files = companion(
        "intel-openmp",
        "2024.2.1",
        {"Library/bin/libiomp5md.dll": bad},
        {"Library/bin/libiomp5md.dll": "Library/bin/libiomp5md.dll"},
    )
    write_tree(site, files)
    report = _scan(site, tmp_path)
    finding = _one(report, "corrupt-dll", "libiomp5md.dll")
    assert finding.severity == "error" and finding.rank == RANK["corrupt"]
    assert finding.dll == "fbgemm.dll" and finding.chain == ("fbgemm.dll", "libiomp5md.dll")
    assert finding.path is not None and finding.path.endswith("libiomp5md.dll")
    assert "libiomp5md.dll is not a loadable image: truncated" in finding.message
    (hint,) = finding.hints
    assert hint.summary.startswith("libiomp5md.dll is damaged")
    assert hint.commands[0].endswith("--no-cache-dir intel-openmp==2024.2.1")


def test_arch_mismatch_names_root_chain_path_rank_and_machines(tmp_path: Path) -> None:
    fake = FakeTorch()
    fake.extra["torch/lib/asmjit.dll"] = build_pe(list(KERNEL), machine=I386)
    report = _scan(fake.write(tmp_path / "site"), tmp_path)
    finding = _one(report, "arch-mismatch", "asmjit.dll")
    assert finding.rank == RANK["arch"] and finding.dll == "asmjit.dll"
    assert finding.chain == ("asmjit.dll",)
    assert finding.path is not None and finding.path.endswith("asmjit.dll")
    assert finding.message == "asmjit.dll is built for x86, but this Python is x64"
    (hint,) = finding.hints
    assert hint.summary.startswith("asmjit.dll is built for x86, not for this 64-bit x64")


def test_missing_dll_names_its_importer_and_fits_the_hint_to_the_owner(tmp_path: Path) -> None:
    fake = FakeTorch()
    fake.graph["fbgemm.dll"] = (*fake.graph["fbgemm.dll"], "stranger.dll")
    site = fake.write(tmp_path / "site")
    (site / "torch" / "lib" / "uv.dll").unlink()  # torch's RECORD still lists it
    report = torchguard.scan([site], clean_windows=True)  # no VC++ runtime either
    uv = _one(report, "missing-dll", "uv.dll")
    assert uv.rank == RANK["missing"] and uv.severity == "error"
    assert uv.message.startswith("uv.dll is missing; torch_cpu.dll needs it")
    (hint,) = uv.hints
    assert (
        hint.summary == "uv.dll is part of torch itself and is missing: the install is incomplete"
    )
    stranger = _one(report, "missing-dll", "stranger.dll")
    assert "part of torch" not in " ".join(h.summary for h in stranger.hints)
    runtime = _one(report, "missing-dll", "MSVCP140.dll")
    assert runtime.message.startswith("MSVCP140.dll is missing; c10.dll needs it")
    assert "VCRedist" in " ".join(runtime.hints[0].commands)


def test_missing_delay_import_is_a_warning_ranked_after_errors(tmp_path: Path) -> None:
    fake = FakeTorch()
    fake.extra["torch/lib/c10.dll"] = build_pe(list(KERNEL), ["nvToolsExt64_1.dll"])
    report = _scan(fake.write(tmp_path / "site"), tmp_path)
    finding = _one(report, "missing-dll", "nvToolsExt64_1.dll")
    assert finding.severity == "warning" and finding.rank == 60
    assert finding.message.startswith("nvToolsExt64_1.dll is missing; c10.dll delay-loads it")


def test_every_distinct_failure_becomes_a_finding(tmp_path: Path) -> None:
    """The same leaf failing in several loads is one finding; other leaves are not lost."""
    fake = FakeTorch()
    del fake.graph["libiomp5md.dll"]
    del fake.graph["uv.dll"]
    report = _scan(fake.write(tmp_path / "site"), tmp_path)
    missing = sorted(f.missing or "" for f in report.errors if f.code == "missing-dll")
    assert missing == ["libiomp5md.dll", "uv.dll"]
