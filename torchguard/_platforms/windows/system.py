"""What the pipeline needs from a Windows machine, live or described offline.

A :class:`System` bundles a :class:`~torchguard._platforms.windows.tree.WinTree` with the
interpreter's facts (folders, version, architecture) and the loader's machine-wide state (System32,
KnownDLLs, modules already loaded). ``LiveWindows`` (in ``_platforms.windows.live``) fills it from
the running process; :func:`offline_windows` from folders and wheels, on any OS.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from torchguard._binary.pe.machine import X64, X86, platform_machine
from torchguard._platforms.windows.environment import (
    CONDA,
    VENV,
    Environment,
    environment_around,
    environment_of,
)
from torchguard._platforms.windows.foreign import (
    refuse_other_platform_install,
    refuse_other_platforms,
)
from torchguard._platforms.windows.gpus import DisplayAdapter, named_adapter
from torchguard._platforms.windows.python_dlls import python_dlls, tag_free_threaded
from torchguard._platforms.windows.tree import AssumedFile, WinTree, join, same_path
from torchguard._platforms.windows.wheel import (
    WheelError,
    mount_wheel,
    wheel_platform_tag,
    wheel_python_tag,
)

OFFLINE_PREFIX = "C:\\Python"
OFFLINE_VENV = "C:\\venv"
OFFLINE_SYSTEM32 = "C:\\Windows\\System32"


@dataclass(frozen=True)
class Interpreter:
    """The Python process torch would be imported into."""

    version: tuple[int, int]
    machine: int
    executable: str
    prefix: str
    exec_prefix: str
    base_exec_prefix: str
    userbase: str | None
    app_dir: str
    site_dirs: tuple[str, ...]
    environ: Mapping[str, str] = field(default_factory=dict)
    path_dirs: tuple[str, ...] = ()
    is_conda: bool = False
    free_threaded: bool = False
    """A free-threaded build (``python313t.dll``)."""

    @property
    def in_venv(self) -> bool:
        return not same_path(self.exec_prefix, self.base_exec_prefix)

    @property
    def dlls(self) -> tuple[str, str]:
        """(its own DLL, its stable-ABI DLL): ``python313t.dll`` and ``python3t.dll`` for a
        free-threaded 3.13."""
        return python_dlls(self.version, free_threaded=self.free_threaded)


@dataclass
class System:
    """A Windows machine as the loader model sees it."""

    tree: WinTree
    interpreter: Interpreter
    system32: str
    known_dlls: frozenset[str]
    loaded: Mapping[str, str]
    live: bool
    torch_package_dir: str | None
    python_cmd: str = "python"
    display_adapters: tuple[DisplayAdapter, ...] = ()
    """The machine's display adapters (live: the registry; offline: as given)."""
    commit: tuple[int, int] | None = None
    """(commit limit, commit available) in bytes; live only."""
    driver_cuda: tuple[int, int] | None = None
    """Offline: the newest CUDA version the NVIDIA driver supports, as given (``--cuda``)."""
    loaded_paths: tuple[str, ...] = ()
    """Live: every module of the process in load order, same-named copies included."""
    kmp_started: str | None = None
    """Live: the module whose KMP (OpenMP) runtime already registered in this process."""
    environment: str | None = None
    """Offline: the environment the scan found its targets in (``conda``, ``venv`` ...)."""
    registered_dirs: tuple[str, ...] = ()
    """Live: folders the program registered with ``os.add_dll_directory`` (observed)."""
    unseen_dirs: tuple[str, ...] = ()
    """Live: folders the program may have registered unseen (``_platforms.windows.user_dirs``)."""
    smart_app_control: int | None = None
    """Live: Smart App Control's state (0 off, 1 on, 2 evaluation; None: unknown)."""

    def close(self) -> None:
        self.tree.close()


