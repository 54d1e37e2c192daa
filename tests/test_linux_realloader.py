"""The real-loader tier: torchguard's live diagnosis against glibc's real ``import torch``.

Genuine torch 2.9.1+cu128 manylinux wheels with their NVIDIA wheels from PyPI (no GPU needed:
CUDA builds import on a GPU-less machine), broken in scratch copies the way the public record
breaks them. Each scenario compares the real ``python -c "import torch"`` with ``diagnose()``
run live in the same layout and environment, and with what ``ensure()``, ``doctor --json`` and
the offline ``scan`` of the same folder say there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from linux_realloader import (
    CACHE,
    Verdict,
    agree,
    agree_package,
    cached_wheel,
    front_doors_agree,
    install_over,
    local_or_cached_wheel,
    predicted,
    real_import,
    real_run,
    replace_file,
    scratch_site,
    torch_site,
    wheel_member,
)

pytestmark = [
    pytest.mark.linux,
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the cached wheels are cp311"),
]

TORCH = "2.9.1"
OLD_NVJITLINK = "12.4.127"
NCCL_CU13 = "2.27.7"  # the smallest nvidia-nccl-cu13 wheel on PyPI: 184 MB

Breaker = Callable[[Path, Path], dict[str, str]]
"""(scratch site, scratch folder) -> extra environment."""


def _healthy(site: Path, where: Path) -> dict[str, str]:
    return {}


def _impostors_on_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    """torch's DT_RPATH beats LD_LIBRARY_PATH for its direct needs (S1)."""
    impostors = where / "impostors"
    impostors.mkdir()
    old = wheel_member("nvidia-nvjitlink-cu12", OLD_NVJITLINK, "libnvJitLink.so.12")
    for name in ("libcudnn.so.9", "libcudart.so.12", "libnvJitLink.so.12"):
        (impostors / name).write_bytes(old)
    return {"LD_LIBRARY_PATH": str(impostors)}


def _old_nvjitlink_on_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    """An older nvJitLink first on LD_LIBRARY_PATH: torch's preload by path defuses it (S2)."""
    folder = where / "cuda-12.4" / "lib64"
    folder.mkdir(parents=True)
    data = wheel_member("nvidia-nvjitlink-cu12", OLD_NVJITLINK, "libnvJitLink.so.12")
    (folder / "libnvJitLink.so.12").write_bytes(data)
    return {"LD_LIBRARY_PATH": str(folder)}


def _old_nvjitlink_wheel(site: Path, where: Path) -> dict[str, str]:
    """nvidia-nvjitlink-cu12 12.4 installed beside cuSPARSE 12.5 (built with CUDA 12.8)."""
    data = wheel_member("nvidia-nvjitlink-cu12", OLD_NVJITLINK, "libnvJitLink.so.12")
    replace_file(site / "nvidia" / "nvjitlink" / "lib" / "libnvJitLink.so.12", data)
    return {}


def _no_cudnn(site: Path, where: Path) -> dict[str, str]:
    shutil.rmtree(site / "nvidia" / "cudnn")
    return {}


def _no_nvjitlink(site: Path, where: Path) -> dict[str, str]:
    shutil.rmtree(site / "nvidia" / "nvjitlink")
    return {}


def _no_cuda_runtime(site: Path, where: Path) -> dict[str, str]:
    """libtorch_global_deps fails naming libcudart: torch's strict preload raises ValueError."""
    shutil.rmtree(site / "nvidia" / "cuda_runtime")
    return {}


def _truncated_curand(site: Path, where: Path) -> dict[str, str]:
    """A copy cut short of its ELF header (an interrupted download or unpack)."""
    path = site / "nvidia" / "curand" / "lib" / "libcurand.so.10"
    replace_file(path, path.resolve().read_bytes()[:40])
    return {}


def _old_libstdcxx_first(site: Path, where: Path) -> dict[str, str]:
    """An old C++ runtime first on LD_LIBRARY_PATH (a conda-style libstdc++ of GCC 3.4)."""
    return {"LD_LIBRARY_PATH": str(_old_libstdcxx(where).parent)}


def _old_libstdcxx_preloaded(site: Path, where: Path) -> dict[str, str]:
    """The same old C++ runtime in LD_PRELOAD, after an entry that does not exist: ld.so
    reports and skips the missing one, and the old libstdc++ wins by soname."""
    return {"LD_PRELOAD": f"/nonexistent/libgone.so {_old_libstdcxx(where)}"}


