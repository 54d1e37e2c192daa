"""The real-loader tier's CUDA 13 and CPU-only layouts: torch 2.14.1+cu130 with its NVIDIA
CUDA 13 wheels (the toolkit's libraries all in ``nvidia/cu13/lib``) and torch 2.13.0+cpu.

Both are installed once per session from wheel files already on the machine, into a temporary
folder removed at the end (no cache space). Each scenario is judged three ways: the real
``python -c "import torch"`` (glibc's ld.so), torchguard's ``diagnose()`` live in the same
layout and environment, with ``ensure()``, ``doctor --json`` and the offline ``scan`` of the
folder. For an import that works, the
NVIDIA libraries the real process maps must be the copies torchguard says load.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from linux_realloader import (
    CU13,
    LOCAL_WHEELS,
    Verdict,
    agree,
    farm_folder,
    front_doors_agree,
    predicted,
    real_import,
    real_run,
    replace_file,
    scratch_site,
    session_site,
    verdict,
)

pytestmark = [
    pytest.mark.linux,
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the local wheels are cp311"),
]


def _cu12_site() -> Path:
    """torch 2.9.1+cu128's install for this test process (installed on first use)."""
    from linux_realloader import torch_site

    return torch_site("2.9.1")


"""The cu12 tier's install (tests/test_linux_realloader.py): its NVIDIA CUDA 12 wheels are
the leftovers of an in-place upgrade."""

Breaker = Callable[[Path, Path], dict[str, str]]

_MAPPED = (
    "import torch\n"
    "for line in sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l}):\n"
    "    print('MAPPED', line)\n"
)


@pytest.fixture(scope="module")
def cu13_site() -> Iterator[Path]:
    with session_site(CU13) as site:
        yield site


@pytest.fixture(scope="module")
def cpu_site(cpu_torch_site: Path) -> Path:
    return cpu_torch_site  # shared with the differential tier (tests/conftest.py)


@pytest.fixture(scope="module")
def cu12_site() -> Path:
    from linux_realloader import torch_site

    return torch_site("2.9.1")


@pytest.fixture(scope="module")
def tg_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tg-cache")


def _real(site: Path, extra: Mapping[str, str], cache: Path) -> tuple[Verdict, set[str]]:
    """The real ``import torch``, and the shared objects the process maps once it is done."""
    done = real_run(site, extra, cache, _MAPPED)
    lines = done.stdout.splitlines()
    return verdict(done), {line.split(" ", 1)[1] for line in lines if line.startswith("MAPPED")}


def _native(paths: set[str], extra: Mapping[str, str] | None = None) -> set[str]:
    """torch's and NVIDIA's libraries among ``paths``, and whatever came from
    ``LD_LIBRARY_PATH`` (numpy's, Python's own and the system's are left aside)."""
    folders = [f for f in (extra or {}).get("LD_LIBRARY_PATH", "").split(":") if f]
    return {
        os.path.realpath(p)
        for p in paths
        if "/nvidia/" in p or "/torch/lib/" in p or os.path.dirname(p) in folders
    }


def _errors(report: Mapping[str, object]) -> list[dict[str, object]]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return [f for f in findings if f["severity"] == "error"]


def _judge(
    site: Path, extra: dict[str, str], cache: Path, name: str
) -> tuple[Verdict, dict[str, object], set[str]]:
    """Real import, live ``diagnose()``, ``ensure()``, ``doctor`` and offline ``scan`` must
    agree; for an import that works, the torch and NVIDIA copies torchguard loads are the
    ones the real process maps. Returns the real verdict, the live report and the mapped set."""
    real, mapped = _real(site, extra, cache)
    live = predicted(site, extra, cache)
    print(f"\n{name}: real={'ok' if real.ok else real.line!r} live={live['import_torch']}")
    assert agree(real, live), (real, live["findings"])
    assert front_doors_agree(real, live) == [], real  # ensure(), doctor, scan DIR
    if real.ok:
        offline = live["scan"]
        assert isinstance(offline, dict)
        assert _errors(live) == [] and _errors(offline) == []
        modules = live["modules"]
        assert isinstance(modules, list)
        model = _native({str(m["path"]) for m in modules}, extra)
        assert model == _native(mapped, extra)
    return real, live, mapped


def _gpu_less() -> bool:
    return not Path("/proc/driver/nvidia").exists() and not Path("/usr/lib/wsl").exists()


# --- CUDA 13 -------------------------------------------------------------------------------


