"""A training script protected by torchguard: call ensure() right before `import torch`."""

from __future__ import annotations

import sys

import torchguard

try:
    report = torchguard.ensure()
except torchguard.TorchDllError as exc:
    # str(exc) is the whole diagnosis: the missing DLL, who needs it, and how to fix it.
    print(exc, file=sys.stderr)
    sys.exit(1)

import torch  # deliberately after ensure()

print(f"torch {torch.__version__} imported; torchguard checked {len(report.modules)} DLLs")
