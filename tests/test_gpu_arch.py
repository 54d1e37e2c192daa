"""gpu-arch-unsupported: torch_cuda.dll's .nv_fatb against the machine's NVIDIA GPU."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from pe_builder import build_pe
from pe_sections import with_section
from test_fatbin import container, entry

import torchguard
from torchguard._facts.gpus import compute_capability, cuda_can_build
from torchguard._platforms.windows.gpus import DisplayAdapter


def torch_cuda(sass: tuple[int, ...], ptx: tuple[int, ...] = ()) -> bytes:
    entries = [entry(2, a, b"sass") for a in sass] + [entry(1, a, b"ptx") for a in ptx]
    return with_section(build_pe(["KERNEL32.dll"]), ".nv_fatb", container(*entries))


def scan(
    tmp_path: Path,
    gpu: str,
    version: str = "2.5.1+cu124",
    cuda: str = "12.4",
    sass: tuple[int, ...] = (50, 60, 61, 70, 75, 80, 86, 90),
    ptx: tuple[int, ...] = (),
    driver: tuple[int, int, int, int] | None = (32, 0, 15, 7261),  # 572.61
) -> torchguard.Report:
    fake = FakeTorch(
        version=version, cuda=cuda, extra={"torch/lib/torch_cuda.dll": torch_cuda(sass, ptx)}
    )
    site = fake.write(tmp_path / "site")
    folder = system32(tmp_path / "s32")
    if driver:
        (folder / "nvcuda.dll").write_bytes(build_pe(["KERNEL32.dll"], file_version=driver))
    return torchguard.scan([site], system32=[folder], gpus=[gpu])


def test_rtx_5090_on_a_cu124_build_is_told_to_take_cu128_of_torch_27(tmp_path: Path) -> None:
    report = scan(tmp_path, "NVIDIA GeForce RTX 5090")
    assert report.ok
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("gpu-arch-unsupported", "warning")
    assert "sm_120" in finding.message and "sm_90" in finding.message
    assert "no kernel image" in finding.message
    # torch 2.5 has no CUDA 12.8 build: the first release that has one
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.7.1 --index-url https://download.pytorch.org/whl/cu128")
    )


def test_ptx_lets_a_newer_gpu_jit_compile(tmp_path: Path) -> None:
    assert scan(tmp_path, "NVIDIA GeForce RTX 5090", ptx=(90,)).findings == ()


def test_sass_of_the_same_major_runs_on_a_later_minor(tmp_path: Path) -> None:
    report = scan(tmp_path, "NVIDIA GeForce RTX 4090", sass=(50, 60, 70, 75, 80))  # sm_89
    assert report.findings == ()


def test_pascal_on_a_build_without_sm_61_takes_cu126_of_the_same_release(tmp_path: Path) -> None:
    report = scan(
        tmp_path,
        "NVIDIA GeForce GTX 1080",
        version="2.9.1+cu128",
        cuda="12.8",
        sass=(75, 80, 86, 90, 100, 120),
    )
    (finding,) = report.findings
    assert finding.code == "gpu-arch-unsupported"
    # cu130 no longer compiles Pascal: cu126 of torch 2.9.1
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.9.1 --index-url https://download.pytorch.org/whl/cu126")
    )


def test_old_driver_steers_the_choice(tmp_path: Path) -> None:
    report = scan(
        tmp_path,
        "NVIDIA GeForce GTX 1080",
        version="2.9.1+cu128",
        cuda="12.8",
        sass=(75, 80, 86, 90, 100, 120),
        driver=(31, 0, 15, 3623),  # 536.23: below cu126's 560.76
    )
    codes = [f.code for f in report.findings]
    assert "gpu-arch-unsupported" in codes
    finding = next(f for f in report.findings if f.code == "gpu-arch-unsupported")
    # no build of 2.9 or newer with sm_61 kernels (cu126) starts on it: back to 2.7.1's cu118
    (command,) = finding.hints[0].commands
    assert command.endswith("torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118")
    assert "no build of torch 2.9 or newer has them" in finding.hints[0].summary
    assert len(finding.hints) == 1  # the newest build for this driver is that same one


def test_other_vendors_unknown_names_and_cpu_builds_are_not_judged(tmp_path: Path) -> None:
    assert scan(tmp_path / "a", "Intel(R) UHD Graphics 770").findings == ()
    assert scan(tmp_path / "b", "NVIDIA GeForce MX130").findings == ()
    site = FakeTorch(version="2.5.1+cpu").write(tmp_path / "c" / "site")
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "c" / "s32")], gpus=["NVIDIA GeForce RTX 5090"]
    )
    # a CPU build is not judged for kernels; that the GPU is named is enough for the CPU-build
    # warning (no nvcuda.dll offline), which knows no CUDA build of 2.5 compiles sm_120
    assert [f.code for f in report.findings] == ["cpu-build-on-gpu"]
    finding = report.findings[0]
    assert "no CUDA build of torch 2.5.1 runs on NVIDIA GeForce RTX 5090" in finding.message
    assert "(sm_120)" in finding.message
    assert finding.hints[0].commands == (
        "py -3.11 -m pip install --force-reinstall torch==2.7.1 "
        "--index-url https://download.pytorch.org/whl/cu128",
    )


def test_damaged_fatbin_is_not_a_finding(tmp_path: Path) -> None:
    fatbin = bytearray(container(entry(2, 80, b"x" * 64)))
    struct.pack_into("<Q", fatbin, 8, 1 << 20)  # declares 1 MiB of entries: past the section
    broken = with_section(build_pe(["KERNEL32.dll"]), ".nv_fatb", bytes(fatbin))
    fake = FakeTorch(version="2.5.1+cu124", cuda="12.4", extra={"torch/lib/torch_cuda.dll": broken})
    site = fake.write(tmp_path / "site")
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32")], gpus=["NVIDIA GeForce RTX 5090"]
    )
    assert "gpu-arch-unsupported" not in [f.code for f in report.findings]


@pytest.mark.parametrize(
    ("name", "capability"),
    [
        ("NVIDIA GeForce RTX 5090", (12, 0)),
        ("NVIDIA RTX 5000 Ada Generation", (8, 9)),
        ("Quadro RTX 5000", (7, 5)),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", (8, 9)),
        ("NVIDIA GeForce RTX 3080 Ti", (8, 6)),
        ("NVIDIA GeForce GTX 1660 SUPER", (7, 5)),
        ("NVIDIA GeForce GTX 970M", (5, 2)),
        ("NVIDIA GeForce GTX 960M", (5, 0)),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0)),
        ("NVIDIA H100 PCIe", (9, 0)),
        ("NVIDIA GeForce MX250", None),
    ],
)
def test_capability_table(name: str, capability: tuple[int, int] | None) -> None:
    assert compute_capability(name) == capability


def test_cuda_limits_per_architecture() -> None:
    assert cuda_can_build((12, 8), (12, 0)) and not cuda_can_build((12, 6), (12, 0))
    assert cuda_can_build((12, 9), (6, 1)) and not cuda_can_build((13, 0), (6, 1))
    assert cuda_can_build((13, 0), (7, 5))


def test_display_adapter_ids() -> None:
    gpu = DisplayAdapter("NVIDIA GeForce RTX 4090", r"pci\ven_10de&dev_2684&subsys_16f310de")
    assert gpu.pci_ids == (0x10DE, 0x2684) and gpu.is_nvidia
    intel = DisplayAdapter("Intel(R) UHD Graphics", r"PCI\VEN_8086&DEV_4680")
    assert not intel.is_nvidia
    assert DisplayAdapter("NVIDIA GeForce RTX 4090").is_nvidia  # offline: the name alone


def test_a_warm_scan_reads_no_fatbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = scan(tmp_path, "NVIDIA GeForce RTX 5090")
    import torchguard._rules.gpu_arch as rule

    def fail(path: str) -> None:
        raise AssertionError(f"read {path} again")

    monkeypatch.setattr(rule, "read_dll_archs", fail)
    site = tmp_path / "site"
    again = torchguard.scan([site], system32=[tmp_path / "s32"], gpus=["NVIDIA GeForce RTX 5090"])
    assert [f.message for f in again.findings] == [f.message for f in first.findings]


def test_cli_gpu_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchguard._frontends.cli import main

    scan(tmp_path, "NVIDIA GeForce RTX 5090")  # writes the site and System32
    argv = ["scan", str(tmp_path / "site"), "--system32", str(tmp_path / "s32"), "--json"]
    assert main([*argv, "--gpu", "NVIDIA GeForce RTX 5090"]) == 0
    assert '"gpu-arch-unsupported"' in capsys.readouterr().out
    assert main(argv) == 0
    assert '"gpu-arch-unsupported"' not in capsys.readouterr().out


def scan_wheel(
    tmp_path: Path, gpu: str, version: str, cuda: str, dll: bytes | None = None
) -> torchguard.Report:
    """A torch CUDA wheel checked offline. Its torch_cuda.dll member is read from its stream;
    one without a readable ``.nv_fatb`` (the default here) is judged by PyTorch's build policy."""
    dll = build_pe(["KERNEL32.dll"]) if dll is None else dll
    fake = FakeTorch(version=version, cuda=cuda, extra={"torch/lib/torch_cuda.dll": dll})
    (tmp_path / "wheels").mkdir(parents=True)
    wheel = fake.wheel(tmp_path / "wheels")
    return torchguard.scan([wheel], system32=[system32(tmp_path / "s32")], gpus=[gpu])


