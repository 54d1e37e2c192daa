"""How a binary constructs the ``std::mutex`` and ``std::condition_variable`` it uses.

Microsoft's STL 14.40 (Visual Studio 2022 17.10) made both constructors ``constexpr``: the
compiler lays the object out, and no call to ``msvcp140.dll`` constructs it. An
``msvcp140.dll`` older than 14.40 expects every object it locks or waits on to have been
constructed by its own ``_Mtx_init_in_situ`` / ``_Cnd_init_in_situ`` and fails on one that
was not (c10.dll's initialiser: WinError 1114). Code built with
``_DISABLE_CONSTEXPR_MUTEX_CONSTRUCTOR``, or with an older STL, calls those constructors. The
import table says which:

- ``constant``: it locks (or waits on) objects but imports no constructor of that family, so
  every one it uses is laid out by the compiler (torch 2.9.0 to 2.14.1's ``c10.dll``:
  ``_Mtx_lock`` without ``_Mtx_init_in_situ``);
- ``runtime``: it imports the constructors (torch 2.15.0's ``c10.dll`` imports
  ``_Mtx_init_in_situ`` and ``_Cnd_init_in_situ``); whether every object goes through them is
  not in the import table (one source file compiled otherwise would not);
- ``none``: it neither locks nor waits through ``msvcp140.dll``;
- ``unknown``: it imports from ``msvcp140.dll`` by ordinal, so the names cannot be told.
"""

from __future__ import annotations

from torchguard._binary.pe.symbols import SymbolTables

CONSTANT = "constant"
RUNTIME = "runtime"
NONE = "none"
UNKNOWN = "unknown"

RUNTIME_DLL = "msvcp140.dll"

#: Per family: the calls that use an object, and the calls that construct one.
_FAMILIES: tuple[tuple[frozenset[bytes], frozenset[bytes]], ...] = (
    (
        frozenset({b"_Mtx_lock", b"_Mtx_trylock", b"_Mtx_timedlock", b"_Mtx_unlock"}),
        frozenset({b"_Mtx_init_in_situ", b"_Mtx_init"}),
    ),
    (
        frozenset({b"_Cnd_wait", b"_Cnd_timedwait", b"_Cnd_signal", b"_Cnd_broadcast"}),
        frozenset({b"_Cnd_init_in_situ", b"_Cnd_init"}),
    ),
)

#: The names a finding quotes as the evidence.
LOCK, CONSTRUCT = "_Mtx_lock", "_Mtx_init_in_situ"


def mutex_construction(tables: SymbolTables) -> str:
    """:data:`CONSTANT`, :data:`RUNTIME`, :data:`NONE` or :data:`UNKNOWN` (module docstring)."""
    imported = tables.imports.get(RUNTIME_DLL, ())
    if any(isinstance(symbol, int) for symbol in imported):
        return UNKNOWN
    names = {symbol for symbol in imported if isinstance(symbol, bytes)}
    used = [(uses & names, constructors & names) for uses, constructors in _FAMILIES]
    if any(uses and not constructed for uses, constructed in used):
        return CONSTANT
    if any(uses for uses, _ in used):
        return RUNTIME
    return NONE
