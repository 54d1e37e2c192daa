"""torchguard: explain why ``import torch`` fails on Windows, before it does.

Call :func:`ensure` right before ``import torch``. Importing this package is cheap: pefile,
packaging and platformdirs are imported only when an analysis runs.
"""

from __future__ import annotations

from torchguard._api import diagnose, ensure, scan
from torchguard._errors import (
    ArchitectureMismatchError,
    CorruptDllError,
    MissingDllError,
    TorchDllError,
    TorchNotFoundError,
)
from torchguard._findings import Finding, RepairHint
from torchguard._report import Report

__version__ = "0.1.0"

__all__ = [
    "ArchitectureMismatchError",
    "CorruptDllError",
    "Finding",
    "MissingDllError",
    "RepairHint",
    "Report",
    "TorchDllError",
    "TorchNotFoundError",
    "__version__",
    "diagnose",
    "ensure",
    "scan",
]
