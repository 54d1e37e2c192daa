"""Windows installs as users really have them, assembled from genuine files for an offline replay.

A :class:`Layout` says where python.exe, its DLLs, site-packages and the wheels' data files sit
(python.org install, venv, ``pip install --user``, ``pip install --target``, a conda
environment, a portable ``python_embeded`` folder). :func:`build` mounts python.org's own
embeddable CPython folder, the wheels (read in place) and a folder standing in for System32 at
those places in a :class:`~torchguard._platforms.windows.tree.WinTree` and describes the interpreter
exactly as the running process would see itself (``sys.prefix``, ``sys.base_exec_prefix``,
the user base, ``sys.path``), so :func:`torchguard._frontends.pipeline.analyze` replays what ``ensure()``
would do on that machine.
"""

from __future__ import annotations

import ntpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchguard._platforms.windows.system import Interpreter, System, bundled_names
from torchguard._platforms.windows.tree import AssumedFile, MemoryFile, WinTree, join
from torchguard._platforms.windows.wheel import mount_wheel

USER = "C:\\Users\\ana"
USERBASE = f"{USER}\\AppData\\Roaming\\Python"
SYSTEM32 = "C:\\Windows\\System32"


def python_org_home(python: str) -> str:
    """Where python.org's installer puts CPython ``python`` for one user."""
    return f"{USER}\\AppData\\Local\\Programs\\Python\\Python{python.replace('.', '')}"


@dataclass(frozen=True)
class Places:
    """Where things are for one layout and one Python version."""

    app_dir: str  # the folder of the process image (python.exe that really runs)
    executable: str  # sys.executable
    prefix: str  # sys.prefix == sys.exec_prefix
    base_prefix: str  # sys.base_exec_prefix
    install_site: str  # where pip puts the wheels' packages
    install_data: str  # where pip puts the wheels' *.data/data files
    site_dirs: tuple[str, ...]  # sys.path entries that hold packages, in order
    cwd: str  # the working directory of the program
    conda: bool = False
    pth: str | None = None  # the content of python3XY._pth beside python.exe, if any


@dataclass(frozen=True)
class Layout:
    """One way users install torch; :meth:`places` gives the paths for a Python version."""

    name: str
    description: str

    def places(self, python: str) -> Places:
        xy = python.replace(".", "")
        home = python_org_home(python)
        user_site = f"{USERBASE}\\Python{xy}\\site-packages"
        home_site = f"{home}\\Lib\\site-packages"
        if self.name == "plain":
            return Places(
                home,
                f"{home}\\python.exe",
                home,
                home,
                home_site,
                home,
                (home_site,),
                f"{USER}\\proj",
            )
        if self.name.startswith("venv"):
            venv = f"{USER}\\proj\\.venv"
            site = f"{venv}\\Lib\\site-packages"
            # Scripts\python.exe is the venv launcher: it starts the base python.exe, so the
            # process image (and the folder python3XY.dll and vcruntime140.dll load from) is
            # the base installation's.
            return Places(
                home,
                f"{venv}\\Scripts\\python.exe",
                venv,
                home,
                site,
                venv,
                (site,),
                f"{USER}\\proj",
            )
        if self.name == "user":
            return Places(
                home,
                f"{home}\\python.exe",
                home,
                home,
                user_site,
                USERBASE,
                (user_site, home_site),
                f"{USER}\\proj",
            )
        if self.name == "target":
            target = f"{USER}\\proj\\deps"
            # pip install --target T: packages and the data folders (Library\bin ...) in T,
            # T reached through PYTHONPATH, ahead of site-packages.
            return Places(
                home,
                f"{home}\\python.exe",
                home,
                home,
                target,
                target,
                (target, home_site),
                f"{USER}\\proj",
            )
        if self.name == "conda":
            env = f"{USER}\\miniconda3\\envs\\ml"
            site = f"{env}\\Lib\\site-packages"
            return Places(
                env, f"{env}\\python.exe", env, env, site, env, (site,), f"{USER}\\proj", conda=True
            )
        if self.name == "embedded":
            embedded = "C:\\ComfyUI_windows_portable\\python_embeded"
            site = f"{embedded}\\Lib\\site-packages"
            # What ComfyUI's portable build ships: site enabled, packages in Lib\site-packages.
            pth = f"python{xy}.zip\r\n.\r\n../ComfyUI\r\n\r\n# Uncomment to run site.main()\r\nimport site\r\n"
            return Places(
                embedded,
                f"{embedded}\\python.exe",
                embedded,
                embedded,
                site,
                embedded,
                (site,),
                "C:\\ComfyUI_windows_portable",
                pth=pth,
            )
        raise ValueError(f"unknown layout {self.name}")


LAYOUTS = {
    layout.name: layout
    for layout in (
        Layout("plain", "python.org CPython, torch in its own site-packages"),
        Layout("venv", "a venv: Scripts\\python.exe, base prefix elsewhere"),
        Layout("venv+msvc-runtime", "a venv with the msvc-runtime wheel (DLLs in the venv root)"),
        Layout("venv+msvc-runtime-14.34", "the same with an older msvc-runtime (14.34)"),
        Layout("user", "pip install --user: the user site, data files in the user base"),
        Layout("target", "pip install --target: packages and data folders in T (PYTHONPATH)"),
        Layout("conda", "a conda environment (conda-meta, Library\\bin registered by torch)"),
        Layout("embedded", "a portable python_embeded folder with a ._pth (ComfyUI)"),
    )
}


