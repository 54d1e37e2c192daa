"""Everything a rule may look at, computed once per analysis."""

from __future__ import annotations

import base64
import hashlib
import ntpath
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from torchguard._cache import FactsCache
from torchguard._dists import InstalledDist
from torchguard._ecosystem import PackageSimulation
from torchguard._fs import HostFile, join
from torchguard._hints import HintContext
from torchguard._locate import TorchInstall
from torchguard._pe import PEFacts
from torchguard._report import DllDirectory
from torchguard._simulate import ImportSimulation
from torchguard._system import System


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
    _replaced: dict[str, bool] = field(default_factory=dict, repr=False)

    @cached_property
    def owners(self) -> dict[str, str]:
        """Lower-case path of each file a distribution's RECORD lists -> ``name==version``."""
        owners: dict[str, str] = {}
        for dist in [
            *(d for d in self.dists if d.name != "torch"),
            *([self.torch.dist] if self.torch.dist else []),
        ]:
            for path in dist.file_paths():
                owners[ntpath.normcase(path)] = f"{dist.name}=={dist.version}"
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
        return self.owners.get(ntpath.normcase(path)) if path else None

    @cached_property
    def recorded_hashes(self) -> dict[str, str]:
        """Lower-case path of each file a RECORD lists -> its ``sha256=...`` entry."""
        hashes: dict[str, str] = {}
        for dist in [*self.dists, *([self.torch.dist] if self.torch.dist else [])]:
            for relative, digest in dist.record_rows():
                if digest.startswith("sha256="):
                    hashes[ntpath.normcase(join(dist.site_dir, relative))] = digest
        return hashes

    def replaced_since_install(self, path: str | None) -> bool:
        """Whether a file on disk differs from what its package's RECORD says was installed.

        Hashes the file (once), so only called on the rare path of a finding about it.
        """
        key = ntpath.normcase(path) if path else ""
        if key not in self._replaced:
            self._replaced[key] = self._differs_from_record(path)
        return self._replaced[key]

    def _differs_from_record(self, path: str | None) -> bool:
        recorded = self.recorded_hashes.get(ntpath.normcase(path)) if path else None
        entry = self.system.tree.entry(path) if path else None
        if recorded is None or not isinstance(entry, HostFile):
            return False
        digest = hashlib.sha256()
        try:
            with open(entry.path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return False
        encoded = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
        return recorded != f"sha256={encoded}"
