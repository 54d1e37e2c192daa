"""package-mismatch: torchvision/torchaudio pinned to another torch or another build variant."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, system32, write_wheel

import torchguard


def add_dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("requires", "version", "problem"),
    [
        (["torch ==2.4.0"], "0.19.0", "requires torch==2.4.0"),
        (["torch ==2.4.1"], "0.19.1+cu121", "is a +cu121 build while torch is +cpu"),
        (["numpy", "torch (==2.3.1)"], "0.18.1", "requires torch==2.3.1"),
    ],
)
def test_mismatched_sibling_is_a_warning(
    tmp_path: Path, requires: list[str], version: str, problem: str
) -> None:
    site = FakeTorch(version="2.4.1+cpu").write(tmp_path / "site")
    add_dist(site, "torchvision", version, requires)
    report = torchguard.scan([site], system32=[system32(tmp_path / "s32")])
    assert report.ok
    (finding,) = report.findings
    assert finding.code == "package-mismatch" and problem in finding.message
    # no binary of the package to replay: every way it can go, the quiet one included
    assert "`import torchvision` may fail" in finding.message
    assert "crash while its operators register" in finding.message
    assert "or work while its compiled operators" in finding.message
    assert "`torchvision.ops.nms` raises NotImplementedError" in finding.message
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("--force-reinstall torch==2.4.1 torchvision")  # PyPI's are the CPU builds
    )


@pytest.mark.parametrize(
    ("requires", "version"),
    [
        (["torch ==2.4.1"], "0.19.1"),
        (["torch ==2.4.1"], "0.19.1+cpu"),
        (["torch >=2.0", "pillow"], "0.19.1"),
        ([], "0.19.1"),
        (["torch ==2.4.0 ; extra == 'x'"], "0.19.0"),
    ],
)
def test_matching_or_unpinned_siblings_are_fine(
    tmp_path: Path, requires: list[str], version: str
) -> None:
    site = FakeTorch(version="2.4.1+cpu").write(tmp_path / "site")
    add_dist(site, "torchvision", version, requires)
    assert torchguard.scan([site], system32=[system32(tmp_path / "s32")]).findings == ()


def test_broken_requirement_lines_are_skipped(tmp_path: Path) -> None:
    site = FakeTorch().write(tmp_path / "site")
    add_dist(site, "torchaudio", "2.4.1", ["torch >=>= 1", "torch ==2.4.0"])
    (finding,) = torchguard.scan([site], system32=[system32(tmp_path / "s32")]).findings
    assert "requires torch==2.4.0" in finding.message


def test_a_leftover_second_torch_dist_info_does_not_decide_the_version(tmp_path: Path) -> None:
    """An interrupted upgrade left torch-2.3.0+cpu.dist-info beside 2.4.1's, listed first:
    torch/version.py says what is installed, so the matching torchvision is no mismatch."""
    stale = "torch-2.3.0+cpu.dist-info"
    vision = "torchvision-0.19.1.dist-info"
    files = {  # a wheel's members are listed in this order: the stale dist-info comes first
        f"{stale}/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.3.0+cpu\n",
        f"{stale}/RECORD": f"torch/version.py,,\n{stale}/RECORD,,\n".encode(),
        **FakeTorch().files(),
        f"{vision}/METADATA": (
            b"Metadata-Version: 2.1\nName: torchvision\nVersion: 0.19.1\n"
            b"Requires-Dist: torch ==2.4.1\n"
        ),
    }
    target = tmp_path / "torch-2.4.1+cpu-cp311-cp311-win_amd64.whl"
    write_wheel(target, files)
    report = torchguard.scan([target], system32=[system32(tmp_path / "s32")])
    assert report.torch is not None and report.torch.version == "2.4.1+cpu"
    assert report.findings == ()
