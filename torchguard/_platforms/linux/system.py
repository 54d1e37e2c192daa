"""What the Linux pipeline needs from a machine, live or described offline.

Live: ``/proc/self/maps`` (what is already mapped), ``/proc/self/environ`` (the environment
ld.so saw at start: a later ``os.environ`` change does not reach it), ``/proc/self/exe``,
``/etc/ld.so.cache`` parsed directly and the default directories. No subprocess, no
``ldconfig -p``. Offline: site-packages folders plus a system root (``/`` or a mounted one).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchguard._binary.state import watch
from torchguard._platforms.linux.hwcaps import Cpu, glibc_version, hwcaps_names, read_cpu
from torchguard._platforms.linux.ldcache import CacheEntry, LdCache, LdCacheError, read_ld_cache
from torchguard._platforms.linux.maps import read_maps
from torchguard._platforms.linux.nvidia import DEFAULT_PATH as NVIDIA_VERSION
from torchguard._platforms.linux.nvidia import read_driver_version
from torchguard._platforms.linux.process import (
    read_environ,
    read_preload_file,
    read_secure,
    split_preload,
)
from torchguard._platforms.linux.searchlist import startup_library_path
from torchguard._platforms.linux.wheel_dists import free_threaded
from torchguard._platforms.linux.wsl import Wsl, driver_store, read_wsl

if TYPE_CHECKING:  # zipfile and hashlib are imported only when a wheel is scanned
    from torchguard._platforms.linux.wheel_files import WheelLayout

_MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
_ELF_MACHINE = {"x86_64": 62, "aarch64": 183}


def machine_label(machine: int) -> str:
    """``uname -m``'s name for an ELF machine (what ``platform_machine`` markers compare)."""
    return next((name for name, code in _ELF_MACHINE.items() if code == machine), "x86_64")


@dataclass(frozen=True)
class LinuxSystem:
    """A Linux machine as the ld.so model sees it (pure data)."""

    site_dirs: tuple[str, ...]
    torch_package_dir: str | None
    ld_library_path: tuple[str, ...] = ()
    secure: bool = False
    cache: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_dirs: tuple[str, ...] = ()
    machine: int = 62
    executable: str | None = None
    mapped: tuple[str, ...] = ()
    environ: Mapping[str, str] = field(default_factory=dict)
    live: bool = False
    python_version: tuple[int, int] = (3, 11)
    free_threaded: bool = False
    """Live: the interpreter is a free-threaded build (``Py_GIL_DISABLED``)."""
    conda: bool = False
    wsl: bool = False
    sysroot: str = "/"
    gpus: tuple[str, ...] = ()
    """NVIDIA GPUs the driver lists (``/proc/driver/nvidia/gpus/*/information`` "Model:");
    offline, also the ones named with ``--gpu``."""
    driver: str | None = None
    """The NVIDIA driver's version (``535.104.05``), from ``/proc/driver/nvidia/version``."""
    driver_source: str = ""
    """Where ``driver`` comes from; offline ``--cuda 12.4`` describes it."""
    driver_present: bool = False
    """An NVIDIA driver is there: the kernel module, the WSL host's ``libcuda.so.1``, or one
    described offline (a named NVIDIA GPU, ``--cuda``)."""
    wsl_libcuda: str | None = None
    """Under WSL2, the host driver's ``libcuda.so.1`` in ``/usr/lib/wsl/lib`` (None: absent)."""
    host_driver_store: str | None = None
    """Under WSL2 with the host's ``libcuda.so.1``, where the host's driver store is mounted
    (``/usr/lib/wsl/drivers``): the FileVersion of its NVIDIA DLLs is the host driver's version
    (listed and read by the pipeline, both cached by state)."""
    driver_cuda: tuple[int, int] | None = None
    """Offline ``--cuda X.Y``: the newest CUDA the driver supports (its version unknown)."""
    pci_root: str | None = None
    """Live: the root whose sysfs lists PCI devices, read only when a driver is missing."""
    wheels: WheelLayout | None = None
    """Offline: the scratch site mirroring manylinux wheels, whose shared objects are read
    from the wheels themselves (:mod:`.wheel_files`)."""
    preload: tuple[str, ...] = ()
    """``LD_PRELOAD`` at process start (live) or as given (offline)."""
    preload_file: tuple[str, ...] = ()
    """The entries of ``<root>/etc/ld.so.preload``."""
    dst_lib: str = "lib64"
    """What ``$LIB`` expands to: the directory glibc's own ``libc.so.6`` lives in."""
    cpu: Callable[[], Cpu] | None = None
    """The CPU's x86-64 level and ``$PLATFORM`` (live: ``/proc/cpuinfo``, read on demand;
    offline: an assumed level)."""
    glibc: tuple[int, int] | None = None
    """The running glibc (live); None offline (its hwcaps rules taken as 2.37+)."""
    library_path_doubt: str = ""
    """Why ``ld_library_path`` may not be what ld.so read at start (empty: it is): then a
    failure a folder on the real one could undo is a warning, never a proof."""