def _old_libstdcxx(where: Path) -> Path:
    """A stand-in ``libstdc++.so.6`` that defines only GLIBCXX_3.4 and CXXABI_1.3."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the old libstdc++ stand-in")
    folder = where / "oldlib"
    folder.mkdir()
    (folder / "v.map").write_text("GLIBCXX_3.4 { global: *; };\nCXXABI_1.3 { } GLIBCXX_3.4;\n")
    (folder / "s.c").write_text("int glibcxx_stand_in(void) { return 34; }\n")
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "libstdc++.so.6"),
            str(folder / "s.c"),
            "-Wl,-soname,libstdc++.so.6",
            f"-Wl,--version-script={folder / 'v.map'}",
        ],
        check=True,
        timeout=120,
    )
    return folder / "libstdc++.so.6"


def _no_nvidia_wheels(site: Path, where: Path) -> dict[str, str]:
    """``pip install torch --no-deps``: the CUDA build without any NVIDIA wheel. global-deps
    fails naming libcudart, and torch's strict preload raises ``ValueError`` for the first
    library of its list (the real CPU-only build is in tests/test_linux_layouts.py)."""
    shutil.rmtree(site / "nvidia")
    for entry in site.iterdir():
        if entry.name.startswith("nvidia_") and entry.name.endswith(".dist-info"):
            entry.unlink()
    return {}


SCENARIOS: dict[str, Breaker] = {
    "healthy": _healthy,
    "impostor cudnn/cudart/nvjitlink on LD_LIBRARY_PATH": _impostors_on_ld_library_path,
    "old nvjitlink on LD_LIBRARY_PATH": _old_nvjitlink_on_ld_library_path,
    "old nvjitlink wheel": _old_nvjitlink_wheel,
    "cuDNN wheel missing": _no_cudnn,
    "nvjitlink wheel missing": _no_nvjitlink,
    "cuda-runtime wheel missing": _no_cuda_runtime,
    "truncated libcurand": _truncated_curand,
    "old libstdc++ first": _old_libstdcxx_first,
    "old libstdc++ preloaded": _old_libstdcxx_preloaded,
    "no NVIDIA wheels (torch --no-deps)": _no_nvidia_wheels,
}


@pytest.fixture(scope="module")
def base_site() -> Path:
    return torch_site(TORCH)


@pytest.fixture(scope="module")
def tg_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchguard cache for the module: facts are keyed by file identity, so scratch
    copies (symlinks to one install) share them, as two venvs sharing files would."""
    return tmp_path_factory.mktemp("tg-cache")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_torchguard_predicts_what_the_real_loader_does(
    name: str, base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(base_site, tmp_path)
    extra = SCENARIOS[name](site, tmp_path)
    cache = tg_cache
    real = real_import(site, extra, cache)
    report = predicted(site, extra, cache)
    outcome = report["import_torch"]
    print(f"\n{name}: real={'ok' if real.ok else real.line!r} torchguard={outcome}")
    assert agree(real, report), (real, report["findings"])
    assert front_doors_agree(real, report) == [], real
    if real.ok:
        assert not [f for f in report["findings"] if f["severity"] == "error"]  # type: ignore[union-attr,index]
    gpu_less = not Path("/proc/driver/nvidia").exists() and not Path("/usr/lib/wsl").exists()
    if name == "healthy" and gpu_less:  # no driver, no NVIDIA PCI device: no driver warning
        assert report["findings"] == [], report["findings"]


def test_nccl_for_cuda_13_installed_beside_cuda_12s(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """``pip install nvidia-nccl-cu13`` beside torch's nvidia-nccl-cu12: both RECORDs claim
    ``nvidia/nccl/lib/libnccl.so.2`` and the later install's bytes win. torchguard names the
    conflict (a warning) and predicts what the real import does with the CUDA 13 copy."""
    site = scratch_site(base_site, tmp_path)
    install_over(site, cached_wheel("nvidia-nccl-cu13", NCCL_CU13))
    real = real_import(site, {}, tg_cache)
    report = predicted(site, {}, tg_cache)
    print(f"\nnccl-cu13 beside cu12: real={'ok' if real.ok else real.line!r}")
    assert agree(real, report), (real, report["findings"])
    findings = report["findings"]
    assert isinstance(findings, list)
    (conflict,) = [f for f in findings if f["code"] == "conflicting-files"]
    assert conflict["severity"] == "warning"
    assert conflict["path"] == str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert "nvidia-nccl-cu12" in conflict["message"] and "nvidia-nccl-cu13" in conflict["message"]
    assert f"nvidia-nccl-cu13 {NCCL_CU13}'s" in conflict["message"]  # its bytes are on disk


#: torchvision as a user meets it: its import, then one of its compiled operators.
_IMPORT_AND_NMS = """
import torch, torchvision
boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
print("NMS", torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist(), flush=True)
"""


@pytest.mark.parametrize(("torchvision", "fits"), [("0.24.1", True), ("0.23.0", False)])
def test_an_extension_built_for_another_torch_is_named_with_its_package(
    torchvision: str, fits: bool, base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """torchvision imported into torch 2.9.1 and its ``nms`` called: 0.24.1 is built for 2.9,
    0.23.0 for 2.8. 0.23.0 binds every symbol, yet ``import torchvision`` itself segfaults
    while its ``_C.so`` registers its operators (unlike Windows, where torchvision 0.19.1
    imports into torch 2.5.1 and its ``nms`` raises NotImplementedError): the package-mismatch
    warning says both can happen."""
    import zipfile

    site = scratch_site(base_site, tmp_path)
    wheel_member("torchvision", torchvision, "_C.so")  # cached once
    found = sorted((CACHE / "wheels").glob(f"torchvision-{torchvision}-*.whl"))
    wheels = [found[0], local_or_cached_wheel("numpy", "2.3.5")]
    wheels.append(local_or_cached_wheel("pillow", "12.3.0"))  # torchvision imports numpy and
    for wheel in wheels:  # pillow, which torch 2.9.1's install lacks
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    real = real_import(site, {}, tg_cache, _IMPORT_AND_NMS)
    report = predicted(site, {}, tg_cache)
    print(f"\ntorchvision {torchvision}: real={'ok' if real.ok else real.status}")
    assert agree(real_import(site, {}, tg_cache), report)  # import torch itself is unaffected
    assert agree_package(real if fits else Verdict(True, ""), report, "torchvision")
    findings = report["findings"]
    assert isinstance(findings, list)
    mismatch = [f for f in findings if f["code"] == "package-mismatch"]
    if fits:
        assert real.ok and not mismatch, real
        return
    # every symbol binds (ld.so and the model agree), then its operator registration
    # crashes `import torchvision`: no loader model sees that, the metadata pin explains it
    assert real.status < 0, real
    (warning,) = mismatch
    assert warning["package"] == "torchvision" and warning["severity"] == "warning"
    message = str(warning["message"])
    assert "crash while its operators register" in message, message
    assert "`torchvision.ops.nms` raises NotImplementedError" in message, message


def test_the_real_kernels_against_named_gpus(
    base_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libtorch_cuda.so 2.9.1+cu128 carries SASS for sm_70 to sm_120 and no PTX (read from its
    .nv_fatbin): a Pascal card gets the CUDA 12.6 build of the release, an Ada card nothing;
    the architectures are cached, so the second scan reads no fatbin."""
    import torchguard

    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(tmp_path / "cache"))
    gpus = ["NVIDIA GeForce GTX 1080", "NVIDIA GeForce RTX 4090"]
    report = torchguard.scan([base_site], gpus=gpus)
    (finding,) = report.findings
    assert finding.code == "gpu-arch-unsupported" and "GTX 1080" in finding.message
    assert "sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_120" in finding.message
    assert finding.hints[0].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 --index-url "
        "https://download.pytorch.org/whl/cu126",
    )

    def no_read(path: object) -> None:
        raise AssertionError(f"read {path} on a warm run")

    monkeypatch.setattr("torchguard._platforms.linux.cached.read_fatbin_archs", no_read)
    again = torchguard.scan([base_site], gpus=gpus)
    assert [f.code for f in again.findings] == ["gpu-arch-unsupported"]
    # a CUDA 12.2 driver starts the cu126 build through minor-version compatibility
    old_driver = torchguard.scan([base_site], gpus=gpus, cuda="12.2")
    arch = next(f for f in old_driver.findings if f.code == "gpu-arch-unsupported")
    assert arch.hints[0].commands == finding.hints[0].commands
    assert "full feature set needs NVIDIA driver 560.28.03" in arch.hints[0].summary


# The real libcudnn.so.9 makes the late load itself: cudnnGetVersion dlopens libcudnn_graph.so.9
# (no GPU needed); the child then prints where it landed from /proc/self/maps. When the load
# fails, cuDNN prints "Unable to load any of {...}" and aborts the process (measured: SIGABRT).
_FIRST_CUDNN_CALL = """
import torch
try:
    torch.backends.cudnn.version()
finally:
    maps = [l.split()[-1] for l in open("/proc/self/maps") if "libcudnn_graph.so" in l]
    print("GRAPH", maps[0] if maps else "-", flush=True)
"""


def _graph_copy_on_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    copies = where / "cuda-toolkit" / "lib64"
    copies.mkdir(parents=True)
    shutil.copyfile(site / "nvidia" / "cudnn" / "lib" / "libcudnn_graph.so.9", copies / GRAPH)
    return {"LD_LIBRARY_PATH": str(copies)}


def _graph_missing(site: Path, where: Path) -> dict[str, str]:
    (site / "nvidia" / "cudnn" / "lib" / GRAPH).unlink()
    return {}


GRAPH = "libcudnn_graph.so.9"
LATE: dict[str, Breaker] = {
    "graph copy on LD_LIBRARY_PATH": _graph_copy_on_ld_library_path,
    "graph missing": _graph_missing,
}


@pytest.mark.parametrize("name", list(LATE))
def test_cudnns_late_load_lands_where_torchguard_says(
    name: str, base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """``import torch`` works in both; the first cuDNN call loads libcudnn_graph.so.9 by name
    with libcudnn.so.9's own search, and torchguard names where (or that nowhere) it lands."""
    site = scratch_site(base_site, tmp_path)
    extra = LATE[name](site, tmp_path)
    real = real_run(site, extra, tg_cache, _FIRST_CUDNN_CALL)
    lines = [line for line in real.stdout.splitlines() if line.startswith("GRAPH ")]
    landed = lines[0].split(" ", 1)[1] if lines else "-"  # cuDNN aborts the process: nowhere
    report = predicted(site, extra, tg_cache)
    print(f"\n{name}: real graph={landed} rc={real.returncode}")
    outcome = report["import_torch"]
    assert isinstance(outcome, dict) and outcome["ok"]
    findings = report["findings"]
    assert isinstance(findings, list)
    assert not [f for f in findings if f["severity"] == "error"]
    late = [f for f in findings if f["missing"] == GRAPH]
    pinned = str(site / "nvidia" / "cudnn" / "lib" / GRAPH)
    if landed == "-":
        assert real.returncode != 0 and "Unable to load any of" in real.stdout + real.stderr
        (finding,) = late
        assert finding["code"] == "missing-dll" and finding["severity"] == "warning"
    elif Path(landed).samefile(pinned):
        assert late == []
    else:
        (finding,) = late
        assert finding["code"] == "library-shadowed" and finding["severity"] == "warning"
        assert Path(str(finding["path"])).samefile(landed)


def test_repair_commands_pin_what_the_real_torch_pins(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """The real torch 2.9.1 METADATA decides the versions: an old nvJitLink wheel is replaced
    at torch's pin, and a torch installed with --no-deps gets every NVIDIA wheel it pins."""
    site = scratch_site(base_site, tmp_path / "old")
    _old_nvjitlink_wheel(site, tmp_path)
    (finding,) = [f for f in predicted(site, {}, tg_cache)["findings"] if f["severity"] == "error"]  # type: ignore[union-attr]
    assert finding["hints"][0]["commands"] == [
        "python -m pip install --force-reinstall nvidia-nvjitlink-cu12==12.8.93"
    ]
    site = scratch_site(base_site, tmp_path / "bare")
    _no_nvidia_wheels(site, tmp_path)
    (finding,) = [f for f in predicted(site, {}, tg_cache)["findings"] if f["severity"] == "error"]  # type: ignore[union-attr]
    (command,) = finding["hints"][0]["commands"]
    assert command.startswith("python -m pip install nvidia-cublas-cu12==12.8.4.1 ")
    assert "nvidia-cudnn-cu12==9.10.2.21" in command and "--force-reinstall" not in command
    assert command.count("==") == 15, command  # the 15 NVIDIA wheels torch 2.9.1 pins
