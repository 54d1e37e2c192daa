"""The running Windows process, the only module that touches ctypes and winreg.

Importable everywhere; every function that needs Windows raises NotImplementedError elsewhere,
so the rest of torchguard stays pure and testable on Linux.
"""

from __future__ import annotations

import ntpath
import os
import site
import sys
import sysconfig
from typing import IO

from torchguard._binary import winapi
from torchguard._binary.pe.machine import interpreter_machine
from torchguard._facts.interpreter import torch_package_dir
from torchguard._platforms.windows.gpus import DisplayAdapter
from torchguard._platforms.windows.python_dlls import live_free_threaded
from torchguard._platforms.windows.system import Interpreter, System
from torchguard._platforms.windows.tree import WinTree, path_key
from torchguard._platforms.windows.user_dirs import library_dirs, maybe_registered, registered

_ONLY_WINDOWS = "only available on Windows"


def process_image_dir() -> str:
    """python.exe's real folder (the base interpreter's in a venv): the loader's app dir."""
    return ntpath.dirname(process_image())


def python_machine() -> int:
    """The CPU this interpreter is built for: its own image's PE header, never the host's.

    The process image (the base python.exe, even in a venv) first, then ``sys.executable``,
    then ``sysconfig.get_platform()``. ``platform.machine()`` is not asked: it names the host
    CPU, so an x64 Python on Windows on ARM would read as ARM64.
    """
    images = [sys.executable] if sys.executable else []
    if sys.platform == "win32":
        images.insert(0, process_image())
    return interpreter_machine(images, sysconfig.get_platform())


def process_image() -> str:
    """The running process's image file (python.exe, or an embedding program)."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    size = 32768
    buffer = ctypes.create_unicode_buffer(size)
    length = kernel32.GetModuleFileNameW(None, buffer, size)
    if not length:
        raise ctypes.WinError(ctypes.get_last_error())
    return buffer.value


def system_directory() -> str:
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import ctypes

    buffer = ctypes.create_unicode_buffer(1024)
    length = ctypes.windll.kernel32.GetSystemDirectoryW(buffer, 1024)
    return (
        buffer.value
        if length
        else ntpath.join(os.environ.get("SYSTEMROOT", "C:\\Windows"), "System32")
    )


def known_dlls() -> frozenset[str]:
    """KnownDLLs from the registry, plus ntdll.dll which is always known."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import winreg

    names = {"ntdll.dll"}
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, winapi.KNOWN_DLLS) as key:
            for _, value, kind in winapi.values(key):
                if (
                    kind == winreg.REG_SZ
                    and isinstance(value, str)
                    and value.lower().endswith(".dll")
                ):
                    names.add(value.lower())
    except OSError:
        pass
    return frozenset(names)


def loaded_modules(paths: tuple[str, ...] | None = None) -> dict[str, str]:
    """Base name (lower case) -> full path of the first-loaded module of that name.

    The loader binds a by-name lookup to the copy loaded first; :func:`loaded_paths` has all.
    """
    found: dict[str, str] = {}
    for path in loaded_paths() if paths is None else paths:
        found.setdefault(ntpath.basename(path).lower(), path)
    return found


def loaded_paths() -> tuple[str, ...]:
    """The full path of every module of this process, in load order (same names included)."""
    found = winapi.module_paths()
    return () if found is None else tuple(path for path in found if path is not None)


def kmp_started() -> str | None:
    """The module whose KMP OpenMP runtime has started in this process, or None.

    A starting KMP runtime sets ``__KMP_REGISTERED_LIB_<pid>`` to ``<flag address>-<flag
    value>-<library name>`` with SetEnvironmentVariable (so ``os.environ`` never sees it); the
    module owning that address is the runtime, and the flag still holding that value shows
    it is alive, as KMP itself checks.
    """
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetEnvironmentVariableW.argtypes = [wintypes.LPCWSTR, wintypes.LPWSTR, wintypes.DWORD]
    kernel32.GetModuleHandleExW.argtypes = [
        wintypes.DWORD,
        ctypes.c_void_p,
        ctypes.POINTER(wintypes.HMODULE),
    ]
    kernel32.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    buffer = ctypes.create_unicode_buffer(1024)
    name = f"__KMP_REGISTERED_LIB_{os.getpid()}"
    if not kernel32.GetEnvironmentVariableW(name, buffer, 1024):
        return None
    parts = buffer.value.split("-", 2)
    try:
        address, value = int(parts[0], 16), int(parts[1], 16)
    except (IndexError, ValueError):
        return None
    module = wintypes.HMODULE()
    from_address_unchanged = 0x4 | 0x2  # FROM_ADDRESS | UNCHANGED_REFCOUNT
    if not address or not kernel32.GetModuleHandleExW(
        from_address_unchanged, ctypes.c_void_p(address), ctypes.byref(module)
    ):
        return None  # the runtime that registered is gone
    if ctypes.c_long.from_address(address).value & 0xFFFFFFFF != value & 0xFFFFFFFF:
        return None
    path = ctypes.create_unicode_buffer(32768)
    if not kernel32.GetModuleFileNameW(module, path, 32768):
        return None
    return path.value


