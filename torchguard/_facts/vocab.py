"""torchguard's one vocabulary: every word that crosses a module boundary, as an enum.

Finding codes, severities, loader steps, failure kinds, CPU types and hook modes used to be
bare strings and numbers spread over many modules, where a typo is a silent new value. Each
is defined here once. The text enums are ``str`` subclasses whose ``str()`` and ``format()``
are their value, so they compare equal to, hash like, print and serialise as the strings of
the documented JSON and CLI contracts ("missing-dll", "error", "dll_load_dir" ...).
"""

from __future__ import annotations

from enum import Enum, IntEnum


class _Text(str, Enum):
    """A closed set of strings: equal to, printed and serialised as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Code(_Text):
    """Finding codes: stable, documented in the README, never renamed once released."""

    MISSING_DLL = "missing-dll"
    CORRUPT_DLL = "corrupt-dll"
    UNREADABLE_DLL = "unreadable-dll"
    ARCH_MISMATCH = "arch-mismatch"
    MISSING_SYMBOL = "missing-symbol"
    RUNTIME_TOO_OLD = "runtime-too-old"
    CUDA_DRIVER_MISSING = "cuda-driver-missing"
    CUDA_DRIVER_TOO_OLD = "cuda-driver-too-old"
    CUDA_DRIVER_MISMATCH = "cuda-driver-mismatch"
    CPU_BUILD_ON_GPU = "cpu-build-on-gpu"
    GPU_ARCH_UNSUPPORTED = "gpu-arch-unsupported"
    PAGE_FILE_TOO_SMALL = "page-file-too-small"
    XPU_DRIVER_MISSING = "xpu-driver-missing"
    CUDNN_ZLIB_MISSING = "cudnn-zlib-missing"
    TORCH_NOT_FOUND = "torch-not-found"
    NEEDS_DLL_DIRECTORY = "needs-dll-directory"
    PATH_FALLBACK = "path-fallback"
    GLOB_UNSAFE_PATH = "glob-unsafe-path"
    PACKAGE_MISMATCH = "package-mismatch"
    TORCH_ALREADY_IMPORTED = "torch-already-imported"
    ENSURE_REENTERED = "ensure-reentered"
    OPENMP_CONFLICT = "openmp-conflict"
    LIBRARY_SHADOWED = "library-shadowed"
    CONFLICTING_FILES = "conflicting-files"
    WHEEL_TAG_MISMATCH = "wheel-tag-mismatch"
    BITSANDBYTES_BINARY_MISSING = "bitsandbytes-binary-missing"
    NEIGHBOUR_LOAD_ORDER = "neighbour-load-order"
    SMART_APP_CONTROL = "smart-app-control"
    COMPILE_NOT_READY = "compile-not-ready"
    NO_MATCHING_WHEEL = "no-matching-wheel"


class Severity(_Text):
    ERROR = "error"
    WARNING = "warning"


class Step(_Text):
    """The loader step that found a module (``Report.modules[].via``)."""

    ROOT = "root"
    LOADED = "loaded"
    APISET = "apiset"
    KNOWNDLL = "knowndll"
    DLL_LOAD_DIR = "dll_load_dir"
    APP_DIR = "app_dir"
    USER_DIR = "user_dir"
    SYSTEM32 = "system32"
    PATH_FALLBACK = "path_fallback"
    WINDOWS_DIR = "windows_dir"
    """torch's legacy retry: the Windows folder (``C:\\Windows``) or its 16-bit ``System``."""
    CURRENT_DIR = "current_dir"
    """torch's legacy retry: the process's current directory."""
    OPENED_BY_PATH = "path"
    """Linux: opened by the path torch or Python gave (``dlopen("/.../x.so")``)."""
    RPATH = "rpath"
    LD_LIBRARY_PATH = "ld_library_path"
    RUNPATH = "runpath"
    LD_SO_CACHE = "ld_so_cache"
    DEFAULT_DIR = "default_dir"


class FailureKind(_Text):
    """Why a load fails, and so which WinError the loader reports."""

    MISSING = "missing"
    CORRUPT = "corrupt"
    ARCH = "arch"
    SYMBOL = "symbol"
    INIT = "init"
    """Every DLL maps and binds, but an initialiser fails (WinError 1114)."""


class Analysis(_Text):
    """What a Report describes (``Report.mode``)."""

    LIVE = "live"
    OFFLINE = "offline"
    NON_WINDOWS = "non-windows"


class PackageStatus(_Text):
    """What importing a sibling or an extension does after ``import torch``."""

    OK = "ok"
    WARNS = "warns"
    FAILS = "fails"
    BLOCKED = "blocked"


class Role(_Text):
    """What a failed load of one of a package's binaries costs it."""

    CORE = "core"
    """A binary the package's import needs: a failure breaks ``import <package>``."""
    OPTIONAL = "optional"
    """A binary behind one feature: the import succeeds (maybe with a warning), the feature
    fails."""
    QUIET = "quiet"
    """An optional binary whose failure the package hides completely (a fallback exists)."""


class Loader(_Text):
    """How a package loads one of its binaries."""

    CTYPES = "ctypes"
    """Loaded with ``torch.ops.load_library`` / ``ctypes.CDLL``."""
    IMPORT = "import"
    """Loaded by Python's import of an extension module."""


class Mode(_Text):
    """What the start-up hook does (``TORCHGUARD=...``)."""

    STRICT = "strict"
    WARN = "warn"
    OFF = "off"


class Machine(IntEnum):
    """PE machine types (the CPU an image or an interpreter is built for)."""

    X86 = 0x14C
    X64 = 0x8664
    ARM = 0x1C4
    ARM64 = 0xAA64
    ARM64EC = 0xA641
