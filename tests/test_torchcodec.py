"""torchcodec loads whichever FFmpeg (8 down to 4) is present: no FFmpeg at all is one warning
naming the alternatives, not one error per missing DLL (issue 27.6); FFmpeg 6 present means
the FFmpeg 8 and 7 tried first cost nothing. In-memory PE files laid out as torchcodec 0.9.1's
win_amd64 wheel (read with pefile: each libtorchcodec_core<N>.dll imports seven FFmpeg DLLs)."""

from __future__ import annotations

from pathlib import Path

from fakes import KERNEL, companion
from pe_builder import build_pe
from test_ecosystem import TORCH, outcome, scan

#: FFmpeg major -> the DLLs libtorchcodec_core<N>.dll imports (torchcodec 0.9.1's wheel).
FFMPEG = {
    8: ("avcodec-62.dll", "avfilter-11.dll", "avformat-62.dll", "avutil-60.dll",
        "swresample-6.dll", "swscale-9.dll"),
    7: ("avcodec-61.dll", "avfilter-10.dll", "avformat-61.dll", "avutil-59.dll",
        "swresample-5.dll", "swscale-8.dll"),
    6: ("avcodec-60.dll", "avfilter-9.dll", "avformat-60.dll", "avutil-58.dll",
        "swresample-4.dll", "swscale-7.dll"),
    5: ("avcodec-59.dll", "avfilter-8.dll", "avformat-59.dll", "avutil-57.dll",
        "swresample-4.dll", "swscale-6.dll"),
    4: ("avcodec-58.dll", "avfilter-7.dll", "avformat-58.dll", "avutil-56.dll",
        "swresample-3.dll", "swscale-5.dll"),
}  # fmt: skip
RUNTIME = ("msvcp140.dll", "vcruntime140_1.dll", "vcomp140.dll")


def torchcodec(other_torch: bool = False, **override: bytes | None) -> dict[str, bytes]:
    """``other_torch``: built against a c10.dll exporting a name this torch's does not."""
    files: dict[str, bytes | None] = {"torchcodec/__init__.py": b""}
    symbols = {"c10.dll": ["?MessageLogger@c10@@QEAA@XZ"]} if other_torch else None
    for major, ffmpeg in FFMPEG.items():
        core = f"libtorchcodec_core{major}.dll"
        files[f"torchcodec/{core}"] = build_pe(
            [*ffmpeg, *TORCH, "MSVCP140.dll", *KERNEL], symbols=symbols
        )
        files[f"torchcodec/libtorchcodec_custom_ops{major}.dll"] = build_pe(
            [core, *ffmpeg, *TORCH, "python311.dll", *KERNEL]
        )
        files[f"torchcodec/libtorchcodec_pybind_ops{major}.pyd"] = build_pe(
            [core, *TORCH, "python311.dll", *KERNEL]
        )
    files.update(override)
    present = {k: v for k, v in files.items() if v is not None}
    record = {k: v or b"" for k, v in files.items()}  # its RECORD lists a file removed since
    out = companion("torchcodec", "0.9.1", record, {})
    return {k: v for k, v in out.items() if k in present or k not in record}


def test_no_ffmpeg_is_one_warning_naming_every_alternative(tmp_path: Path) -> None:
    report = scan(tmp_path, torchcodec(), system32=RUNTIME)
    (finding,) = report.findings
    assert (finding.package, finding.severity, finding.code) == (
        "torchcodec",
        "warning",
        "missing-dll",
    )
    assert report.ok and report.import_torch is not None and report.import_torch.ok
    assert "whichever of FFmpeg 8, FFmpeg 7, FFmpeg 6, FFmpeg 5, FFmpeg 4 is present" in (
        finding.message
    )
    assert "libtorchcodec_core8.dll needs avcodec-62.dll (and 5 more)" in finding.message
    assert "libtorchcodec_core4.dll needs avcodec-58.dll (and 5 more)" in finding.message
    (hint,) = finding.hints
    assert hint.url == "https://github.com/pytorch/torchcodec#installing-torchcodec"
    codec = outcome(report, "torchcodec")
    assert codec["status"] == "fails"
    assert str(codec["message"]).startswith('fails: RuntimeError "Could not load libtorchcodec.')
    assert codec["unavailable"] == []


def test_ffmpeg_6_present_costs_nothing_for_the_8_and_7_tried_first(tmp_path: Path) -> None:
    report = scan(tmp_path, torchcodec(), system32=(*RUNTIME, *FFMPEG[6]))
    assert report.findings == ()
    assert outcome(report, "torchcodec")["status"] == "ok"


def test_an_attempt_fails_when_any_of_its_three_libraries_fails(tmp_path: Path) -> None:
    """FFmpeg 6 there but its custom_ops DLL gone: core6 loads, the attempt does not, so
    FFmpeg 5's is tried next, and with no FFmpeg 5 the import fails."""
    gone = torchcodec(**{"torchcodec/libtorchcodec_custom_ops6.dll": None})
    report = scan(tmp_path, gone, system32=(*RUNTIME, *FFMPEG[6]))
    assert outcome(report, "torchcodec")["status"] == "fails"
    assert not report.ok  # a file of the wheel missing: a damaged install, not a prerequisite
    (error,) = report.findings  # FFmpeg 8, 7, 5 and 4 missing are not causes of their own
    assert (error.missing, error.severity) == ("libtorchcodec_custom_ops6.dll", "error")


def test_a_broken_torch_is_the_error_and_torchcodec_is_blocked(tmp_path: Path) -> None:
    report = scan(tmp_path, torchcodec(), system32=("vcruntime140_1.dll",))
    assert report.import_torch is not None and not report.import_torch.ok
    assert outcome(report, "torchcodec")["status"] == "blocked"
    assert not any(f.package == "torchcodec" for f in report.findings)


def test_built_for_another_torch_and_no_ffmpeg_are_two_causes(tmp_path: Path) -> None:
    """ai-toolkit's torchcodec 0.9.1 under torch 2.15.0 (c10::MessageLogger gone), and no
    FFmpeg: one error for the torch it was built for, one warning for FFmpeg; no DLL twice."""
    report = scan(tmp_path, torchcodec(other_torch=True), system32=RUNTIME)
    (error,) = report.errors
    (warning,) = report.warnings
    assert (error.code, error.missing) == ("missing-symbol", "c10.dll")
    assert (warning.code, warning.package) == ("missing-dll", "torchcodec")
    assert "whichever of FFmpeg 8, FFmpeg 7, FFmpeg 6, FFmpeg 5, FFmpeg 4" in warning.message
