"""The real-loader tier's fixtures: genuine manylinux torch wheels, scratch layouts, two judges.

torch 2.9.1+cu128 and its NVIDIA wheels are downloaded once into a cache keyed by version and
Python tag (``~/.cache/torchguard-ci/linux``; triton is left out: ``import torch`` never needs
it) and installed once per test process into a temporary folder removed at exit
(:func:`torch_site`). The CUDA 13 and CPU-only layouts install per test session from wheel
files already on the machine (:func:`session_site`), so they cost no cache space. Each scenario builds a scratch site-packages of symlinks (real directories where
``$ORIGIN`` must stay inside the scratch copy), breaks it the way the public record breaks
installs, and runs, in child processes, the real ``import torch`` and torchguard's
``diagnose()``. Nothing in the cache or the session's install is ever modified.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from realwheels import build_once, download

CACHE = Path(
    os.environ.get("TORCHGUARD_LINUX_CACHE", Path.home() / ".cache" / "torchguard-ci" / "linux")
)
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _pip_env() -> dict[str, str]:
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # lift the local torch cap


NOT_NEEDED = ("triton",)
"""Dependencies ``import torch`` never loads (measured: 2.9.1, 2.13.0 and 2.14.1 import
without them), left out of every layout: triton alone is 592 MB in 2.9.1's install."""


def _prune(site: Path) -> None:
    """Remove :data:`NOT_NEEDED` (also from a cache filled before they were left out)."""
    for project in NOT_NEEDED:
        for entry in [site / project, *site.glob(f"{project}-*.dist-info")]:
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)


def torch_wheels(version: str) -> Path:
    """The wheels of torch ``version`` and of its dependencies (but :data:`NOT_NEEDED`) for
    this Python, downloaded once into the cache (about 3 GB for 2.9.1+cu128: half of what the
    installed tree would keep)."""

    def fill(folder: Path) -> None:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
        command += ["--dest", str(folder), f"torch=={version}"]
        subprocess.run(command, check=True, env=_pip_env(), timeout=3000)
        for project in NOT_NEEDED:
            for unwanted in folder.glob(f"{project}-*.whl"):
                unwanted.unlink()

    return build_once(CACHE / f"wheels-torch-{version}-{TAG}", fill)


_SITES: dict[str, Path] = {}


def torch_site(version: str) -> Path:
    """torch ``version`` with its dependencies (but :data:`NOT_NEEDED`), installed once per
    test process from :func:`torch_wheels` into a temporary folder removed at exit: the cache
    keeps the wheels only."""
    found = _SITES.get(version)
    if found is not None:
        return found
    old = CACHE / f"torch-{version}-{TAG}"  # the installed tree earlier versions kept (6 GB)
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    wheels = sorted(torch_wheels(version).glob("*.whl"))
    where = Path(tempfile.mkdtemp(prefix=f"torchguard-torch-{version}-"))
    atexit.register(shutil.rmtree, where, True)
    site = where / "site"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps"]
    command += ["--no-index", "--disable-pip-version-check", "--target", str(site)]
    subprocess.run([*command, *map(str, wheels)], check=True, env=_pip_env(), timeout=3000)
    _SITES[version] = site
    return site


LOCAL_WHEELS = tuple(
    Path(folder)
    for folder in os.environ.get(
        "TORCHGUARD_LOCAL_WHEELS", "/opt/wheels:/opt/pypi-more/files:/opt/pypi/files"
    ).split(os.pathsep)
    if folder
)
"""Folders of wheel files this machine (and CI's) already holds: the session layouts install
from them with no download."""


@dataclass(frozen=True)
class Layout:
    """A torch install made per session: every requirement pinned, installed ``--no-deps``
    (a dependency these folders lack, such as ``cuda-bindings``, is one ``import torch`` never
    loads)."""

    name: str
    requirements: tuple[str, ...]
    index_url: str | None = None
    """Where the torch wheel lives when no local folder has it (PyPI has no ``+cpu`` build)."""


_PURE = ("filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe")
_PURE += ("fsspec",)

CU13 = Layout(
    "torch-2.14.1-cu130",
    (
        "torch==2.14.1",
        # cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,
        # nvrtc,nvtx]==13.0.3's pins: every one installs into nvidia/cu13/lib
        "cuda-toolkit==13.0.3",
        "nvidia-cublas==13.1.1.3",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cufft==12.0.0.61",
        "nvidia-cufile==1.15.1.6",
        "nvidia-cuda-cupti==13.0.85",
        "nvidia-curand==10.4.0.35",
        "nvidia-cusolver==12.0.4.66",
        "nvidia-cusparse==12.6.3.3",
        "nvidia-nvjitlink==13.4.92",
        "nvidia-cuda-nvrtc==13.0.88",
        "nvidia-nvtx==13.0.85",
        # torch's own pins: their own nvidia/<name>/lib folders
        "nvidia-cudnn-cu13==9.24.0.43",
        "nvidia-cusparselt-cu13==0.8.1",
        "nvidia-nccl-cu13==2.30.7",
        "nvidia-nvshmem-cu13==3.4.5",
        "numpy==2.3.5",  # torchvision's
        "pillow==12.3.0",
        *_PURE,
    ),
)
CPU = Layout(
    "torch-2.13.0-cpu",
    ("torch==2.13.0+cpu", "numpy==2.3.5", "pillow==12.3.0", *_PURE),
    index_url="https://download.pytorch.org/whl/cpu",
)


