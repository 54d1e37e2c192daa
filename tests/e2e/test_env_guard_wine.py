"""``torchguard pip install`` and ``check --env`` run by a real Windows CPython, under Wine.

Each case is a Windows environment of its own: a copy of the provisioned CPython 3.11 folder
(hard links) whose ``Lib\\site-packages`` holds the pristine torch 2.4.1 + torchvision 0.19.1
tree (hard links; pip unlinks before it writes, so the pristine tree is never changed) and pip
24.2. torchguard is on that interpreter's path through its ``._pth`` file, and runs as the
user would: ``python.exe -m torchguard pip install ...``. pip runs offline: ``--no-index
--find-links C:\\tg-guard\\<pid>\\wheels``, a folder of real cached wheels (torch 2.5.1,
torchvision 0.20.1, sympy 1.13.1 from PyPI) and of two wheels built here; torchguard forwards
these options to pip's dry run and keeps them in the command it proposes. Every refusal is
checked to leave the environment's files as they were; every proposed command is then run by
the same pip, and the real ``import torch`` (and torchvision) judges the result.

Not covered under Wine: replacing a CUDA torch by PyPI's CPU build. Windows CUDA builds of
torch come only from download.pytorch.org, which this machine cannot reach, and a CPU wheel
renamed ``+cu124`` would carry none of a CUDA build's DLLs, so nothing true would be judged.
That case runs on Linux with real CUDA wheels (``tests/test_env_install_real.py``) and offline
for Windows (``tests/test_env_windows.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realwheels import CACHE, build_once, download, wheel
from wine import (
    _DLL_OVERRIDES,
    WINE_START_FAILURE,
    WineEnv,
    _install_wheel,
    _link_or_copy,
    _rmtree,
    _wine_env,
)

pytestmark = pytest.mark.e2e

EXTRA = ("pip==24.2", "sympy==1.13.1", "six==1.17.0")
"""From PyPI, once: the environment's pip, torch 2.5.1's sympy pin, a harmless package."""

OTHER_RUNTIME = "libomp-5f3a2b1c.dll"
"""intel-openmp's KMP runtime under another name, as a bundling tool renames it."""

_TAKES = 1800.0


def _dist_info_wheel(folder: Path, name: str, files: dict[str, bytes], metadata: str) -> Path:
    """A wheel of ``files`` with its dist-info, as a build backend writes it."""
    tag = "py3-none-win_amd64" if any(f.endswith(".dll") for f in files) else "py3-none-any"
    info = f"{name}-1.0.dist-info"
    members = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{metadata}".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: torchguard-tests\nRoot-Is-Purelib: "
        f"{'false' if 'win' in tag else 'true'}\nTag: {tag}\n".encode(),
    }
    rows = []
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    rows.append(f"{info}/RECORD,,")
    target = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in members.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\n".join(rows) + "\n")
    return target


def _local_wheels(folder: Path) -> list[Path]:
    """``otheromp``: a KMP runtime of its own (intel-openmp 2021.4.0's, renamed) and an
    extension importing it by name; ``nodepack``: pure Python, requiring ``otheromp`` the way
    a custom node's requirements pull in a package it uses in one feature only."""
    from pe_builder import build_pe

    with zipfile.ZipFile(wheel("intel-openmp", "2021.4.0")) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith("/libiomp5md.dll")]
        runtime = archive.read(member)
    user = build_pe(
        [OTHER_RUNTIME, "KERNEL32.dll"],
        symbols={OTHER_RUNTIME: ["omp_get_max_threads"], "KERNEL32.dll": ["GetLastError"]},
    )
    other = _dist_info_wheel(
        folder,
        "otheromp",
        {
            f"otheromp/{OTHER_RUNTIME}": runtime,
            "otheromp/_core.cp311-win_amd64.pyd": user,
            "otheromp/__init__.py": b"",
        },
        "",
    )
    node = _dist_info_wheel(
        folder,
        "nodepack",
        {"nodepack/__init__.py": b"NAME = 'nodepack'\n"},
        "Requires-Dist: otheromp\n",
    )
    return [other, node]


def _download_extra(folder: Path) -> None:
    for spec in EXTRA:
        download(spec, folder, platform=None)


