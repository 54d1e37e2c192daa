"""Real-wheel tier for torch's siblings: torch 2.4.1 with torchvision 0.19.1 and torchaudio 2.4.1.

What the genuine wheels hold (checked by the first test, so the model's assumptions are seen
to hold): torchvision ships ``_C.pyd`` and ``image.pyd`` importing ``c10.dll`` and
``torch_cpu.dll``, with ``image.pyd`` needing ``libpng16.dll`` (which needs ``zlib.dll``) and
``jpeg8.dll`` beside it; torchaudio ships ``lib\\libtorchaudio.pyd`` (needs ``VCOMP140.DLL``)
and ``lib\\_torchaudio.pyd``, and torio's FFmpeg 6/5/4 extensions, which need FFmpeg DLLs no
wheel ships.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from realwheels import siblings, unpack_sibling, vc_runtime_dir, wheel

import torchguard
from torchguard._frontends.cli import main
from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.ecosystem import CORE, OPTIONAL, QUIET, discover
from torchguard._platforms.windows.system import offline_windows

pytestmark = pytest.mark.realwheel


@pytest.fixture(scope="module")
def vc_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vc_runtime_dir(tmp_path_factory.mktemp("vcruntime"))


def test_the_model_matches_what_the_wheels_hold() -> None:
    system = offline_windows([str(p) for p in [wheel("torch", "2.4.1"), *siblings("2.4.1")]])
    try:
        from torchguard._platforms.windows.dists import find_dists

        dists = find_dists(system.tree, system.interpreter.site_dirs)
        plans = {p.name: p for p in discover(dists, Binaries(system.tree).facts)}
    finally:
        system.close()
    assert sorted(plans) == ["torchaudio", "torchvision"]
    vision = [(s.path.rsplit("\\", 1)[-1], s.role) for s in plans["torchvision"].steps]
    assert vision == [("_C.pyd", CORE), ("image.pyd", OPTIONAL)]
    audio = [(s.path.rsplit("\\", 1)[-1], s.role, s.group) for s in plans["torchaudio"].steps]
    assert audio[:2] == [("libtorchaudio.pyd", CORE, None), ("_torchaudio.pyd", CORE, None)]
    assert [name for name, _, _ in audio[2:]] == [
        f"{kind}_ffmpeg{v}.pyd" for v in "654" for kind in ("libtorio", "_torio")
    ]
    assert {(role, group) for _, role, group in audio[2:]} == {(QUIET, "ffmpeg")}


def test_torch_241_with_its_siblings_is_clean(vc_runtime: Path) -> None:
    report = torchguard.scan([wheel("torch", "2.4.1"), *siblings("2.4.1")], system32=[vc_runtime])
    assert report.findings == (), report.render_text()
    outcomes = {p.name: p for p in report.packages}
    assert outcomes["torchvision"].status == "ok" and outcomes["torchvision"].unavailable == ()
    assert outcomes["torchaudio"].status == "ok"
    (ffmpeg,) = outcomes["torchaudio"].unavailable  # no FFmpeg installed: quiet, no finding
    assert ffmpeg.startswith("FFmpeg 6, FFmpeg 5, FFmpeg 4: none loads (first: avutil-")


def _damaged(tmp_path: Path, project: str, victim: str) -> Path:
    tree = unpack_sibling(siblings("2.4.1", project)[0], tmp_path / project)
    (tree / victim).unlink()
    return tree


def test_torchvision_without_jpeg8_warns_about_its_image_extension(
    tmp_path: Path, vc_runtime: Path
) -> None:
    tree = _damaged(tmp_path, "torchvision", "torchvision/jpeg8.dll")
    targets = [str(wheel("torch", "2.4.1")), str(tree)]
    report = torchguard.scan(targets, system32=[vc_runtime])
    (finding,) = report.findings
    assert (finding.code, finding.severity, finding.package) == (
        "missing-dll",
        "warning",
        "torchvision",
    )
    assert finding.chain == ("image.pyd", "jpeg8.dll")
    assert "torchvision==0.19.1" in finding.hints[0].commands[0]
    (vision,) = report.packages
    assert vision.status == "warns" and "Failed to load image Python extension" in vision.message
    assert main(["scan", *targets, "--system32", str(vc_runtime)]) == 0


def test_torchvision_without_zlib_breaks_image_through_libpng(
    tmp_path: Path, vc_runtime: Path
) -> None:
    tree = _damaged(tmp_path, "torchvision", "torchvision/zlib.dll")
    report = torchguard.scan([wheel("torch", "2.4.1"), tree], system32=[vc_runtime])
    (finding,) = report.findings
    assert finding.chain == ("image.pyd", "libpng16.dll", "zlib.dll")


def test_torchvision_without_its_c_extension_fails_its_import(
    tmp_path: Path, vc_runtime: Path
) -> None:
    tree = _damaged(tmp_path, "torchvision", "torchvision/_C.pyd")
    targets = [str(wheel("torch", "2.4.1")), str(tree)]
    report = torchguard.scan(targets, system32=[vc_runtime])
    assert report.import_torch is not None and report.import_torch.ok
    (error,) = report.errors
    assert (error.package, error.missing) == ("torchvision", "_C.pyd")
    (vision,) = report.packages
    assert vision.status == "fails" and "torchvision::nms" in vision.message
    assert main(["scan", *targets, "--system32", str(vc_runtime)]) == 1


def test_torchaudio_without_libtorchaudio_fails_its_import(
    tmp_path: Path, vc_runtime: Path
) -> None:
    tree = _damaged(tmp_path, "torchaudio", "torchaudio/lib/libtorchaudio.pyd")
    report = torchguard.scan([wheel("torch", "2.4.1"), tree], system32=[vc_runtime])
    (error,) = report.errors
    assert error.package == "torchaudio"
    assert error.chain == ("_torchaudio.pyd", "libtorchaudio.pyd")
    (audio,) = report.packages
    assert audio.status == "fails"
    assert audio.message == 'fails: "DLL load failed while importing _torchaudio" (WinError 126)'


def test_torchaudio_without_the_openmp_runtime_fails_its_import(tmp_path: Path) -> None:
    """libtorchaudio.pyd needs VCOMP140.DLL, which only the VC++ redistributable installs."""
    runtime = vc_runtime_dir(tmp_path / "vc")
    (runtime / "vcomp140.dll").unlink()
    report = torchguard.scan(
        [wheel("torch", "2.4.1"), *siblings("2.4.1", "torchaudio")],
        system32=[runtime],
        clean_windows=True,
    )
    (error,) = report.errors
    assert (error.package, (error.missing or "").lower()) == ("torchaudio", "vcomp140.dll")
    assert error.hints[0].url == "https://aka.ms/vs/17/release/vc_redist.x64.exe"


def test_a_broken_torch_blocks_its_siblings(vc_runtime: Path) -> None:
    """torch 2.4.0 misses libomp140.x86_64.dll: torchvision 0.19.0 never gets to load."""
    report = torchguard.scan(
        [wheel("torch", "2.4.0"), *siblings("2.4.0", "torchvision")], system32=[vc_runtime]
    )
    assert report.import_torch is not None and not report.import_torch.ok
    assert all(finding.package is None for finding in report.findings)
    (vision,) = report.packages
    assert (vision.name, vision.status) == ("torchvision", "blocked")


def test_xformers_0035_beside_the_cpu_torch_2100_warns_and_names_its_torch() -> None:
    """The genuine xformers 0.0.35 wheel (2.6 MB): its `_cpp_lib.py` catches the failed load of
    `_C.pyd` (which needs torch_cuda.dll and cudart64_12.dll) and logs a warning; its
    `cpp_lib.json` names torch 2.10.0+cu128."""
    report = torchguard.scan([wheel("torch", "2.10.0"), wheel("xformers", "0.0.35")])
    (xformers,) = report.packages
    assert report.ok and xformers.status == "warns"
    assert xformers.message.startswith(
        "succeeds, with the logged warning \"xFormers can't load C++/CUDA extensions. xFormers "
        'was built for: PyTorch 2.10.0+cu128 (you have 2.10.0+cpu)": '
    )
    assert {f.missing.lower() for f in report.warnings if f.missing} >= {"cudart64_12.dll"}
    assert {c for f in report.warnings for h in f.hints for c in h.commands} == {
        "py -3.11 -m pip install --force-reinstall torch==2.10.0 "
        "--index-url https://download.pytorch.org/whl/cu128"
    }