def _install(layout: Layout, target: Path, local: bool) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps"]
    command += ["--disable-pip-version-check", "--target", str(target)]
    if local:
        command.append("--no-index")
        for folder in LOCAL_WHEELS:
            command += ["--find-links", str(folder)]
    elif layout.index_url:
        command += ["--extra-index-url", layout.index_url]
    subprocess.run(
        [*command, *layout.requirements],
        check=True,
        env=_pip_env(),
        timeout=3000,
        capture_output=True,
        text=True,
    )


@contextmanager
def session_site(layout: Layout) -> Iterator[Path]:
    """``layout`` installed into a temporary folder that is removed afterwards: from the
    machine's wheel folders when they hold every pin, else downloaded (CI, where the folders
    are part of the machine, fails loudly instead)."""
    import pytest

    where = Path(tempfile.mkdtemp(prefix=f"torchguard-{layout.name}-"))
    site = where / "site"
    try:
        start = time.perf_counter()
        try:
            _install(layout, site, local=True)
        except subprocess.CalledProcessError as local_error:
            if os.environ.get("CI") == "true":
                raise RuntimeError(
                    f"{layout.name}: a wheel is missing from {', '.join(map(str, LOCAL_WHEELS))}"
                    f" on this CI machine:\n{local_error.stderr}"
                ) from local_error
            shutil.rmtree(site, ignore_errors=True)
            try:
                _install(layout, site, local=False)
            except subprocess.CalledProcessError as error:
                pytest.skip(f"{layout.name}: not on this machine, not downloadable: {error.stderr}")
        _prune(site)
        took = time.perf_counter() - start
        size = sum(
            os.lstat(os.path.join(root, name)).st_size
            for root, _, names in os.walk(site)
            for name in names
        )
        print(
            f"\n{layout.name}: installed in {took:.0f} s, {size / 1e9:.2f} GB (removed at the end)"
        )
        yield site
    finally:
        shutil.rmtree(where, ignore_errors=True)


def wheel_member(project: str, version: str, suffix: str) -> bytes:
    """The bytes of the member ending in ``suffix`` of the cached ``project==version`` wheel."""
    with zipfile.ZipFile(cached_wheel(project, version)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(suffix))
        return archive.read(name)


def cached_wheel(project: str, version: str) -> Path:
    """The ``project==version`` wheel, downloaded once into the cache (keyed by version)."""
    folder = CACHE / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    dist = project.replace("-", "_")
    found = sorted(folder.glob(f"{dist}-{version}-*.whl"))
    if not found:
        download(f"{project}=={version}", folder, platform=None)
        found = sorted(folder.glob(f"{dist}-{version}-*.whl"))
    return found[0]


def local_or_cached_wheel(project: str, version: str) -> Path:
    """The ``project==version`` wheel for this Python from the machine's wheel folders
    (:data:`LOCAL_WHEELS`), else from the cache (downloaded once)."""
    dist = project.replace("-", "_")
    for folder in LOCAL_WHEELS:
        found = sorted(folder.glob(f"{dist}-{version}-{TAG}-*.whl"))
        if found:
            return found[0]
    return cached_wheel(project, version)


def install_over(site: Path, wheel: Path) -> None:
    """Unpack ``wheel`` into a scratch site as pip would install it after the others: a file
    both claim is replaced (a symlink into the cache is unlinked first, never written)."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            target = site / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                target.unlink()
            target.write_bytes(archive.read(name))


def _farm(source: Path, target: Path, real: set[str]) -> None:
    """``target`` mirrors ``source``: entries named in ``real`` become real directories
    (recursively farmed), every other entry is a symlink."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in os.listdir(source):
        src = source / entry
        if entry in real and src.is_dir():
            _farm(src, target / entry, {"lib"})
        else:
            os.symlink(src, target / entry)


def farm_folder(source: Path, target: Path) -> None:
    """``target`` (absent) becomes a real folder mirroring ``source`` whose ``lib`` is a real
    folder of symlinks, so ``$ORIGIN/..`` paths resolve inside ``target``'s site."""
    _farm(source, target, {"lib"})


