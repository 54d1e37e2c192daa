"""The cuDNN version a Windows folder holds, from ``cudnn64_N.dll``'s version resource.

NVIDIA stamps the full release into the DLL's FileVersion: the ``cudnn64_9.dll`` of the
``nvidia-cudnn-cu12`` 9.1.0.70 and 9.8.0.87 Windows wheels say ``9.1.0.70`` and ``9.8.0.87``
(read over range requests in ``tests/test_realwheel_onnxruntime_builds.py``). The DLL's name
gives the major only, so this is what tells two cuDNN 9 minors apart (torch's ``lib`` copy and
the NVIDIA wheel's that ``onnxruntime.preload_dlls()`` loads: onnxruntime issues 20049, 24266).
"""

from __future__ import annotations

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.image import read_pe
from torchguard._facts.neighbours import cudnn_major
from torchguard._platforms.windows.tree import WinTree, join


def cudnn_version(tree: WinTree, folder: str, major: int = 9) -> tuple[int, ...] | None:
    """The FileVersion of ``cudnn64_<major>.dll`` in ``folder``; None when there is none, it
    cannot be read, or its resource names another major than its file name (not trusted)."""
    name = f"cudnn64_{major}.dll"
    hit = tree.lookup(folder, name)
    if hit is None:
        return None
    try:
        version = read_pe(tree.read_bytes(join(folder, hit[0]))).file_version
    except (ImageUnavailable, OSError, MemoryError, ValueError):
        return None
    if version is None or version[0] != cudnn_major(name):
        return None
    return tuple(version)
