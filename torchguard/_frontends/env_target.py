"""The environment ``pip install`` would change: its interpreter, install folders and dists.

The target interpreter answers for itself (a short script run by it, which needs no
torchguard): its version and platform, the folders pip installs into, and every distribution
there with its files, so that what pip would replace can be taken out of an overlay view
(:mod:`.env_overlay`) without touching the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field

from torchguard._frontends.check_error import CheckError

_PROBE = r"""
import json, os, sys, sysconfig
try:
    import importlib.metadata as metadata
except ImportError:
    metadata = None
paths = sysconfig.get_paths()
folders = list(dict.fromkeys([paths["platlib"], paths["purelib"]]))
dists = []
if metadata is not None:
    for dist in metadata.distributions(path=folders):
        name = dist.metadata["Name"]
        if not name:
            continue
        files = []
        for entry in dist.files or ():
            files.append(os.path.normpath(str(dist.locate_file(entry))))
        dists.append({"name": name, "version": dist.version,
                      "requires": list(dist.requires or ()), "files": files})
try:
    import pip
    pip_version = pip.__version__
except Exception:
    pip_version = None
print(json.dumps({"version": list(sys.version_info[:2]), "platform": sys.platform,
                  "executable": sys.executable, "prefix": sys.prefix, "folders": folders,
                  "pip": pip_version, "metadata": metadata is not None, "dists": dists}))
"""


@dataclass(frozen=True)
class Installed:
    """One installed distribution: name as its metadata spells it, version, requirements."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonical(self.name)


@dataclass
class TargetEnv:
    """The interpreter ``pip install`` runs for, and what its install folders hold."""

    python: str
    version: tuple[int, int]
    platform: str
    prefix: str
    folders: tuple[str, ...]
    pip: str | None
    dists: dict[str, Installed] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.prefix} (Python {self.version[0]}.{self.version[1]})"


def canonical(name: str) -> str:
    """PEP 503's normalised project name, without importing packaging."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def probe(python: str) -> TargetEnv:
    """Ask ``python`` about itself; :class:`CheckError` when it cannot answer."""
    if not os.path.exists(python):
        raise CheckError(f"--python {python}: no such interpreter")
    try:
        done = subprocess.run(
            [python, "-I", "-B", "-c", _PROBE],  # -B: its `import pip` writes nothing
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CheckError(f"--python {python}: cannot run it ({exc})") from None
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckError(f"--python {python}: not a Python 3.8+ interpreter ({last})") from None
    if not data.get("metadata"):
        raise CheckError(f"--python {python}: Python 3.8 or newer is needed")
    dists: dict[str, Installed] = {}
    for row in data["dists"]:
        item = Installed(
            str(row["name"]),
            str(row["version"]),
            tuple(str(r) for r in row["requires"]),
            tuple(str(f) for f in row["files"]),
        )
        dists.setdefault(item.key, item)  # the first on the path is the one imported
    major, minor = data["version"]
    return TargetEnv(
        python=python,
        version=(int(major), int(minor)),
        platform=str(data["platform"]),
        prefix=str(data["prefix"]),
        folders=tuple(str(f) for f in data["folders"]),
        pip=data.get("pip"),
        dists=dists,
    )
