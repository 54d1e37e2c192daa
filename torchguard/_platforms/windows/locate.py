"""Find torch and its companions without importing torch.

The version comes from ``torch/version.py`` (read as text with ``ast``; the dist-info only when
it has none), the variant from the local version tag (``+cpu``, ``+cu121``), the CUDA version
from ``torch/version.py``, the Python tag from the ``_C`` extension's file name.
"""

from __future__ import annotations

import ast
import ntpath
import re
from dataclasses import dataclass

from torchguard._platforms.windows.dists import InstalledDist, canonical_name, dists_named
from torchguard._platforms.windows.tree import WinTree, join, same_path

_PYD = re.compile(r"^_C\.(?P<tag>cp\d+t?)-(?P<plat>[a-z0-9_]+)\.pyd$", re.IGNORECASE)

#: Distributions whose DLL folders torch may need; torch registers only some of them itself.
COMPANION_PATTERNS = (
    re.compile(r"^mkl(-.*)?$"),
    re.compile(r"^intel-.*$"),
    re.compile(r"^tbb\d*$"),
    re.compile(r"^nvidia-.*$"),
    re.compile(r"^cuda-.*$"),
    re.compile(r"^dpcpp-cpp-rt$"),
    re.compile(r"^onemkl-.*$"),
    re.compile(r"^umf$"),
    re.compile(r"^tcmlib$"),
    re.compile(r"^msvc-runtime$"),
)

#: The patterns as one expression: every analysis matches every installed distribution.
_COMPANION = re.compile("|".join(f"(?:{p.pattern})" for p in COMPANION_PATTERNS))

#: Torch's own siblings, reported beside the DLL companions (binary-paired with torch).
SIBLINGS = frozenset({"torchvision", "torchaudio", "torchtext", "torchdata", "triton-windows"})


@dataclass(frozen=True)
class TorchInstall:
    """An installed torch, as far as the loader cares."""

    version: str
    package_dir: str
    site_dir: str
    origin: str
    cuda: str | None
    extensions: tuple[str, ...]
    dist: InstalledDist | None

    @property
    def lib_dir(self) -> str:
        return join(self.package_dir, "lib")

    @property
    def base_version(self) -> str:
        return split_local(self.version)[0]

    @property
    def variant(self) -> str | None:
        """The local version tag: ``cpu``, ``cu121``, ``rocm6.2``; None for a plain PyPI build."""
        return split_local(self.version)[1]

    def installer(self) -> str | None:
        return self.dist.installer() if self.dist else None


def locate_torch(tree: WinTree, package_dir: str, dists: list[InstalledDist]) -> TorchInstall:
    """Describe the torch package at ``package_dir`` (a folder holding ``__init__.py``)."""
    site_dir = ntpath.dirname(ntpath.normpath(package_dir))
    dist = next((d for d in dists if d.name == "torch" and _same(d.site_dir, site_dir)), None)
    fields = _version_py(tree.read_text(join(package_dir, "version.py")) or "")
    installed = fields.get("__version__")
    if isinstance(installed, str) and installed.strip():
        # torch/version.py is what the installed files are; a leftover second
        # torch-*.dist-info (an interrupted upgrade) must not decide the version.
        version = installed.strip()
        dist = _matching_dist(tree, site_dir, version) or dist
    else:
        version = dist.version if dist else "unknown"
    extensions = [
        join(package_dir, name)
        for _, (name, _entry) in sorted(tree.listdir(package_dir).items())
        if extension_tag(name)
    ]
    cuda = fields.get("cuda")
    return TorchInstall(
        version=version,
        package_dir=package_dir,
        site_dir=site_dir,
        origin=tree.origin(join(package_dir, "__init__.py")).rsplit("__init__.py", 1)[0]
        or package_dir,
        cuda=cuda if isinstance(cuda, str) else None,
        extensions=tuple(extensions),
        dist=dist,
    )


def _matching_dist(tree: WinTree, site_dir: str, version: str) -> InstalledDist | None:
    """The torch dist-info of ``version`` in ``site_dir`` (exactly, else by release), or None."""
    candidates = dists_named(tree, site_dir, "torch")
    if len(candidates) < 2:
        return None  # nothing to choose between: keep what find_dists found
    wanted = version.lower()
    for matches in (
        lambda d: d.version.lower() == wanted,
        lambda d: split_local(d.version)[0] == split_local(wanted)[0],
    ):
        chosen = [d for d in candidates if matches(d)]
        if chosen:
            return chosen[0]
    return None


def split_local(version: str) -> tuple[str, str | None]:
    """``("2.4.1", "cu121")`` for ``2.4.1+cu121``; ``("2.4.1", None)`` for a plain release."""
    base, _, local = version.partition("+")
    return base, local or None


def extension_tag(name: str) -> str | None:
    """The CPython tag of a ``_C`` extension file name: ``cp311`` for ``_C.cp311-win_amd64.pyd``."""
    match = _PYD.match(name)
    return match["tag"].lower() if match else None


def extension_platform(name: str) -> str | None:
    """The platform tag of a ``_C`` extension file name: ``win_amd64`` for the one above."""
    match = _PYD.match(name)
    return match["plat"].lower() if match else None


def tag_version(tag: str) -> tuple[int, int] | None:
    """``(3, 11)`` for ``cp311`` (and ``cp313t``); None for anything else."""
    match = re.match(r"^cp(\d)(\d+)t?$", tag.lower())
    return (int(match[1]), int(match[2])) if match else None


def find_torch_package(tree: WinTree, site_dirs: list[str]) -> str | None:
    """The first ``torch`` package on the search path, as Python's path finder would pick."""
    for site_dir in site_dirs:
        candidate = join(site_dir, "torch")
        if tree.is_file(join(candidate, "__init__.py")):
            return candidate
    return None


def companions(dists: list[InstalledDist]) -> list[InstalledDist]:
    """Installed distributions that may hold DLLs torch needs."""
    return [d for d in dists if _COMPANION.match(d.name)]


def related(dists: list[InstalledDist]) -> list[InstalledDist]:
    """torch's siblings and DLL companions, sorted by name: what a bug report should list."""
    chosen = {d.name: d for d in companions(dists)}
    chosen.update((d.name, d) for d in dists if d.name in SIBLINGS)
    return [chosen[name] for name in sorted(chosen)]


def _same(a: str, b: str) -> bool:
    return same_path(a, b)


def _version_py(text: str) -> dict[str, object]:
    """Simple ``name = constant`` assignments of torch/version.py, without executing it."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    values: dict[str, object] = {}
    for node in module.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    return values


__all__ = ["TorchInstall", "canonical_name", "companions", "find_torch_package", "locate_torch"]