def preload(path: str) -> None:
    """Load ``path`` by full path now (its own folder first for its imports); raises OSError."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    if not winapi.preload(path):  # the memo's replay makes the same call
        import ctypes

        raise ctypes.WinError(ctypes.get_last_error())  # winapi's kernel32 keeps it


def commit_status() -> tuple[int, int]:
    """(commit limit, commit available) in bytes, from GlobalMemoryStatusEx.

    ``ullTotalPageFile`` and ``ullAvailPageFile`` are, despite their names, the system commit
    limit (RAM plus page files) and what is left of it.
    """
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [
            ("dwLength", wintypes.DWORD),
            ("dwMemoryLoad", wintypes.DWORD),
            ("ullTotalPhys", ctypes.c_ulonglong),
            ("ullAvailPhys", ctypes.c_ulonglong),
            ("ullTotalPageFile", ctypes.c_ulonglong),
            ("ullAvailPageFile", ctypes.c_ulonglong),
            ("ullTotalVirtual", ctypes.c_ulonglong),
            ("ullAvailVirtual", ctypes.c_ulonglong),
            ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
        ]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    if not kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        raise ctypes.WinError(ctypes.get_last_error())
    return int(status.ullTotalPageFile), int(status.ullAvailPageFile)


def _commit_or_none() -> tuple[int, int] | None:
    try:
        return commit_status()
    except OSError:
        return None


def display_adapters() -> tuple[DisplayAdapter, ...]:
    """The display adapters' driver descriptions and PCI hardware ids, from the registry.

    Reads the device class key only: no CUDA initialisation, no driver DLL loaded.
    """
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import winreg

    found: list[DisplayAdapter] = []
    try:
        # the display adapter device class: each numbered subkey is one installed adapter
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, winapi.DISPLAY) as key:
            for sub in winapi.subkeys(key):
                if not sub.isdigit():
                    continue  # "Properties" and the like
                try:
                    with winreg.OpenKey(key, sub) as adapter:
                        name = _reg_string(adapter, "DriverDesc")
                        hardware = _reg_string(adapter, "MatchingDeviceId")
                except OSError:
                    continue
                if name or hardware:
                    found.append(DisplayAdapter(name, hardware))
    except OSError:
        return ()
    return tuple(found)


def _reg_string(key: object, name: str) -> str:
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import winreg

    assert isinstance(key, winreg.HKEYType)
    try:
        value, kind = winreg.QueryValueEx(key, name)
    except OSError:
        return ""
    return value if kind == winreg.REG_SZ and isinstance(value, str) else ""


def _site_dirs() -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            seen.setdefault(path_key(os.path.abspath(entry)), os.path.abspath(entry))
    return tuple(seen.values())


def smart_app_control() -> int | None:
    """Smart App Control's state from the registry: 0 off, 1 on (enforcing), 2 evaluation
    (watching, not blocking); None: not there, as before Windows 11 22H2, or unreadable."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, winapi.SAC[0]) as key:
            value, kind = winreg.QueryValueEx(key, winapi.SAC[1])
    except OSError:
        return None
    return value if kind == winreg.REG_DWORD and isinstance(value, int) else None


def live_windows() -> System:
    """The running process as a :class:`System` (Windows only)."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    app_dir = process_image_dir()
    version = sys.version_info
    interpreter = Interpreter(
        version=(version[0], version[1]),
        machine=python_machine(),
        executable=sys.executable,
        prefix=sys.prefix,
        exec_prefix=sys.exec_prefix,
        base_exec_prefix=sys.base_exec_prefix,
        userbase=sysconfig.get_config_var("userbase") or site.getuserbase(),
        app_dir=app_dir,
        site_dirs=_site_dirs(),
        environ=dict(os.environ),
        path_dirs=tuple(
            p for p in os.environ.get("PATH", "").split(os.pathsep) if p and ntpath.isabs(p)
        ),
        is_conda=os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
        free_threaded=live_free_threaded(),
    )
    executable = sys.executable
    modules = loaded_paths()
    system32 = system_directory()
    known = registered()
    site_dirs = interpreter.site_dirs
    return System(
        tree=WinTree(passthrough=True),
        interpreter=interpreter,
        system32=system32,
        known_dlls=known_dlls(),
        loaded=loaded_modules(modules),
        live=True,
        torch_package_dir=torch_package_dir(),
        python_cmd=f'"{executable}"' if " " in executable else executable,
        display_adapters=display_adapters(),
        commit=_commit_or_none(),
        loaded_paths=modules,
        kmp_started=kmp_started(),
        smart_app_control=smart_app_control(),
        registered_dirs=known,
        unseen_dirs=maybe_registered(modules, library_dirs(site_dirs), known, (system32, app_dir)),
    )


def enable_ansi(stream: IO[str]) -> bool:
    """Turn on ANSI sequences for the console behind ``stream`` (stdout or stderr); False if
    it is not a console or refuses (consoles before Windows 10)."""
    if sys.platform != "win32":
        raise NotImplementedError(_ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    try:
        fileno = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    std = {1: -11, 2: -12}.get(fileno)
    if std is None:
        return False
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetStdHandle.restype = wintypes.HANDLE
    handle = kernel32.GetStdHandle(std)
    mode = wintypes.DWORD()
    if not kernel32.GetConsoleMode(handle, ctypes.byref(mode)):
        return False
    virtual_terminal_processing = 0x0004
    if mode.value & virtual_terminal_processing:
        return True
    return bool(kernel32.SetConsoleMode(handle, mode.value | virtual_terminal_processing))
