"""What the running interpreter would import, found without importing it (any platform)."""

from __future__ import annotations

import os


def torch_package_dir() -> str | None:
    """Where ``import torch`` would come from, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(next(iter(spec.submodule_search_locations)))