class GuardEnv:
    """One Windows environment: ``C:\\tg-guard\\<pid>\\<name>\\Python311``."""

    def __init__(self, wine: WineEnv, root: Path, name: str, pip_wheel: Path) -> None:
        self.wine = wine
        self.python_dir = root / name / "Python311"
        _rmtree(self.python_dir.parent)
        skip = shutil.ignore_patterns("Lib", "Scripts", "*._pth", ".torchguard-e2e*")
        shutil.copytree(wine.python_dir, self.python_dir, copy_function=_link_or_copy, ignore=skip)
        self.site = self.python_dir / "Lib" / "site-packages"
        shutil.copytree(wine.site, self.site, symlinks=True, copy_function=_link_or_copy)
        here = wine.to_windows(self.python_dir)
        _install_wheel(pip_wheel, self.site, self.python_dir, here)
        lines = ("python311.zip", ".", "Lib\\site-packages", wine.to_windows(wine.torchguard_src))
        (self.python_dir / "python311._pth").write_text("\r\n".join((*lines, "import site", "")))

    def run(self, *args: str, compile_: bool = True) -> subprocess.CompletedProcess[str]:
        """``python.exe ARGS`` in a fresh Windows process (pip quiet about its version, no
        colours; ``compile_=False``: pip writes no bytecode, a minute less for torch)."""
        argv = [str(self.wine.loader), self.wine.to_windows(self.python_dir / "python.exe")]
        # no winedbg: a crash ends the process (said by its exit code) instead of waiting
        environment = _wine_env(self.wine.prefix, overrides=f"{_DLL_OVERRIDES};winedbg.exe=d")
        environment.update(PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
        if not compile_:
            environment["PIP_NO_COMPILE"] = "1"
        for _ in range(3):
            with self.wine.system32_shared():
                done = subprocess.run(
                    [*argv, *args],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    env=environment,
                    cwd=self.wine.workdir,
                    timeout=_TAKES,
                    check=False,
                )
            if WINE_START_FAILURE not in done.stderr:
                break
            time.sleep(1)
        return done

    def guard(self, *args: str) -> tuple[int, dict[str, Any], str]:
        """``python.exe -m torchguard pip install --json ARGS``: exit code, JSON, stderr."""
        done = self.run("-m", "torchguard", "pip", "install", "--json", *args)
        start = done.stdout.find("{")
        assert start >= 0, done.stdout + done.stderr
        return done.returncode, json.loads(done.stdout[start:]), done.stderr

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Every file of the environment: size and modification time."""
        seen: dict[str, tuple[int, int]] = {}
        for folder, _, names in os.walk(self.python_dir):
            for name in names:
                stat = os.lstat(os.path.join(folder, name))
                seen[os.path.relpath(os.path.join(folder, name), self.python_dir)] = (
                    stat.st_size,
                    stat.st_mtime_ns,
                )
        return seen

    def unchanged_since(self, before: dict[str, tuple[int, int]]) -> None:
        """No file changed, none removed; new files only the bytecode of torchguard's own
        imports (``packaging``, ``pefile``, ``platformdirs``: written by Python for any program
        that imports them). pip's dry run and the probe run with ``-B``: nothing of pip's."""
        now = self.snapshot()
        assert {k: v for k, v in now.items() if k in before} == before
        added = sorted(set(now) - set(before))
        own = tuple(f"Lib/site-packages/{m}/" for m in ("packaging", "pefile", "platformdirs"))
        strays = [p for p in added if not (p.startswith(own) and "/__pycache__/" in p)]
        assert strays == []

    def probe(self, code: str) -> dict[str, Any]:
        """Run ``code`` (which prints one ``TG-JSON`` line) and return that line's object."""
        done = self.run("-c", code)
        lines = [line for line in done.stdout.splitlines() if line.startswith("TG-JSON ")]
        assert done.returncode == 0 and lines, f"exit {done.returncode}\n{done.stderr[-3000:]}"
        value: dict[str, Any] = json.loads(lines[-1][len("TG-JSON ") :])
        return value


class Guard:
    """The wheels folder and a maker of fresh environments."""

    def __init__(self, wine: WineEnv, root: Path, links: Path, pip_wheel: Path) -> None:
        self.wine, self.root, self.pip_wheel = wine, root, pip_wheel
        self.offline = ("--no-index", "--find-links", wine.to_windows(links))

    def fresh(self, name: str) -> GuardEnv:
        return GuardEnv(self.wine, self.root, name, self.pip_wheel)


@pytest.fixture(scope="module")
def guard(wine_env: WineEnv) -> Iterator[Guard]:
    pins = hashlib.sha256(";".join(EXTRA).encode()).hexdigest()[:8]
    extra = build_once(CACHE.parent / f"wheels-wine-env-{pins}", _download_extra)
    root = wine_env.prefix / "drive_c" / "tg-guard" / str(os.getpid())
    _rmtree(root)
    links = root / "wheels"
    links.mkdir(parents=True)
    found = [wheel("torch", "2.5.1"), wheel("torchvision", "0.20.1")]
    found += [p for p in extra.iterdir() if p.suffix == ".whl" and not p.name.startswith("pip-")]
    for path in found:
        os.symlink(path, links / path.name)
    _local_wheels(links)
    (pip_wheel,) = extra.glob("pip-*.whl")
    try:
        yield Guard(wine_env, root, links, pip_wheel)
    finally:
        if os.environ.get("TORCHGUARD_E2E_KEEP") != "1":
            _rmtree(root)


TORCH_AND_VISION = """
import json, torch, torchvision
boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
kept = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist()
print("TG-JSON " + json.dumps({"torch": torch.__version__, "vision": torchvision.__version__,
                               "nms": kept, "sum": float((torch.ones(64, 64) @ torch.ones(64, 64)).sum())}))
"""


def test_torch_upgraded_under_torchvision_is_refused_and_the_alternative_works(
    guard: Guard,
) -> None:
    env = guard.fresh("upgrade")
    before = env.snapshot()
    code, document, stderr = env.guard(*guard.offline, "torch==2.5.1")
    assert code == 1, stderr
    assert document["ran_pip"] is False and document["pip_exit"] is None
    check = document["check"]
    assert check["torch"]["before"]["version"] == "2.4.1"
    assert check["torch"]["after"]["version"] == "2.5.1"
    left = [b["message"] for b in check["breaks"] if b["code"] == "left-behind"]
    assert left == [
        "torchvision 0.19.1 requires torch==2.4.1, but torch would become 2.5.1 (it is 2.4.1 "
        "today): torchvision is left built for what it replaces"
    ]
    env.unchanged_since(before)
    first = check["alternatives"][0]
    assert first["resolved"] is True
    assert first["arguments"] == [*guard.offline, "torch==2.5.1", "torchvision"]
    assert first["command"] == f"pip install {' '.join(first['arguments'])}"  # cmd.exe's
    done = env.run("-m", "pip", "install", "--quiet", *first["arguments"], compile_=False)
    assert done.returncode == 0, done.stderr[-3000:]
    works = env.probe(TORCH_AND_VISION)
    assert works == {"torch": "2.5.1+cpu", "vision": "0.20.1+cpu", "nms": [0], "sum": 64.0**3}


OTHER_AFTER_TORCH = f"""
import ctypes, json, os, torch, otheromp
a = torch.ones(256, 256)
ok = float((a @ a).sum()) == 256.0 ** 3
runtime = ctypes.CDLL(os.path.join(os.path.dirname(otheromp.__file__), {OTHER_RUNTIME!r}))
print("TG-JSON " + json.dumps({{"torch": ok, "threads": runtime.omp_get_max_threads()}}))
"""

TORCH_AND_NODE = """
import json, importlib.util, torch, nodepack
print("TG-JSON " + json.dumps({"node": nodepack.NAME, "torch": torch.__version__,
    "sum": float((torch.ones(64, 64) @ torch.ones(64, 64)).sum()),
    "otheromp": importlib.util.find_spec("otheromp") is not None}))
"""


def test_a_second_openmp_runtime_is_refused_and_the_no_deps_command_works(
    guard: Guard,
) -> None:
    """``nodepack`` pulls in ``otheromp``, whose KMP runtime has another name than torch
    2.4.1's ``libiomp5md.dll``: two runtimes, which no preload can make one. Refused; the
    refusal proven by the real loader (forced, torch then otheromp's runtime abort with OMP:
    Error #15); the proposed ``--no-deps`` command installs nodepack without it, and torch
    still works."""
    env = guard.fresh("openmp")
    before = env.snapshot()
    code, document, stderr = env.guard(*guard.offline, "nodepack")
    assert code == 1, stderr
    check = document["check"]
    assert [c["name"] for c in check["changes"]] == ["nodepack", "otheromp"]
    (conflict,) = [b for b in check["breaks"] if b["code"] == "openmp-conflict"]
    assert OTHER_RUNTIME in conflict["message"] and "libiomp5md.dll" in conflict["message"]
    assert document["ran_pip"] is False
    env.unchanged_since(before)
    (alternative,) = check["alternatives"]
    assert alternative["arguments"] == ["--no-deps", *guard.offline, "nodepack==1.0"]
    assert "left unmet: nodepack asks for otheromp (not installed)" in alternative["why"]
    done = env.run("-m", "pip", "install", "--quiet", *alternative["arguments"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert env.probe(TORCH_AND_NODE) == {
        "node": "nodepack",
        "torch": "2.4.1+cpu",
        "sum": 64.0**3,
        "otheromp": False,
    }
    # what the refusal prevented: the same install forced, then torch and otheromp used
    code, document, stderr = env.guard("--force", *guard.offline, "nodepack")
    assert code == 0 and document["ran_pip"] is True, stderr
    real = env.run("-c", OTHER_AFTER_TORCH)
    assert real.returncode == 3 and "OMP: Error #15" in real.stderr, (
        f"predicted an abort; Wine says exit {real.returncode}:\n{real.stdout}{real.stderr[-2000:]}"
    )


def test_a_harmless_set_passes_installs_and_torch_still_imports(guard: Guard) -> None:
    env = guard.fresh("harmless")
    before = env.snapshot()
    code, document, stderr = env.guard(*guard.offline, "six")
    assert code == 0, stderr
    assert document["check"]["safe"] is True and document["check"]["breaks"] == []
    assert [(c["name"], c["kind"], c["to"]) for c in document["check"]["changes"]] == [
        ("six", "new", "1.17.0")
    ]
    assert document["ran_pip"] is True and document["pip_exit"] == 0
    after = env.snapshot()
    assert {k: v for k, v in after.items() if k in before} == before  # torch's files untouched
    assert "Lib/site-packages/six.py" in after
    assert "Lib/site-packages/six-1.17.0.dist-info/RECORD" in after
    works = env.probe(
        "import json, six, torch; print('TG-JSON ' + json.dumps([six.__version__, "
        "torch.__version__, float(torch.ones(3).sum())]))"
    )
    assert works == ["1.17.0", "2.4.1+cpu", 3.0]
