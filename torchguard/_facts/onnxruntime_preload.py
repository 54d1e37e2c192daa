"""What ``onnxruntime.preload_dlls(cuda=True, cudnn=True, msvc=True, directory=None)`` loads on
Windows, per onnxruntime-gpu release: which DLLs, in which order, from which folder.

Read from ``onnxruntime/__init__.py`` of every win_amd64 cp311 wheel on PyPI from 1.21.0 to
1.31.1 (2026-12; ``tests/test_realwheel_onnxruntime_preload.py`` runs the real wheels'
``_get_nvidia_dll_paths`` again and compares). Its list is built by Python code (f-strings on
the build's CUDA major, an architecture folder from ``platform.machine()``), so it is kept here
as data rather than parsed from the installed file; the installed file's cuDNN names, plain
literals, are compared with it (:func:`agrees_with_source`), so a release that changes them is
not replayed with a list it does not use.

- The order: the CUDA DLLs (``cublasLt64_M``, ``cublas64_M``, ``cufft64_F``, ``cudart64_M``),
  then cuDNN's sub-libraries before ``cudnn_graph64_9`` and ``cudnn64_9`` (1.21.0 already;
  the first preload, onnxruntime PR 23674, loaded only graph and ``cudnn64_9``, and its PR
  23744 added the sub-libraries and torch's folder before 1.21.0 shipped). 1.27.0 adds
  ``cudnn_engines_tensor_ir64_9.dll`` last (PR 28787), optional.
- The CUDA major: 1.21 to 1.23 preload for a CUDA 12 build only, with fixed ``*64_12`` names and
  ``cufft64_11``; 1.24+ take the build's major (``cufft64_12`` for CUDA 13). 1.28+ look for a
  CUDA 13 build's DLLs in NVIDIA's consolidated ``nvidia\\cu13\\bin\\x86_64`` wheel.
- Where: each file by full path (``ctypes.CDLL``) from ``directory``, or with ``directory=None``
  from ``torch\\lib`` when the installed torch's version says a matching CUDA build (1.21 to
  1.23: ``"+cu12"`` in it; 1.24+: the two digits after ``+cu`` equal the build's major), else
  from the NVIDIA wheels (``site-packages\\nvidia\\<part>\\bin``; ``directory=""`` always
  there); each name not loaded that way is then loaded by name. With torch already imported
  and a matching build it loads nothing.
"""

from __future__ import annotations

import re

#: The first onnxruntime-gpu release with ``preload_dlls()``.
PRELOAD_SINCE = (1, 21)

_CUDNN = (
    "cudnn_engines_runtime_compiled64_9.dll",
    "cudnn_engines_precompiled64_9.dll",
    "cudnn_heuristic64_9.dll",
    "cudnn_ops64_9.dll",
    "cudnn_adv64_9.dll",
    "cudnn_graph64_9.dll",
    "cudnn64_9.dll",
)
#: Added in 1.27.0, loaded last, its failure not reported (cuDNN 9.23+ only).
TENSOR_IR = "cudnn_engines_tensor_ir64_9.dll"

Entry = tuple[tuple[str, ...], str]
"""(the folder under ``site-packages``, the DLL name)."""


def _release(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def preload_list(version: str, cuda_major: int) -> tuple[Entry, ...]:
    """What ``preload_dlls()`` of onnxruntime-gpu ``version``, built for CUDA ``cuda_major``,
    loads on x64 Windows, in order; empty when the release has no ``preload_dlls()`` or skips
    the CUDA and cuDNN DLLs for this build (1.21 to 1.23 for anything but CUDA 12, every release
    for CUDA 11 or older)."""
    release = _release(version)
    if release is None or release < PRELOAD_SINCE or cuda_major < 12:
        return ()
    if release < (1, 24) and cuda_major != 12:
        return ()
    cufft = 12 if cuda_major == 13 else 11
    names = (
        f"cublasLt64_{cuda_major}.dll",
        f"cublas64_{cuda_major}.dll",
        f"cufft64_{cufft}.dll",
        f"cudart64_{cuda_major}.dll",
    )
    if release >= (1, 28) and cuda_major >= 13:
        folders: tuple[tuple[str, ...], ...] = (("nvidia", f"cu{cuda_major}", "bin", "x86_64"),) * 4
    else:
        parts = ("cublas", "cublas", "cufft", "cuda_runtime")
        folders = tuple(("nvidia", part, "bin") for part in parts)
    cudnn = (*_CUDNN, TENSOR_IR) if release >= (1, 27) else _CUDNN
    return (
        *zip(folders, names),
        *((("nvidia", "cudnn", "bin"), name) for name in cudnn),
    )


def picks_torch_lib(version: str, cuda_major: int, torch_version: str | None) -> bool:
    """Whether ``preload_dlls()`` (``directory=None``) of onnxruntime-gpu ``version`` loads from
    ``torch\\lib`` rather than the NVIDIA wheels, given the installed torch's version string."""
    release = _release(version)
    if release is None or not torch_version or "+cu" not in torch_version:
        return False
    if release < (1, 24):
        return "+cu12" in torch_version
    digits = torch_version.split("+cu", 1)[1][:2]
    return digits.isdigit() and int(digits) == cuda_major


_CUDNN_LITERAL = re.compile(r"""["'](cudnn[a-z_]*64_\d+\.dll)["']""")


def agrees_with_source(version: str, cuda_major: int, source: str) -> bool:
    """Whether the installed ``onnxruntime/__init__.py`` (``source``) lists the cuDNN DLLs
    :func:`preload_list` says its release does (they are plain literals there, unlike the CUDA
    names): a release whose file lists others is not described by this table. A file without
    ``def preload_dlls`` is not judged here (True)."""
    if "def preload_dlls" not in source:
        return True
    listed = set(_CUDNN_LITERAL.findall(source))
    table = {name for _, name in preload_list(version, cuda_major) if name.startswith("cudnn")}
    return listed == table