def host_machine() -> str:
    return os.uname().machine


def default_dirs(root: str = "/", machine: str | None = None) -> tuple[str, ...]:
    """glibc's trusted directories, as distributions configure them (multiarch first)."""
    triplet = _MULTIARCH.get(machine or host_machine())
    names = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    names += ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    prefix = root.rstrip("/")
    return tuple(prefix + name for name in names if os.path.isdir(prefix + name))


class CacheView(Mapping[str, tuple[str, ...]]):
    """soname -> the one path ld.so's ``search_cache`` picks (as a 1-tuple), per machine.

    The file is parsed only when a name is not in ``memo``, which a persistent cache seeds
    (keyed by ``key``, the file's identity): a warm analysis parses nothing."""

    def __init__(
        self,
        path: str,
        key: str,
        machine: int,
        elf_class: int,
        root: str,
        hwcaps: Callable[[], tuple[str, ...]] | None = None,
    ) -> None:
        self.path = path
        self._hwcaps = hwcaps
        self.key = key
        self.memo: dict[str, tuple[str, ...]] = {}
        self._machine = machine
        self._class = elf_class
        self._root = root
        self._index: dict[str, list[CacheEntry]] | None = None
        self._parsed: LdCache | None = None

    def _entries(self, name: str) -> tuple[LdCache, list[CacheEntry]]:
        if self._parsed is None:
            try:
                self._parsed = read_ld_cache(self.path)
            except LdCacheError:
                self._parsed = LdCache("new", ())
            self._index = {}
            for entry in self._parsed.entries:
                self._index.setdefault(entry.soname, []).append(entry)
        assert self._index is not None
        return self._parsed, self._index.get(name, [])

    def get(self, name: str, default: object = None) -> tuple[str, ...]:
        found = self.memo.get(name)
        if found is None:
            parsed, entries = self._entries(name)
            one = LdCache(parsed.format, tuple(entries), parsed.generator)
            named = any(e.hwcaps_subdir for e in entries) and self._hwcaps is not None
            levels = self._hwcaps() if named and self._hwcaps is not None else ()
            entry = one.resolve(name, self._machine, self._class, levels)
            found = self.memo[name] = (self._root + entry.path,) if entry else ()
        return found

    def __getitem__(self, name: str) -> tuple[str, ...]:
        found = self.get(name)
        if not found:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        self._entries("")
        return iter(self._index or {})

    def __len__(self) -> int:
        self._entries("")
        return len(self._index or {})


def read_cache(
    root: str = "/", machine: int = 62, hwcaps: Callable[[], tuple[str, ...]] | None = None
) -> Mapping[str, tuple[str, ...]]:
    """``<root>/etc/ld.so.cache`` (unreadable or damaged: empty, as ld.so treats it);
    ``hwcaps``: the glibc-hwcaps names the CPU supports, asked for when an entry has one."""
    path = os.path.join(root, "etc/ld.so.cache")
    watch(path)
    try:
        info = os.stat(path)
    except OSError:
        return {}
    if not stat.S_ISREG(info.st_mode):
        return {}  # ld.so maps only a regular file (a FIFO would even block the open)
    key = f"{info.st_dev}|{info.st_ino}|{info.st_size}|{info.st_mtime_ns}|{machine}"
    return CacheView(path, key, machine, 2, root.rstrip("/"), hwcaps)


