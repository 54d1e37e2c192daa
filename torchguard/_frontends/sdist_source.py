"""Does a source distribution compile native code? Its own files say, never its name.

A release published only as an sdist is built by pip on the installing machine. When its
source has no C, C++, CUDA, Cython or Rust file, no ``ext_modules``/``Extension`` in its
``setup.py`` and no compiling build backend, pip builds a pure-Python wheel on any Windows
machine: ``check`` then resolves it from that sdist (as pip does) and judges the rest. Only a
source that says so is called one that compiles.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from urllib.request import Request, urlopen

SDIST_LIMIT = 64 << 20
"""The largest sdist read (lycoris-lora's is 0.1 MB; one holding model weights is not)."""
_NATIVE_SOURCE = (".c", ".cc", ".cpp", ".cxx", ".cu", ".pyx", ".rs", ".f90", ".f")
_SETUP_NATIVE = re.compile(
    r"\bext_modules\s*=|\b(?:CUDAExtension|CppExtension|Extension|cythonize|Pybind11Extension)"
    r"\s*\(|\bbuild_ext\b"
)
_COMPILING_BACKENDS = re.compile(
    r"build-backend\s*=\s*[\"'](scikit_build_core|mesonpy|maturin|setuptools_rust|"
    r"py_build_cmake|cmake_build_extension)",
)


def native_reasons(archive: bytes, filename: str) -> list[str]:
    """Why this sdist would compile native code (its files, its setup.py, its backend);
    empty when nothing in it does."""
    files = _members(archive, filename)
    reasons: list[str] = []
    sources = sorted(
        name
        for name in files
        if name.lower().endswith(_NATIVE_SOURCE) and "/test" not in name.lower()
    )
    if sources:
        shown = ", ".join(_short(n) for n in sources[:3])
        more = f" and {len(sources) - 3} more" if len(sources) > 3 else ""
        reasons.append(f"its source has {shown}{more}")
    for name, text in files.items():
        base = name.rsplit("/", 1)[-1]
        if base == "setup.py" and text and _SETUP_NATIVE.search(text):
            found = _SETUP_NATIVE.search(text)
            reasons.append(f"its setup.py uses {found.group(0).strip(' =(') if found else ''}")
        if base == "pyproject.toml" and text:
            backend = _COMPILING_BACKENDS.search(text)
            if backend:
                reasons.append(f"its build backend is {backend.group(1)}, which compiles")
    return reasons


def _short(name: str) -> str:
    return name.split("/", 1)[1] if "/" in name else name


def _members(archive: bytes, filename: str) -> dict[str, str | None]:
    """Each member's name, with the text of the files that decide (setup.py, pyproject.toml)."""
    wanted = ("setup.py", "pyproject.toml")
    found: dict[str, str | None] = {}
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(archive)) as opened:
            for name in opened.namelist():
                keep = name.rsplit("/", 1)[-1] in wanted and name.count("/") <= 1
                found[name] = opened.read(name).decode("utf-8", "replace") if keep else None
        return found
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as opened:
        for member in opened.getmembers():
            if not member.isfile():
                continue
            text = None
            if member.name.rsplit("/", 1)[-1] in wanted and member.name.count("/") <= 1:
                handle = opened.extractfile(member)
                text = handle.read(1 << 20).decode("utf-8", "replace") if handle else None
            found[member.name] = text
    return found


def download_sdist(url: str, timeout: float = 60.0) -> bytes:
    """The sdist's bytes (OSError when it cannot be read, ValueError when it is too large)."""
    if url.startswith("file:"):
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        with open(url2pathname(urlparse(url).path), "rb") as handle:
            data = handle.read(SDIST_LIMIT + 1)
    else:
        with urlopen(Request(url.split("#", 1)[0]), timeout=timeout) as response:
            data = response.read(SDIST_LIMIT + 1)
    if len(data) > SDIST_LIMIT:
        raise ValueError(f"larger than {SDIST_LIMIT >> 20} MB")
    return data
