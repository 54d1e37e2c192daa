"""torch CUDA layouts built from genuine NVIDIA win_amd64 DLLs (PyPI wheels, cached by version).

No torch CUDA wheel is downloaded (2-3 GB each). The torch side is the real CPU wheel's DLLs
with ``version.py`` set to a CUDA build, plus ``c10_cuda.dll`` and ``torch_cuda.dll`` built with
``pe_builder`` from the import lists in shared/gpu-facts.md section 2a, restricted to the NVIDIA
DLLs downloaded here, and for cu118 the ``zlibwapi.dll`` torch bundles beside cuDNN 8. Every NVIDIA DLL is the real file, so its imports (the chains under test)
are NVIDIA's. The smallest set that shows the chains (about 1.2 GB of wheels):

- cu118: cudart64_110 and the cuDNN 8.9.4 set (sub-libraries import each other);
- cu124: cudart64_12, cusparse64_12 (12.3.1, which imports nvJitLink_120_0) and nvJitLink_120_0;
- cu130: cudart64_13, cusparse64_12 from CUDA 13 (imports nvJitLink_130_0) and nvJitLink_130_0.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from neighbour_members import copy_members, unpack_members
from pe_builder import build_pe
from realwheels import CACHE, build_once, wheel

DLL_CACHE = CACHE.parent / "nvidia-dlls"
RUNTIME = ("MSVCP140.dll", "VCRUNTIME140.dll", "VCRUNTIME140_1.dll", "KERNEL32.dll")


@dataclass(frozen=True)
class Variant:
    tag: str
    cuda: str
    torch: str
    wheels: tuple[tuple[str, str], ...]
    cudart: str
    torch_cuda_imports: tuple[str, ...]


VARIANTS: dict[str, Variant] = {
    "cu118": Variant(
        "cu118",
        "11.8",
        "2.4.1",
        (("nvidia-cuda-runtime-cu11", "11.8.89"), ("nvidia-cudnn-cu11", "8.9.4.25")),
        "cudart64_110.dll",
        ("cudart64_110.dll", "cudnn64_8.dll"),
    ),
    "cu124": Variant(
        "cu124",
        "12.4",
        "2.4.1",
        (
            ("nvidia-cuda-runtime-cu12", "12.4.127"),
            ("nvidia-cusparse-cu12", "12.3.1.170"),
            ("nvidia-nvjitlink-cu12", "12.4.127"),
        ),
        "cudart64_12.dll",
        ("cudart64_12.dll", "cusparse64_12.dll"),
    ),
    "cu130": Variant(
        "cu130",
        "13.0",
        "2.15.0",
        (
            ("nvidia-cuda-runtime", "13.0.96"),
            ("nvidia-cusparse", "12.6.3.3"),
            ("nvidia-nvjitlink", "13.0.88"),
        ),
        "cudart64_13.dll",
        ("cudart64_13.dll", "cusparse64_12.dll"),
    ),
}


_DLLS: dict[tuple[str, str], dict[str, Path]] = {}


def nvidia_dlls(project: str, version: str) -> dict[str, Path]:
    """The 64-bit DLLs of an NVIDIA wheel, by file name. The cache keeps them as the wheel
    stores them (deflated: about 0.65 GB for the three variants instead of 1.6 GB inflated),
    inflated once per test process into a temporary folder removed at exit (each checked
    against the wheel's CRC)."""
    found = _DLLS.get((project, version))
    if found is not None:
        return found

    def fill(scratch: Path) -> None:
        path = wheel(project, version)
        with zipfile.ZipFile(path) as archive, path.open("rb") as source:
            kept = [
                info
                for info in archive.infolist()
                if info.filename.lower().endswith(".dll")
                and "32_" not in info.filename.rsplit("/", 1)[-1]  # not cudart32_110
            ]
            copy_members(source, kept, scratch)

    folder = build_once(DLL_CACHE / f"{project}-{version}-stored", fill)
    # only these DLLs are ever read: the wheel (up to 700 MB) need not stay in the cache
    for leftover in CACHE.glob(f"{project.replace('-', '_')}-{version}-*.whl"):
        leftover.unlink(missing_ok=True)
    where = Path(tempfile.mkdtemp(prefix=f"torchguard-{project}-{version}-"))
    atexit.register(shutil.rmtree, where, True)
    dlls = {path.name: path for path in sorted(unpack_members(folder, where))}
    _DLLS[(project, version)] = dlls
    return dlls


_TREES: dict[str, Path] = {}


def torch_tree(version: str) -> Path:
    """The parts of the real CPU torch wheel the loader cares about, unpacked once per test
    process into a temporary folder removed at exit: the cache keeps the wheel only (the
    unpacked DLLs would add 257 MB for 2.4.1 and 320 MB for 2.15.0 beside it)."""
    found = _TREES.get(version)
    if found is not None:
        return found
    where = Path(tempfile.mkdtemp(prefix=f"torchguard-torch-{version}-dlls-"))
    atexit.register(shutil.rmtree, where, True)
    with zipfile.ZipFile(wheel("torch", version)) as archive:
        for member in archive.namelist():
            top, _, rest = member.partition("/")
            keep = top.endswith(".dist-info") or (
                top == "torch"
                and (
                    rest in ("__init__.py", "version.py")
                    or (rest.startswith("_C.") and rest.endswith(".pyd"))
                    or (rest.startswith("lib/") and rest.endswith(".dll"))
                )
            )
            if keep:
                archive.extract(member, where)
    _TREES[version] = where
    return where


def _place(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        target.symlink_to(source)


def cuda_layout(site: Path, variant: Variant, *, without: tuple[str, ...] = ()) -> Path:
    """A site-packages holding a CUDA build of torch, minus the DLL names in ``without``."""
    base = torch_tree(variant.torch)
    for path in base.rglob("*"):
        if path.is_file() and path.name != ".complete":
            relative = path.relative_to(base)
            if relative.as_posix() != "torch/version.py":
                _place(path, site / relative)
    lib = site / "torch" / "lib"
    for project, version in variant.wheels:
        for name, path in nvidia_dlls(project, version).items():
            if name not in without:
                _place(path, lib / name)
    built = {
        "c10_cuda.dll": ("c10.dll", variant.cudart, *RUNTIME),
        **({"zlibwapi.dll": ("KERNEL32.dll",)} if variant.tag == "cu118" else {}),
        "torch_cuda.dll": (
            "c10.dll",
            "c10_cuda.dll",
            "torch_cpu.dll",
            *variant.torch_cuda_imports,
            *RUNTIME,
        ),
    }
    for name, imports in built.items():
        if name not in without:
            # A stand-in names what it imports from genuine DLLs without naming symbols: which
            # of their exports a real torch_cuda.dll takes is not known here, so the symbol
            # level judges only the bindings between stand-ins.
            genuine = {dll: [] for dll in imports if dll.lower() not in built}
            (lib / name).write_bytes(build_pe(imports, symbols=genuine))
    (site / "torch" / "version.py").write_text(
        f"__version__ = '{variant.torch}+{variant.tag}'\ncuda: 'Optional[str]' = '{variant.cuda}'\n"
    )
    return site


def driver_dir(folder: Path, runtime: Path, driver: tuple[int, int] | None) -> Path:
    """A System32 stand-in: the VC++ runtime, plus nvcuda.dll carrying ``driver``'s number."""
    folder.mkdir(parents=True, exist_ok=True)
    for dll in runtime.glob("*.dll"):
        _place(dll, folder / dll.name)
    if driver is not None:
        merged = driver[0] * 100 + driver[1]  # 560.94 -> FileVersion 32.0.15.6094
        version = (32, 0, 10 + merged // 10000, merged % 10000)
        (folder / "nvcuda.dll").write_bytes(build_pe(["KERNEL32.dll"], file_version=version))
    return folder


if __name__ == "__main__":
    total = 0
    for variant in VARIANTS.values():
        torch_tree(variant.torch)
        for project, version in variant.wheels:
            nvidia_dlls(project, version)
            total += wheel(project, version).stat().st_size
    print(f"NVIDIA wheels: {total / 1e6:.0f} MB")