@cache
def bundled_names(resource: str) -> frozenset[str]:
    """A bundled list of DLL names (``data/*.txt``, ``#`` comments allowed)."""
    folder = resources.files("torchguard._platforms.windows").joinpath("data")
    text = folder.joinpath(resource).read_text("utf-8")
    return frozenset(
        line.strip().lower()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    )


class TargetError(ValueError):
    """A scan target that cannot be read (the CLI exits with status 2)."""


def offline_windows(
    targets: Sequence[str],
    *,
    system32_dirs: Sequence[str] = (),
    python_dir: str | None = None,
    assumed_system32: Sequence[tuple[str, Iterable[str]]] = (),
    gpus: Sequence[str] = (),
    driver_cuda: tuple[int, int] | None = None,
    machine: int | None = None,
    free_threaded: bool | None = None,
    hidden: Iterable[str] = (),
) -> System:
    """A Windows install described by wheels and folders, for :func:`torchguard.scan`.

    Targets overlay as one site-packages. Without ``python_dir`` python.exe's folder is a
    python.org layout for the wheel's Python (``python3XY.dll``, ``vcruntime140.dll`` and
    ``vcruntime140_1.dll``, no ``msvcp140.dll``). System32 holds the DLLs every Windows 10/11
    x64 has (but no Visual C++ redistributable) plus the files of ``system32_dirs`` and the
    names of ``assumed_system32`` (``(source, names)`` pairs: present, without a file to read).
    The interpreter's CPU is the platform tag of torch's ``_C`` extension, else of the first
    Windows wheel (``win_amd64``, ``win32``, ``win_arm64``), else x64. ``gpus`` names the
    machine's display adapters (``"NVIDIA GeForce RTX 5090"``); ``driver_cuda`` the newest
    CUDA version its NVIDIA driver supports (as ``nvidia-smi`` prints it). ``machine`` and
    ``free_threaded`` state the interpreter's CPU and build where the caller knows them
    (``check --platform win_arm64 --python 3.13t``) instead of reading them from the wheels:
    a wheel of another CPU is then judged against the Python it would be installed into.
    ``hidden`` host files and folders are left out of the folders mounted, as if removed
    (what ``pip install`` would uninstall, for ``check --env``).
    Raises :class:`TargetError` for a target or folder that cannot be read.
    """
    from torchguard._platforms.windows.locate import find_torch_package

    env, env_target = _environment(targets, python_dir)
    places = _places(env)
    site_dir = places.site_dir
    tree = WinTree()
    tree.hide_host_paths(hidden)
    try:
        if env is not None and env_target is not None:
            # the environment itself: its root (python.exe, DLLs, Library\bin, conda-meta)
            # at its prefix, its site-packages where the other targets overlay it
            tree.mount_host_dir(places.prefix, env.root)
            tree.mount_host_dir(site_dir, env.site or env.root)
            targets = [t for t in targets if t is not env_target]
        tags, platforms = _mount_targets(tree, targets, site_dir, places.prefix)
        if env is not None and env.home_host is not None:  # a venv's base python.exe folder
            tree.mount_host_dir(places.app_dir, env.home_host)
        for folder in system32_dirs:
            _mount_folder(tree, OFFLINE_SYSTEM32, folder, "--system32")
        _assume(
            tree, OFFLINE_SYSTEM32, bundled_names("system32_x64.txt"), "every Windows 10/11 x64"
        )
        for source, names in assumed_system32:
            _assume(tree, OFFLINE_SYSTEM32, names, source)
        site_dirs = [site_dir]
        if env is not None and env.system_site:  # the base's site-packages follow the venv's
            site_dirs.append(join(places.app_dir, "Lib", "site-packages"))
        package_dir = find_torch_package(tree, site_dirs)
        refusal = refuse_other_platform_install(tree, site_dir, package_dir)
        if refusal is not None:
            raise TargetError(refusal)
        version = _python_version(tree, package_dir, tags)
        if free_threaded is None:
            free_threaded = _python_free_threaded(tree, package_dir, tags)
        if machine is None:
            machine = _python_machine(tree, package_dir, platforms)
        python_dll, stable_dll = python_dlls(version, free_threaded=free_threaded)
        if python_dir is not None:
            _mount_folder(tree, places.prefix, python_dir, "--python-dir")
        unseen = env is not None and env.kind == VENV and env.home_host is None
        if unseen or (env is None and python_dir is None):  # python.exe's folder unseen
            shipped = (python_dll, stable_dll, "vcruntime140.dll") + (
                () if machine == X86 else ("vcruntime140_1.dll",)  # no x86 build needs it
            )
            build = f"{version[0]}.{version[1]}{'t' if free_threaded else ''}"
            _assume(tree, places.app_dir, shipped, f"python.org CPython {build}")
    except TargetError:
        tree.close()
        raise
    interpreter = Interpreter(
        version=version,
        machine=machine,
        executable=places.executable,
        prefix=places.prefix,
        exec_prefix=places.prefix,
        base_exec_prefix=places.base_exec_prefix,
        userbase=None,
        app_dir=places.app_dir,
        site_dirs=tuple(site_dirs),
        is_conda=env is not None and env.kind == CONDA,
        free_threaded=free_threaded,
    )
    # python.exe itself has loaded these by the time anything imports torch.
    loaded = {
        name: join(places.app_dir, name)
        for name in (interpreter.dlls[0], "vcruntime140.dll")
        if tree.is_file(join(places.app_dir, name))
    }
    known = env is not None and env.prefix is not None
    executable = places.executable
    return System(
        tree=tree,
        interpreter=interpreter,
        system32=OFFLINE_SYSTEM32,
        known_dlls=bundled_names("known_dlls_x64.txt"),
        loaded=loaded,
        live=False,
        torch_package_dir=package_dir,
        python_cmd=(
            (f'"{executable}"' if " " in executable else executable)
            if known
            else f"py -{version[0]}.{version[1]}"
        ),
        display_adapters=tuple(DisplayAdapter(named_adapter(name)) for name in gpus),
        driver_cuda=driver_cuda,
        environment=env.describe(places.prefix, places.app_dir) if env is not None else None,
    )


