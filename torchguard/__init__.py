"""torchguard: explain why ``import torch`` fails on Windows, before it does.

Call :func:`ensure` right before ``import torch``. Importing this package costs almost nothing:
the public names are loaded on first use (PEP 562), so the start-up hook that imports
``torchguard._boot`` in every Python process stays cheap, and pefile, packaging and
platformdirs are imported only when an analysis runs.
"""

from __future__ import annotations

from torchguard._boot import observe_dll_directories as _observe_dll_directories
from torchguard._version import __version__

_observe_dll_directories()  # Windows: the folders registered from now on are known to ensure()

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~10 ms
if TYPE_CHECKING:
    from typing import Any

    from torchguard._facts.internal import InternalError
    from torchguard._frontends.api import diagnose, ensure, scan
    from torchguard._hook import HookHandle, install_hook
    from torchguard._report.errors import (
        ArchitectureMismatchError,
        CorruptDllError,
        MissingDllError,
        MissingSymbolError,
        RuntimeTooOldError,
        TorchDllError,
        TorchNotFoundError,
    )
    from torchguard._report.findings import Finding, RepairHint
    from torchguard._report.report import Report


_EXPORTS = {
    "ensure": "torchguard._frontends.api",
    "diagnose": "torchguard._frontends.api",
    "scan": "torchguard._frontends.api",
    "install_hook": "torchguard._hook",
    "HookHandle": "torchguard._hook",
    "TorchDllError": "torchguard._report.errors",
    "MissingDllError": "torchguard._report.errors",
    "MissingSymbolError": "torchguard._report.errors",
    "CorruptDllError": "torchguard._report.errors",
    "ArchitectureMismatchError": "torchguard._report.errors",
    "TorchNotFoundError": "torchguard._report.errors",
    "RuntimeTooOldError": "torchguard._report.errors",
    "InternalError": "torchguard._facts.internal",
    "Finding": "torchguard._report.findings",
    "RepairHint": "torchguard._report.findings",
    "Report": "torchguard._report.report",
}

__all__ = [
    "ArchitectureMismatchError",
    "CorruptDllError",
    "Finding",
    "HookHandle",
    "InternalError",
    "MissingDllError",
    "MissingSymbolError",
    "RepairHint",
    "Report",
    "RuntimeTooOldError",
    "TorchDllError",
    "TorchNotFoundError",
    "__version__",
    "diagnose",
    "ensure",
    "install_hook",
    "scan",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'torchguard' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
