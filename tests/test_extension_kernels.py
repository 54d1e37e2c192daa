"""An extension's own CUDA kernels against the machine's GPU (xformers, flash-attn, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, companion, system32, write_tree
from test_gpu_arch import torch_cuda

import torchguard

TORCH_28_CU128 = (70, 75, 80, 86, 90, 100, 120)


def scan(
    tmp_path: Path, gpu: str, package: str, binaries: dict[str, bytes], version: str = "0.0.32"
) -> torchguard.Report:
    fake = FakeTorch(
        version="2.8.0+cu128",
        cuda="12.8",
        extra={"torch/lib/torch_cuda.dll": torch_cuda(TORCH_28_CU128)},
    )
    site = fake.write(tmp_path / "site")
    write_tree(site, companion(package, version, binaries, {}))
    folder = system32(tmp_path / "s32")
    return torchguard.scan([site], system32=[folder], gpus=[gpu])


def read_releases(
    package: str, platform: str, requires: str | None, capability: tuple[int, int]
) -> dict[str, str]:
    """Release -> wheel of ``package`` whose recorded readings (any member) carry SASS or
    PTX the GPU runs, and whose torch requirement is ``requires`` (None: any)."""
    import json

    path = Path(__file__).resolve().parent / "readings" / "extension_archs_readings.jsonl"
    arch = capability[0] * 10 + capability[1]
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["package"] != package or r["platform"] != platform:
            continue
        if requires is not None and r["requires_torch"] != requires:
            continue
        sass_ok = any(s // 10 == capability[0] and s <= arch for s in r["sass"])
        if sass_ok or any(p <= arch for p in r["ptx"]):
            found[r["version"]] = r["wheel"]
    return found


def kernels(report: torchguard.Report) -> list[torchguard.Finding]:
    return [f for f in report.findings if f.code == "gpu-arch-unsupported"]


def test_xformers_without_sm_120_on_an_rtx_5090(tmp_path: Path) -> None:
    """torch runs on the RTX 5090; xformers' own kernels stop at sm_90."""
    report = scan(
        tmp_path, "NVIDIA GeForce RTX 5090", "xformers", {"xformers/_C.pyd": torch_cuda((80, 90))}
    )
    (finding,) = kernels(report)
    assert finding.severity == "warning" and report.ok
    assert "xformers 0.0.32" in finding.message and "sm_120" in finding.message
    assert "sm_80, sm_90" in finding.message and "attention" in finding.message
    (hint,) = finding.hints
    good = read_releases("xformers", "windows", "==2.8.0", (12, 0))
    assert good, "the readings know an xformers for torch 2.8.0 with kernels an RTX 5090 runs"
    (command,) = hint.commands
    version = command.split(" -m pip install xformers==")[1]
    assert version in good and good[version] in hint.summary  # the wheel that was read


def test_no_published_xformers_runs_on_a_gtx_970(tmp_path: Path) -> None:
    """No xformers wheel read has SASS or PTX for Maxwell: the hint says so and names none
    (torch 2.8.0+cu126 itself runs there)."""
    assert read_releases("xformers", "windows", None, (5, 2)) == {}
    report = scan_with(tmp_path, "2.8.0+cu126", "NVIDIA GeForce GTX 970")
    (finding,) = kernels(report)
    (hint,) = finding.hints
    assert hint.commands == ()
    assert hint.summary.startswith("no xformers wheel on PyPI for windows (releases ")
    assert "read) has kernels for sm_52; a source build takes TORCH_CUDA_ARCH_LIST=5.2" in (
        hint.summary
    )


def test_a_release_for_another_torch_is_named_with_that_torch(tmp_path: Path) -> None:
    """A GTX 1080 under torch 2.8.0: no xformers pinned to 2.8.0 has Pascal kernels, an older
    release pinned to another torch does: no command, that release and its torch named."""
    assert read_releases("xformers", "windows", "==2.8.0", (6, 1)) == {}
    report = scan_with(tmp_path, "2.8.0+cu126", "NVIDIA GeForce GTX 1080")
    (finding,) = kernels(report)
    (hint,) = finding.hints
    assert hint.commands == ()
    assert "that accepts torch 2.8.0+cu126 has kernels for sm_61" in hint.summary
    named, torch = hint.summary.split("; xformers ")[1].split(" has them but requires torch")
    assert named in read_releases("xformers", "windows", torch.split(";")[0], (6, 1))


def scan_with(tmp_path: Path, torch_version: str, gpu: str) -> torchguard.Report:
    """torch with Maxwell-to-Hopper kernels and an xformers built for sm_80 only."""
    fake = FakeTorch(
        version=torch_version,
        cuda="12.6",
        extra={"torch/lib/torch_cuda.dll": torch_cuda((50, 60, 70, 75, 80, 86, 90))},
    )
    site = fake.write(tmp_path / "site")
    binaries = {"xformers/_C.pyd": torch_cuda((80,))}
    write_tree(site, companion("xformers", "0.0.32.post2", binaries, {}))
    return torchguard.scan([site], system32=[system32(tmp_path / "s32")], gpus=[gpu])


