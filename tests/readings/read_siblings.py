"""Read which torch each torchvision and torchaudio release on PyPI was made for, and which
CPython versions each torch release has Windows wheels for.

Rerun it to check or extend ``torchguard/_facts/siblings.py``::

    python tests/readings/read_siblings.py > tests/readings/siblings_readings.jsonl

For every final torchvision and torchaudio release, the ``Requires-Dist: torch`` line of its
CPython 3.11 (or ``py3-none``) win_amd64 wheel's METADATA (the wheel read over HTTP range requests: its central
directory and one small member, never the whole file); for torch, the ``cpXY-cpXY-win_amd64``
tags of its wheels in PyPI's simple index (GIL builds). ``tests/test_siblings.py`` checks the
table against the recorded output.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from read_torch_archs import RangeFile

PROJECTS = ("torchvision", "torchaudio")
_FINAL = re.compile(
    r"^(?P<project>[a-z]+)-(?P<version>\d+\.\d+\.\d+)-(?:cp311-cp311|py3-none)-win_amd64\.whl$"
)


def wheels(project: str) -> list[tuple[str, str, int]]:
    """(version, url, size) of each final release's cp311 (or py3) win_amd64 wheel, oldest first."""
    request = urllib.request.Request(
        f"https://pypi.org/simple/{project}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    found = {}
    for item in index["files"]:
        match = _FINAL.match(item["filename"])
        if match and not item.get("yanked"):
            found[match["version"]] = (match["version"], item["url"], int(item["size"]))
    return sorted(found.values(), key=lambda w: tuple(int(p) for p in w[0].split(".")))


def torch_requirement(url: str, size: int) -> str | None:
    """The ``Requires-Dist: torch ...`` of the wheel at ``url`` (None when it names none)."""
    with zipfile.ZipFile(RangeFile(url, size)) as archive:  # type: ignore[arg-type]
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            value = line.partition(":")[2].strip()
            if re.match(r"^torch\b(?![-_])", value):
                return value
    return None


_TORCH = re.compile(r"^torch-(\d+\.\d+\.\d+)(?:-\d+)?-cp(\d)(\d+)-cp\d+-win_amd64\.whl$")


def torch_pythons() -> dict[str, list[str]]:
    """torch version -> the CPython versions (``3.11``) of its win_amd64 wheels, from 2.0."""
    request = urllib.request.Request(
        "https://pypi.org/simple/torch/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    found: dict[str, set[tuple[int, int]]] = {}
    for item in index["files"]:
        match = _TORCH.match(item["filename"])
        if match and not item.get("yanked") and not match[1].startswith(("0.", "1.")):
            found.setdefault(match[1], set()).add((int(match[2]), int(match[3])))
    return {
        version: [f"{a}.{b}" for a, b in sorted(pythons)]
        for version, pythons in sorted(
            found.items(), key=lambda f: tuple(int(p) for p in f[0].split("."))
        )
    }


def main() -> int:
    for version, pythons in torch_pythons().items():
        print(json.dumps({"project": "torch", "version": version, "pythons": pythons}))
    for project in PROJECTS:
        for version, url, size in wheels(project):
            requirement = torch_requirement(url, size)
            print(json.dumps({"project": project, "version": version, "torch": requirement}))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
