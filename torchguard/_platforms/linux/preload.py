"""torch's own Linux load sequence, read from the installed ``torch/__init__.py`` by ``ast``.

``_load_global_deps`` loads ``lib/libtorch_global_deps.so`` with ``RTLD_GLOBAL``; when that
works and a ``libcudart.so`` is mapped, it preloads CUDA libraries by full path from the first
``sys.path`` entry holding them, silently stopping at the first failure (2.6-2.9: nvrtc,
nvrtc-builtins, nvjitlink; 2.10 on: the whole list; 2.14 on, ``required=False``: a library
in no entry is skipped, only a failing load stops it); when it fails naming one of them, it
preloads the whole list strictly (a missing one raises ``ValueError``) and retries. Reading
the literal lists from the release itself keeps an unknown release right; the table below
only stands in for a file that cannot be parsed.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

Lib = tuple[str, str, bool]
"""(folder under nvidia/, glob, required)."""

_FULL: tuple[Lib, ...] = (
    ("cublas", "libcublasLt.so.*[0-9]", True),
    ("cublas", "libcublas.so.*[0-9]", True),
    ("cudnn", "libcudnn.so.*[0-9]", True),
    ("cuda_nvrtc", "libnvrtc.so.*[0-9]", True),
    ("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]", True),
    ("cuda_runtime", "libcudart.so.*[0-9]", True),
    ("cuda_cupti", "libcupti.so.*[0-9]", True),
    ("cufft", "libcufft.so.*[0-9]", True),
    ("curand", "libcurand.so.*[0-9]", True),
    ("nvjitlink", "libnvJitLink.so.*[0-9]", True),
    ("cusparse", "libcusparse.so.*[0-9]", True),
    ("cusparselt", "libcusparseLt.so.*[0-9]", True),
    ("cusolver", "libcusolver.so.*[0-9]", True),
    ("nccl", "libnccl.so.*[0-9]", True),
    ("nvshmem", "libnvshmem_host.so.*[0-9]", True),
    ("cufile", "libcufile.so.*[0-9]", True),
    ("nvtx", "libnvToolsExt.so.*[0-9]", False),
)
_LINK_FIX: tuple[Lib, ...] = (
    ("cuda_nvrtc", "libnvrtc.so.*[0-9]", True),
    ("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]", True),
    ("nvjitlink", "libnvJitLink.so.*[0-9]", True),
)


@dataclass(frozen=True)
class PreloadPlan:
    """What ``torch/__init__.py`` loads before ``torch._C``, and how."""

    libs: tuple[Lib, ...]
    """The list preloaded strictly when the global-deps load fails."""
    on_success: tuple[Lib, ...]
    """Preloaded (silently, stopping at the first failure) after it succeeds."""
    cuda_major: str | None
    source: str
    """``ast`` (read from the release) or ``table`` (by version)."""


def _version_tuple(version: str) -> tuple[int, int]:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def table_plan(version: str, cuda: str | None) -> PreloadPlan:
    """The per-release sequence (shared/linux-loader.md §2.1) for an unparsable file."""
    major = cuda.split(".")[0] if cuda else None
    release = _version_tuple(version)
    if release >= (2, 10):
        success = _FULL
    elif release >= (2, 6):
        success = _LINK_FIX
    else:
        success = ()
    return PreloadPlan(_FULL, success, major, "table")


def _is_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _pairs(node: ast.AST) -> list[tuple[str, str]]:
    """(folder, glob) pairs of a dict literal or a list of 2-tuples of strings."""
    found: list[tuple[str, str]] = []
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            if _is_text(key) and _is_text(value):
                found.append((key.value, value.value))  # type: ignore[attr-defined,union-attr]
    elif isinstance(node, (ast.List, ast.Tuple)):
        for element in node.elts:
            if isinstance(element, ast.Tuple) and len(element.elts) == 2:
                a, b = element.elts
                if _is_text(a) and _is_text(b):
                    found.append((a.value, b.value))  # type: ignore[attr-defined]
    return found


def _literal_call(node: ast.Call) -> Lib | None:
    name = node.func.id if isinstance(node.func, ast.Name) else ""
    args = node.args
    if "preload" not in name or len(args) < 2:
        return None
    a, b = args[0], args[1]
    if not (isinstance(a, ast.Constant) and isinstance(b, ast.Constant)):
        return None
    if not (isinstance(a.value, str) and isinstance(b.value, str)):
        return None
    required = _required(node)
    if len(args) > 2 and isinstance(args[2], ast.Constant):
        required = bool(args[2].value)
    return (a.value, b.value, required is not False)


def _required(node: ast.Call) -> bool | None:
    """A literal ``required=`` keyword (None: not given)."""
    for keyword in node.keywords:
        if keyword.arg == "required" and isinstance(keyword.value, ast.Constant):
            return bool(keyword.value.value)
    return None


def parse_plan(source: str, version: str, cuda: str | None) -> PreloadPlan:
    """The plan of one ``torch/__init__.py`` text; the table when its shape is unknown."""
    fallback = table_plan(version, cuda)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return fallback
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    libs = _cuda_libs(tree)
    deps = functions.get("_preload_cuda_deps")
    if deps is not None:  # 2.10 on: optional extras called after the loop
        _add_new(libs, _literal_calls(ast.walk(deps)))
    loader = functions.get("_load_global_deps")
    if not libs or loader is None:
        return fallback
    _add_new(libs, _handler_calls(loader))
    major = cuda.split(".")[0] if cuda else None
    return PreloadPlan(tuple(libs), tuple(_on_success(loader, libs)), major, "ast")


def _cuda_libs(tree: ast.AST) -> list[Lib]:
    """The first ``cuda_libs = {...}`` (or list of pairs) assigned anywhere: all required."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "cuda_libs" for t in targets):
            libs = [(f, g, True) for f, g in _pairs(node.value)]
            if libs:
                return libs
    return []


