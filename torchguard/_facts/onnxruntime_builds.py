"""Which CUDA and cuDNN each onnxruntime-gpu release was built with, as its own wheel says.

Every wheel carries the answer in two small text members: ``onnxruntime/capi/
build_and_package_info.py`` (``cuda_version = '12.2'``, 1.21+, both platforms) and, on Windows,
``onnxruntime/capi/version_info.py`` (``cuda_version = "12.2.128"``, ``cudnn_version = "9"``,
1.19+). Read from the PyPI cp311 wheels over range requests (2026-12,
``tests/test_realwheel_onnxruntime_builds.py`` reads one again and compares):

- 1.19.0 to 1.23.x: CUDA 12.2 (12.2.128 on Windows), cuDNN 9;
- 1.24.x to 1.26.x: CUDA 12.8 (12.8.61 on Windows), cuDNN 9;
- 1.27.0: CUDA 13.0 (13.0.88 on Windows), cuDNN 9;
- 1.31.1 (Linux, no ``version_info.py``): CUDA 13.0.
(1.19.x and 1.20.x Linux wheels carry neither member; their Windows wheels say the same build.)

The wheels name the cuDNN major only, never its minor (``cudnn_version = "9"``), and their
metadata pins ``nvidia-cudnn-cu12~=9.0`` (the ``cudnn`` extra, 1.21 to 1.26), so the minor a
release was built with, which onnxruntime needs at least at run time (its issue 24266: a
provider built with a newer 9.x that binds torch's cuDNN 9.1 fails), cannot be read from the
release's files, nor from its documentation (the CUDA execution provider's requirements table
says "9.x" for every CUDA 12 release; its PR 23674 says the provider reuses torch's CUDA and
cuDNN "as long as CUDA and cuDNN major versions are compatible"): no finding compares cuDNN
minors from this table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Build:
    """What one onnxruntime-gpu wheel says it was built with."""

    cuda: tuple[int, ...] | None
    """The CUDA version (``(12, 2)``, ``(12, 2, 128)``); None when the wheel does not say."""
    cudnn: tuple[int, ...] | None
    """The cuDNN version (``(9,)``: the wheels give the major only)."""


#: (first release, last release, CUDA major.minor, cuDNN major), read from the wheels.
BUILDS: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int], int | None], ...] = (
    ((1, 19), (1, 23), (12, 2), 9),
    ((1, 24), (1, 26), (12, 8), 9),
    ((1, 27), (1, 27), (13, 0), 9),
    ((1, 31), (1, 31), (13, 0), None),
)

_ASSIGN = re.compile(r"""^\s*(cuda_version|cudnn_version)\s*=\s*['"]([0-9.]+)['"]\s*$""", re.M)


def parse_build_info(*texts: str) -> Build:
    """The CUDA and cuDNN versions the wheel's ``build_and_package_info.py`` and
    ``version_info.py`` assign (read as text, never executed); the longest CUDA version wins
    (``version_info``'s ``12.2.128`` over ``12.2``)."""
    found: dict[str, tuple[int, ...]] = {}
    for text in texts:
        for name, value in _ASSIGN.findall(text):
            parts = tuple(int(p) for p in value.split(".") if p)
            if parts and len(parts) > len(found.get(name, ())):
                found[name] = parts
    return Build(found.get("cuda_version"), found.get("cudnn_version"))


def built_with(version: str) -> Build | None:
    """The CUDA major.minor and cuDNN major the onnxruntime-gpu ``version`` was built with, from
    :data:`BUILDS`; None outside the releases read."""
    parts = re.findall(r"\d+", version)
    if len(parts) < 2:
        return None
    release = (int(parts[0]), int(parts[1]))
    for first, last, cuda, cudnn in BUILDS:
        if first <= release <= last:
            return Build(cuda, (cudnn,) if cudnn is not None else None)
    return None