@pytest.mark.parametrize(
    ("sass", "ptx"),
    [((80, 90, 120), ()), ((80,), (90,))],  # SASS for the GPU, or PTX the driver JIT-compiles
)
def test_an_extension_with_kernels_for_the_gpu_is_fine(
    tmp_path: Path, sass: tuple[int, ...], ptx: tuple[int, ...]
) -> None:
    binaries = {"flash_attn_2_cuda.cp311-win_amd64.pyd": torch_cuda(sass, ptx)}
    assert kernels(scan(tmp_path, "NVIDIA GeForce RTX 5090", "flash-attn", binaries)) == []


def test_binaries_without_a_fatbin_and_unknown_packages_are_not_judged(tmp_path: Path) -> None:
    cpu_only = {"bitsandbytes/libbitsandbytes_cpu.dll": torch_cuda(())}
    assert kernels(scan(tmp_path / "a", "NVIDIA GeForce RTX 5090", "bitsandbytes", cpu_only)) == []
    other = {"mypkg/_C.pyd": torch_cuda((80,))}
    assert kernels(scan(tmp_path / "b", "NVIDIA GeForce RTX 5090", "mypkg", other)) == []


def test_kernels_spread_over_several_binaries_count_together(tmp_path: Path) -> None:
    """bitsandbytes ships one library per CUDA version and loads the one for torch's (12.8
    here): that library's kernels are what the GPU runs."""
    binaries = {
        "bitsandbytes/libbitsandbytes_cuda121.dll": torch_cuda((50, 60, 70)),
        "bitsandbytes/libbitsandbytes_cuda128.dll": torch_cuda((75, 120)),
    }
    assert kernels(scan(tmp_path, "NVIDIA GeForce RTX 5090", "bitsandbytes", binaries)) == []
    report = scan(tmp_path / "b", "NVIDIA H100 PCIe", "bitsandbytes", binaries)
    (finding,) = kernels(report)  # torch has sm_90; sm_75 SASS does not run on Hopper
    assert finding.message.startswith("the NVIDIA H100 PCIe (sm_90) cannot run bitsandbytes")


def test_a_bitsandbytes_library_torch_does_not_load_does_not_count(tmp_path: Path) -> None:
    """A GTX 1080 under torch cu128: bitsandbytes loads libbitsandbytes_cuda128.dll, which has
    no Pascal kernels; the CUDA 12.1 library's sm_60 does not help."""
    binaries = {
        "bitsandbytes/libbitsandbytes_cuda121.dll": torch_cuda((50, 60, 70)),
        "bitsandbytes/libbitsandbytes_cuda128.dll": torch_cuda((75, 120)),
    }
    cu128 = scan_bnb(tmp_path / "a", "12.8", binaries)
    (finding,) = [f for f in kernels(cu128) if "bitsandbytes" in f.message]
    assert "built for sm_75, sm_120" in finding.message
    cu121 = scan_bnb(tmp_path / "b", "12.1", binaries)  # its own library has sm_60
    assert [f for f in kernels(cu121) if "bitsandbytes" in f.message] == []


def scan_bnb(tmp_path: Path, cuda: str, binaries: dict[str, bytes]) -> torchguard.Report:
    """torch (with Pascal kernels) built for ``cuda`` beside a bitsandbytes 0.45.3 whose
    ``cextension.py`` loads the exact CUDA version's library."""
    fake = FakeTorch(
        version=f"2.6.0+cu{cuda.replace('.', '')}",
        cuda=cuda,
        extra={"torch/lib/torch_cuda.dll": torch_cuda((50, 60, 70, 75, 80, 86, 90))},
    )
    site = fake.write(tmp_path / "site")
    files = {**binaries, "bitsandbytes/cextension.py": b"lib = ct.cdll.LoadLibrary(path)\n"}
    write_tree(site, companion("bitsandbytes", "0.45.3", files, {}))
    return torchguard.scan(
        [site], system32=[system32(tmp_path / "s32")], gpus=["NVIDIA GeForce GTX 1080"]
    )


