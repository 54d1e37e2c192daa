"""Everything a rule may look at, computed once per analysis."""

from __future__ import annotations

import base64
import ntpath
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from torchguard._binary.cache import FactsCache
from torchguard._binary.pe.image import PEFacts
from torchguard._platforms.windows.conda import conda_owners
from torchguard._platforms.windows.dists import InstalledDist, moved_path
from torchguard._platforms.windows.ecosystem import PackageSimulation
from torchguard._platforms.windows.locate import TorchInstall
from torchguard._platforms.windows.neighbours import NeighbourReplay
from torchguard._platforms.windows.openmp import OpenMPState
from torchguard._platforms.windows.simulate import ImportSimulation
from torchguard._platforms.windows.site_answers import SiteAnswers
from torchguard._platforms.windows.system import System
from torchguard._platforms.windows.tree import PathKey, is_within, join, path_key
from torchguard._platforms.windows.vcruntime import StaleCopy
from torchguard._report.report import DllDirectory, PreloadRecord
from torchguard._rules.hints import HintContext


@dataclass
class CheckContext:
    system: System
    torch: TorchInstall
    plan: list[DllDirectory]
    guarded: ImportSimulation
    """``import torch`` after ``ensure()`` registered every planned directory."""
    unguarded: ImportSimulation
    """``import torch`` with only the directories torch registers itself."""
    hints: HintContext
    facts: Callable[[str], PEFacts]
    """PE facts of any path of the tree (cached); raises PEReadError."""
    dists: list[InstalledDist] = field(default_factory=list)
    packages: list[PackageSimulation] = field(default_factory=list)
    """torch's siblings and extensions, loaded after the guarded ``import torch``."""
    cache: FactsCache | None = None
    """Facts kept across runs (``get_derived``/``put_derived`` for a rule's own), or None."""
    openmp: OpenMPState = field(default_factory=OpenMPState)
    """Every OpenMP runtime and user, and the conflicts among them."""
    stale_runtimes: list[StaleCopy] = field(default_factory=list)
    """Packages' own msvcp140.dll older than torch's toolset, which they load when imported."""
    preloads: tuple[PreloadRecord, ...] = ()
    """What ``ensure()`` loads before torch (``Report.preloads``)."""
    neighbours: tuple[NeighbourReplay, ...] = ()
    """torch's native neighbours replayed after torch and without it (empty unless torch
    imports)."""
    site_answers: SiteAnswers | None = None
    """Site folders' answers kept whole (a rule asking every distribution asks these first)."""
    _replaced: dict[PathKey, bool] = field(default_factory=dict, repr=False)

    @cached_property
    def owners(self) -> dict[PathKey, str]:
        """Lower-case path of each file a distribution's RECORD lists -> ``name==version``."""
        owners: dict[PathKey, str] = {}
        for dist in [
            *(d for d in self.dists if d.name != "torch"),
            *([self.torch.dist] if self.torch.dist else []),
        ]:
            label = f"{dist.name}=={dist.version}"
            for relative in dist.record_paths():
                owners[path_key(join(dist.site_dir, relative))] = label
                moved = moved_path(dist.site_dir, relative)
                if moved is not None:
                    owners.setdefault(path_key(moved), label)
        return owners

    @cached_property
    def torch_dll_names(self) -> frozenset[str]:
        """Lower-case names of the DLLs torch's RECORD (or its lib folder) holds."""
        names = {
            ntpath.basename(path).lower()
            for path in (self.torch.dist.file_paths() if self.torch.dist else [])
            if path.lower().endswith(".dll")
        }
        names.update(self.system.tree.listdir(self.torch.lib_dir))
        return frozenset(names)

    def owner_of(self, path: str | None) -> str | None:
        return self.owners.get(path_key(path)) if path else None

    def file_owner(self, path: str) -> str | None:
        """:meth:`owner_of` for one file, for findings that recur on every run: only the
        RECORDs that mention its name are parsed (the whole map costs ~0.3 s with torch's)."""
        if "owners" in self.__dict__:
            return self.owner_of(path)
        key, name = path_key(path), ntpath.basename(path).lower()
        torch_dist = self.torch.dist
        if torch_dist is not None and is_within(path, self.torch.package_dir):
            return f"torch=={torch_dist.version}"
        for dist in (d for d in self.dists if d.name != "torch"):
            text = dist.distribution.read_text("RECORD")
            if not text or name not in text.lower():
                continue
            for relative in dist.record_paths():
                if ntpath.basename(relative.replace("/", "\\")).lower() != name:
                    continue
                moved = moved_path(dist.site_dir, relative)
                if key == path_key(join(dist.site_dir, relative)) or (
                    moved is not None and key == path_key(moved)
                ):
                    return f"{dist.name}=={dist.version}"
        return None

    @cached_property
    def conda_owners(self) -> dict[PathKey, list[str]]:
        """Each file a conda package of this environment lists -> every ``name==version``."""
        interpreter = self.system.interpreter
        if not interpreter.is_conda:
            return {}
        return conda_owners(self.system.tree, interpreter.prefix)

    def conda_owner_of(self, path: str | None) -> str | None:
        found = self.conda_owners_of(path)
        return " and ".join(found) if found else None

    def conda_owners_of(self, path: str | None) -> list[str]:
        """The conda packages that list ``path`` (only read for a finding about such a file)."""
        return list(self.conda_owners.get(path_key(path), [])) if path else []

    @cached_property
    def recorded_hashes(self) -> dict[PathKey, str]:
        """Lower-case path of each file a RECORD lists -> its ``sha256=...`` entry."""
        hashes: dict[PathKey, str] = {}
        for dist in [*self.dists, *([self.torch.dist] if self.torch.dist else [])]:
            for relative, digest in dist.record_rows():
                if digest.startswith("sha256="):
                    hashes[path_key(join(dist.site_dir, relative))] = digest
        return hashes

    def replaced_since_install(self, path: str | None) -> bool:
        """Whether a file on disk differs from what its package's RECORD says was installed.

        Hashes the file (once), so only called on the rare path of a finding about it.
        """
        key = path_key(path) if path else PathKey("")
        if key not in self._replaced:
            self._replaced[key] = self._differs_from_record(path)
        return self._replaced[key]

    def _differs_from_record(self, path: str | None) -> bool:
        recorded = self.recorded_hashes.get(path_key(path)) if path else None
        if recorded is None or path is None:
            return False
        digest = self.system.tree.host_sha256(path)
        if digest is None:
            return False
        encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        return recorded != f"sha256={encoded}"
