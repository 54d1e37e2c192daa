"""Which Windows environment a scanned folder belongs to, told from the folders around it.

``ensure()`` knows its interpreter (``sys.prefix``, the folder of the running python.exe,
conda's ``Library\\bin``); an offline scan has only a path. A site-packages folder at
``<root>\\Lib\\site-packages`` (or ``<root>`` itself) says the rest: ``conda-meta`` makes
``<root>`` a conda environment (python.exe and its DLLs in ``<root>``, conda's DLLs in
``<root>\\Library\\bin``); ``pyvenv.cfg`` a venv whose python.exe runs from its ``home``; a
``python3XY._pth`` a portable, embedded Python (``python_embeded``); a ``python.exe`` a plain
install. The Windows path each host folder stands for is its own on Windows and ``X:\\...``
for WSL's ``/mnt/x/...``; a copy elsewhere keeps a stand-in path. The same inference serves
``--python-dir``.
"""

from __future__ import annotations

import ntpath
import os
import re
from dataclasses import dataclass

from torchguard._binary.state import watch

#: Where WSL mounts the Windows drives (``/mnt/c`` is ``C:\``).
WSL_MOUNTS = "/mnt"

CONDA = "conda"
VENV = "venv"
EMBEDDED = "embedded"
PLAIN = "plain"

_PTH = re.compile(r"python3\d{0,2}\._pth", re.IGNORECASE)
_PYTHON_DLL = re.compile(r"python3\d{1,2}t?\.dll", re.IGNORECASE)
_DESCRIPTION = {
    CONDA: "a conda environment (conda-meta)",
    VENV: "a venv (pyvenv.cfg)",
    EMBEDDED: "an embedded Python (a ._pth file)",
    PLAIN: "a Python installation (python.exe)",
}


@dataclass(frozen=True)
class Environment:
    """A scanned environment: its host folders and the Windows paths they stand for."""

    kind: str
    root: str
    """The host folder of ``sys.prefix``."""
    prefix: str | None
    """The Windows path of ``sys.prefix``; None for a copy (a stand-in is used)."""
    home: str | None = None
    """venv only: python.exe's folder, as ``pyvenv.cfg`` names it (a Windows path)."""
    home_host: str | None = None
    """venv only: that folder on this host, when it can be read."""
    site: str | None = None
    """The host folder of its ``Lib\\site-packages``, when it has one."""
    system_site: bool = False
    """venv only: ``include-system-site-packages = true`` (the base's site-packages follow)."""

    def describe(self, prefix: str, app_dir: str) -> str:
        """What the scan took the environment to be, for the report's ``assumed:`` line."""
        where = f"{_DESCRIPTION[self.kind]} at {prefix}"
        if self.kind == VENV:
            reach = "" if self.home_host else " (not found here: python.org's DLLs assumed)"
            where += f", python.exe's folder {app_dir} from its home{reach}"
            if self.system_site:
                where += f", then {app_dir}\\Lib\\site-packages (include-system-site-packages)"
        return f"{where}; PATH is not known offline: no folder of it assumed"


def child(folder: str, name: str) -> str | None:
    """``folder``'s entry ``name`` in any case (a copy on a case-sensitive file system)."""
    watch(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    if name in names:
        return os.path.join(folder, name)
    lower = name.lower()
    return next((os.path.join(folder, n) for n in names if n.lower() == lower), None)


def windows_path(host: str) -> str | None:
    """The Windows path a host folder stands for: itself on Windows, ``X:\\...`` for WSL's
    ``/mnt/x/...``; None anywhere else (a copy)."""
    path = os.path.abspath(host)
    if os.name == "nt":
        return path
    mounts = WSL_MOUNTS.rstrip("/") + "/"
    if not path.startswith(mounts):
        return None
    drive, _, rest = path[len(mounts) :].partition("/")
    if len(drive) != 1 or not drive.isalpha():
        return None
    return ntpath.join(f"{drive.upper()}:\\", *[p for p in rest.split("/") if p])


def host_folder(windows: str) -> str | None:
    """Where the Windows folder ``windows`` is on this host (itself on Windows, under WSL's
    ``/mnt``), if it is there."""
    if os.name == "nt":
        return windows if os.path.isdir(windows) else None
    drive, rest = ntpath.splitdrive(windows)
    if len(drive) != 2 or drive[1] != ":" or not drive[0].isalpha():
        return None
    current: str | None = os.path.join(WSL_MOUNTS, drive[0].lower())
    for part in [p for p in rest.split("\\") if p]:
        current = child(current, part) if current else None
    return current if current and os.path.isdir(current) else None


def _kind(root: str) -> str | None:
    watch(root)
    try:
        names = os.listdir(root)
    except OSError:
        return None
    lowered = [n.lower() for n in names]  # one pass over a site-packages of hundreds
    if "conda-meta" in names:  # as :func:`child` finds it: this name, else the first in any case
        meta: str | None = os.path.join(root, "conda-meta")
    elif "conda-meta" in lowered:
        meta = os.path.join(root, names[lowered.index("conda-meta")])
    else:
        meta = None
    if meta is not None and os.path.isdir(meta):
        return CONDA
    if "pyvenv.cfg" in lowered:
        return VENV
    # both patterns start with "python3" (case aside): only such names are matched
    pythons = [n for n, low in zip(names, lowered) if low.startswith("python3")]
    if any(_PTH.fullmatch(n) for n in pythons):
        return EMBEDDED
    if "python.exe" in lowered or any(_PYTHON_DLL.fullmatch(n) for n in pythons):
        return PLAIN
    return None


def _venv_config(root: str) -> dict[str, str]:
    """``<root>\\pyvenv.cfg``'s settings (``home``: the folder of the python.exe it runs)."""
    config = child(root, "pyvenv.cfg")
    if config:
        watch(config)
    try:
        with open(config or "", encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1 << 16).splitlines()
    except OSError:
        return {}
    settings: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and value.strip():
            settings.setdefault(key.strip().lower(), value.strip())
    return settings


def environment_of(root: str) -> Environment | None:
    """The environment whose ``sys.prefix`` is the host folder ``root``, or None when
    nothing there says what it is."""
    kind = _kind(root)
    if kind is None:
        return None
    lib = child(root, "Lib")
    site = child(lib, "site-packages") if lib else None
    config = _venv_config(root) if kind == VENV else {}
    home = ntpath.normpath(config["home"]) if "home" in config else None
    if home is not None and not (ntpath.isabs(home) and ntpath.splitdrive(home)[0]):
        home = None  # not a Windows folder: python.exe's folder is unknown
    return Environment(
        kind=kind,
        root=os.path.abspath(root),
        prefix=windows_path(root),
        home=home,
        home_host=host_folder(home) if home else None,
        site=site if site and os.path.isdir(site) else None,
        system_site=config.get("include-system-site-packages", "").lower() == "true",
    )


def environment_around(target: str) -> Environment | None:
    """The environment a scanned folder belongs to: ``target`` is its ``Lib\\site-packages``
    (any case) or its root; None for a folder of neither kind (a plain folder of packages)."""
    path = os.path.abspath(target)
    parent = os.path.dirname(path)
    if os.path.basename(path).lower() == "site-packages" and os.path.basename(parent).lower() == (
        "lib"
    ):
        found = environment_of(os.path.dirname(parent))
        if found is not None and found.site is not None and _same(found.site, path):
            return found
    found = environment_of(path)
    return found if found is not None and found.site is not None else None


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