def test_linux_extension_kernels_are_read_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux: xformers' _C.so (it links torch) carries sm_80/sm_90 only; torch has sm_120."""
    from dataclasses import replace

    from elf_builder import build_elf
    from test_fatbin import container, entry
    from test_linux_gpu import root_with_driver, system_on, with_kernels
    from test_linux_import import torch_site

    from torchguard._frontends.pipeline import analyze_linux
    from torchguard._platforms.linux.cache import LinuxCache

    site = torch_site(tmp_path)
    with_kernels(site, *(entry(2, a, b"k" * 16) for a in (80, 86, 90, 100, 120)))
    package = site / "xformers"
    package.mkdir()
    (package / "_C.so").write_bytes(
        build_elf(
            ["libtorch_cuda.so"],
            soname="_C.so",
            rpath="$ORIGIN/../torch/lib",
            fatbin=container(entry(2, 80, b"x" * 16), entry(2, 90, b"y" * 16)),
        )
    )
    root = root_with_driver(tmp_path, "580.82.07")
    system = replace(system_on(tmp_path, root), gpus=("NVIDIA GeForce RTX 5090",))
    cache = LinuxCache(tmp_path / "cache")
    (finding,) = analyze_linux(system, cache=cache).findings
    assert finding.code == "gpu-arch-unsupported" and finding.severity == "warning"
    assert finding.message.startswith("the NVIDIA GeForce RTX 5090 (sm_120) cannot run xformers")
    assert "sm_80, sm_90" in finding.message
    good = read_releases("xformers", "linux", "==2.9.1", (12, 0))
    newest = max(good, key=lambda v: [int(p.removeprefix("post")) for p in v.split(".")])
    assert finding.hints[0].commands == (f"python3 -m pip install xformers=={newest}",)

    def no_read(path: object) -> None:
        raise AssertionError(f"read {path} on a warm run")

    monkeypatch.setattr("torchguard._platforms.linux.cached.read_fatbin_archs", no_read)
    again = analyze_linux(system, cache=LinuxCache(tmp_path / "cache")).findings
    assert [f.message for f in again] == [finding.message]
    h100 = replace(system, gpus=("NVIDIA H100 PCIe",))
    assert analyze_linux(h100, cache=LinuxCache(tmp_path / "cache")).findings == ()


def test_an_extension_inside_an_offline_wheel_is_read_from_the_member_stream(
    tmp_path: Path,
) -> None:
    """``scan torch.whl xformers.whl --gpu ...`` (as ``check`` does): xformers' ``_C.pyd`` is
    judged from the wheel member's stream, as torch_cuda.dll is."""
    from fakes import write_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    torch_wheel = FakeTorch(
        version="2.8.0+cu128",
        cuda="12.8",
        extra={"torch/lib/torch_cuda.dll": torch_cuda(TORCH_28_CU128)},
    ).wheel(wheels)
    xformers = wheels / "xformers-0.0.32-cp39-abi3-win_amd64.whl"
    write_wheel(
        xformers, companion("xformers", "0.0.32", {"xformers/_C.pyd": torch_cuda((80, 90))}, {})
    )
    folder = system32(tmp_path / "s32")
    report = torchguard.scan(
        [str(torch_wheel), str(xformers)], system32=[folder], gpus=["NVIDIA GeForce RTX 5090"]
    )
    (finding,) = kernels(report)
    assert "xformers 0.0.32" in finding.message and "sm_80, sm_90" in finding.message
    # offline too, the nearest read release for torch 2.8.0 whose Windows wheel runs there
    (command,) = finding.hints[0].commands
    assert command.split(" -m pip install xformers==")[1] in read_releases(
        "xformers", "windows", "==2.8.0", (12, 0)
    )
    assert (
        kernels(
            torchguard.scan(
                [str(torch_wheel), str(xformers)],
                system32=[folder],
                gpus=["NVIDIA GeForce RTX 4090"],
            )
        )
        == []
    )


def test_bitsandbytes_is_recommended_by_the_library_torchs_cuda_loads(tmp_path: Path) -> None:
    """A GTX 1080 under torch 2.8.0+cu128 with a bitsandbytes whose libraries lack Pascal:
    the hint judges each read release by its CUDA 12.8 library (the one bitsandbytes loads),
    never by a CUDA 11.8 library that torch cu128 does not use."""
    import json

    fake = FakeTorch(
        version="2.8.0+cu128",
        cuda="12.8",
        extra={"torch/lib/torch_cuda.dll": torch_cuda((50, 60, 70, 75, 80, 86, 90))},
    )
    site = fake.write(tmp_path / "site")
    binaries = {"bitsandbytes/libbitsandbytes_cuda128.dll": torch_cuda((75, 120))}
    write_tree(site, companion("bitsandbytes", "0.50.2", binaries, {}))
    report = torchguard.scan(
        [site], system32=[system32(tmp_path / "s32")], gpus=["NVIDIA GeForce GTX 1080"]
    )
    (finding,) = kernels(report)
    (hint,) = finding.hints
    path = Path(__file__).resolve().parent / "readings" / "extension_archs_readings.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    good = {
        r["version"]
        for r in lines
        if r["package"] == "bitsandbytes"
        and r["platform"] == "windows"
        and r["member"].endswith("libbitsandbytes_cuda128.dll")
        and (any(s // 10 == 6 and s <= 61 for s in r["sass"]) or any(p <= 61 for p in r["ptx"]))
    }
    if good:
        (command,) = hint.commands
        assert command.split(" -m pip install bitsandbytes==")[1] in good
        assert "library for CUDA 12.8" in hint.summary
    else:
        assert hint.commands == ()
        assert "read) has kernels for sm_61 in the library it loads for CUDA 12.8;" in hint.summary
