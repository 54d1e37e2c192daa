"""Torch's native neighbours: packages that load CUDA libraries by name into torch's process.

Each entry says where the package keeps the library it loads (site-relative globs, the first
match wins) and what it is. What that library then needs is read from the binary itself (its
``DT_NEEDED`` entries, and the exact ``lib*.so.N`` names in its ``.rodata`` that it ``dlopen``s
later, as :mod:`torchguard._platforms.linux.late_loads` reads cuDNN's), never from this table.

Pins, from the projects' own release notes and READMEs:

- ctranslate2: 3.x was built for CUDA 11 and cuDNN 8, 4.0-4.4 for CUDA 12 and cuDNN 8, 4.5+ for
  CUDA 12 and cuDNN 9 (faster-whisper's README: "ctranslate2==3.24.0" for CUDA 11,
  "ctranslate2==4.4.0" for cuDNN 8 on CUDA 12). The Linux 4.8.5 wheel ``dlopen``s
  ``libcublas.so.12`` and ships no cuDNN (read from the real wheel).
- onnxruntime-gpu: its provider's ``DT_NEEDED`` entries, read from every PyPI Linux x86-64 wheel
  (2026-12): ``libcublas.so.11`` up to 1.18.1, ``libcublas.so.12`` and ``libcudnn.so.9`` from
  1.19.0 to 1.26.0, ``libcublas.so.13`` from 1.27.0 (1.31.1: no cuDNN in ``DT_NEEDED``).
  ``onnxruntime.preload_dlls()`` (1.21.0+) loads the CUDA and cuDNN libraries of the NVIDIA
  wheels before the provider (per release: :mod:`torchguard._facts.onnxruntime_preload`).
  onnxruntime loads ``libonnxruntime_providers_shared.so`` from the
  provider's folder with ``RTLD_GLOBAL`` first (``ProviderSharedLibrary::Ensure`` in its
  ``provider_bridge_ort.cc``), then the provider ``RTLD_NOW | RTLD_LOCAL``: the provider's
  ``Provider_GetHost`` is in no ``DT_NEEDED`` library and binds to that global copy (measured
  with 1.24.1 beside torch 2.9.1+cu128: without it, glibc refuses the provider).

Windows (read from the real wheels and the projects' sources):

- onnxruntime-gpu loads ``onnxruntime\\capi\\onnxruntime_providers_cuda.dll`` with
  ``LoadLibraryExW(path, LOAD_WITH_ALTERED_SEARCH_PATH)`` (``WindowsEnv::LoadDynamicLibrary``):
  its imports are searched in that folder, System32, the Windows folders, the current directory
  and PATH, never in ``os.add_dll_directory`` folders. The 1.15.1 provider imports
  ``cublas64_11.dll``, ``cublasLt64_11.dll``, ``cudnn64_8.dll``, ``cufft64_10.dll`` and
  ``cudart64_110.dll``; its Python code adds no folder. ``preload_dlls()`` (1.21+) loads torch's
  ``lib`` copies when torch's version says a matching CUDA build, else
  ``nvidia\\<part>\\bin\\<name>`` of the NVIDIA wheels, by full path
  (:mod:`torchguard._facts.onnxruntime_preload`).
- ctranslate2's ``__init__`` adds its folder with ``os.add_dll_directory`` and loads every
  ``ctranslate2\\*.dll`` with ``ctypes.CDLL``; ``ctranslate2.dll`` then calls
  ``LoadLibraryA("cublas64_12.dll")`` at its first CUDA call, after
  ``SetDllDirectoryA(%CUDA_PATH%\\bin)`` when ``CUDA_PATH`` is set (its ``cublas_stub.cc``):
  the standard search (python.exe's folder, that folder, System32, the Windows folders, the
  current directory, PATH), after a module of that name already loaded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    package: str
    """The distribution name (``onnxruntime-gpu``)."""
    module: str
    """What a program imports (``onnxruntime``)."""
    globs: tuple[str, ...]
    """Site-relative globs of the library it loads, first match wins."""
    role: str
    """What that library is, for messages."""
    pins: tuple[tuple[int, str], ...]
    """(CUDA major, the release series built for it) for hints."""
    linux_globals: tuple[str, ...] = ()
    """Linux: libraries of the library's own folder the package loads ``RTLD_GLOBAL`` before
    it (the symbols they define bind the library's undefined ones)."""
    windows: tuple[str, ...] = ()
    """Windows: the site-relative parts of the library it loads (none: not judged there)."""
    windows_altered: bool = False
    """Windows: loaded with ``LOAD_WITH_ALTERED_SEARCH_PATH`` (onnxruntime's provider), not
    by ``ctypes.CDLL`` from the package's ``__init__``."""
    windows_by_name: bool = False
    """Windows: loads the CUDA DLL names kept in its data later with ``LoadLibraryA``."""


KINDS: tuple[Kind, ...] = (
    Kind(
        "ctranslate2",
        "ctranslate2",
        ("ctranslate2.libs/libctranslate2*.so*", "ctranslate2/libctranslate2.so*"),
        "its CUDA code (faster-whisper, whisperX)",
        ((11, "ctranslate2==3.24.0"), (12, "ctranslate2>=4.5")),
        windows=("ctranslate2", "ctranslate2.dll"),
        windows_by_name=True,
    ),
    Kind(
        "onnxruntime-gpu",
        "onnxruntime",
        ("onnxruntime/capi/libonnxruntime_providers_cuda.so",),
        "its CUDAExecutionProvider",
        (
            (11, "onnxruntime-gpu<1.19"),
            (12, "onnxruntime-gpu>=1.19,<1.27"),
            (13, "onnxruntime-gpu>=1.27"),
        ),
        linux_globals=("libonnxruntime_providers_shared.so",),
        windows=("onnxruntime", "capi", "onnxruntime_providers_cuda.dll"),
        windows_altered=True,
    ),
)

#: The CUDA library families whose exact ``lib*.so.N`` names a neighbour may ``dlopen``.
LATE_FAMILIES = ("libcublas", "libcudnn", "libcudart", "libcufft", "libcurand", "libcusparse")


def pin_for(kind: Kind, major: int) -> str | None:
    return next((pin for cuda, pin in kind.pins if cuda == major), None)


#: Windows CUDA DLL stems -> the NVIDIA wheel part that ships them (``nvidia\\<part>\\bin``).
_WINDOWS_WHEELS = {
    "cublas": "cublas",
    "cublaslt": "cublas",
    "cudnn": "cudnn",
    "cudart": "cuda-runtime",
    "cufft": "cufft",
    "curand": "curand",
    "cusparse": "cusparse",
    "cusolver": "cusolver",
}


def windows_wheel(name: str, cuda_major: str | None) -> str | None:
    """The NVIDIA wheel with a Windows build of ``name`` for torch's CUDA major
    (``cublas64_12.dll``, 12 -> ``nvidia-cublas-cu12``; 13 -> ``nvidia-cublas``, cuDNN
    ``nvidia-cudnn-cu13``)."""
    stem = name.lower().split("64_", 1)[0].split("_", 1)[0]
    part = _WINDOWS_WHEELS.get(stem)
    if part is None or cuda_major not in ("11", "12", "13"):
        return None
    if cuda_major == "13" and part != "cudnn":
        return f"nvidia-{part}"
    return f"nvidia-{part}-cu{cuda_major}"


def cudnn_major(name: str) -> int | None:
    """The cuDNN major a Windows cuDNN DLL name asks for (``cudnn64_8.dll``,
    ``cudnn_ops_infer64_8.dll`` -> 8); None for other names. NVIDIA's ``nvidia-cudnn-cu11``
    ships cuDNN 8 and 9 under one name (8.9.4.25 to 9.10.2.21 on Windows), so the wheel is
    pinned to this major."""
    lowered = name.lower()
    if not lowered.startswith("cudnn") or "64_" not in lowered:
        return None
    digits = lowered.rsplit("64_", 1)[1].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def windows_cuda_major(name: str) -> int | None:
    """The CUDA major a Windows cuBLAS or CUDA runtime DLL name belongs to
    (``cublas64_12.dll`` -> 12, ``cudart64_110.dll`` -> 11); None for other names."""
    lowered = name.lower()
    if not lowered.startswith(("cublas", "cudart")) or "64_" not in lowered:
        return None
    digits = lowered.rsplit("64_", 1)[1].split(".", 1)[0]
    if not digits.isdigit():
        return None
    return int(digits[:2]) if len(digits) == 3 else int(digits)


def library_cuda_major(name: str) -> int | None:
    """The CUDA major a cuBLAS or CUDA runtime library name belongs to, on either platform
    (``cublas64_12.dll`` -> 12, ``libcublas.so.12`` -> 12); None for other names (a cuDNN or
    cuFFT major is not the CUDA major)."""
    lowered = name.lower()
    if lowered.endswith(".dll"):
        return windows_cuda_major(lowered)
    stem, dot, rest = lowered.partition(".so.")
    digits = rest.split(".", 1)[0]
    if not dot or stem not in ("libcublas", "libcublaslt", "libcudart") or not digits.isdigit():
        return None
    return int(digits)
