"""The one initialisation failure the replay proves: 14.40+ code on an older msvcp140.dll.

Microsoft's STL 14.40 (Visual Studio 2022 17.10) made ``std::mutex``'s constructor
``constexpr``; a binary built with it that binds to an ``msvcp140.dll`` older than 14.40 fails
to initialise (WinError 1114, "A dynamic link library (DLL) initialization routine failed") or
crashes in ``mtx_do_lock`` (microsoft/STL#4730; pytorch#169429 for torch 2.9.0). ``std::mutex``
lives in ``msvcp140.dll``: an older ``vcruntime140.dll`` is no such proof. torch's DLLs carry
no version resource; their linker version stands for the toolset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.image import PEFacts

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
    """Whether a binary is built with the 14.40+ toolset and imports ``msvcp140.dll``."""
    linker = facts.linker_version
    return linker[0] == 14 and linker >= MUTEX_CHANGE and _imports_msvcp140(facts)


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