def split_path_list(value: str | None) -> tuple[str, ...]:
    """``LD_LIBRARY_PATH`` as ld.so splits it (``:`` and ``;``; an empty entry is the cwd)."""
    if not value:
        return ()
    entries = value.replace(";", ":").split(":")
    return tuple(entry or "." for entry in entries)


def nvidia_gpus(root: str = "/") -> tuple[str, ...]:
    """The GPU models the loaded NVIDIA kernel driver lists (none without the driver)."""
    folder = os.path.join(root, "proc/driver/nvidia/gpus")
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return ()
    models: list[str] = []
    for entry in entries:
        try:
            with open(os.path.join(folder, entry, "information"), encoding="utf-8") as handle:
                text = handle.read(4096)
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "Model":
                models.append(value.strip())
    return tuple(models)


def live_linux(torch_package_dir: str | None) -> LinuxSystem:
    """This process, as ld.so would treat a ``dlopen`` from it now."""
    executable = os.path.realpath("/proc/self/exe") if os.path.exists("/proc/self/exe") else None
    environ = read_environ()
    library_path, doubt = None, ""
    if environ is None:  # unreadable, or overwritten by a process that renamed itself
        environ = dict(os.environ)
        library_path = startup_library_path(executable)
        if library_path is None:
            doubt = _LIBRARY_PATH_UNKNOWN
    if library_path is None:
        library_path = split_path_list(environ.get("LD_LIBRARY_PATH"))
    # only code: locale files, gconv caches and data files are mapped too, and reading them
    # as ELF on every run would fail again each time (ld.so maps every object with code)
    mapped = tuple(m.path for m in read_maps() if m.executable and not m.deleted)
    machine = _ELF_MACHINE.get(host_machine(), 62)
    secure = read_secure()
    if secure is None:
        secure = os.getuid() != os.geteuid() or os.getgid() != os.getegid()
    wsl = read_wsl("/")
    driver = read_driver_version(NVIDIA_VERSION)
    libcuda = _wsl_libcuda(wsl)
    cpu = _memo(lambda: read_cpu(machine=host_machine()))
    return LinuxSystem(
        site_dirs=tuple(sys.path),  # as torch's preload walks it, '' (the cwd) included
        torch_package_dir=torch_package_dir,
        ld_library_path=library_path,
        secure=secure,
        cache=read_cache("/", machine, lambda: hwcaps_names(cpu(), host_machine())),
        default_dirs=default_dirs("/"),
        machine=machine,
        executable=executable,
        mapped=tuple(p for p in mapped if p != executable),
        environ=environ,
        live=True,
        python_version=(sys.version_info[0], sys.version_info[1]),
        free_threaded=free_threaded(),
        conda=os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
        wsl=wsl is not None,
        gpus=nvidia_gpus("/"),
        driver=driver.version if driver else None,
        driver_source=NVIDIA_VERSION if driver else "",
        driver_present=driver is not None or libcuda is not None,
        wsl_libcuda=libcuda,
        host_driver_store=driver_store("/") if libcuda is not None else None,
        pci_root="/",
        preload=split_preload(environ.get("LD_PRELOAD")),
        preload_file=read_preload_file(),
        dst_lib=_lib_of(next((p for p in mapped if _is_libc(p)), None)),
        cpu=cpu,
        glibc=glibc_version(),
        library_path_doubt="" if secure else doubt,
    )


_LIBRARY_PATH_UNKNOWN = (
    "this process's start-up environment cannot be read (/proc/self/environ is unreadable or "
    "was overwritten, as setproctitle does) and ld.so could not be asked for its search "
    "folders, so LD_LIBRARY_PATH was taken from os.environ; a folder on the one ld.so read "
    "at start may hold it"
)


def _memo(read: Callable[[], Cpu]) -> Callable[[], Cpu]:
    """``read`` called once, on first use."""
    found: list[Cpu] = []

    def cpu() -> Cpu:
        if not found:
            found.append(read())
        return found[0]

    return cpu


def _is_libc(path: str) -> bool:
    return os.path.basename(path) == "libc.so.6"


def _lib_of(libc: str | None, root: str = "/") -> str:
    """``$LIB``: glibc's library directory (where its ``libc.so.6`` is) below ``/`` or
    ``/usr``: ``lib/x86_64-linux-gnu`` on Debian, ``lib64`` on Fedora, ``lib`` on Arch."""
    if libc is None:
        return "lib64"
    folder = os.path.dirname(libc)[len(root.rstrip("/")) :] or "/"
    for prefix in ("/usr/", "/"):
        if folder.startswith(prefix):
            return folder[len(prefix) :] or "lib64"
    return "lib64"