def _cu13_healthy(site: Path, where: Path) -> dict[str, str]:
    return {}


def _cu13_no_cudnn(site: Path, where: Path) -> dict[str, str]:
    shutil.rmtree(site / "nvidia" / "cudnn")
    return {}


def _cu13_no_nvrtc_builtins(site: Path, where: Path) -> dict[str, str]:
    """2.14 preloads with ``required=False``: a library in no ``sys.path`` entry is skipped
    and the preload goes on (before 2.14 it stopped there), so every later one is still
    loaded by path."""
    for path in (site / "nvidia" / "cu13" / "lib").glob("libnvrtc-builtins.so.*"):
        path.unlink()
    return {}


def _cu12_toolkit_on_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    """A CUDA 12 install first on LD_LIBRARY_PATH (the cu12 wheels' libraries): same sonames
    for cuSPARSE, cuRAND, cuFile, cuDNN, NCCL; torch's RPATH and its preload by path win."""
    folders = sorted(glob.glob(str(_cu12_site() / "nvidia" / "*" / "lib")))
    return {"LD_LIBRARY_PATH": ":".join(folders)}


CU13_SCENARIOS: dict[str, Breaker] = {
    "healthy": _cu13_healthy,
    "cuDNN wheel missing": _cu13_no_cudnn,
    "nvrtc-builtins missing (the preload goes on)": _cu13_no_nvrtc_builtins,
    "CUDA 12 libraries on LD_LIBRARY_PATH": _cu12_toolkit_on_ld_library_path,
}


