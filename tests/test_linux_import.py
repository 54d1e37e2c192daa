"""torch's Linux import replayed on built ELF files: its per-release sequence, the findings,
scan() of a Linux site-packages and ensure() on Linux (in a child process: live mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from linux_elf import write_so

import torchguard
from torchguard._frontends.pipeline import analyze_linux
from torchguard._platforms.linux.preload import parse_plan
from torchguard._platforms.linux.system import offline_linux

NVJIT = "libnvJitLink.so.12"

# A torch/__init__.py shaped like the 2.9 releases (written for this test, never run).
INIT_29 = """
def _load_global_deps():
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        try:
            _preload_cuda_deps("cuda_nvrtc", "libnvrtc.so.*[0-9]")
            _preload_cuda_deps("nvjitlink", "libnvJitLink.so.*[0-9]")
        except Exception:
            pass
    except OSError as err:
        cuda_libs = {"cuda_runtime": "libcudart.so.*[0-9]", "nvjitlink": "libnvJitLink.so.*[0-9]"}
        for folder, name in cuda_libs.items():
            _preload_cuda_deps(folder, name)
        _preload_cuda_deps("nvtx", "libnvToolsExt.so.*[0-9]", required=False)
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
"""
# The 2.10 shape: one list, preloaded whole on success.
INIT_210 = """
def _preload_cuda_deps(err=None):
    cuda_libs = [("cuda_runtime", "libcudart.so.*[0-9]"), ("nvjitlink", "libnvJitLink.so.*[0-9]")]
    for folder, name in cuda_libs:
        _preload_cuda_lib(folder, name)
    _preload_cuda_lib("nvtx", "libnvToolsExt.so.*[0-9]", required=False)

