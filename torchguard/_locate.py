"""Find torch and its companions without importing torch.

The version comes from the dist-info (or ``torch/version.py``, read as text with ``ast``);
the variant from the local version tag (``+cpu``, ``+cu121``); the CUDA version from
``torch/version.py``; the Python tag from the ``_C`` extension's file name.
"""

from __future__ import annotations

import ast
import ntpath
import re
from dataclasses import dataclass

from torchguard._dists import InstalledDist, canonical_name
from torchguard._fs import WinTree, join

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
    python_tag: str | None
    extensions: tuple[str, ...]
    dist: InstalledDist | None

    @property
    def lib_dir(self) -> str:
        return join(self.package_dir, "lib")

    @property
    def base_version(self) -> str:
        return self.version.split("+", 1)[0]

    @property
    def variant(self) -> str | None:
        """The local version tag: ``cpu``, ``cu121``, ``rocm6.2``; None for a plain PyPI build."""
        return self.version.split("+", 1)[1] if "+" in self.version else None

    @property
    def python_version(self) -> tuple[int, int] | None:
        if not self.python_tag:
            return None
        digits = self.python_tag[2:].rstrip("t")
        return (int(digits[0]), int(digits[1:])) if len(digits) >= 2 else None

    def installer(self) -> str | None:
        return self.dist.installer() if self.dist else None


def locate_torch(tree: WinTree, package_dir: str, dists: list[InstalledDist]) -> TorchInstall:
    """Describe the torch package at ``package_dir`` (a folder holding ``__init__.py``)."""
    site_dir = ntpath.dirname(ntpath.normpath(package_dir))
    dist = next((d for d in dists if d.name == "torch" and _same(d.site_dir, site_dir)), None)
    fields = _version_py(tree.read_text(join(package_dir, "version.py")) or "")
    version = dist.version if dist else str(fields.get("__version__") or "unknown")
    if dist and "+" not in version and "+" in str(fields.get("__version__", "")):
        version = str(fields["__version__"])
    extensions: list[str] = []
    tag: str | None = None
    for _, (name, _entry) in sorted(tree.listdir(package_dir).items()):
        match = _PYD.match(name)
        if match:
            extensions.append(join(package_dir, name))
            tag = tag or match["tag"].lower()
    cuda = fields.get("cuda")
    return TorchInstall(
        version=version,
        package_dir=package_dir,
        site_dir=site_dir,
        origin=tree.origin(join(package_dir, "__init__.py")).rsplit("__init__.py", 1)[0]
        or package_dir,
        cuda=cuda if isinstance(cuda, str) else None,
        python_tag=tag,
        extensions=tuple(extensions),
        dist=dist,
    )


def find_torch_package(tree: WinTree, site_dirs: list[str]) -> str | None:
    """The first ``torch`` package on the search path, as Python's path finder would pick."""
    for site_dir in site_dirs:
        candidate = join(site_dir, "torch")
        if tree.is_file(join(candidate, "__init__.py")):
            return candidate
    return None


def companions(dists: list[InstalledDist]) -> list[InstalledDist]:
    """Installed distributions that may hold DLLs torch needs."""
    return [d for d in dists if any(p.match(d.name) for p in COMPANION_PATTERNS)]


def related(dists: list[InstalledDist]) -> list[InstalledDist]:
    """torch's siblings and DLL companions, sorted by name: what a bug report should list."""
    chosen = {d.name: d for d in companions(dists)}
    chosen.update((d.name, d) for d in dists if d.name in SIBLINGS)
    return [chosen[name] for name in sorted(chosen)]


def _same(a: str, b: str) -> bool:
    return ntpath.normcase(ntpath.normpath(a)) == ntpath.normcase(ntpath.normpath(b))


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
