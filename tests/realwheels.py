"""Genuine torch Windows wheels from PyPI, downloaded once and cached under ~/.cache."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(
    os.environ.get("TORCHGUARD_WHEEL_CACHE", Path.home() / ".cache" / "torchguard-ci" / "wheels")
)
PYTHON_VERSION = "3.11"
TAG = "cp311-cp311-win_amd64"
MSVC_RUNTIME = "14.44.35112"


def download(spec: str, folder: Path, platform: str = "win_amd64") -> None:
    """``pip download`` one wheel (no dependencies) for ``platform`` into ``folder``."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # lift the local torch<=2.14.1 cap
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            platform,
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            "-d",
            str(folder),
            spec,
        ],
        check=True,
        env=env,
        timeout=1800,
    )


def wheel(project: str, version: str) -> Path:
    """The cached ``project==version`` win_amd64 cp311 wheel, downloaded on first use."""
    CACHE.mkdir(parents=True, exist_ok=True)
    dist = project.replace("-", "_")
    found = sorted(CACHE.glob(f"{dist}-{version}-*win_amd64.whl"))
    if found:
        return found[0]
    download(f"{project}=={version}", CACHE)
    found = sorted(CACHE.glob(f"{dist}-{version}-*win_amd64.whl"))
    if not found:
        raise RuntimeError(f"pip downloaded no win_amd64 wheel for {project}=={version}")
    return found[0]


def vc_runtime_dir(target: Path, version: str = MSVC_RUNTIME) -> Path:
    """Microsoft's VC++ runtime DLLs from the msvc-runtime wheel, as a --system32 folder."""
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel("msvc-runtime", version)) as archive:
        for member in archive.namelist():
            parts = member.split("/")
            if len(parts) == 4 and parts[1:3] == ["data", "Scripts"] and member.endswith(".dll"):
                (target / parts[3]).write_bytes(archive.read(member))
    return target


def unpack(wheel_path: Path, target: Path) -> Path:
    """The wheel as an installed site-packages tree (torch has no .data members)."""
    if not (target / "torch" / "__init__.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel_path) as archive:
            archive.extractall(target)
    return target


#: torch releases and the torchvision / torchaudio released with them (their Requires-Dist pins).
SIBLINGS: dict[str, dict[str, str]] = {
    "2.4.0": {"torchvision": "0.19.0", "torchaudio": "2.4.0"},
    "2.4.1": {"torchvision": "0.19.1", "torchaudio": "2.4.1"},
}


def siblings(torch_version: str, *projects: str) -> list[Path]:
    """The cached wheels of the siblings released with ``torch_version`` (default: all)."""
    pinned = SIBLINGS[torch_version]
    return [wheel(project, pinned[project]) for project in projects or tuple(pinned)]


def unpack_sibling(wheel_path: Path, target: Path) -> Path:
    """A small (non-torch) wheel as an installed tree, fresh each time: tests damage it."""
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel_path) as archive:
        archive.extractall(target)
    return target


if __name__ == "__main__":
    for version in sys.argv[1:] or ["2.4.0", "2.4.1", "2.15.0"]:
        print(wheel("torch", version))
    print(wheel("msvc-runtime", MSVC_RUNTIME))
