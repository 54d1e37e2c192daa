"""What a Linux analysis keeps across runs, so a warm ``ensure()`` reads no ELF file.

ELF dynamic facts by file fingerprint (path, size, mtime, inode), binding verdicts by the
fingerprints of the object and of its whole lookup scope (only "everything binds" is kept: a
failure is recomputed, with its symbols), torch's preload plan by ``__init__.py``'s
fingerprint, and what other checks derive from a file or a folder's state. A typed view of
the one facts cache (:mod:`torchguard._binary.cache`: its lock, merge, bounds and per
environment files), each section an entry kind ``linux-<section>``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from torchguard._binary.cache import FactsCache
from torchguard._binary.elf.strings import DlopenFacts
from torchguard._platforms.linux.files import LoadFacts as ElfFacts
from torchguard._platforms.linux.preload import PreloadPlan
from torchguard._platforms.linux.requirements import TorchRequirements


def facts_to_json(facts: ElfFacts) -> dict[str, Any]:
    return {
        "class": facts.elf_class,
        "machine": facts.machine,
        "soname": facts.soname,
        "needed": list(facts.needed),
        "rpath": None if facts.rpath is None else list(facts.rpath),
        "runpath": None if facts.runpath is None else list(facts.runpath),
        "nodeflib": facts.nodeflib,
        "verneed": {f: [[n, w] for n, w in v] for f, v in facts.verneed.items()},
        "verdef": None if facts.verdef is None else sorted(facts.verdef),
    }


def facts_from_json(data: dict[str, Any]) -> ElfFacts:
    return ElfFacts(
        elf_class=int(data["class"]),
        machine=int(data["machine"]),
        soname=data["soname"],
        needed=tuple(data["needed"]),
        rpath=None if data["rpath"] is None else tuple(data["rpath"]),
        runpath=None if data["runpath"] is None else tuple(data["runpath"]),
        nodeflib=bool(data["nodeflib"]),
        verneed={f: tuple((str(n), bool(w)) for n, w in v) for f, v in data["verneed"].items()},
        verdef=None if data["verdef"] is None else frozenset(data["verdef"]),
    )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def _digest(key: str) -> str:
    return hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()


class LinuxCache:
    """Facts, verdicts and plans; ``folder=None`` keeps them for this run only."""

    def __init__(self, folder: Path | None, store: FactsCache | None = None) -> None:
        self.folder = folder
        self.store = store if store is not None else FactsCache(folder)
        self.transient: str | None = None
        """A folder that exists for this run only (a wheels' scratch folder): nothing keyed
        by its path is stored, as no later run would look it up."""

    def use_scope(self, scope: str) -> None:
        """The environment whose entries this run reads (see :class:`FactsCache`)."""
        self.store.use_scope(scope)

    def _get(self, section: str, key: str) -> Any:
        return self.store.found(f"linux-{section}", key)

    def facts(self, fingerprint: str) -> ElfFacts | None:
        found = self._get("facts", fingerprint)
        if not isinstance(found, dict):
            return None
        try:
            return facts_from_json(found)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def store_facts(self, fingerprint: str, facts: ElfFacts) -> None:
        self._put("facts", fingerprint, facts_to_json(facts))

    def bound(self, key: str) -> bool:
        return self._get("bound", _digest(key)) is True

    def remember(self, key: str) -> None:
        self._put("bound", _digest(key), True)

    def plan(self, fingerprint: str) -> PreloadPlan | None:
        found = self._get("plans", fingerprint)
        try:
            libs, success, major, source = found
            return PreloadPlan(
                tuple((str(f), str(g), bool(r)) for f, g, r in libs),
                tuple((str(f), str(g), bool(r)) for f, g, r in success),
                major,
                str(source),
            )
        except (TypeError, ValueError):
            return None

    def store_plan(self, fingerprint: str, plan: PreloadPlan) -> None:
        value = [list(map(list, plan.libs)), list(map(list, plan.on_success))]
        self._put("plans", fingerprint, [*value, plan.cuda_major, plan.source])

    def requirements(self, key: str) -> TorchRequirements | None:
        """torch's Linux pins and the installed distributions, as last read for ``key``."""
        found = self._get("requirements", key)
        try:
            pins, extras, installed = found
            return TorchRequirements(
                {str(k): str(v) for k, v in pins.items()},
                {str(k): tuple(map(str, v)) for k, v in extras.items()},
                frozenset(map(str, installed)),
            )
        except (TypeError, ValueError, AttributeError):
            return None

    def store_requirements(self, key: str, found: TorchRequirements) -> None:
        value = [dict(found.pins), {k: list(v) for k, v in found.extras.items()}]
        self._put("requirements", key, [*value, sorted(found.installed)])

    def extensions(self, key: str) -> list[tuple[str, str]] | None:
        """(package, path) of a site-packages folder's torch extensions, as last listed."""
        found = self._get("extensions", key)
        if not isinstance(found, list):
            return None
        try:
            return [(str(package), str(path)) for package, path in found]
        except (TypeError, ValueError):
            return None

    def store_extensions(self, key: str, found: list[tuple[str, str]]) -> None:
        self._put("extensions", key, [list(item) for item in found])

    def wheel_tags(self, key: str) -> list[tuple[str, str, str]] | None:
        """(name, version, WHEEL text) of a site folder's distributions, as last read."""
        found = self._get("wheel-tags", key)
        if not isinstance(found, list):
            return None
        try:
            return [(str(name), str(version), str(text)) for name, version, text in found]
        except (TypeError, ValueError):
            return None

    def store_wheel_tags(self, key: str, rows: list[tuple[str, str, str]]) -> None:
        self._put("wheel-tags", key, [list(row) for row in rows])

    def lookups(self, key: str) -> dict[str, tuple[str, ...]]:
        """The ``ld.so.cache`` answers remembered for the cache file ``key``."""
        found = self._get("ldcache", key)
        if not isinstance(found, dict):
            return {}
        return {str(k): tuple(map(str, v)) for k, v in found.items() if isinstance(v, list)}

    def store_lookups(self, key: str, memo: dict[str, tuple[str, ...]]) -> None:
        self._put("ldcache", key, {k: list(v) for k, v in sorted(memo.items())})

    def claims(self, key: str) -> dict[str, list[tuple[str, int | None]]] | None:
        """Shared objects claimed twice in a site-packages state: path -> (dist, size)."""
        found = self._get("claims", key)
        if not isinstance(found, dict):
            return None
        try:
            return {
                str(p): [(str(d), None if s is None else int(s)) for d, s in v]
                for p, v in found.items()
            }
        except (TypeError, ValueError):
            return None

    def store_claims(self, key: str, claims: dict[str, list[tuple[str, int | None]]]) -> None:
        self._put("claims", key, {p: [list(c) for c in v] for p, v in claims.items()})

    def fatbin(self, fingerprint: str) -> tuple[frozenset[int], frozenset[int]] | None:
        """(SASS, PTX) architectures of a file's ``.nv_fatbin`` as last read (both empty:
        none); None when not read yet or damaged."""
        found = self._get("fatbin", fingerprint)
        try:
            sass, ptx = found
            return frozenset(int(a) for a in sass), frozenset(int(a) for a in ptx)
        except (TypeError, ValueError):
            return None

    def store_fatbin(self, fingerprint: str, sass: frozenset[int], ptx: frozenset[int]) -> None:
        self._put("fatbin", fingerprint, [sorted(sass), sorted(ptx)])

    def subdir_tops(self, key: str) -> tuple[str, ...] | None:
        """The hwcaps subfolders (``glibc-hwcaps``, ``tls`` ...) a folder had in the state
        ``key`` names (its path, inode and mtime); None when not looked at in that state."""
        found = self._get("subdirs", key)
        if not isinstance(found, list) or not all(isinstance(t, str) for t in found):
            return None
        return tuple(found)

    def store_subdir_tops(self, key: str, tops: tuple[str, ...]) -> None:
        self._put("subdirs", key, list(tops))

    def nvidia_pci(self, boot: str) -> bool | None:
        """Whether an NVIDIA GPU was on the PCI bus in boot ``boot`` (None: not looked)."""
        found = self._get("pci", boot)
        return found if isinstance(found, bool) else None

    def store_nvidia_pci(self, boot: str, present: bool) -> None:
        self._put("pci", boot, present)

    def dlopen_facts(self, key: str) -> DlopenFacts | None:
        """What a file keeps to ``dlopen``/``dlsym`` later (key: fingerprint and family)."""
        found = self._get("dlopen", key)
        if not isinstance(found, dict):
            return None
        stems, lookups, version = found.get("stems"), found.get("lookups"), found.get("version")
        names = found.get("names")
        lists = (stems, lookups, names)
        if not all(isinstance(v, list) and _strings(v) for v in lists):
            return None
        if version is not None and not isinstance(version, str):
            return None
        return DlopenFacts(tuple(stems), tuple(lookups), version, tuple(names))  # type: ignore[arg-type]

    def store_dlopen_facts(self, key: str, facts: DlopenFacts) -> None:
        value = {
            "stems": list(facts.stems),
            "lookups": list(facts.lookups),
            "version": facts.version,
            "names": list(facts.names),
        }
        self._put("dlopen", key, value)

    def late_verdict(self, key: str) -> list[str] | None:
        """A late load's symbol verdict (the names found missing), by the files' states."""
        found = self._get("late", _digest(key))
        return list(found) if isinstance(found, list) and _strings(found) else None

    def store_late_verdict(self, key: str, names: list[str]) -> None:
        self._put("late", _digest(key), list(names))

    def file_version(self, fingerprint: str) -> tuple[int, ...] | None:
        """A Windows DLL's FileVersion by file fingerprint: () when it has none; None when
        not read yet."""
        found = self._get("versions", fingerprint)
        if not isinstance(found, list) or not all(isinstance(n, int) for n in found):
            return None
        return tuple(found)

    def store_file_version(self, fingerprint: str, version: tuple[int, ...]) -> None:
        self._put("versions", fingerprint, list(version))

    def driver_store(self, key: str) -> tuple[tuple[str, ...], ...] | None:
        """The NVIDIA DLLs of a WSL2 host's driver store in one state (None: not listed)."""
        found = self._get("stores", key)
        if not isinstance(found, list) or not all(
            isinstance(f, list) and all(isinstance(p, str) for p in f) for f in found
        ):
            return None
        return tuple(tuple(f) for f in found)

    def store_driver_store(self, key: str, folders: tuple[tuple[str, ...], ...]) -> None:
        self._put("stores", key, [list(f) for f in folders])

    def _put(self, section: str, key: str, value: Any) -> None:
        if self.transient is not None and self.transient in key:
            return
        self.store.store(f"linux-{section}", key, value)

    def save(self) -> None:
        """Write what this run learned (see :meth:`FactsCache.save`); failures are ignored."""
        self.store.save()