def _literal_calls(nodes: Iterable[ast.AST]) -> Iterator[Lib]:
    """The preload calls with literal arguments among ``nodes``."""
    for node in nodes:
        if isinstance(node, ast.Call):
            literal = _literal_call(node)
            if literal is not None:
                yield literal


def _handler_calls(loader: ast.FunctionDef) -> Iterator[Lib]:
    """Up to 2.9: the optional nvtx call sits in ``_load_global_deps``' except handler."""
    for node in ast.walk(loader):
        if isinstance(node, ast.ExceptHandler):
            yield from _literal_calls(ast.walk(node))


def _add_new(libs: list[Lib], extra: Iterable[Lib]) -> None:
    for lib in extra:
        if lib not in libs:
            libs.append(lib)


def _on_success(loader: ast.FunctionDef, libs: list[Lib]) -> list[Lib]:
    """What the first ``try`` that loads with ``CDLL`` preloads after it: literal calls, and
    the whole list where it calls ``_preload_cuda_deps``."""
    for node in ast.walk(loader):
        if not isinstance(node, ast.Try):
            continue
        calls = [n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Call)]
        if any(_is_cdll(call) for call in calls):
            return [lib for call in calls for lib in _preloaded_by(call, libs)]
    return []


def _preloaded_by(call: ast.Call, libs: list[Lib]) -> list[Lib]:
    literal = _literal_call(call)
    if literal is not None:
        return [literal]
    if isinstance(call.func, ast.Name) and call.func.id == "_preload_cuda_deps":
        best_effort = _required(call) is False  # 2.14: a missing wheel is skipped
        return [(f, g, False) if best_effort else (f, g, r) for f, g, r in libs]
    return []


def _is_cdll(call: ast.Call) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr == "CDLL"


def read_plan(torch_dir: str, version: str, cuda: str | None) -> PreloadPlan:
    try:
        with open(os.path.join(torch_dir, "__init__.py"), encoding="utf-8") as handle:
            source = handle.read()
    except (OSError, UnicodeDecodeError):
        return table_plan(version, cuda)
    return parse_plan(source, version, cuda)
