"""Which of a package's modules ``import PKG`` really runs, read from its sources (never run).

A claim that ``import xformers`` fails because ``_C_flashattention.pyd`` does not load must be
a proof: xformers' ``__init__.py`` never imports it; only ``xformers.ops.fmha.flash`` does,
inside ``try ... except ImportError``. An import statement is **unconditional** when it runs
whenever its module runs: at module level, in a class body or a ``with`` block, or in the body
of a ``try`` none of whose handlers catches ``ImportError``. Everything else is **guarded**: in
a function (runs when called), under ``if``, in a loop, in a ``try`` that catches
``ImportError`` (or ``Exception``, or everything), in an ``except`` handler. ``import a.b.c``
runs ``a`` and ``a.b`` first. The modules ``import PKG`` runs are those reached from ``PKG``
through unconditional imports only.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

#: How an import is guarded: not at all (None), or why it may not run.
CAUGHT = "inside try/except ImportError"
IN_FUNCTION = "only inside a function"
CONDITIONAL = "only under a condition"

#: Exception classes whose handler catches the ImportError of a failed extension load.
_CATCH_IMPORT_ERROR = frozenset(
    {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
)


@dataclass(frozen=True)
class Source:
    """One module's source: its text, and whether it is a package's ``__init__``."""

    text: str
    is_package: bool


@dataclass(frozen=True)
class Reach:
    """What ``import PKG`` runs, and where the package imports the rest."""

    runs: frozenset[str]
    """Dotted names of the modules ``import PKG`` runs (extension modules included)."""
    importers: Mapping[str, tuple[tuple[str, str | None], ...]]
    """Module -> each of the package's modules that import it, and how that import is guarded
    (None: unconditional), in name order."""

    def importer_of(self, module: str) -> tuple[str, str | None] | None:
        """The first module that imports ``module``, preferring one ``import PKG`` runs."""
        found = self.importers.get(module, ())
        running = [item for item in found if item[0] in self.runs]
        ordered = running or list(found)
        return ordered[0] if ordered else None


def reach(package: str, sources: Mapping[str, Source]) -> Reach | None:
    """The reach of ``import package`` over ``sources`` (dotted name -> source); None when the
    package's own first module has no readable source (then nothing can be proven)."""
    if package not in sources:
        return None
    edges: dict[str, list[tuple[str, str | None]]] = {}
    importers: dict[str, dict[str, str | None]] = {}
    for name in sorted(sources):
        found = list(_imports(name, sources[name]))
        edges[name] = found
        for target, guard in found:
            by = importers.setdefault(target, {})
            if by.get(name, "") is not None:  # an unconditional import of it wins
                by[name] = guard
    runs: set[str] = set()
    queue = deque([package])
    while queue:
        module = queue.popleft()
        for step in _with_parents(module):
            if step in runs:
                continue
            runs.add(step)
            queue.extend(target for target, guard in edges.get(step, ()) if guard is None)
    return Reach(frozenset(runs), {k: tuple(v.items()) for k, v in importers.items()})


def _with_parents(module: str) -> list[str]:
    """``a``, ``a.b``, ``a.b.c`` for ``a.b.c``: what importing it runs, in order."""
    parts = module.split(".")
    return [".".join(parts[: index + 1]) for index in range(len(parts))]


Imports = Iterator[tuple[str, "str | None"]]


def _imports(name: str, source: Source) -> Imports:
    """Each module an import statement of ``name`` names, and how that import is guarded."""
    try:
        tree = ast.parse(source.text)
    except (SyntaxError, ValueError, RecursionError):
        return  # an unparsable module imports nothing that can be proven
    package = name if source.is_package else name.rpartition(".")[0]
    yield from _visit(tree.body, None, package)