def test_offline_cu128_wheel_of_28_has_no_pascal_kernels(tmp_path: Path) -> None:
    """CUDA 12.8 can compile sm_61, but PyTorch's cu128 builds of 2.8+ carry no Pascal kernels."""
    assert cuda_can_build((12, 8), (6, 1))  # toolkit capability alone would say "fine"
    report = scan_wheel(tmp_path, "NVIDIA GeForce GTX 1080", "2.8.0+cu128", "12.8")
    (finding,) = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
    assert "sm_61" in finding.message and "sm_70" in finding.message
    assert "read from the real 2.8.0 wheel" in finding.message
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.8.0 --index-url https://download.pytorch.org/whl/cu126")
    )


def test_offline_cu126_wheel_runs_pascal_and_cu128_of_211_drops_volta(tmp_path: Path) -> None:
    ok = scan_wheel(tmp_path / "a", "NVIDIA GeForce GTX 1080", "2.8.0+cu126", "12.6")
    assert [f for f in ok.findings if f.code == "gpu-arch-unsupported"] == []
    volta = scan_wheel(tmp_path / "b", "NVIDIA Tesla V100-SXM2-16GB", "2.11.0+cu128", "12.8")
    (finding,) = [f for f in volta.findings if f.code == "gpu-arch-unsupported"]
    assert "sm_70" in finding.message and "sm_75" in finding.message
    still = scan_wheel(tmp_path / "c", "NVIDIA Tesla V100-SXM2-16GB", "2.10.0+cu128", "12.8")
    assert [f for f in still.findings if f.code == "gpu-arch-unsupported"] == []


