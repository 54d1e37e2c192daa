"""One member of a large wheel, kept without the wheel (the test cache's budget).

The wheel is downloaded once with pip into a temporary folder, the member is copied under
``~/.cache/torchguard-ci/elf-wheels/<project>-<version>-files`` (keyed by version) and the
wheel is deleted with the folder: cuDNN's 700 MB wheels cost a few megabytes to keep.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from realwheels import build_once, download

CACHE = Path(
    os.environ.get("TORCHGUARD_ELF_WHEELS", Path.home() / ".cache" / "torchguard-ci" / "elf-wheels")
)


def cached_member(project: str, version: str, member: str, platform: str) -> Path:
    """The file ``member`` of the ``project==version`` wheel for ``platform``, cached."""
    name = member.rsplit("/", 1)[-1]

    def fill(folder: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="wheel-", dir=folder) as scratch:
            download(f"{project}=={version}", Path(scratch), platform=platform)
            (wheel,) = Path(scratch).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                (folder / name).write_bytes(archive.read(member))

    return build_once(CACHE / f"{project}-{version}-files", fill) / name
