"""What the verdict memo needs from Windows, with the standard library only.

The memo (:mod:`torchguard._binary.memo`) runs inside a hooked ``import torch`` to avoid
importing the analysis, so it cannot use :mod:`torchguard._platforms.windows.live`. This
module reads the same process and registry states the live analysis reads (loaded modules,
KnownDLLs, Smart App Control, display adapters, folders registered with
``os.add_dll_directory``, the KMP runtime's marker) as raw values, and replays the guard's
two side effects (registering a folder, preloading a DLL). ``ctypes`` and ``winreg`` are
imported only when a function is called; every function needs Windows.
"""

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~10 ms
if TYPE_CHECKING:
    from typing import Any

KNOWN_DLLS = r"SYSTEM\CurrentControlSet\Control\Session Manager\KnownDLLs"
SAC = (r"SYSTEM\CurrentControlSet\Control\CI\Policy", "VerifiedAndReputablePolicyState")
DISPLAY = r"SYSTEM\CurrentControlSet\Control\Class\{4d36e968-e325-11ce-bfc1-08002be10318}"
ONLY_WINDOWS = "only available on Windows"
LOAD_FLAGS = 0x1100  # LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS


def _kernel32() -> "Any":
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    return kernel32


def loaded_paths() -> "list[str] | None":
    """Every module of this process, in load order (the process image first); None when
    they cannot be listed."""
    found = module_paths()
    if found is None:
        return None
    paths = [path for path in found if path is not None]
    return paths if len(paths) == len(found) else None


def module_paths() -> "list[str | None] | None":
    """Every module of this process, in load order (the process image first): its full path,
    or None for one that cannot be named; None when they cannot be listed. Also what the live
    analysis lists (:func:`torchguard._platforms.windows.live.loaded_paths`)."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import ctypes
    from ctypes import wintypes

    kernel32 = _kernel32()
    psapi = ctypes.WinDLL("psapi", use_last_error=True)
    psapi.EnumProcessModules.argtypes = [
        wintypes.HANDLE,
        ctypes.POINTER(wintypes.HMODULE),
        wintypes.DWORD,
        ctypes.POINTER(wintypes.DWORD),
    ]
    process = kernel32.GetCurrentProcess()
    size = ctypes.sizeof(wintypes.HMODULE)
    count = 1024
    while True:
        modules = (wintypes.HMODULE * count)()
        needed = wintypes.DWORD()
        if not psapi.EnumProcessModules(
            process, modules, ctypes.sizeof(modules), ctypes.byref(needed)
        ):
            return None
        if needed.value <= ctypes.sizeof(modules):
            break
        count = needed.value // size + 16
    found: list[str | None] = []
    buffer = ctypes.create_unicode_buffer(32768)
    for handle in modules[: needed.value // size]:
        named = handle and kernel32.GetModuleFileNameW(handle, buffer, 32768)
        found.append(buffer.value if named else None)
    return found


def system_directory() -> "str | None":
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import ctypes

    buffer = ctypes.create_unicode_buffer(1024)
    length = _kernel32().GetSystemDirectoryW(buffer, 1024)
    return buffer.value if length else None


def kmp_marker() -> bool:
    """Whether a KMP OpenMP runtime has announced itself in this process (its variable is
    set with SetEnvironmentVariable, so ``os.environ`` never sees it)."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import ctypes

    buffer = ctypes.create_unicode_buffer(1024)
    name = f"__KMP_REGISTERED_LIB_{os.getpid()}"
    return bool(_kernel32().GetEnvironmentVariableW(name, buffer, 1024))


def values(key: "Any") -> "list[tuple[str, object, int]]":
    """An open registry key's values as (name, data, type), in the registry's order."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import winreg

    return _listed(winreg.EnumValue, key)


def subkeys(key: "Any") -> "list[str]":
    """An open registry key's subkey names, in the registry's order."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import winreg

    return _listed(winreg.EnumKey, key)


def _listed(enum: "Any", key: "Any") -> "list[Any]":
    """``enum(key, 0)``, ``enum(key, 1)``, ... until it raises OSError (no more items)."""
    found = []
    index = 0
    while True:
        try:
            found.append(enum(key, index))
        except OSError:
            return found
        index += 1


def known_dlls() -> "list[tuple[str, object, int]] | str":
    """The KnownDLLs key's values as the registry holds them (or why they cannot be read)."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, KNOWN_DLLS) as key:
            return sorted(values(key), key=repr)
    except OSError as exc:
        return f"unreadable {exc.errno}"


def smart_app_control() -> "tuple[object, int] | str":
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import winreg

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, SAC[0]) as key:
            return winreg.QueryValueEx(key, SAC[1])
    except OSError as exc:
        return f"unreadable {exc.errno}"


def display_adapters() -> "list[object] | str":
    """Each display adapter subkey's name and values (the analysis reads DriverDesc and
    MatchingDeviceId; a driver update rewrites them)."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    import winreg

    found: list[object] = []
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, DISPLAY) as key:
            for sub in subkeys(key):
                try:
                    with winreg.OpenKey(key, sub) as adapter:
                        wanted = [v for v in values(adapter) if v[0] in _ADAPTER_VALUES]
                except OSError as exc:
                    wanted = [f"unreadable {exc.errno}"]
                found.append((sub, sorted(wanted, key=repr)))
    except OSError as exc:
        return f"unreadable {exc.errno}"
    return found


_ADAPTER_VALUES = frozenset({"DriverDesc", "MatchingDeviceId"})


def registered_dirs() -> "list[object]":
    """The folders ``os.add_dll_directory`` registered since the start-up hook began to keep
    its handles (``None`` for a closed one), in order."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    handles = getattr(getattr(os, "add_dll_directory", None), "torchguard_handles", None)
    if not isinstance(handles, list):
        return ["unobserved"]
    return [getattr(handle, "path", "?") for handle in list(handles)]


def add_dll_directory(path: str) -> "Any":
    """Register ``path`` as the guard does (through the observed ``os.add_dll_directory``)."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    return os.add_dll_directory(path)


def preload(path: str) -> bool:
    """Load ``path`` by full path, its own folder first for its imports, as the guard does."""
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    from ctypes import wintypes

    kernel32 = _kernel32()
    kernel32.LoadLibraryExW.argtypes = [wintypes.LPCWSTR, wintypes.HANDLE, wintypes.DWORD]
    kernel32.LoadLibraryExW.restype = wintypes.HMODULE
    return bool(kernel32.LoadLibraryExW(path, None, LOAD_FLAGS))


def windows_version() -> "tuple[object, ...]":
    if sys.platform != "win32":
        raise NotImplementedError(ONLY_WINDOWS)
    version = sys.getwindowsversion()
    return (*tuple(version), version.platform_version)