@dataclass(frozen=True)
class _Places:
    """The Windows paths of an offline interpreter (see :class:`Interpreter`)."""

    prefix: str
    base_exec_prefix: str
    app_dir: str
    executable: str

    @property
    def site_dir(self) -> str:
        return join(self.prefix, "Lib", "site-packages")


def _environment(
    targets: Sequence[str], python_dir: str | None
) -> tuple[Environment | None, str | None]:
    """The environment of ``--python-dir``, else of the first folder target inside one, and
    that target (None: ``--python-dir``'s, or none found)."""
    if python_dir is not None:
        return (environment_of(python_dir) if os.path.isdir(python_dir) else None), None
    for target in targets:
        if os.path.isdir(target):
            found = environment_around(target)
            if found is not None:
                return found, target
    return None, None


def _places(env: Environment | None) -> _Places:
    """Where python.exe, its folder and ``sys.prefix`` are: the environment's own Windows
    paths when known (on Windows, or under WSL's ``/mnt``), stand-ins for a copy."""
    if env is None:
        prefix = OFFLINE_PREFIX
        return _Places(prefix, prefix, prefix, join(prefix, "python.exe"))
    if env.kind != VENV:
        prefix = env.prefix or OFFLINE_PREFIX
        return _Places(prefix, prefix, prefix, join(prefix, "python.exe"))
    prefix = env.prefix or OFFLINE_VENV
    home = env.home or OFFLINE_PREFIX
    if same_path(home, prefix):
        home = OFFLINE_PREFIX if not same_path(prefix, OFFLINE_PREFIX) else OFFLINE_VENV
    # Scripts\python.exe is the venv launcher: the process image is the base python.exe
    return _Places(prefix, home, home, join(prefix, "Scripts", "python.exe"))