def test_gtx_1080_under_291_cu130_is_told_to_take_cu126_not_cu128(tmp_path: Path) -> None:
    """cu128 of 2.9.1 was built without sm_50/sm_60 although CUDA 12.8 compiles them."""
    report = scan(
        tmp_path,
        "NVIDIA GeForce GTX 1080",
        version="2.9.1+cu130",
        cuda="13.0",
        sass=(75, 80, 86, 90, 100, 120),
    )
    (finding,) = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
    command = finding.hints[0].commands[0]
    assert command.endswith("torch==2.9.1 --index-url https://download.pytorch.org/whl/cu126")
    assert "sm_61 kernels" in finding.hints[0].summary


def test_offline_wheel_member_fatbin_is_read_before_the_table(tmp_path: Path) -> None:
    """What the binary carries decides: a member with sm_61 SASS runs a GTX 1080 whatever the
    table says of its variant; one without is judged by its own list, not the table's."""
    with_pascal = torch_cuda((60, 61, 70, 75, 80, 86, 90, 100, 120))
    report = scan_wheel(
        tmp_path / "a", "NVIDIA GeForce GTX 1080", "2.8.0+cu128", "12.8", with_pascal
    )
    assert [f for f in report.findings if f.code == "gpu-arch-unsupported"] == []
    without = torch_cuda((75, 86))
    report = scan_wheel(tmp_path / "b", "NVIDIA GeForce GTX 1080", "2.8.0+cu128", "12.8", without)
    (finding,) = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
    assert "built for sm_75, sm_86" in finding.message  # the member's own list
    assert "build policy" not in finding.message


