"""Genuine Linux shared objects from manylinux wheels on PyPI, downloaded once and cached.

Cached under ~/.cache/torchguard-ci/elf-wheels, keyed by project and version: the wheel (one
the machine's wheel folders hold, such as cuSPARSE 12.6.3.3, is read where it is); the
few members a test reads are extracted once per test process into a temporary folder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from linux_realloader import LOCAL_WHEELS, TAG, torch_wheels
from realwheels import download

CACHE = Path(
    os.environ.get("TORCHGUARD_ELF_CACHE", Path.home() / ".cache" / "torchguard-ci" / "elf-wheels")
)
TORCH = ("torch", "2.9.1", "manylinux_2_28_x86_64")
CUSPARSE = ("nvidia-cusparse", "12.6.3.3", "manylinux2014_x86_64")


def wheel(project: str, version: str, platform: str) -> Path:
    """The ``project==version`` cp311 wheel for ``platform``: read in place from the machine's
    wheel folders when they hold it (no cache space), else downloaded once into the cache."""
    dist = project.replace("-", "_")
    for folder in LOCAL_WHEELS:
        local = sorted(p for p in folder.glob(f"{dist}-{version}-*.whl") if platform in p.name)
        if local:
            return local[0]
    if project == "torch" and TAG == "cp311":  # the real-loader tier's wheel: one copy
        kept = sorted(p for p in torch_wheels(version).glob("torch-*.whl") if platform in p.name)
        if kept:
            return kept[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    if not found:
        download(f"{project}=={version}", CACHE, platform=platform)
        found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"pip downloaded no {platform} wheel for {project}=={version}")
    return found[0]


_EXTRACTED: list[Path] = []


def _scratch() -> Path:
    """One folder per test process for extracted members, removed when the process ends: the
    wheel stays cached, its members (600 MB for torch) need not be kept twice."""
    if not _EXTRACTED:
        _EXTRACTED.append(Path(tempfile.mkdtemp(prefix="torchguard-elf-")))
        atexit.register(shutil.rmtree, _EXTRACTED[0], True)
    return _EXTRACTED[0]


def shared_objects(spec: tuple[str, str, str], *names: str) -> dict[str, Path]:
    """Members of the wheel whose file names are ``names``, extracted once per test process."""
    project, version, platform = spec
    folder = _scratch() / f"{project}-{version}-files"
    wanted = {name: folder / name for name in names}
    missing = [name for name, path in wanted.items() if not path.exists()]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel(project, version, platform)) as archive:
            for member in archive.namelist():
                name = member.rsplit("/", 1)[-1]
                if name in missing:
                    partial = folder / (name + ".part")
                    with archive.open(member) as source, partial.open("wb") as target:
                        shutil.copyfileobj(source, target, 1 << 20)
                    partial.replace(folder / name)
    absent = [name for name, path in wanted.items() if not path.exists()]
    if absent:
        raise RuntimeError(f"{project}=={version} has no {absent}")
    return wanted
