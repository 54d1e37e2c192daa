"""compile-not-ready on Linux: the triton installed beside torch is not the one torch's own
METADATA pins (``triton==3.5.1`` for torch 2.9.1, read from the real manylinux wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_linux_hints import TORCH_291, _metadata
from test_linux_import import analyze, torch_site

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.extensions import torch_pins
from torchguard._report.findings import Finding
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.linux_package_mismatch import package_mismatch


def _triton(site: Path, version: str, name: str = "triton") -> None:
    (site / f"{name.replace('-', '_')}-{version}.dist-info").mkdir()


def _compile(site: Path) -> list[Finding]:
    return [f for f in analyze(site).findings if f.code == Code.COMPILE_NOT_READY]


@pytest.mark.parametrize("installed", ["3.4.0", "3.5.0", "3.6.0"])
def test_a_triton_other_than_torchs_pin_is_a_warning(tmp_path: Path, installed: str) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    _triton(site, installed)
    (finding,) = _compile(site)
    assert finding.severity == "warning" and finding.package == "triton"
    assert f"triton {installed} is installed, but torch 2.9.1+cu128 pins triton==3.5.1" in (
        finding.message
    )
    assert "torch.compile" in finding.message and "`import torch` is unaffected" in finding.message
    assert finding.hints[0].commands == ("python -m pip install triton==3.5.1",)


def test_the_pinned_triton_and_no_triton_say_nothing(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291)
    assert _compile(site) == []  # torch.compile may not be used: nothing to judge
    _triton(site, "3.5.1")
    assert _compile(site) == []


def test_a_torch_without_a_triton_pin_says_nothing(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _metadata(site, TORCH_291.replace("Requires-Dist: triton==3.5.1", "Requires-Dist: trit"))
    _triton(site, "3.2.0")
    assert _compile(site) == []


def test_package_mismatch_reads_the_other_direction_and_misses_triton(tmp_path: Path) -> None:
    """Why a rule of its own: package-mismatch judges what neighbours pin of torch."""
    _triton(tmp_path, "3.4.0")
    pins = [(p.name, p.version, p.requires) for p in torch_pins(str(tmp_path))]
    assert pins == [("triton", "3.4.0", None)]
    assert list(package_mismatch(pins, "2.9.1", LinuxHints())) == []
