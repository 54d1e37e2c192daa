"""torch's siblings and extensions: discovery by imports, load replay after torch, outcomes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, write_tree
from pe_builder import I386, build_pe

import torchguard
from torchguard._frontends import api as _api
from torchguard._platforms.windows.loader import WINERROR
from torchguard._report.report import Report
from torchguard._rules.packages import FAILURE_FINDINGS

TORCH = ("c10.dll", "torch_cpu.dll")


def torchvision(**override: bytes | None) -> dict[str, bytes]:
    """A fake torchvision 0.19.1 laid out like the real wheel (see test_realwheels)."""
    files: dict[str, bytes | None] = {
        "torchvision/__init__.py": b"",
        "torchvision/_C.pyd": build_pe([*TORCH, "MSVCP140.dll", *KERNEL]),
        "torchvision/image.pyd": build_pe(["libpng16.dll", "jpeg8.dll", *TORCH, *KERNEL]),
        "torchvision/libpng16.dll": build_pe(["zlib.dll", *KERNEL]),
        "torchvision/zlib.dll": build_pe(KERNEL),
        "torchvision/jpeg8.dll": build_pe(KERNEL),
    }
    files.update(override)
    present = {k: v for k, v in files.items() if v is not None}
    record = {k: v or b"" for k, v in files.items()}
    out = companion("torchvision", "0.19.1", record, {})
    return {k: v for k, v in out.items() if k in present or k not in record}


def torchaudio(ffmpeg_dirs: bool = False, **override: bytes | None) -> dict[str, bytes]:
    ffmpeg6 = ["avutil-58.dll", "avcodec-60.dll"]
    files: dict[str, bytes | None] = {
        "torchaudio/__init__.py": b"",
        "torchaudio/lib/libtorchaudio.pyd": build_pe([*TORCH, "VCOMP140.DLL", *KERNEL]),
        "torchaudio/lib/_torchaudio.pyd": build_pe(
            ["libtorchaudio.pyd", "python311.dll", *TORCH, *KERNEL]
        ),
        "torio/lib/libtorio_ffmpeg6.pyd": build_pe([*TORCH, *ffmpeg6, *KERNEL]),
        "torio/lib/_torio_ffmpeg6.pyd": build_pe(["libtorio_ffmpeg6.pyd", *TORCH, *ffmpeg6]),
        "torio/lib/libtorio_ffmpeg4.pyd": build_pe([*TORCH, "avutil-56.dll", *KERNEL]),
        "torio/lib/_torio_ffmpeg4.pyd": build_pe(["libtorio_ffmpeg4.pyd", "avutil-56.dll"]),
    }
    files.update(override)
    present = {k: v for k, v in files.items() if v is not None}
    out = companion("torchaudio", "2.4.1", present, {})
    return out


def scan(
    tmp_path: Path,
    *packages: dict[str, bytes],
    torch: FakeTorch | None = None,
    system32: tuple[str, ...] = ("msvcp140.dll", "vcruntime140_1.dll", "vcomp140.dll"),
) -> Report:
    from fakes import system32 as make_system32

    site = (torch or FakeTorch()).write(tmp_path / "site")
    for files in packages:
        write_tree(site, files)
    s32 = make_system32(tmp_path / "s32", system32)
    return torchguard.scan([site], system32=[s32], clean_windows=True)


def outcome(report: Report, name: str) -> dict[str, object]:
    (found,) = [p.to_dict() for p in report.packages if p.name == name]
    return found


def test_healthy_siblings_import_cleanly(tmp_path: Path) -> None:
    report = scan(tmp_path, torchvision(), torchaudio())
    assert report.findings == ()
    assert outcome(report, "torchvision")["status"] == "ok"
    audio = outcome(report, "torchaudio")
    assert audio["status"] == "ok"
    (note,) = audio["unavailable"]  # no FFmpeg anywhere: the normal case, no finding
    assert "FFmpeg 6, FFmpeg 4: none loads (first: avutil-58.dll)" in note
    assert "import torchvision (torchvision 0.19.1) succeeds" in report.render_text()


def test_a_missing_image_dependency_is_a_warning_for_torchvision(tmp_path: Path) -> None:
    report = scan(tmp_path, torchvision(**{"torchvision/jpeg8.dll": None}))
    assert report.ok
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.package) == (
        "missing-dll",
        "warning",
        "torchvision",
    )
    assert finding.missing == "jpeg8.dll" and finding.chain == ("image.pyd", "jpeg8.dll")
    assert "`import torchvision` loses torchvision.io image" in finding.message
    assert "torchvision==0.19.1" in finding.hints[0].commands[0]
    vision = outcome(report, "torchvision")
    assert vision["status"] == "warns" and vision["dll"] == "image.pyd"
    assert "Failed to load image Python extension: Could not find module" in str(vision["message"])
    data = json.loads(report.to_json())
    assert data["findings"][0]["package"] == "torchvision"
    assert data["packages"][0]["winerror"] == 126


def test_a_core_extension_that_cannot_load_is_an_error_for_its_package(tmp_path: Path) -> None:
    broken = build_pe([*TORCH, "cudart64_12.dll", *KERNEL])
    report = scan(tmp_path, torchvision(**{"torchvision/_C.pyd": broken}))
    assert not report.ok
    assert report.import_torch is not None and report.import_torch.ok
    (finding,) = report.errors
    assert (finding.code, finding.package, finding.missing) == (
        "missing-dll",
        "torchvision",
        "cudart64_12.dll",
    )
    vision = outcome(report, "torchvision")
    assert vision["status"] == "fails" and vision["dll"] == "_c.pyd"
    assert "operator torchvision::nms does not exist" in str(vision["message"])
    hint = report.findings[0].hints[0]  # not torchvision's file: the generic missing-DLL advice
    assert "torchvision" not in " ".join(hint.commands)


def test_a_recorded_core_extension_that_is_absent_fails_the_import(tmp_path: Path) -> None:
    report = scan(tmp_path, torchvision(**{"torchvision/_C.pyd": None}))
    (finding,) = report.errors
    assert finding.chain == ("torchvision", "_C.pyd") and finding.package == "torchvision"
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("--force-reinstall --no-deps torchvision==0.19.1")  # PyPI's: CPU builds
    )


@pytest.mark.parametrize(
    ("victim", "code", "severity"),
    [
        ("torchvision/_C.pyd", "arch-mismatch", "error"),
        ("torchvision/image.pyd", "arch-mismatch", "warning"),
        ("torchvision/libpng16.dll", "arch-mismatch", "warning"),
    ],
)
def test_other_failure_kinds_flow_through_with_the_package(
    tmp_path: Path, victim: str, code: str, severity: str
) -> None:
    report = scan(tmp_path, torchvision(**{victim: build_pe(KERNEL, machine=I386)}))
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.package) == (code, severity, "torchvision")


def test_a_corrupt_binary_of_a_sibling_names_its_package(tmp_path: Path) -> None:
    report = scan(tmp_path, torchvision(**{"torchvision/zlib.dll": b"MZ not a PE"}))
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.package) == (
        "corrupt-dll",
        "warning",
        "torchvision",
    )
    assert finding.chain == ("image.pyd", "libpng16.dll", "zlib.dll")


def test_every_failure_kind_becomes_a_package_finding() -> None:
    """A kind the loader can report (WinError 126, 193, 127 ...) without a finding would vanish."""
    assert set(FAILURE_FINDINGS) == set(WINERROR)


def test_an_extension_is_found_by_its_imports_alone(tmp_path: Path) -> None:
    scatter = companion(
        "torch-scatter",
        "2.1.2",
        {
            "torch_scatter/__init__.py": b"from . import _scatter_cpu, _version_cpu\n",
            "torch_scatter/_scatter_cpu.pyd": build_pe(
                ["torch_cpu.dll", "c10.dll", "missing_helper.dll", *KERNEL]
            ),
            "torch_scatter/_version_cpu.pyd": build_pe(["c10.dll", *KERNEL]),
            "torch_scatter/missing_helper.dll": build_pe(KERNEL),
        },
        {},
    )
    del scatter["torch_scatter/missing_helper.dll"]  # in its RECORD, gone from the disk
    unrelated = companion(
        "numpy",
        "1.26.4",
        {"numpy/core/_multiarray_umath.pyd": build_pe(["libopenblas.dll", *KERNEL])},
        {},
    )
    report = scan(tmp_path, scatter, unrelated)
    (finding,) = report.findings  # numpy's missing DLL is not a torch matter
    assert (finding.code, finding.severity, finding.package) == (
        "missing-dll",
        "error",
        "torch-scatter",
    )
    assert finding.missing == "missing_helper.dll"
    assert (
        "`import torch_scatter` fails (torch_scatter._scatter_cpu does not load)" in finding.message
    )
    assert [p.name for p in report.packages] == ["torch-scatter"]
    scatter_outcome = outcome(report, "torch-scatter")
    assert scatter_outcome["import"] == "torch_scatter"
    assert "DLL load failed while importing _scatter_cpu" in str(scatter_outcome["message"])
    # its own file (listed in its RECORD): reinstall it from PyPI, not from torch's index
    assert finding.hints[0].commands == (
        "py -3.11 -m pip install --force-reinstall --no-deps torch-scatter==2.1.2",
    )


def test_torch_failing_blocks_its_siblings(tmp_path: Path) -> None:
    graph = dict(FakeTorch().graph)
    del graph["uv.dll"]
    report = scan(
        tmp_path, torchvision(**{"torchvision/jpeg8.dll": None}), torch=FakeTorch(graph=graph)
    )
    assert report.import_torch is not None and not report.import_torch.ok
    assert all(f.package is None for f in report.findings)  # torch's failure explains it all
    vision = outcome(report, "torchvision")
    assert vision["status"] == "blocked" and vision["ok"] is False


def test_torchaudio_core_failure_is_an_error_and_ffmpeg_is_quiet(tmp_path: Path) -> None:
    report = scan(tmp_path, torchaudio(), system32=("msvcp140.dll", "vcruntime140_1.dll"))
    (finding,) = report.findings
    assert (finding.package, finding.missing, finding.severity) == (
        "torchaudio",
        "VCOMP140.DLL",
        "error",
    )
    audio = outcome(report, "torchaudio")
    assert audio["status"] == "fails" and audio["dll"] == "libtorchaudio.pyd"
    assert (
        audio["message"]
        == "fails: FileNotFoundError: Could not find module '...\\libtorchaudio.pyd' (or one of its dependencies)"
    )


def test_an_ffmpeg_build_found_makes_the_backend_available(tmp_path: Path) -> None:
    """FFmpeg 6's DLLs where the loader looks (System32 here): the backend loads."""
    names = (
        "msvcp140.dll",
        "vcruntime140_1.dll",
        "vcomp140.dll",
        "avutil-58.dll",
        "avcodec-60.dll",
    )
    report = scan(tmp_path, torchaudio(), system32=names)
    assert report.findings == ()
    assert outcome(report, "torchaudio")["unavailable"] == []