def _wsl_libcuda(wsl: Wsl | None) -> str | None:
    """The host driver's ``libcuda.so.1`` under WSL2 (as the guest sees its path)."""
    if wsl is None or wsl.version != 2 or not wsl.has_cuda_driver or wsl.lib_dir is None:
        return None
    return os.path.join(wsl.lib_dir, "libcuda.so.1")


def offline_linux(
    site_dirs: list[str],
    *,
    sysroot: str = "/",
    ld_library_path: tuple[str, ...] = (),
    machine: str = "x86_64",
    gpus: tuple[str, ...] = (),
    driver_cuda: tuple[int, int] | None = None,
    wheels: WheelLayout | None = None,
    preload: tuple[str, ...] = (),
    cpu_level: int = 3,
) -> LinuxSystem:
    """Site-packages folders on a system root: no interpreter, nothing mapped yet.

    The root's ``/proc/driver/nvidia`` and ``/usr/lib/wsl/lib`` say which driver and GPUs it
    has; ``gpus`` (``--gpu``) and ``driver_cuda`` (``--cuda``: the newest CUDA the driver
    supports, so at least that toolkit's minimum driver) describe them instead. The CPU is
    assumed to have the x86-64 level ``cpu_level`` (which ``glibc-hwcaps`` subdirectories
    and ld.so.cache hwcaps entries win); ``preload`` is an ``LD_PRELOAD`` to assume."""
    elf_machine = _ELF_MACHINE.get(machine, 62)
    assumed = Cpu(cpu_level if machine == "x86_64" else 0, machine)
    wsl = read_wsl(sysroot)
    driver = read_driver_version(os.path.join(sysroot, NVIDIA_VERSION.lstrip("/")))
    libcuda = _wsl_libcuda(wsl)
    named = tuple(dict.fromkeys((*nvidia_gpus(sysroot), *gpus)))
    torch_dir = next(
        (
            os.path.join(d, "torch")
            for d in site_dirs
            if os.path.isfile(os.path.join(d, "torch", "__init__.py"))
        ),
        None,
    )
    return LinuxSystem(
        site_dirs=tuple(site_dirs),
        torch_package_dir=torch_dir,
        ld_library_path=ld_library_path,
        cache=read_cache(sysroot, elf_machine, lambda: hwcaps_names(assumed, machine)),
        default_dirs=default_dirs(sysroot, machine),
        machine=elf_machine,
        sysroot=sysroot,
        python_version=_extension_python(torch_dir) or (3, sys.version_info[1]),
        wsl=wsl is not None,
        gpus=named,
        driver=driver.version if driver else None,
        driver_source=os.path.join(sysroot, NVIDIA_VERSION.lstrip("/")) if driver else "",
        driver_cuda=driver_cuda,
        driver_present=(
            driver is not None
            or libcuda is not None
            or driver_cuda is not None
            or any("nvidia" in g.lower() for g in gpus)
        ),
        wsl_libcuda=libcuda,
        host_driver_store=driver_store(sysroot) if libcuda is not None else None,
        wheels=wheels,
        preload=preload,
        preload_file=read_preload_file(os.path.join(sysroot, "etc/ld.so.preload")),
        dst_lib=_lib_of(_find_libc(sysroot, machine), sysroot),
        cpu=lambda: assumed,
    )


def _find_libc(root: str, machine: str) -> str | None:
    for folder in default_dirs(root, machine):
        if os.path.isfile(os.path.join(folder, "libc.so.6")):
            return os.path.join(folder, "libc.so.6")
    return None


def _extension_python(torch_dir: str | None) -> tuple[int, int] | None:
    """The Python an offline torch is built for, from ``_C.cpython-3XY-...so``."""
    if torch_dir is None:
        return None
    try:
        names = os.listdir(torch_dir)
    except OSError:
        return None
    for name in names:
        if name.startswith("_C.cpython-3"):
            digits = name[len("_C.cpython-3") :].split("-", 1)[0].rstrip("t")
            if digits.isdigit():
                return (3, int(digits))
    return None