def _mount_targets(
    tree: WinTree, targets: Sequence[str], site_dir: str, prefix: str
) -> tuple[list[str], list[str]]:
    """Overlay each target on the site directory; return the wheels' CPython and platform
    tags."""
    tags: list[str] = []
    platforms: list[str] = []
    for target in targets:
        if os.path.isdir(target):
            tree.mount_host_dir(site_dir, target)
        elif os.path.isfile(target) and target.lower().endswith(".whl"):
            refusal = refuse_other_platforms(target)
            if refusal is not None:
                raise TargetError(refusal)
            try:
                mount_wheel(tree, os.path.abspath(target), site_dir, prefix)
            except WheelError as exc:
                raise TargetError(str(exc)) from None
            tag = wheel_python_tag(target)
            if tag and tag.startswith("cp"):
                tags.append(tag)
            platform = wheel_platform_tag(target)
            if platform:
                platforms.append(platform)
        elif os.path.exists(target):
            raise TargetError(f"{target}: not a .whl file or a directory")
        else:
            raise TargetError(f"{target}: no such file or directory")
    return tags, platforms


def _mount_folder(tree: WinTree, where: str, folder: str, option: str) -> None:
    if not os.path.isdir(folder):
        raise TargetError(f"{option} {folder}: not a directory")
    tree.mount_host_dir(where, folder)


def _assume(tree: WinTree, folder: str, names: Iterable[str], source: str) -> None:
    """Names that exist in ``folder`` without a file to read (unless a real one is there)."""
    present = set(tree.listdir(folder))
    wanted = [name for name in sorted(names) if name.lower() not in present]
    if not wanted:
        return  # nothing added: the folder holds no file of the tree's own
    assumed = AssumedFile(f"part of {source}")
    if all(map(_plain_name, wanted)):  # every name directly in ``folder``: one batch
        tree.add_files(folder, [(name, assumed) for name in wanted])
        return
    for name in wanted:
        tree.add_file(join(folder, name), assumed)


def _plain_name(name: str) -> bool:
    """Whether ``join(folder, name)`` is a file directly in ``folder`` named ``name``."""
    return name not in ("", ".", "..") and "\\" not in name and "/" not in name and ":" not in name


def _python_machine(tree: WinTree, package_dir: str | None, platforms: list[str]) -> int:
    """The CPU of the Python a scanned torch was built for (see :func:`offline_windows`)."""
    from torchguard._platforms.windows.locate import extension_platform

    names = [name for name, _ in tree.listdir(package_dir).values()] if package_dir else []
    for platform in [*filter(None, map(extension_platform, names)), *platforms]:
        machine = platform_machine(platform)
        if machine is not None:
            return machine
    return X64


def _python_free_threaded(tree: WinTree, package_dir: str | None, tags: list[str]) -> bool:
    """Whether the Python a scanned torch was built for is free-threaded (``cp313t``): the
    tag :func:`_python_version` reads the version from."""
    from torchguard._platforms.windows.locate import extension_tag, tag_version

    names = [name for name, _ in tree.listdir(package_dir).values()] if package_dir else []
    for tag in [*filter(None, map(extension_tag, names)), *tags]:
        if tag_version(tag) is not None:
            return tag_free_threaded(tag)
    return False


def _python_version(tree: WinTree, package_dir: str | None, tags: list[str]) -> tuple[int, int]:
    """The Python a scanned torch was built for: its ``_C`` extension tag, else a wheel tag."""
    from torchguard._platforms.windows.locate import extension_tag, tag_version

    names = [name for name, _ in tree.listdir(package_dir).values()] if package_dir else []
    for tag in [*filter(None, map(extension_tag, names)), *tags]:
        version = tag_version(tag)
        if version is not None:
            return version
    return (3, 11)