def scratch_site(base: Path, where: Path) -> Path:
    """A site-packages of symlinks to ``base`` whose torch/, torch/lib/, nvidia/*/ and
    nvidia/*/lib/ are real folders, so ``$ORIGIN`` paths stay inside the copy."""
    site = where / "site"
    site.mkdir(parents=True)
    for entry in os.listdir(base):
        src = base / entry
        if entry == "torch":
            _farm(src, site / entry, {"lib"})
        elif entry == "nvidia":
            _farm(src, site / entry, set(os.listdir(src)))
        else:
            os.symlink(src, site / entry)
    return site


def replace_file(path: Path, data: bytes) -> None:
    """Swap a symlinked file of a scratch site for a real one (the cache is untouched)."""
    path.unlink()
    path.write_bytes(data)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    line: str
    status: int = 0
    """The exit status (negative: killed by that signal, e.g. -11 for a segfault)."""


def _env(site: Path, extra: Mapping[str, str], cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update({"PYTHONPATH": str(site), "TORCHGUARD_CACHE_DIR": str(cache)})
    env.update(extra)
    return env


def real_import(
    site: Path, extra: Mapping[str, str], cache: Path, code: str = "import torch"
) -> Verdict:
    """What the real ``python -c "import torch"`` (or ``code``) does in this layout."""
    return verdict(real_run(site, extra, cache, code))


def verdict(done: subprocess.CompletedProcess[str]) -> Verdict:
    """The outcome of a child run and the error line Python printed last."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.split(":", 1)[0].endswith(("Error", "Exception"))]
    last = errors[-1] if errors else (lines[-1] if lines else f"exit status {done.returncode}")
    return Verdict(done.returncode == 0, last, done.returncode)


def real_run(
    site: Path, extra: Mapping[str, str], cache: Path, code: str
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in this layout and environment, its output kept whole."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env(site, extra, cache),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(site.parent),
    )


_PREDICT = """
import contextlib, io, json, os
import torchguard
from torchguard._frontends.cli import main

report = torchguard.diagnose().to_dict()
try:
    torchguard.ensure()
    report["ensure"] = None
except torchguard.TorchDllError as exc:
    report["ensure"] = exc.code
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = main(["doctor", "--json"])
report["doctor"] = {"status": status, "report": json.loads(out.getvalue())}
search = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
site = os.environ["PYTHONPATH"]
preload = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
report["scan"] = torchguard.scan([site], ld_library_path=search, ld_preload=preload).to_dict()
print(json.dumps(report))
"""


def predicted(site: Path, extra: Mapping[str, str], cache: Path) -> dict[str, object]:
    """torchguard's ``diagnose()`` report, live, in the same layout and environment, with what
    the other front doors say there: ``ensure`` (the code it raised, or None), ``doctor``
    (its exit status and JSON) and ``scan`` (the offline report of the same folder, with the
    same LD_LIBRARY_PATH assumed)."""
    done = subprocess.run(
        [sys.executable, "-c", _PREDICT],
        env=_env(site, extra, cache),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        cwd=str(site.parent),
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report


def front_doors_agree(real: Verdict, report: Mapping[str, object]) -> list[str]:
    """Where ``ensure()``, ``doctor`` and the offline ``scan`` disagree with the real import
    (an empty list when all three say what the real loader does)."""
    wrong: list[str] = []
    if (report["ensure"] is None) != real.ok:
        wrong.append(f"ensure() raised {report['ensure']!r}")
    doctor = report["doctor"]
    assert isinstance(doctor, dict)
    if not agree(real, doctor["report"]):
        wrong.append(f"doctor said {doctor['report']['import_torch']}")
    if (doctor["status"] == 0) != real.ok:
        wrong.append(f"doctor exited {doctor['status']}")
    scanned = report["scan"]
    assert isinstance(scanned, dict)
    if not agree(real, scanned):
        errors = [f["message"] for f in scanned["findings"] if f["severity"] == "error"]
        wrong.append(f"scan said {scanned['import_torch']} {errors}")
    return wrong


def agree(real: Verdict, report: Mapping[str, object]) -> bool:
    """Same outcome; for a failure, the real error text is the one torchguard predicts."""
    outcome = report["import_torch"]
    assert isinstance(outcome, dict)
    if real.ok or outcome["ok"]:
        return bool(real.ok and outcome["ok"])
    findings = report["findings"]
    assert isinstance(findings, list)
    errors = [f for f in findings if f["severity"] == "error" and f["package"] is None]
    if not errors:
        return False
    message = real.line.split(": ", 1)[1] if ": " in real.line else real.line
    message = message.split(" [", 1)[0]  # ValueError appends sys.path
    return message in str(errors[0]["message"])


def agree_package(real: Verdict, report: Mapping[str, object], package: str) -> bool:
    """A package binary loaded after torch: the real outcome against the package's errors."""
    findings = report["findings"]
    assert isinstance(findings, list)
    errors = [f for f in findings if f["severity"] == "error" and f["package"] == package]
    if real.ok:
        return not errors
    message = real.line.split(": ", 1)[1] if ": " in real.line else real.line
    return bool(errors) and message in str(errors[0]["message"])