def test_a_sibling_error_does_not_make_ensure_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ensure() guards `import torch`; a broken torchvision is for doctor/scan to report."""
    report = scan(tmp_path, torchvision(**{"torchvision/_C.pyd": None}))
    assert not report.ok
    monkeypatch.setattr(_api, "_live_report", lambda: report)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr("torchguard._platforms.windows.register.register", lambda paths: None)
    assert _api.ensure() is report


def test_a_warm_scan_reads_no_sibling_binary(tmp_path: Path, reads: list[str]) -> None:
    seen = reads
    cold = scan(tmp_path, torchvision(), torchaudio())
    assert "_C.pyd" in seen and "libtorio_ffmpeg6.pyd" in seen
    seen.clear()
    warm = torchguard.scan([tmp_path / "site"], system32=[tmp_path / "s32"])
    assert warm.packages == cold.packages
    assert [s for s in seen if s.endswith(".pyd")] == []


def test_a_new_failure_kind_flows_through_by_its_winerror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a later kind (the loader's missing-symbol WinError 127) gets without new code here."""
    from torchguard._platforms.windows import loader as _loader
    from torchguard._platforms.windows.loader import Failure, LoaderModel, LoadResult
    from torchguard._report.findings import ERROR, Finding

    monkeypatch.setitem(_loader.WINERROR, "symbol", 127)
    monkeypatch.setitem(
        FAILURE_FINDINGS,
        "symbol",
        lambda context, root, failure: Finding(
            "missing-symbol", ERROR, f"{failure.leaf} lacks a name", dll=root, rank=15
        ),
    )
    real_load = LoaderModel.load

    def load(self: LoaderModel, root: str) -> LoadResult:
        result = real_load(self, root)
        if root.lower().endswith("torchvision\\_c.pyd"):
            result.failures.append(Failure("symbol", "c10.dll", ("_C.pyd", "c10.dll")))
        return result

    monkeypatch.setattr(LoaderModel, "load", load)
    report = scan(tmp_path, torchvision())
    (finding,) = report.findings
    assert (finding.code, finding.package, finding.severity) == (
        "missing-symbol",
        "torchvision",
        "error",
    )
    assert finding.message.startswith("`import torchvision` fails (torchvision._C does not load): ")
    vision = outcome(report, "torchvision")
    assert (vision["status"], vision["winerror"]) == ("fails", 127)