def _visit(statements: list[ast.stmt], guarded: str | None, package: str) -> Imports:
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from ((module, guarded) for module in _with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base is None:
                continue
            yield from ((module, guarded) for module in _with_parents(base))
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}", guarded
        elif isinstance(node, (ast.ClassDef, ast.With, ast.AsyncWith)):
            yield from _visit(node.body, guarded, package)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            handlers: list[ast.ExceptHandler] = getattr(node, "handlers", [])
            caught = guarded or (CAUGHT if any(map(_catches_import_error, handlers)) else None)
            yield from _visit(getattr(node, "body", []), caught, package)
            yield from _visit(getattr(node, "orelse", []), caught, package)
            for handler in handlers:
                yield from _visit(handler.body, guarded or CONDITIONAL, package)
            yield from _visit(getattr(node, "finalbody", []), guarded, package)
        else:  # functions, if, loops, match ...: their bodies may never run
            why = IN_FUNCTION if isinstance(node, _FUNCTIONS) else CONDITIONAL
            inner = guarded or why
            for field in ("body", "orelse", "finalbody"):
                found = getattr(node, field, None)
                if isinstance(found, list):
                    yield from _visit([s for s in found if isinstance(s, ast.stmt)], inner, package)
            for case in getattr(node, "cases", []) or []:
                yield from _visit(case.body, inner, package)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    """The absolute module a ``from ... import`` names, or None when it climbs too far."""
    if not node.level:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (node.level - 1)]
    if node.module:
        base.append(node.module)
    return ".".join(base) or None


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    for item in names:
        name = item.attr if isinstance(item, ast.Attribute) else getattr(item, "id", None)
        if name in _CATCH_IMPORT_ERROR:
            return True
    return False


# -- where a failing extension module stands in its package's code ------------------------------

#: ``[RUNS]``: ``import PKG`` imports it; ``[NAMED]``: a module it runs names it beside a load
#: call; ``[IMPORTED, importer, guard]``; ``[UNREACHED]``; ``[UNREAD]``: no source of ``PKG``.
RUNS, NAMED, IMPORTED, UNREACHED, UNREAD = "runs", "named", "imported", "unreached", "unread"
#: Calls that load a binary by path or name from Python.
_LOAD_CALLS = ("load_library(", "cdll(", "windll(", "pydll(", "loadlibrary", "dlopen(")


def module_sources(files: Mapping[str, str]) -> dict[str, Source]:
    """Dotted module name -> source, for site-relative ``.py`` paths (``a/b/__init__.py``)."""
    modules: dict[str, Source] = {}
    for relative, text in files.items():
        parts = relative[: -len(".py")].replace("\\", "/").split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        if parts and all(part.isidentifier() for part in parts):
            modules[".".join(parts)] = Source(text, is_package)
    return modules


def place(found: Reach | None, module: str, sources: Mapping[str, Source]) -> list[str]:
    """Where extension module ``module`` stands (JSON, for caches): see :data:`RUNS`."""
    if found is None:
        return [UNREAD]
    if module in found.runs:
        return [RUNS]
    stem = module.rsplit(".", 1)[-1].lower()
    named = re.compile(r"[\"'/\\]" + re.escape(stem) + r"(?:\.[a-z0-9_.-]+)?[\"']")
    for name in found.runs:
        text = sources[name].text.lower() if name in sources else ""
        if named.search(text) and any(call in text for call in _LOAD_CALLS):
            return [NAMED]  # loaded by a load call that import PKG runs (as modelled)
    importer = found.importer_of(module)
    if importer is None:
        return [UNREACHED]
    return [IMPORTED, importer[0], importer[1] or ""]


def lost_feature(package: str, module: str, where: list[str]) -> str | None:
    """What ``import package`` loses when ``module`` cannot load, or None when it fails."""
    kind = where[0] if where else UNREAD
    if kind in (RUNS, NAMED):
        return None
    if kind == IMPORTED and len(where) >= 3:
        how = where[2] or f"though nothing `import {package}` runs imports {where[1]}"
        return f"{module}, which {where[1]} imports {how}"
    if kind == UNREACHED:
        return f"{module} (nothing `import {package}` runs imports it)"
    return f"{module} (its package's code could not be read)"
