"""The interpreter's CPU comes from its own image or its wheel tag, never from the host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import AMD64, ARM64, I386, build_pe

import torchguard
from torchguard._binary.pe.machine import file_machine, image_machine, interpreter_machine
from torchguard._platforms.windows import live as _live
from torchguard._rules.hints import ARM64_INDEX, HintContext, for_arch

MACHINES = {"win_amd64": AMD64, "win32": I386, "win_arm64": ARM64}


@pytest.mark.parametrize("machine", [AMD64, I386, ARM64])
def test_image_machine_reads_the_pe_header(machine: int) -> None:
    assert image_machine(build_pe(["KERNEL32.dll"], machine=machine)) == machine


@pytest.mark.parametrize("data", [b"", b"MZ", b"MZ" + b"\0" * 100, b"\x7fELF" + b"\0" * 200])
def test_image_machine_of_non_images_is_none(data: bytes) -> None:
    assert image_machine(data) is None


def test_file_machine_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert file_machine(str(tmp_path / "python.exe")) is None


@pytest.mark.parametrize(
    ("platform", "machine"), [("win-amd64", AMD64), ("win32", I386), ("win-arm64", ARM64)]
)
def test_without_a_readable_image_sysconfig_decides(
    tmp_path: Path, platform: str, machine: int
) -> None:
    assert interpreter_machine([str(tmp_path / "missing.exe")], platform) == machine


def test_the_image_wins_over_sysconfig(tmp_path: Path) -> None:
    image = tmp_path / "python.exe"
    image.write_bytes(build_pe([], machine=AMD64, dll=False))
    assert interpreter_machine([str(image)], "win-arm64") == AMD64


def test_an_unknown_platform_defaults_to_x64() -> None:
    assert interpreter_machine([], "linux-x86_64") == AMD64


def test_live_python_machine_ignores_the_host_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """x64 Python on Windows on ARM: platform.machine() says ARM64, the image says x64."""
    import platform

    image = tmp_path / "python.exe"
    image.write_bytes(build_pe([], machine=AMD64, dll=False))
    monkeypatch.setattr(platform, "machine", lambda: "ARM64")
    monkeypatch.setattr(_live.sysconfig, "get_platform", lambda: "win-arm64")
    monkeypatch.setattr(sys, "executable", str(image))
    monkeypatch.setattr(sys, "platform", "linux")  # no process image to ask off Windows
    assert _live.python_machine() == AMD64
    image.unlink()
    assert _live.python_machine() == ARM64


@pytest.mark.parametrize("platform", MACHINES)
@pytest.mark.parametrize("as_wheel", [False, True])
def test_offline_scan_takes_the_cpu_from_the_platform_tag(
    tmp_path: Path, platform: str, as_wheel: bool
) -> None:
    fake = FakeTorch(platform=platform)
    target = fake.wheel(tmp_path) if as_wheel else fake.write(tmp_path / "site")
    s32 = system32(tmp_path / "s32", machine=MACHINES[platform])
    report = torchguard.scan([target], system32=[s32])
    assert report.ok, report.render_text()
    assert report.python["machine"] == {"win_amd64": "x64", "win32": "x86"}.get(platform, "arm64")


def _mismatch(tmp_path: Path, platform: str, dll_machine: int) -> torchguard.Finding:
    fake = FakeTorch(platform=platform)
    from pe_builder import build_pe as pe

    fake.extra["torch/lib/asmjit.dll"] = pe(["KERNEL32.dll"], machine=dll_machine)
    s32 = system32(tmp_path / "s32", machine=MACHINES[platform])
    report = torchguard.scan([fake.write(tmp_path / "site")], system32=[s32])
    (finding,) = [f for f in report.errors if f.code == "arch-mismatch"]
    return finding


def test_arm64_python_with_an_x64_dll_points_at_pytorchs_arm64_builds(tmp_path: Path) -> None:
    finding = _mismatch(tmp_path, "win_arm64", AMD64)
    assert "built for x64, but this Python is arm64" in finding.message
    first, second = finding.hints
    assert first.commands[0].endswith(f"--index-url {ARM64_INDEX}")
    assert "x64 Python" in second.summary and "--architecture x64" in second.commands[0]


def test_x86_python_is_told_torch_needs_64_bit(tmp_path: Path) -> None:
    finding = _mismatch(tmp_path, "win32", AMD64)
    assert "but this Python is x86" in finding.message
    (hint,) = finding.hints
    assert "no 32-bit Windows builds" in hint.summary
    assert "--architecture x64" in hint.commands[0]


def test_x64_python_hint_is_unchanged() -> None:
    (hint,) = for_arch("asmjit.dll", HintContext(python_version=(3, 11)), "x86")
    assert "64-bit x64 Python" in hint.summary and ARM64_INDEX not in " ".join(hint.commands)


@pytest.mark.parametrize(("machine", "cpu"), [(AMD64, "x64"), (I386, "x86"), (ARM64, "arm64")])
def test_vc_redist_hint_fits_the_python_cpu(machine: int, cpu: str) -> None:
    from torchguard._rules.hints import vc_redist

    hint = vc_redist(HintContext(python_machine=machine), "vcruntime140_threads.dll")
    assert f"Redistributable ({cpu})" in hint.summary
    assert hint.commands == (
        f"winget install --id Microsoft.VCRedist.2015+.{cpu} --exact",
        f"winget upgrade --id Microsoft.VCRedist.2015+.{cpu} --exact",
    )
    assert hint.url == f"https://aka.ms/vs/17/release/vc_redist.{cpu}.exe"


def test_arm64_scan_without_the_runtime_points_at_the_arm64_redistributable(
    tmp_path: Path,
) -> None:
    report = torchguard.scan(
        [FakeTorch(platform="win_arm64").write(tmp_path / "site")], clean_windows=True
    )
    finding = next(f for f in report.errors if f.missing == "MSVCP140.dll")
    assert finding.hints[0].commands[0].endswith("Microsoft.VCRedist.2015+.arm64 --exact")