@pytest.mark.parametrize("name", list(CU13_SCENARIOS))
def test_cuda13_layout_is_predicted_as_the_real_loader_does(
    name: str, cu13_site: Path, cu12_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(cu13_site, tmp_path)
    extra = CU13_SCENARIOS[name](site, tmp_path)
    real, live, _ = _judge(site, extra, tg_cache, name)
    if name == "healthy" and _gpu_less():
        assert live["findings"] == []
    if name == "cuDNN wheel missing":
        assert not real.ok and "libcudnn.so.9" in real.line
        (error,) = _errors(live)
        assert error["code"] == "missing-dll"
        hints = error["hints"]
        assert isinstance(hints, list)
        assert any("nvidia-cudnn-cu13" in c for h in hints for c in h["commands"])


def _leave_cu12_wheels(site: Path) -> list[str]:
    """torch 2.9.1+cu128 upgraded in place to 2.14.1: pip keeps the 15 NVIDIA CUDA 12 wheels
    (no longer required), and the CUDA 13 ones that share their folders (cuDNN, NCCL,
    cuSPARSELt, NVSHMEM) overwrote those files. Returns the CUDA 12 folders added."""
    added = []
    for folder in sorted(os.listdir(_cu12_site() / "nvidia")):
        source = _cu12_site() / "nvidia" / folder
        if source.is_dir() and not (site / "nvidia" / folder).exists():
            farm_folder(source, site / "nvidia" / folder)
            added.append(folder)
    for dist_info in _cu12_site().glob("nvidia_*_cu12-*.dist-info"):
        os.symlink(dist_info, site / dist_info.name)
    return added


def test_cuda12_wheels_left_beside_cuda13_are_preloaded_first(
    cu13_site: Path, cu12_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """torch 2.14's preload globs ``nvidia/<library>/lib`` before ``nvidia/cu13/lib``, so a
    leftover CUDA 12 cuSPARSE, cuRAND and cuFile (sonames shared with CUDA 13's) are loaded by
    full path and ``libtorch_cuda.so`` binds to them. The import works (measured); torchguard
    names exactly the copies the real process maps, with the distribution to uninstall."""
    site = scratch_site(cu13_site, tmp_path)
    added = _leave_cu12_wheels(site)
    assert "cusparse" in added and "curand" in added
    _, live, mapped_all = _judge(site, {}, tg_cache, "CUDA 12 wheels left beside CUDA 13")
    findings = live["findings"]
    assert isinstance(findings, list)
    shadows = [f for f in findings if f["code"] == "library-shadowed"]
    mapped = _native(mapped_all)
    cu13 = {p.name for p in (site / "nvidia" / "cu13" / "lib").iterdir()}
    leftovers = {
        p for p in mapped if "/nvidia/cu13/" not in p and os.path.basename(p) in cu13
    }  # a CUDA 12 copy loaded under a soname CUDA 13 also ships
    assert leftovers, mapped
    assert {os.path.realpath(str(f["path"])) for f in shadows} == leftovers
    for finding in shadows:
        assert finding["severity"] == "warning"
        assert "nvidia/<library>/lib before nvidia/cu<major>/lib" in str(finding["message"])
        (hint,) = finding["hints"]  # type: ignore[misc]
        (command,) = hint["commands"]
        assert command.startswith("python -m pip uninstall -y nvidia-") and "-cu12" in command
    conflicts = [f for f in findings if f["code"] == "conflicting-files"]
    assert any("nvidia-nccl-cu12" in str(f["message"]) for f in conflicts)


def test_nccl_for_cuda_12_installed_over_cuda_13s(
    cu13_site: Path, cu12_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """``pip install nvidia-nccl-cu12`` after torch 2.14.1 (a CUDA 12 package's requirement):
    both wheels write ``nvidia/nccl/lib/libnccl.so.2`` and NCCL 2.27.5's bytes lack a symbol
    torch 2.14.1's libtorch_cuda.so needs: a real ``undefined symbol`` from real wheels."""
    site = scratch_site(cu13_site, tmp_path)
    library = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.unlink()
    os.symlink(_cu12_site() / "nvidia" / "nccl" / "lib" / "libnccl.so.2", library)
    for dist_info in _cu12_site().glob("nvidia_nccl_cu12-*.dist-info"):
        os.symlink(dist_info, site / dist_info.name)
    real, live, _ = _judge(site, {}, tg_cache, "nccl-cu12 over nccl-cu13")
    assert not real.ok and "undefined symbol: nccl" in real.line, real
    (error,) = _errors(live)
    assert error["code"] == "missing-symbol" and error["missing"] == "libnccl.so.2"
    hints = error["hints"]
    assert isinstance(hints, list)  # the NCCL wheel torch pins, not "reinstall torch"
    assert hints[0]["commands"] == [
        "python -m pip install --force-reinstall nvidia-nccl-cu13==2.30.7"
    ]
    findings = live["findings"]
    assert isinstance(findings, list)
    (conflict,) = [f for f in findings if f["code"] == "conflicting-files"]
    assert "the file on disk is nvidia-nccl-cu12" in str(conflict["message"])


# --- CPU only -------------------------------------------------------------------------------


def _cpu_healthy(site: Path, where: Path) -> dict[str, str]:
    return {}


def _old_libstdcxx(where: Path) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the old libstdc++ stand-in")
    folder = where / "oldlib"
    folder.mkdir()
    (folder / "v.map").write_text("GLIBCXX_3.4 { global: *; };\nCXXABI_1.3 { } GLIBCXX_3.4;\n")
    (folder / "s.c").write_text("int glibcxx_stand_in(void) { return 34; }\n")
    subprocess.run(
        [
            *(gcc, "-shared", "-fPIC", "-o", str(folder / "libstdc++.so.6"), str(folder / "s.c")),
            *("-Wl,-soname,libstdc++.so.6", f"-Wl,--version-script={folder / 'v.map'}"),
        ],
        check=True,
        timeout=120,
    )
    return folder


def _cpu_old_libstdcxx_first(site: Path, where: Path) -> dict[str, str]:
    """A conda-style old C++ runtime first on LD_LIBRARY_PATH: the CPU build's DT_RUNPATH
    (``$ORIGIN``) comes after it, unlike the CUDA builds' DT_RPATH."""
    return {"LD_LIBRARY_PATH": str(_old_libstdcxx(where))}


def _cpu_truncated_libc10(site: Path, where: Path) -> dict[str, str]:
    """The core library cut short of its ELF header (an interrupted unpack)."""
    path = site / "torch" / "lib" / "libc10.so"
    replace_file(path, path.resolve().read_bytes()[:40])
    return {}


def _cpu_gomp_on_ld_library_path(site: Path, where: Path) -> dict[str, str]:
    """A copy of torch's own libgomp first on LD_LIBRARY_PATH: the CPU build's RUNPATH
    lets it win; it binds, so the import works and the copy is named."""
    folder = where / "gomp"
    folder.mkdir()
    shutil.copyfile(site / "torch" / "lib" / "libgomp.so.1", folder / "libgomp.so.1")
    return {"LD_LIBRARY_PATH": str(folder)}


CPU_SCENARIOS: dict[str, Breaker] = {
    "healthy": _cpu_healthy,
    "old libstdc++ first": _cpu_old_libstdcxx_first,
    "truncated libc10.so": _cpu_truncated_libc10,
    "libgomp copy on LD_LIBRARY_PATH": _cpu_gomp_on_ld_library_path,
}


@pytest.mark.parametrize("name", list(CPU_SCENARIOS))
def test_cpu_only_layout_is_predicted_as_the_real_loader_does(
    name: str, cpu_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(cpu_site, tmp_path)
    extra = CPU_SCENARIOS[name](site, tmp_path)
    real, live, _ = _judge(site, extra, tg_cache, name)
    findings = live["findings"]
    assert isinstance(findings, list)
    if name == "healthy":
        assert real.ok
        assert not [f for f in findings if f["code"] == "cpu-build-on-gpu"] or not _gpu_less()
        if _gpu_less():
            assert findings == []
    if name == "old libstdc++ first":
        assert not real.ok and "not found" in real.line
        (error,) = _errors(live)
        assert error["code"] == "runtime-too-old"
    if name == "truncated libc10.so":
        assert not real.ok and "file too short" in real.line
        (error,) = _errors(live)
        assert error["code"] == "corrupt-dll"


_LOAD_AS_TORCHVISION = (
    "import ctypes, glob, torch\n"  # torch.ops.load_library's own call, its error unwrapped
    "ctypes.CDLL(sorted(glob.glob({!r}))[0])\n"
)


TORCHVISIONS = [
    # (layout, torchvision, pinned torch differs, what loading its _C fails on: None = loads)
    ("cu13", "0.29.1", False, None),
    ("cu13", "0.28.0", True, "undefined symbol: _ZN3c10"),
    ("cpu", "0.28.0", False, "libc10_cuda.so: cannot open shared object file"),
    ("cpu", "0.29.0", True, "libc10_cuda.so: cannot open shared object file"),
]


@pytest.mark.parametrize(("layout", "version", "mismatch", "failure"), TORCHVISIONS)
def test_torchvision_built_for_another_torch_is_named_with_its_package(
    layout: str,
    version: str,
    mismatch: bool,
    failure: str | None,
    request: pytest.FixtureRequest,
    tg_cache: Path,
    tmp_path: Path,
) -> None:
    """PyPI's torchvision wheels are CUDA 13 builds, each pinned to one torch: 0.29.1 (for
    2.14.1) loads into torch 2.14.1+cu130; 0.28.0 (for 2.13.0) does not bind there
    (``undefined symbol: _ZN3c10...``); on the CPU-only 2.13.0 both 0.28.0 and 0.29.0 lack
    ``libc10_cuda.so``. ``import torchvision`` swallows the load error and fails later
    (``operator torchvision::nms does not exist``); loading its ``_C`` as it does shows the
    loader's error, which torchguard names with the package. ``import torch`` still works."""
    wheels = [p for folder in LOCAL_WHEELS for p in folder.glob(f"torchvision-{version}-*.whl")]
    if not wheels:
        pytest.skip(f"torchvision {version} is not among the local wheels")
    base: Path = request.getfixturevalue(f"{layout}_site")
    site = scratch_site(base, tmp_path)
    with zipfile.ZipFile(wheels[0]) as archive:
        archive.extractall(site)
    cache = tg_cache
    real = real_import(site, {}, cache, "import torch, torchvision")
    library = str(site / "torchvision" / "_C*.so")
    loaded = real_import(site, {}, cache, _LOAD_AS_TORCHVISION.format(library))
    live = predicted(site, {}, cache)
    offline = live["scan"]
    assert isinstance(offline, dict)
    print(f"\n{layout} torchvision {version}: import={real.line!r} load={loaded.line!r}")
    # import torch works and every front door says so; doctor exits 1 for the package's error
    wrong = front_doors_agree(Verdict(True, ""), live)
    assert wrong == ([] if failure is None else ["doctor exited 1"]), wrong
    findings = live["findings"]
    assert isinstance(findings, list)
    codes = [f["package"] for f in findings if f["code"] == "package-mismatch"]
    assert codes == (["torchvision"] if mismatch else [])
    if failure is None:
        assert real.ok and loaded.ok, (real, loaded)
        assert not _errors(live) and not _errors(offline)
        return
    assert not real.ok and not loaded.ok
    assert loaded.line.startswith("OSError: ") and failure in loaded.line  # after import torch
    for report in (live, offline):
        errors = [f for f in _errors(report) if f["package"] == "torchvision"]
        assert errors, report["findings"]
        message = loaded.line.split(": ", 1)[1]
        assert any(message in str(e["message"]) for e in errors), (message, errors)
