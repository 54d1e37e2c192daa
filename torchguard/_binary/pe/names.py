"""The CUDA DLL names a Windows binary keeps to load by name at run time.

ctranslate2's ``ctranslate2.dll`` imports no CUDA library: it calls ``LoadLibraryA`` on the
string ``cublas64_12.dll`` at its first CUDA call (read from the real 4.8.5 wheel: that one
name, in ``.rdata``). The names are read from the image's non-code sections, never assumed
per release; the NVIDIA fat binaries (``.nv_fatb``, megabytes of device code) are skipped.
"""

from __future__ import annotations

import re

from torchguard._binary.pe.sections import SectionTableError, section_table
from torchguard._binary.pe.symbols import Buffer

#: ``cublas64_12.dll``, ``cublasLt64_12.dll``, ``cudnn_ops64_9.dll``, ``cudart64_110.dll`` ...
_NAME = re.compile(
    rb"(?<=\0)(cu(?:blas|dnn|dart|fft|rand|sparse|solver)[A-Za-z0-9_]*64_[0-9]+\.dll)(?=\0)",
    re.IGNORECASE,
)


def cuda_dll_names(data: Buffer) -> tuple[str, ...]:
    """The NUL-terminated CUDA DLL names in ``data``'s data sections, lower-cased and sorted;
    () when the section table cannot be read (nothing is known, nothing is claimed)."""
    try:
        sections = section_table(data)
    except SectionTableError:
        return ()
    size = len(data)
    found: set[str] = set()
    for section in sections:
        if section.executable or not section.raw_size or section.name.startswith(".nv"):
            continue
        start = min(section.raw_pointer, size)
        stop = min(section.raw_pointer + section.raw_size, size)
        for match in _NAME.finditer(bytes(data[max(start - 1, 0) : stop])):
            found.add(match.group(1).decode("ascii").lower())
    return tuple(sorted(found))
