"""Checks: pure functions from a :class:`CheckContext` to findings, one module per family.

A new failure family (runtime versions, loaded-module conflicts, OpenMP, CUDA driver ...) is
one more module here and one more entry in :data:`RULES` (``registry``).
The rule set loads on first use, so the Linux analysis does not import the Windows rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchguard._rules import context as _context
    from torchguard._rules import registry as _registry

    CheckContext = _context.CheckContext
    RULES = _registry.RULES
    run_rules = _registry.run_rules

__all__ = ["RULES", "CheckContext", "run_rules"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from torchguard._rules import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