def test_a_failing_video_reader_is_quiet_but_listed(tmp_path: Path) -> None:
    """torchvision sets _HAS_VIDEO_OPT = False without a word: no finding, a note."""
    reader = build_pe([*TORCH, "avcodec-58.dll", *KERNEL])
    report = scan(tmp_path, torchvision(**{"torchvision/video_reader.pyd": reader}))
    assert report.findings == ()
    vision = outcome(report, "torchvision")
    assert vision["status"] == "ok"
    assert vision["unavailable"] == [
        "torchvision.io video_reader backend (video_reader.pyd: WinError 126)"
    ]


def test_an_extension_dll_loaded_with_ctypes_reads_as_ctypes_fails(tmp_path: Path) -> None:
    ops = companion(
        "myops",
        "1.0",
        {"myops/lib/myops_kernels.dll": build_pe(["torch_cuda.dll", *KERNEL], machine=I386)},
        {},
    )
    report = scan(tmp_path, ops)
    (finding,) = report.findings
    assert (finding.code, finding.package, finding.chain) == (
        "arch-mismatch",
        "myops",
        ("myops_kernels.dll",),
    )
    mine = outcome(report, "myops")
    assert (mine["import"], mine["winerror"]) == ("myops", 193)
    assert mine["message"] == "fails: OSError: [WinError 193] loading '...\\myops_kernels.dll'"


