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
  wheels before the provider.
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


KINDS: tuple[Kind, ...] = (
    Kind(
        "ctranslate2",
        "ctranslate2",
        ("ctranslate2.libs/libctranslate2*.so*", "ctranslate2/libctranslate2.so*"),
        "its CUDA code (faster-whisper, whisperX)",
        ((11, "ctranslate2==3.24.0"), (12, "ctranslate2>=4.5")),
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
    ),
)

#: The CUDA library families whose exact ``lib*.so.N`` names a neighbour may ``dlopen``.
LATE_FAMILIES = ("libcublas", "libcudnn", "libcudart", "libcufft", "libcurand", "libcusparse")


def pin_for(kind: Kind, major: int) -> str | None:
    return next((pin for cuda, pin in kind.pins if cuda == major), None)