def _load_global_deps():
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        try:
            _preload_cuda_deps()
        except Exception:
            pass
    except OSError as err:
        _preload_cuda_deps(err)
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
"""


def nvjitlink(folder: Path, minor: int) -> Path:
    return write_so(
        folder,
        NVJIT,
        defines=[f"__nvJitLinkCreate_12_{m}@{NVJIT}" for m in range(minor + 1)],
        verdef=[NVJIT],
    )


def torch_site(root: Path, *, init: str = INIT_29, version: str = "2.9.1+cu128") -> Path:
    """torch + cudart + cuSPARSE (built with CUDA 12.8) + nvjitlink 12.8, as pip lays them out."""
    site = root / "site"
    nv = site / "nvidia"
    write_so(nv / "cuda_runtime" / "lib", "libcudart.so.12", defines=["cudaMalloc"])
    write_so(nv / "cuda_nvrtc" / "lib", "libnvrtc.so.12")
    nvjitlink(nv / "nvjitlink" / "lib", 8)
    write_so(
        nv / "cusparse" / "lib",
        "libcusparse.so.12",
        needed=[NVJIT],
        runpath="$ORIGIN/../../nvjitlink/lib:$ORIGIN",
        undefined=[f"__nvJitLinkCreate_12_8@{NVJIT}"],
        verneed={NVJIT: [NVJIT]},
    )
    lib = site / "torch" / "lib"
    rpath = (
        "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
        "$ORIGIN/../../nvidia/cuda_nvrtc/lib:$ORIGIN"
    )
    write_so(lib, "libtorch_global_deps.so", needed=["libcudart.so.12"], rpath=rpath)
    write_so(
        lib,
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12"],
        rpath=rpath,
        undefined=["cudaMalloc"],
        defines=["_ZN3c104cuda6deviceEv"],
    )
    write_so(
        site / "torch",
        "_C.cpython-311-x86_64-linux-gnu.so",
        needed=["libtorch_cuda.so"],
        rpath="$ORIGIN/lib",
        undefined=["PyLong_FromLong"],
    )
    (site / "torch" / "__init__.py").write_text(init)
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\ncuda = '12.8'\n")
    return site


def analyze(site: Path, **kwargs: object) -> torchguard.Report:
    return analyze_linux(offline_linux([str(site)], **kwargs))  # type: ignore[arg-type]


def test_the_plan_is_read_from_the_release_itself() -> None:
    plan = parse_plan(INIT_29, "2.9.1", "12.8")
    assert plan.source == "ast"
    assert [g for _, g, _ in plan.on_success] == ["libnvrtc.so.*[0-9]", "libnvJitLink.so.*[0-9]"]
    assert ("nvtx", "libnvToolsExt.so.*[0-9]", False) in plan.libs
    plan = parse_plan(INIT_210, "2.10.0", "12.8")
    assert [g for _, g, _ in plan.on_success] == [g for _, g, _ in plan.libs]
    assert parse_plan("not python (", "2.5.1", "12.4").on_success == ()
    assert parse_plan("", "2.10.0", "12.8").source == "table"


def test_healthy_layout_has_no_finding(tmp_path: Path) -> None:
    report = analyze(torch_site(tmp_path))
    assert report.import_torch is not None and report.import_torch.ok
    assert report.findings == ()


def test_an_older_nvjitlink_wheel_is_a_missing_symbol_with_the_cuda_minor(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    report = analyze(site)
    (finding,) = report.errors
    assert finding.code == "missing-symbol"
    assert "undefined symbol: __nvJitLinkCreate_12_8, version libnvJitLink.so.12" in (
        finding.message
    )
    assert "CUDA 12.8" in finding.message
    assert finding.chain == (
        "_C.cpython-311-x86_64-linux-gnu.so",
        "libtorch_cuda.so",
        "libcusparse.so.12",
    )
    assert "'nvidia-nvjitlink-cu12>=12.8'" in finding.hints[0].commands[0]


def test_torch_29_preload_defuses_an_old_copy_on_ld_library_path_and_25_does_not(
    tmp_path: Path,
) -> None:
    site = torch_site(tmp_path)
    old = nvjitlink(tmp_path / "cuda-12.4" / "lib64", 4).parent
    assert analyze(site, ld_library_path=(str(old),)).findings == ()
    (site / "torch" / "__init__.py").write_text("# a 2.5 release: no preload on success\n")
    (site / "torch" / "version.py").write_text("__version__ = '2.5.1'\ncuda = '12.4'\n")
    report = analyze(site, ld_library_path=(str(old),))
    (finding,) = report.errors
    assert finding.code == "missing-symbol" and finding.path and "cusparse" in finding.path
    assert "LD_LIBRARY_PATH" in finding.hints[0].summary


def test_a_compatible_second_copy_that_wins_is_a_shadowing_warning(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    (site / "torch" / "__init__.py").write_text("# no preload\n")
    (site / "torch" / "version.py").write_text("__version__ = '2.5.1'\ncuda = '12.4'\n")
    other = nvjitlink(tmp_path / "cuda" / "lib64", 9).parent
    report = analyze(site, ld_library_path=(str(other),))
    assert report.errors == ()
    (warning,) = report.warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/{NVJIT}"
    assert "LD_LIBRARY_PATH" in warning.message


def test_a_missing_cuda_runtime_ends_in_torchs_value_error(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    (site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12").unlink()
    (finding,) = analyze(site).errors
    assert finding.code == "missing-dll"
    assert "libcudart.so.*[0-9] not found in the system path" in finding.message


def test_a_failure_naming_no_cuda_library_is_raised_as_is(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    write_so(site / "torch" / "lib", "libtorch_global_deps.so", needed=["libtg_absent.so.1"])
    (finding,) = analyze(site).errors
    assert finding.code == "missing-dll" and finding.missing == "libtg_absent.so.1"
    assert "libtg_absent.so.1: cannot open shared object file: No such file" in finding.message


def test_scan_and_the_cli_take_a_linux_site_packages(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    report = torchguard.scan([site])
    assert [f.code for f in report.errors] == ["missing-symbol"]
    from torchguard._frontends.cli import main

    assert main(["scan", str(site), "--json"]) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="live Linux analysis")
def test_ensure_on_linux_raises_the_proof_and_passes_a_healthy_install(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    code = (
        "import json, torchguard\n"
        "try:\n"
        "    report = torchguard.ensure()\n"
        "    print(json.dumps({'ok': True, 'errors': [f.code for f in report.errors]}))\n"
        "except torchguard.TorchDllError as exc:\n"
        "    print(json.dumps({'ok': False, 'type': type(exc).__name__, 'code': exc.code}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "TORCHGUARD_CACHE_DIR": str(tmp_path / "c")}
    env.pop("LD_LIBRARY_PATH", None)

    def run() -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]

    assert run() == {"ok": True, "errors": []}
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    assert run() == {"ok": False, "type": "MissingSymbolError", "code": "missing-symbol"}


def _record(site: Path, dist: str, rows: list[str]) -> None:
    info = site / f"{dist}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def test_two_nvidia_distributions_claiming_one_library_is_a_warning(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    nccl = write_so(site / "nvidia" / "nccl" / "lib", "libnccl.so.2")
    size = nccl.stat().st_size
    row = "nvidia/nccl/lib/libnccl.so.2,sha256=x,{}"
    _record(site, "nvidia_nccl_cu12-2.27.5", [row.format(size + 1)])
    assert analyze(site).findings == ()  # one claim: nothing to say
    _record(site, "nvidia_nccl_cu13-2.28.9", [row.format(size)])
    (warning,) = analyze(site).warnings
    assert warning.code == "conflicting-files" and warning.path == str(nccl)
    assert "the file on disk is nvidia-nccl-cu13 2.28.9's" in warning.message
    assert warning.hints[0].commands == (
        "python -m pip uninstall -y nvidia-nccl-cu13",
        "python -m pip install --force-reinstall nvidia-nccl-cu12",
    )


def _wheel(site: Path, path: Path, top: str) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for file in sorted((site / top).rglob("*")):
            if file.is_file():
                archive.write(file, str(file.relative_to(site)))
    return path


def test_manylinux_wheels_are_scanned_like_the_installed_tree(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    targets = [
        _wheel(site, wheels / "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl", "torch"),
        _wheel(site, wheels / "nvidia_libs-12.8-py3-none-manylinux2014_x86_64.whl", "nvidia"),
    ]
    report = torchguard.scan(targets)
    assert [f.code for f in report.errors] == ["missing-symbol"]
    assert "__nvJitLinkCreate_12_8" in report.errors[0].message
    assert sorted(p.name for p in wheels.iterdir()) == sorted(t.name for t in targets)
    with pytest.raises(ValueError, match="not a Linux site-packages"):
        torchguard.scan([*targets, tmp_path / "elsewhere"])


def test_a_cut_short_library_is_corrupt_in_glibcs_words(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    path = site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12"
    path.write_bytes(path.read_bytes()[:40])
    (finding,) = analyze(site).errors
    assert finding.code == "corrupt-dll"
    # global deps fail naming libcudart, so torch's strict preload opens it by its sys.path
    assert finding.message.endswith(
        f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12: file too short"
    )


def test_an_old_cxx_runtime_on_ld_library_path_is_runtime_too_old(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    old = write_so(tmp_path / "old", "libstdcxx.so.6", verdef=["GLIBCXX_3.4"]).parent
    write_so(
        site / "torch" / "lib",
        "libtorch_cuda.so",
        needed=["libstdcxx.so.6"],
        rpath="$ORIGIN",
        undefined=["_ZNSt6threadD1Ev@GLIBCXX_3.4.30"],
        verneed={"libstdcxx.so.6": ["GLIBCXX_3.4.30"]},
    )
    (finding,) = analyze(site, ld_library_path=(str(old),)).errors
    assert finding.code == "runtime-too-old" and finding.path == f"{old}/libstdcxx.so.6"
    assert "version `GLIBCXX_3.4.30' not found (required by" in finding.message
    assert finding.hints[0].commands[0].startswith("unset LD_LIBRARY_PATH")


def test_an_extension_built_for_another_torch_is_its_packages_error_only(tmp_path: Path) -> None:
    site = _flash_attn_site(tmp_path, "from . import flash_attn_2_cuda\n")
    report = analyze(site)
    (finding,) = report.errors
    assert finding.package == "flash_attn" and finding.code == "missing-symbol"
    assert "undefined symbol: _ZN3c104cuda9SetDeviceEa" in finding.message
    assert "built for another torch" in finding.message
    assert report.import_torch is not None and report.import_torch.ok and not report.blocking


def _flash_attn_site(tmp_path: Path, init: str | None) -> Path:
    site = torch_site(tmp_path)
    (site / "flash_attn").mkdir()
    if init is not None:
        (site / "flash_attn" / "__init__.py").write_text(init)
    write_so(
        site / "flash_attn",
        "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
        needed=["libc10.so", "libtorch_cuda.so"],
        undefined=["_ZN3c104cuda6deviceEv", "_ZN3c104cuda9SetDeviceEa"],
    )
    lib = site / "torch" / "lib"
    write_so(lib, "libc10.so", defines=["_ZN3c104cuda6deviceEv"])
    write_so(lib, "libtorch_cuda.so", needed=["libc10.so"], rpath="$ORIGIN")  # loaded by _C
    return site


@pytest.mark.parametrize(
    ("init", "lost"),
    [
        (
            "try:\n    from . import flash_attn_2_cuda\nexcept ImportError:\n    pass\n",
            "flash_attn.flash_attn_2_cuda, which flash_attn imports inside try/except ImportError",
        ),
        ("import torch\n", "flash_attn.flash_attn_2_cuda (nothing `import flash_attn` runs"),
        (None, "flash_attn.flash_attn_2_cuda (its package's code could not be read)"),
    ],
)
def test_an_extension_the_package_does_not_always_import_is_a_lost_feature(
    tmp_path: Path, init: str | None, lost: str
) -> None:
    """The same doors agree on Linux (issue 21, finding 8): a claim that `import flash_attn`
    fails must follow from its code; otherwise a warning names what is lost."""
    report = analyze(_flash_attn_site(tmp_path, init))
    assert report.errors == ()
    (finding,) = report.warnings
    assert finding.package == "flash_attn" and finding.code == "missing-symbol"
    assert finding.message.startswith(f"`import flash_attn` loses {lost}"), finding.message


def _dist(site: Path, name: str, version: str, requires: str | None = None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: torch =={requires}"] if requires else []
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_a_sibling_pinned_to_another_torch_is_a_package_mismatch_warning(tmp_path: Path) -> None:
    site = torch_site(tmp_path)
    _dist(site, "torchvision", "0.24.1", "2.9.1")
    _dist(site, "flash_attn", "2.8.3+cu12torch2.9cxx11abiTRUE")
    assert analyze(site).findings == ()
    _dist(site, "torchaudio", "2.8.0", "2.8.0")
    _dist(site, "xformers", "0.0.31+cu12torch2.8cxx11abiTRUE")
    report = analyze(site)
    assert [(f.code, f.package) for f in report.warnings] == [
        ("package-mismatch", "torchaudio"),
        ("package-mismatch", "xformers"),
    ]
    assert "pins torch==2.8.0" in report.warnings[0].message
    assert "is a build for torch 2.8" in report.warnings[1].message
    assert not report.blocking


def test_torchs_silent_preload_stops_at_the_first_library_it_cannot_find(tmp_path: Path) -> None:
    """2.9 preloads nvrtc before nvJitLink inside one ``try``: without nvrtc its ValueError
    is swallowed and nvJitLink is never preloaded, so the old copy wins again."""
    site = torch_site(tmp_path)
    old = nvjitlink(tmp_path / "cuda-12.4" / "lib64", 4).parent
    assert analyze(site, ld_library_path=(str(old),)).findings == ()
    for name in os.listdir(site / "nvidia" / "cuda_nvrtc" / "lib"):
        (site / "nvidia" / "cuda_nvrtc" / "lib" / name).unlink()
    (finding,) = analyze(site, ld_library_path=(str(old),)).errors
    assert finding.code == "missing-symbol" and "__nvJitLinkCreate_12_8" in finding.message


def test_a_cpu_build_where_the_driver_lists_a_gpu_is_a_warning(tmp_path: Path) -> None:
    from dataclasses import replace

    site = torch_site(tmp_path)
    (site / "torch" / "version.py").write_text("__version__ = '2.9.1+cpu'\ncuda = None\n")
    system = offline_linux([str(site)])
    assert analyze_linux(system).findings == ()
    proc = tmp_path / "root" / "proc" / "driver" / "nvidia" / "gpus" / "0000:01:00.0"
    proc.mkdir(parents=True)
    (proc / "information").write_text("Model: \t\t NVIDIA GeForce RTX 4090\nIRQ: 16\n")
    from torchguard._platforms.linux.system import nvidia_gpus

    gpus = nvidia_gpus(str(tmp_path / "root"))
    assert gpus == ("NVIDIA GeForce RTX 4090",)
    (warning,) = analyze_linux(replace(system, gpus=gpus)).findings
    assert warning.code == "cpu-build-on-gpu" and "RTX 4090" in warning.message
    # a build of this release with sm_89 kernels, then the newest build for it
    assert warning.hints[0].commands == (
        "python -m pip install --force-reinstall torch==2.9.1 "
        "--index-url https://download.pytorch.org/whl/cu130",
    )
    assert "or the newest torch for sm_89" in warning.hints[1].summary
    unknown = analyze_linux(replace(system, gpus=("Some Future GPU",))).findings
    assert unknown[0].hints[0].commands == ("python -m pip install --force-reinstall torch==2.9.1",)
    pascal = analyze_linux(replace(system, gpus=("NVIDIA GeForce GTX 1080",))).findings
    assert (
        pascal[0]
        .hints[0]
        .commands[0]
        .endswith("torch==2.9.1 --index-url https://download.pytorch.org/whl/cu126")
    )


# The 2.14 shape: the success path preloads the whole list best-effort (``required=False``).
INIT_214 = (
    INIT_210.replace(
        "def _preload_cuda_deps(err=None):", "def _preload_cuda_deps(err=None, required=True):"
    )
    .replace(
        "_preload_cuda_lib(folder, name)", "_preload_cuda_lib(folder, name, required=required)"
    )
    .replace(
        "            _preload_cuda_deps()\n", "            _preload_cuda_deps(required=False)\n"
    )
)
INIT_214 = INIT_214.replace(
    '[("cuda_runtime", "libcudart.so.*[0-9]"), ("nvjitlink", "libnvJitLink.so.*[0-9]")]',
    '[("cuda_runtime", "libcudart.so.*[0-9]"), ("cuda_nvrtc", "libnvrtc.so.*[0-9]"), '
    '("nvjitlink", "libnvJitLink.so.*[0-9]"), ("cusparse", "libcusparse.so.*[0-9]")]',
)


def test_torch_214_preload_skips_a_library_it_cannot_find_and_goes_on(tmp_path: Path) -> None:
    """From 2.14 the success-path preload is best-effort: without nvrtc it still preloads
    nvJitLink by path, so an old copy on LD_LIBRARY_PATH stays harmless (2.10 stopped)."""
    plan = parse_plan(INIT_214, "2.14.1", "13.0")
    assert len(plan.on_success) == 5 and not any(r for _, _, r in plan.on_success)
    assert all(required for _, _, required in plan.libs[:3])  # the strict path is unchanged
    site = torch_site(tmp_path, init=INIT_214, version="2.14.1+cu130")
    old = nvjitlink(tmp_path / "cuda-12.4" / "lib64", 4).parent
    for name in os.listdir(site / "nvidia" / "cuda_nvrtc" / "lib"):
        (site / "nvidia" / "cuda_nvrtc" / "lib" / name).unlink()
    # import torch works; only torch's lazy NVRTC load at its first runtime compile fails
    (late,) = analyze(site, ld_library_path=(str(old),)).findings
    assert late.code == "missing-dll" and late.severity == "warning"
    assert late.chain[0] == "libtorch_cuda.so" and late.missing.startswith("libnvrtc.so.")
    (site / "torch" / "__init__.py").write_text(INIT_214.replace("(required=False)", "()"))
    (finding,) = analyze(site, ld_library_path=(str(old),)).errors  # 2.10: it stops at nvrtc
    assert finding.code == "missing-symbol" and "__nvJitLinkCreate_12_8" in finding.message


def _listed_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Directory order is the filesystem's: make it alphabetical (``cu13`` < ``cusparse``)."""
    import glob as glob_module

    real = glob_module.glob
    monkeypatch.setattr(glob_module, "glob", lambda pattern: sorted(real(pattern)))