def test_a_sibling_is_one_more_entry_of_the_loaders_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner follows the table: order, gates and roles come from the entry alone."""
    from torchguard._facts.vocab import Loader, Role
    from torchguard._platforms.windows import siblings

    entry = siblings.KnownSibling(
        "toyvision",
        (
            siblings.KnownLoad("toyvision", "core", Role.CORE, Loader.CTYPES, "toyvision core"),
            siblings.KnownLoad(  # gated on a module the wheel does not ship: never loaded
                "toyvision", "extra", Role.CORE, Loader.CTYPES, "toyvision extra", gate="absent"
            ),
        ),
        others=Role.QUIET,
    )
    monkeypatch.setitem(siblings.SIBLINGS, "toyvision", entry)
    broken = build_pe([*TORCH, "nowhere.dll", *KERNEL])
    files = {
        "toyvision/__init__.py": b"",
        "toyvision/core.pyd": build_pe([*TORCH, *KERNEL]),
        "toyvision/extra.pyd": broken,
        "toyvision/other.pyd": broken,
    }
    report = scan(tmp_path, companion("toyvision", "1.0", files, {}))
    toy = outcome(report, "toyvision")
    assert toy["status"] == "ok"  # extra is gated off; other is quiet by the entry's default
    assert report.ok and not [f for f in report.findings if f.severity == "error"]
    monkeypatch.setitem(
        siblings.SIBLINGS,
        "toyvision",
        siblings.KnownSibling("toyvision", (*entry.loads[:1],), others=Role.CORE),
    )
    report = scan(tmp_path / "again", companion("toyvision", "1.0", files, {}))
    assert outcome(report, "toyvision")["status"] == "fails"  # now other.pyd is core
