"""Real-wheel tier for bitsandbytes (issue 24): its genuine PyPI wheels, 0.45.2 (exact name,
Windows) and 0.50.2 (same-major fallback, Windows and Linux), ~145 MB: the Windows wheels
where :func:`realwheels.wheel` keeps them (``check``'s kohya set shares 0.45.2's), the Linux one
under ~/.cache/torchguard-ci/wheels/bitsandbytes.

The judge is each release's own code: ``get_cuda_bnb_library_path`` from the wheel's
``cextension.py``, run in a child Python with a stand-in ``torch`` module, picks the file for
each CUDA version, and whether that file is in the wheel decides whether the CUDA functions
load. torchguard's verdict must agree for every version.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fakes import FakeTorch
from realwheels import CACHE, download, wheel

import torchguard
from torchguard._facts.bitsandbytes import Install, chosen, cuda_tuple, shipped
from torchguard._facts.vocab import Code
from torchguard._facts.wheel_tags import Interpreter, misfit, wheel_tags
from torchguard._rules.bitsandbytes import binary_findings

pytestmark = pytest.mark.realwheel

FOLDER = CACHE / "bitsandbytes"
CUDAS = [
    (11, 7),
    (11, 8),
    (12, 0),
    (12, 1),
    (12, 4),
    (12, 6),
    (12, 8),
    (12, 9),
    (13, 0),
    (13, 1),
    (13, 2),
    (14, 0),
]

#: Runs the release's own choice for each CUDA version (argv: package dir, suffix, versions).
JUDGE = r"""
import json, sys, types
folder, suffix, versions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
torch = types.ModuleType("torch")
torch.version = types.SimpleNamespace(cuda="12.8", hip=None)
torch.cuda = types.SimpleNamespace(is_available=lambda: False)
torch._C = types.SimpleNamespace(_has_xpu=False)
sys.modules["torch"] = torch
package = types.ModuleType("bitsandbytes")
package.__path__ = [folder]
sys.modules["bitsandbytes"] = package
import bitsandbytes.consts as consts
consts.DYNAMIC_LIBRARY_SUFFIX = suffix
from bitsandbytes.cextension import get_cuda_bnb_library_path
from bitsandbytes.cuda_specs import CUDASpecs
out = {}
for major, minor in versions:
    torch.version.cuda = f"{major}.{minor}"
    path = get_cuda_bnb_library_path(CUDASpecs((8, 6), f"{major}{minor}", (major, minor)))
    out[f"{major}.{minor}"] = [path.name, path.exists()]
print(json.dumps(out))
"""


def bnb_wheel(version: str, platform: str) -> Path:
    """The release's wheel for ``platform``: a Windows one is the tier's shared copy (the one
    ``check`` and ``tests/prefetch.py`` download for the kohya set), never a second one."""
    if platform == "win_amd64":
        return wheel("bitsandbytes", version)
    FOLDER.mkdir(parents=True, exist_ok=True)
    found = sorted(FOLDER.glob(f"bitsandbytes-{version}-*{platform}*.whl"))
    if not found:
        download(f"bitsandbytes=={version}", FOLDER, platform=platform)
        found = sorted(FOLDER.glob(f"bitsandbytes-{version}-*{platform}*.whl"))
    return found[0]


def sketch(wheel: Path, target: Path) -> tuple[Path, str, tuple[str, ...], str]:
    """The wheel's ``bitsandbytes`` folder: its Python files whole, its binaries as empty
    files of the same names (the choice reads names only); (folder, version, names, source)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not member.startswith("bitsandbytes/"):
                continue
            path = target / member
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(member) if member.endswith(".py") else b"")
    folder = target / "bitsandbytes"
    version = wheel.name.split("-")[1]
    names = tuple(p.name for p in folder.iterdir())
    return folder, version, names, (folder / "cextension.py").read_text()


def real_choices(folder: Path, suffix: str) -> dict[str, tuple[str, bool]]:
    argv = [sys.executable, "-c", JUDGE, str(folder), suffix, json.dumps(CUDAS)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    return {k: (v[0], v[1]) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize(
    ("version", "platform"),
    [("0.45.2", "win_amd64"), ("0.50.2", "win_amd64"), ("0.50.2", "manylinux_2_24_x86_64")],
)
def test_every_cuda_version_is_judged_as_the_release_itself_chooses(
    version: str, platform: str, tmp_path: Path
) -> None:
    folder, found_version, names, source = sketch(bnb_wheel(version, platform), tmp_path)
    assert found_version == version
    kind = "windows" if platform.startswith("win") else "linux"
    suffix = ".dll" if kind == "windows" else ".so"
    real = real_choices(folder, suffix)
    install = Install(version, str(folder), names, source, "/")
    present = set(shipped(list(names), kind))
    agreed = 0
    for cuda in CUDAS:
        name, exists = real[f"{cuda[0]}.{cuda[1]}"]
        findings = list(binary_findings(install, cuda, kind, None, "python"))
        assert bool(findings) == (not exists), (cuda, name, exists, findings)
        if exists:
            assert chosen(cuda, present, fallback="_find_cuda_libs" in source) == cuda_tuple(
                name.split("cuda")[1].split(".")[0]
            )
        else:
            assert findings[0].missing == name
        agreed += 1
    assert agreed == len(CUDAS)


def test_a_windows_scan_with_the_real_exact_release(tmp_path: Path, runtime_dir: Path) -> None:
    """bitsandbytes 0.45.2 ships CUDA 11.7 to 12.6: torch cu128 gets the finding, cu126 not."""
    wheel = bnb_wheel("0.45.2", "win_amd64")
    for cuda, expected in (("12.8", ["libbitsandbytes_cuda128.dll"]), ("12.6", [])):
        site = FakeTorch(version=f"2.7.0+cu{cuda.replace('.', '')}", cuda=cuda).write(
            tmp_path / cuda
        )
        report = torchguard.scan([site, wheel], system32=[runtime_dir])
        found = [f for f in report.findings if f.code == Code.BITSANDBYTES_BINARY_MISSING]
        assert [f.missing for f in found] == expected
        if found:
            assert "0.45.3" in found[0].hints[0].summary


def test_the_real_wheels_declare_their_platform() -> None:
    """A bitsandbytes win_amd64 wheel in a Windows-on-ARM64 Python is named as such."""
    with zipfile.ZipFile(bnb_wheel("0.50.2", "win_amd64")) as archive:
        text = archive.read("bitsandbytes-0.50.2.dist-info/WHEEL").decode()
    tags = wheel_tags(text)
    assert tags == ("py3-none-win_amd64",)
    assert misfit(tags, Interpreter((3, 12), False, "win_amd64")) is None
    reason = misfit(tags, Interpreter((3, 12), False, "win_arm64"))
    assert reason is not None and "win_amd64" in reason
    with zipfile.ZipFile(bnb_wheel("0.50.2", "manylinux_2_24_x86_64")) as archive:
        linux = wheel_tags(archive.read("bitsandbytes-0.50.2.dist-info/WHEEL").decode())
    assert misfit(linux, Interpreter((3, 13), True, "linux_x86_64")) is None
    assert misfit(linux, Interpreter((3, 13), False, "linux_aarch64")) is not None
