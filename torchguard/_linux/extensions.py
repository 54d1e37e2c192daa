"""torch's siblings and extensions on Linux: shared objects of other packages that link torch.

A package binary that NEEDs ``libc10.so``/``libtorch*.so`` (torchvision's ``_C.so``,
flash-attn, xformers, PyG) binds to the torch already in the process: an extension built for
another torch or C++ ABI fails there with ``undefined symbol: _ZN3c10...``. Found by the
NEEDED lists of the ``.so`` files in each top-level package folder (two levels deep), read
through the caller's cached reader; torch's own and NVIDIA's folders are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from torchguard._binary.elf import ElfReadError

TORCH_SONAMES = frozenset(
    {
        "libc10.so",
        "libc10_cuda.so",
        "libtorch.so",
        "libtorch_cpu.so",
        "libtorch_cuda.so",
        "libtorch_python.so",
    }
)
_SKIP = frozenset({"torch", "nvidia", "__pycache__", "triton", "functorch", "torchgen"})
_MAX_DEPTH = 2
_MAX_FILES = 2000


@dataclass(frozen=True)
class Extension:
    package: str
    """The top-level import name (``torchvision``)."""
    path: str


def _shared_objects(folder: str, depth: int) -> Iterator[str]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith(".so") and entry.is_file():
            yield entry.path
        elif (
            depth < _MAX_DEPTH
            and entry.is_dir(follow_symlinks=False)
            and not entry.name.endswith((".libs", ".dist-info", "__pycache__"))
        ):
            yield from _shared_objects(entry.path, depth + 1)


def find_extensions(
    site_dirs: Sequence[str], needed: Callable[[str], tuple[str, ...]]
) -> list[Extension]:
    """The package binaries in ``site_dirs`` that link torch, in folder order."""
    found: list[Extension] = []
    seen = 0
    for site in dict.fromkeys(site_dirs):
        if not site or not os.path.isdir(os.path.join(site, "torch")):
            continue
        try:
            tops = sorted(os.scandir(site), key=lambda e: e.name)
        except OSError:
            continue
        for top in tops:
            if top.name in _SKIP or top.name.endswith((".dist-info", ".libs", ".data")):
                continue
            if not top.is_dir():
                continue
            for path in _shared_objects(top.path, 1):
                seen += 1
                if seen > _MAX_FILES:
                    return found
                try:
                    names = needed(path)
                except ElfReadError:
                    continue
                if TORCH_SONAMES.intersection(names):
                    found.append(Extension(top.name, path))
    return found
