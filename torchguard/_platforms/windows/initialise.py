"""The one initialisation failure the replay proves: compiler-laid-out mutexes on an old runtime.

Microsoft's STL 14.40 (Visual Studio 2022 17.10) made ``std::mutex``'s constructor
``constexpr``; a binary whose mutexes are laid out that way and that binds to an
``msvcp140.dll`` older than 14.40 fails to initialise (WinError 1114, "A dynamic link library
(DLL) initialization routine failed") or crashes in ``mtx_do_lock`` (microsoft/STL#4730;
pytorch#169429 for torch 2.9.0). The proof is in the binary's import table
(:mod:`torchguard._binary.pe.mutex`): it locks mutexes through ``msvcp140.dll`` and imports
none of its constructors (torch 2.9.0 to 2.14.1). torch 2.15.0, built with the same 14.42
toolset, imports ``_Mtx_init_in_situ`` and works on 14.34 (Wine with Microsoft's DLLs): the
toolset alone proves nothing. ``std::mutex`` lives in ``msvcp140.dll``: an older
``vcruntime140.dll`` is no such proof.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.image import PEFacts
from torchguard._binary.pe.mutex import CONSTANT, NONE

MUTEX_CHANGE = (14, 40)
"""The first runtime (and toolset) with the ``constexpr`` ``std::mutex``."""
MSVCP140 = "msvcp140.dll"


def runtime_version(facts: Callable[[str], PEFacts], path: str | None) -> tuple[int, ...] | None:
    """The FileVersion of a VC++ runtime copy, or None when it cannot be judged."""
    if not path:
        return None
    try:
        version = facts(path).file_version
    except ImageUnavailable:
        return None  # assumed to exist (offline) or unreadable: nothing to judge
    return version if version is not None and version[0] == 14 else None


def needs_new_mutex(facts: PEFacts) -> bool:
    """Whether a binary is proven to need a 14.40+ ``msvcp140.dll``: built with the 14.40+
    toolset, and every mutex it locks through ``msvcp140.dll`` laid out by the compiler."""
    return _new_toolset(facts) and facts.mutex == CONSTANT and _imports_msvcp140(facts)


def may_need_new_mutex(facts: PEFacts) -> bool:
    """Whether the import table cannot decide: built with the 14.40+ toolset, it locks mutexes
    through ``msvcp140.dll`` and imports their constructors too (or its names are unread)."""
    undecided = facts.mutex not in (CONSTANT, NONE)
    return _new_toolset(facts) and undecided and _imports_msvcp140(facts)


def _new_toolset(facts: PEFacts) -> bool:
    linker = facts.linker_version
    return linker[0] == 14 and linker >= MUTEX_CHANGE


def _imports_msvcp140(facts: PEFacts) -> bool:
    return any(name.lower() == MSVCP140 for name in facts.imports)


@dataclass(frozen=True)
class InitFailure:
    """A binary whose initialiser fails on the runtime copy it bound to."""

    binary: str
    """The path of the 14.40+ binary that fails to initialise."""
    chain: tuple[str, ...]
    """DLL names from the load's root to that binary."""
    runtime_version: str
    """The older ``msvcp140.dll``'s version, e.g. ``14.34.31938``."""


def init_failure(
    facts: Callable[[str], PEFacts],
    mapped: Sequence[tuple[str, tuple[str, ...]]],
    runtime_path: str | None,
) -> InitFailure | None:
    """The 1114 failure of a load whose newly mapped binaries (``mapped``: path, chain from
    the root) include 14.40+ code bound to an ``msvcp140.dll`` (at ``runtime_path``) older
    than 14.40, else None."""
    if runtime_path is None:
        return None
    version = runtime_version(facts, runtime_path)
    if version is None or tuple(version[:2]) >= MUTEX_CHANGE:
        return None
    for path, chain in mapped:  # only binaries new to the process run their initialisers
        try:
            binary = facts(path)
        except ImageUnavailable:
            continue
        if needs_new_mutex(binary):
            return InitFailure(path, chain, ".".join(map(str, version[:3])))
    return None
