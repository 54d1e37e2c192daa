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


#: Bounds on the source read for one package (only ever for a failing extension).
_MAX_SOURCES, _MAX_SOURCE_BYTES = 400, 2_000_000


def extension_module(path: str) -> tuple[str, str] | None:
    """(site folder, dotted module) of an extension ``.so`` found by :func:`find_extensions`:
    ``/site/xformers/_C.cpython-311-x86_64-linux-gnu.so`` -> ``xformers._C``."""
    parts: list[str] = [os.path.basename(path).split(".", 1)[0]]
    folder = os.path.dirname(path)
    for _ in range(_MAX_DEPTH):
        if os.path.isdir(os.path.join(os.path.dirname(folder), "torch")):
            parts.insert(0, os.path.basename(folder))
            return os.path.dirname(folder), ".".join(parts)
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return None


def package_sources(site: str, package: str) -> dict[str, str]:
    """The ``.py`` files of ``site/package`` by site-relative path (bounded), for reading what
    ``import package`` imports (:mod:`torchguard._facts.import_reach`)."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(os.path.join(site, package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            try:
                if os.path.getsize(path) > _MAX_SOURCE_BYTES:
                    continue
                with open(path, encoding="utf-8", errors="replace") as handle:
                    found[os.path.relpath(path, site).replace(os.sep, "/")] = handle.read()
            except OSError:
                continue
            if len(found) >= _MAX_SOURCES:
                return found
    return found


@dataclass(frozen=True)
class Pin:
    """What an installed distribution says about the torch it was built for."""

    name: str
    version: str
    requires: str | None
    """The ``torch`` requirement of METADATA (``==2.8.0``), if any."""


_PAIRED = ("torchvision", "torchaudio")
#: triton as torch's Linux wheels pin it (``triton==3.5.1``; nightlies ``pytorch-triton``).
_TRITONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")


def _requirement(metadata: str) -> str | None:
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.split(":", 1)[1].split(";", 1)[0].strip()
        name = spec.split("(", 1)[0].split("=", 1)[0].split("<", 1)[0].split(">", 1)[0]
        if name.strip().lower() == "torch":
            rest = spec[len(name) :].strip().strip("()").replace(" ", "")
            return rest or None
    return None


def torch_pins(site: str) -> list[Pin]:
    """torchvision/torchaudio (their METADATA pin), triton (its version, which torch's own
    METADATA pins) and any distribution whose local version names a torch build
    (``+cu12torch2.8cxx11abiTRUE``) in ``site``."""
    pins: list[Pin] = []
    try:
        names = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
    except OSError:
        return pins
    for folder in names:
        name, _, version = folder[: -len(".dist-info")].partition("-")
        project = name.lower().replace("_", "-")
        if project in _PAIRED:
            try:
                with open(os.path.join(site, folder, "METADATA"), encoding="utf-8") as handle:
                    requires = _requirement(handle.read())
            except (OSError, UnicodeDecodeError):
                requires = None
            pins.append(Pin(project, version, requires))
        elif project in _TRITONS or "torch" in version.partition("+")[2]:
            pins.append(Pin(project, version, None))
    return pins