def host_of(drive: Path, windows: str) -> Path:
    """Where the Windows path ``windows`` lies in ``drive``, a folder standing for ``C:\\``
    (as WSL's ``/mnt/c`` does)."""
    return drive.joinpath(*[p for p in ntpath.splitdrive(windows)[1].split("\\") if p])


def write_layout(
    layout: Layout,
    python: str,
    drive: Path,
    python_files: Mapping[str, bytes],
    site_files: Mapping[str, bytes],
    data_files: Mapping[str, bytes] = {},
) -> Places:
    """Write ``layout`` on disk below ``drive`` (standing for ``C:\\``): ``python_files`` in
    python.exe's folder, ``site_files`` in its site-packages, ``data_files`` under the prefix
    (``Library\\bin``, ``conda-meta``), plus what marks the layout (``conda-meta``,
    ``pyvenv.cfg`` naming the base folder, ``python3XY._pth``)."""
    places = layout.places(python)
    files: dict[Path, bytes] = {}
    home = host_of(drive, places.app_dir)
    files.update({home / name: data for name, data in python_files.items()})
    prefix = host_of(drive, places.prefix)
    if places.pth is not None:
        files[home / f"python{python.replace('.', '')}._pth"] = places.pth.encode()
    if places.conda:
        files[prefix / "conda-meta" / "history"] = b""
    if places.prefix != places.base_prefix:
        files[prefix / "pyvenv.cfg"] = (
            f"home = {places.base_prefix}\r\ninclude-system-site-packages = false\r\n"
            f"version = {python}.9\r\n"
        ).encode()
        files[prefix / "Scripts" / "python.exe"] = python_files.get("python.exe", b"MZ")
    site = host_of(drive, places.install_site)
    files.update({site.joinpath(*name.split("/")): data for name, data in site_files.items()})
    files.update({prefix.joinpath(*name.split("/")): data for name, data in data_files.items()})
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    site.mkdir(parents=True, exist_ok=True)
    return places


def live_model(places: Places, python: str, drive: Path, system32: Sequence[Path]) -> System:
    """The :class:`System` ``ensure()`` builds of itself on the machine whose ``C:\\`` is
    ``drive``: every path its own, the interpreter as the running process sees it."""
    tree = WinTree()
    tree.mount_host_dir("C:\\", str(drive))
    return _machine(tree, places, python, system32)


def build(
    layout: Layout,
    python: str,
    python_home: Path,
    wheels: Sequence[Path],
    system32: Sequence[Path],
) -> tuple[System, str]:
    """The machine of ``layout``: python.org's ``python_home`` folder, ``wheels`` installed,
    ``system32`` folders' DLLs in System32 beside the DLLs every Windows 10/11 x64 has.
    Returns the system and the working directory."""
    places = layout.places(python)
    tree = WinTree()
    tree.mount_host_dir(places.app_dir, str(python_home))
    if places.pth is not None:
        name = f"python{python.replace('.', '')}._pth"
        tree.add_file(join(places.app_dir, name), MemoryFile(places.pth.encode(), name))
    if places.conda:
        tree.add_file(join(places.prefix, "conda-meta", "history"), MemoryFile(b"", "history"))
    for path in wheels:
        mount_wheel(tree, str(path), places.install_site, places.install_data)
    return _machine(tree, places, python, system32), places.cwd


def _machine(tree: WinTree, places: Places, python: str, system32: Sequence[Path]) -> System:
    """System32 (``system32`` folders and every Windows' own DLLs) and the interpreter of
    ``places`` added to ``tree``."""
    for folder in system32:
        tree.mount_host_dir(SYSTEM32, str(folder))
    present = set(tree.listdir(SYSTEM32))
    for dll in sorted(bundled_names("system32_x64.txt") - present):
        tree.add_file(join(SYSTEM32, dll), AssumedFile("part of every Windows 10/11 x64"))
    major, minor = (int(part) for part in python.split("."))
    python_dll = f"python{major}{minor}.dll"
    interpreter = Interpreter(
        version=(major, minor),
        machine=0x8664,
        executable=places.executable,
        prefix=places.prefix,
        exec_prefix=places.prefix,
        base_exec_prefix=places.base_prefix,
        userbase=USERBASE,
        app_dir=places.app_dir,
        site_dirs=places.site_dirs,
        is_conda=tree.is_dir(join(places.prefix, "conda-meta")) or places.conda,
    )
    torch_dir = next(
        (
            join(site, "torch")
            for site in places.site_dirs
            if tree.is_file(join(site, "torch", "__init__.py"))
        ),
        None,
    )
    # python.exe has loaded its own DLL and vcruntime140.dll before anything imports torch.
    loaded = {name: join(places.app_dir, name) for name in (python_dll, "vcruntime140.dll")}
    system = System(
        tree=tree,
        interpreter=interpreter,
        system32=SYSTEM32,
        known_dlls=bundled_names("known_dlls_x64.txt"),
        loaded=loaded,
        live=False,
        torch_package_dir=torch_dir,
        python_cmd=places.executable,
    )
    return system