def test_a_cuda_13_folder_left_beside_a_cuda_12_torch_is_not_its_pinned_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA 13's cuSPARSE is also ``libcusparse.so.12``: a leftover ``nvidia/cu13/lib`` must
    not pass for the copy a CUDA 12 torch pins (a false shadowing warning)."""
    _listed_sorted(monkeypatch)
    site = torch_site(tmp_path)
    write_so(site / "nvidia" / "cu13" / "lib", "libcusparse.so.12")
    assert analyze(site).findings == ()


def test_a_cuda_12_wheel_torchs_preload_takes_first_is_named_with_the_wheel_to_uninstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.14 (CUDA 13) globs ``nvidia/cusparse/lib`` before ``nvidia/cu13/lib``: a
    leftover nvidia-cusparse-cu12 is preloaded by path. The hint uninstalls that wheel (there
    is no LD_LIBRARY_PATH to unset)."""
    _listed_sorted(monkeypatch)
    site = torch_site(tmp_path, init=INIT_214, version="2.14.1+cu130")
    (site / "torch" / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\n")
    cu13 = site / "nvidia" / "cu13" / "lib"
    cu13.mkdir(parents=True)
    for folder in ("cuda_runtime", "nvjitlink", "cusparse", "cuda_nvrtc"):
        for library in (site / "nvidia" / folder / "lib").iterdir():
            os.replace(library, cu13 / library.name)
    write_so(cu13, "libnvrtc.so.13")  # what torch's lazy NVRTC loader asks for on CUDA 13
    rpath = "$ORIGIN/../../nvidia/cu13/lib:$ORIGIN"
    for name in ("libtorch_global_deps.so", "libtorch_cuda.so"):
        lib = site / "torch" / "lib"
        needed = ["libcudart.so.12"] + (["libcusparse.so.12"] if "cuda" in name else [])
        write_so(lib, name, needed=needed, rpath=rpath, undefined=[])
    assert analyze(site).findings == ()
    leftover = write_so(site / "nvidia" / "cusparse" / "lib", "libcusparse.so.12")
    _record(site, "nvidia_cusparse_cu12-12.5.8.93", ["nvidia/cusparse/lib/libcusparse.so.12,,1"])
    (warning,) = analyze(site).findings
    assert warning.code == "library-shadowed" and warning.path == str(leftover)
    assert "nvidia/<library>/lib before nvidia/cu<major>/lib" in warning.message
    assert warning.hints[0].commands == ("python -m pip uninstall -y nvidia-cusparse-cu12",)


def test_an_unversioned_c_symbol_names_the_library_of_its_api_family(tmp_path: Path) -> None:
    """NCCL's symbols carry no version node: an older libnccl.so.2 (nvidia-nccl-cu12 written
    over nccl-cu13's file) lacking ``ncclCommResume`` is named as the copy that loads, with
    the NCCL wheel to reinstall, not "reinstall torch"."""
    site = torch_site(tmp_path)
    nccl = site / "nvidia" / "nccl" / "lib"
    api = ["ncclCommInitRank", "ncclAllReduce", "ncclGetVersion", "ncclCommDestroy"]
    library = write_so(nccl, "libnccl.so.2", defines=api)
    rpath = "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
    rpath += "$ORIGIN/../../nvidia/nccl/lib:$ORIGIN"
    write_so(
        site / "torch" / "lib",
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12", "libnccl.so.2"],
        rpath=rpath,
        undefined=["cudaMalloc", "ncclAllReduce", "ncclCommResume"],
    )
    cudart = site / "nvidia" / "cuda_runtime" / "lib"  # one nccl* name: not NCCL's library
    write_so(cudart, "libcudart.so.12", defines=["cudaMalloc", "ncclShim"])
    (finding,) = analyze(site).errors
    assert finding.code == "missing-symbol" and finding.missing == "libnccl.so.2"
    assert "(the copy of libnccl.so.2 that loads is " in finding.message
    assert finding.message.endswith("/nvidia/nccl/lib/libnccl.so.2)")
    assert library.exists()
    assert finding.hints[0].commands == (
        "python -m pip install --force-reinstall nvidia-nccl-cu12",
    )


def test_scan_takes_ld_preload_and_a_cpu_level(tmp_path: Path) -> None:
    """An old nvJitLink preloaded wins by soname (a proof); a preload entry that does not exist
    is a warning quoting ld.so's line; the x86-64 level picks the glibc-hwcaps subfolder."""
    site = torch_site(tmp_path)
    old = nvjitlink(tmp_path / "old", 4)
    report = torchguard.scan([site], ld_preload=["/nonexistent/libgone.so", str(old)])
    assert [f.code for f in report.errors] == ["missing-symbol"]
    (ignored,) = [f for f in report.warnings if f.missing == "/nonexistent/libgone.so"]
    assert "cannot be preloaded (cannot open shared object file): ignored." in ignored.message
    from torchguard._frontends.cli import main

    assert main(["scan", str(site), "--json", "--ld-preload", f"{old}:/x.so"]) == 1
    assert main(["scan", str(site), "--json", "--ld-preload", "/nonexistent/libgone.so"]) == 0
    hwcaps = site / "nvidia" / "cuda_runtime" / "lib" / "glibc-hwcaps" / "x86-64-v4"
    write_so(hwcaps, "libcudart.so.12")  # a copy for AVX-512 machines only, without cudaMalloc
    assert torchguard.scan([site], x86_64_level=3).import_torch.ok  # type: ignore[union-attr]
    assert not torchguard.scan([site], x86_64_level=4).import_torch.ok  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="x86_64_level"):
        torchguard.scan([site], x86_64_level=5)


def test_an_unreadable_torch_library_is_a_warning_not_a_blocked_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._binary.elf import ElfUnreadable
    from torchguard._platforms.linux.files import PosixFiles

    site = torch_site(tmp_path)
    facts = PosixFiles.facts

    def flaky(self: PosixFiles, path: str) -> object:
        if path.endswith("libcusparse.so.12"):
            raise ElfUnreadable("[Errno 13] Permission denied")
        return facts(self, path)

    monkeypatch.setattr(PosixFiles, "facts", flaky)
    report = analyze(site)
    assert report.errors == ()
    (unread,) = [f for f in report.warnings if f.code == "unreadable-dll"]
    assert unread.dll == "libcusparse.so.12" and "Permission denied" in unread.message
