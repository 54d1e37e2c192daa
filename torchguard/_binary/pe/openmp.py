"""What a binary is to OpenMP, read from its contents (never its name: delvewheel renames).

- ``kmp``: an Intel/LLVM (KMP) runtime. It exports ``__kmpc_fork_call`` itself, or it exports
  the OpenMP API and carries ``__KMP_REGISTERED_LIB_``, the name of the process environment
  variable through which two started KMP runtimes find each other (OMP: Error #15).
- ``alias:<dll>``: its ``__kmpc_fork_call`` forwards to ``<dll>`` (conda-forge's
  ``libiomp5md.dll`` forwards to ``libomp.dll``): the same runtime as its target.
- ``stubs``: the OpenMP API without a runtime (``libiompstubs5md.dll``); never aborts.
- ``vcomp``: MSVC's OpenMP (``vcomp140.dll``); ``gomp``: GNU's. Neither is KMP.
- ``sibling-hook``: a delay-loading binary carrying ``..\\compiler\\``: MKL's threading layer,
  whose hook loads the OpenMP runtime beside it by full path before trying the name.

The string searches cover non-code sections only, and only of binaries that could need them
(an OpenMP API exporter; a binary with delay imports), so torch_cpu.dll is never scanned.
"""

from __future__ import annotations

from torchguard._binary.pe.sections import SectionTableError, section_table
from torchguard._binary.pe.symbols import Buffer, SymbolTables

KMP = "kmp"
ALIAS = "alias:"
STUBS = "stubs"
VCOMP = "vcomp"
GOMP = "gomp"
SIBLING_HOOK = "sibling-hook"

_FORK = b"__kmpc_fork_call"
_REGISTERED = b"__KMP_REGISTERED_LIB_"
_HOOK = b"..\\compiler\\"
_API_PREFIXES = (b"omp_", b"kmp_", b"__kmpc_")


def openmp_marks(data: Buffer, tables: SymbolTables) -> tuple[str, ...]:
    """The OpenMP marks of one image (see the module docstring); () for most binaries."""
    marks: list[str] = []
    exports = tables.exports
    if _FORK in exports.names:
        target = exports.forwarders.get(_FORK)
        if target is None:
            marks.append(KMP)
        else:
            module = target.rpartition(b".")[0].decode("ascii", "replace").lower()
            marks.append(ALIAS + (module if "." in module else module + ".dll"))
    elif any(name.startswith(_API_PREFIXES) for name in exports.names):
        marks.append(KMP if _contains(data, _REGISTERED) else STUBS)
    elif any(name.startswith(b"_vcomp_") for name in exports.names):
        marks.append(VCOMP)
    elif any(name.startswith(b"GOMP_") for name in exports.names):
        marks.append(GOMP)
    if tables.delay_imports and _contains(data, _HOOK):
        marks.append(SIBLING_HOOK)
    return tuple(marks)


def _contains(data: Buffer, needle: bytes) -> bool:
    """Whether ``needle`` occurs in a non-code section; False when the section table cannot
    be read (a damaged table then marks an API exporter ``stubs``, which never aborts)."""
    try:
        sections = section_table(data)
    except SectionTableError:
        return False
    size = len(data)
    for section in sections:
        if section.executable or not section.raw_size:
            continue
        start = min(section.raw_pointer, size)
        stop = min(section.raw_pointer + section.raw_size, size)
        if data.find(needle, start, stop) >= 0:
            return True
    return False