def test_member_archs_reads_the_stream_and_reports_damage(tmp_path: Path) -> None:
    import zipfile

    from torchguard._binary.fatbin import FatbinError
    from torchguard._platforms.windows.member_fatbin import member_archs
    from torchguard._platforms.windows.tree import WinTree, ZipMember

    dll = torch_cuda((80, 90), (90,))
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("torch/lib/torch_cuda.dll", dll)
        archive.writestr("torch/lib/cut.dll", dll[: len(dll) - 40])
        archive.writestr("torch/lib/plain.dll", build_pe(["KERNEL32.dll"]))
    tree = WinTree()
    archs = member_archs(tree, ZipMember(str(path), "torch/lib/torch_cuda.dll", len(dll)))
    assert archs is not None and archs.sass == {80, 90} and archs.ptx == {90}
    assert member_archs(tree, ZipMember(str(path), "torch/lib/plain.dll", 10**6)) is None
    with pytest.raises(FatbinError):
        member_archs(tree, ZipMember(str(path), "torch/lib/cut.dll", len(dll) - 40))
    tree.close()


def test_the_hint_keeps_torchvision_for_the_same_release_only(tmp_path: Path) -> None:
    from fakes import companion, write_tree

    fake = FakeTorch(
        version="2.9.1+cu128",
        cuda="12.8",
        extra={"torch/lib/torch_cuda.dll": torch_cuda((75, 80, 86, 90, 100, 120))},
    )
    site = fake.write(tmp_path / "site")
    vision = {"torchvision/__init__.py": b""}
    write_tree(site, companion("torchvision", "0.24.1+cu128", vision, {}))
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32")], gpus=["NVIDIA GeForce GTX 1080"]
    )
    (finding,) = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
    assert (
        finding.hints[0]
        .commands[0]
        .endswith(
            "torch==2.9.1 torchvision==0.24.1 --index-url https://download.pytorch.org/whl/cu126"
        )
    )
    # and the newest build for the GPU, as `check --gpu` answers, with torchvision matched
    newest = finding.hints[1]
    assert "or the newest torch for sm_61" in newest.summary
    assert newest.commands[0].endswith(
        "torch==2.14.1 torchvision==0.29.2 --index-url https://download.pytorch.org/whl/cu126"
    )


def test_a_hint_to_another_release_pins_the_siblings_made_for_it(tmp_path: Path) -> None:
    """torch 2.4.1+cu124 on an RTX 5090: no 2.4 build has sm_120; 2.7.1+cu128 is the first, and
    torchvision and torchaudio move with it to 0.22.1 and 2.7.1 (their Requires-Dist pins)."""
    from fakes import companion, write_tree

    fake = FakeTorch(
        version="2.4.1+cu124",
        cuda="12.4",
        extra={"torch/lib/torch_cuda.dll": torch_cuda((50, 60, 70, 75, 80, 86, 90))},
    )
    site = fake.write(tmp_path / "site")
    for name, version in (("torchvision", "0.19.1+cu124"), ("torchaudio", "2.4.1+cu124")):
        write_tree(site, companion(name, version, {f"{name}/__init__.py": b""}, {}))
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32")], gpus=["NVIDIA GeForce RTX 5090"]
    )
    (finding,) = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
    assert (
        finding.hints[0]
        .commands[0]
        .endswith(
            "torch==2.7.1 torchvision==0.22.1 torchaudio==2.7.1 "
            "--index-url https://download.pytorch.org/whl/cu128"
        )
    )
    assert (
        finding.hints[1]
        .commands[0]
        .endswith(
            "torch==2.15.0 torchvision==0.29.2 torchaudio==2.11.1 "
            "--index-url https://download.pytorch.org/whl/cu132"
        )
    )
    assert "read from the real 2.15.0 wheel's fatbin" in finding.hints[1].summary
