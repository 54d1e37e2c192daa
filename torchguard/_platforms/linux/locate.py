"""torch as installed on Linux: its version, the NVIDIA copies its wheels pin, and the loader
environment a :class:`~torchguard._platforms.linux.system.LinuxSystem` gives ld.so."""

from __future__ import annotations

import glob as _glob
import os
import re
from collections.abc import Callable

from torchguard._binary.state import watch
from torchguard._platforms.linux.ldso import Environment
from torchguard._platforms.linux.system import LinuxSystem


def environment(system: LinuxSystem) -> Environment:
    return Environment(
        ld_library_path=system.ld_library_path,
        secure=system.secure,
        cache=system.cache,
        default_dirs=system.default_dirs,
        machine=system.machine,
        assume_python_symbols=system.executable is None,
        preload=system.preload,
        preload_file=system.preload_file,
        lib=system.dst_lib,
        cpu=system.cpu,
        glibc=system.glibc,
        machine_name={62: "x86_64", 183: "aarch64"}.get(system.machine, "x86_64"),
        library_path_doubt=system.library_path_doubt,
    )


def _dist_version(torch_dir: str) -> str:
    """torch's version from its ``.dist-info`` beside the package (``unknown`` without)."""
    for metadata in sorted(
        _glob.glob(os.path.join(torch_dir, "..", "torch-*.dist-info", "METADATA"))
    ):
        watch(metadata)
        try:
            with open(metadata, encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except (OSError, UnicodeDecodeError):
            continue
    return "unknown"


def torch_version(torch_dir: str) -> tuple[str, str | None]:
    """(``__version__``, ``cuda``) from ``torch/version.py``, read as text (never imported)."""
    version, cuda = "unknown", None
    path = os.path.join(torch_dir, "version.py")
    watch(path)  # read every run, never cached: the memo keeps its state
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return _dist_version(torch_dir), cuda
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        name, value = name.split(":")[0].strip(), value.strip().strip("'\"")
        if name == "__version__":
            version = value
        elif name == "cuda" and value not in ("None", ""):
            cuda = value
    return version, cuda


def pinned_copies(
    site_dirs: tuple[str, ...],
    cuda_major: str | None = None,
    glob: Callable[[str], list[str]] = _glob.glob,
) -> dict[str, str]:
    """soname -> the copy under ``<site>/nvidia/*/lib`` (what torch's wheels pin). Two
    CUDA majors' wheels share sonames (``libcusparse.so.12``, ``libcurand.so.10``): torch's
    own major's ``nvidia/cu<major>/lib`` comes first, another major's folder last, whatever
    order the directory lists them in."""
    pinned: dict[str, str] = {}
    for site in site_dirs:
        found = glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so*"))
        for path in sorted(found, key=lambda p: (_pin_rank(p, cuda_major), p)):
            pinned.setdefault(os.path.basename(path), path)
    return pinned


def _pin_rank(path: str, cuda_major: str | None) -> int:
    folder = os.path.basename(os.path.dirname(os.path.dirname(path)))
    if cuda_major is not None and folder == f"cu{cuda_major}":
        return 0
    return 2 if re.fullmatch(r"cu\d+", folder) else 1
