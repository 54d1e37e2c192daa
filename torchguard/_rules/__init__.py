"""Checks: small functions from a platform's context to findings, one module per family.

A new failure family (runtime versions, loaded-module conflicts, OpenMP, CUDA driver ...) is
one more module here, its rule marked ``@rule(WINDOWS)`` or ``@rule(LINUX)`` (``registry``),
and its module named in :data:`~torchguard._rules.registry.MODULES`. The rule set loads on
first use, so the Linux analysis does not import the Windows rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchguard._rules import context as _context
    from torchguard._rules import registry as _registry

    CheckContext = _context.CheckContext
    run_rules = _registry.run_rules

__all__ = ["CheckContext", "run_rules"]


def __getattr__(name: str) -> Any:
    if name == "CheckContext":
        from torchguard._rules import context

        return context.CheckContext
    if name == "run_rules":
        from torchguard._rules import registry

        return registry.run_rules
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
