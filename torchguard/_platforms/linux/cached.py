"""What a Linux run reads once per state of a file or folder, through the one facts cache.

Files are keyed by their fingerprint (path, size, mtime, inode); folders (a site-packages
folder, a WSL host's driver store) by :func:`~torchguard._binary.state.host_state`, which
refuses a folder changed less than :data:`~torchguard._binary.state.RACY` seconds ago, as
the Windows tree does: such a folder is read again on the next run, never remembered in a
state an installer may still be changing. A wheels' scratch folder exists for one run only:
it is read every run and never stored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from torchguard._binary.cache import cache_dir
from torchguard._binary.elf import ElfReadError, ElfUnreadable, read_fatbin_archs
from torchguard._binary.elf.strings import DlopenFacts, read_dlopen_facts
from torchguard._binary.fatbin import FatbinArchs, FatbinError
from torchguard._binary.state import host_state
from torchguard._facts.cuda_builds import driver_version
from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.extensions import find_extensions, torch_pins
from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.nvidia import boot_id, nvidia_on_pci
from torchguard._platforms.linux.preload import PreloadPlan, read_plan
from torchguard._platforms.linux.records import Claim, on_disk, shared_object_claims
from torchguard._platforms.linux.requirements import TorchRequirements, torch_requirements
from torchguard._platforms.linux.wsl import driver_store_dlls

T = TypeVar("T")


def linux_cache() -> LinuxCache:
    """The user's persistent Linux cache (a run-only one when caching is off)."""
    return LinuxCache(cache_dir())


def once_per_state(
    folder: str,
    known: Callable[[str], T | None],
    read: Callable[[], T],
    store: Callable[[str, T], None],
    *,
    temporary: bool = False,
) -> T | None:
    """``read()``'s answer about ``folder``, read once per state of the folder.

    None when the folder cannot be stat-ed (nothing read). The answer stored for the folder's
    state is used when there is one; a folder changed within ``RACY`` seconds, or one that
    exists for this run only (``temporary``), is read and never stored.
    """
    try:
        os.stat(folder)
    except OSError:
        return None
    state = None if temporary else host_state(folder)
    key = f"{os.path.abspath(folder)}|{state}"
    if state is not None:
        found = known(key)
        if found is not None:
            return found
    found = read()
    if state is not None:
        store(key, found)
    return found


class LateFacts:
    """:func:`read_dlopen_facts` and symbol verdicts, kept by file state in the cache (a warm
    run reads no file)."""

    def __init__(self, files: PosixFiles, cache: LinuxCache) -> None:
        self.files = files
        self.cache = cache

    def dlopen_facts(self, path: str, family: str) -> DlopenFacts:
        key = f"{self.files.fingerprint(path)}|{family}"
        known = self.cache.dlopen_facts(key)
        if known is None:
            try:
                known = read_dlopen_facts(self.files.whole(path), family)
            except ElfUnreadable:
                return DlopenFacts()  # not the file's doing: read it again next run, never cache it
            except ElfReadError:
                known = DlopenFacts()
            self.cache.store_dlopen_facts(key, known)
        return known

    def verdict(self, key: str) -> list[str] | None:
        return self.cache.late_verdict(key)

    def store_verdict(self, key: str, names: list[str]) -> None:
        self.cache.store_late_verdict(key, names)


def preload_plan(
    torch_dir: str, version: str, cuda: str | None, files: PosixFiles, cache: LinuxCache
) -> PreloadPlan:
    """torch's preload lists, read once per state of its ``__init__.py``."""
    fingerprint = files.fingerprint(os.path.join(torch_dir, "__init__.py")) + f"|{cuda}"
    plan = cache.plan(fingerprint)
    if plan is None:
        plan = read_plan(torch_dir, version, cuda)
        cache.store_plan(fingerprint, plan)
    return plan


def extensions(
    site_dirs: tuple[str, ...], files: PosixFiles, cache: LinuxCache, scratch: str | None
) -> list[tuple[str, str]]:
    """Package binaries that link torch, listed once per state of each site-packages folder
    (installing or removing a distribution changes the folder's state)."""
    found: list[tuple[str, str]] = []
    for site in dict.fromkeys(d for d in site_dirs if d):
        listed = once_per_state(
            site,
            cache.extensions,
            partial(_list_extensions, site, files),
            cache.store_extensions,
            temporary=site == scratch,
        )
        if listed is not None:
            found += [item for item in listed if files.is_file(item[1])]
    return found


def _list_extensions(site: str, files: PosixFiles) -> list[tuple[str, str]]:
    return [
        (e.package, e.path) for e in find_extensions([site], lambda path: files.facts(path).needed)
    ]


def requirements(
    torch_dir: str, cache: LinuxCache, scratch: str | None = None, machine: str = "x86_64"
) -> TorchRequirements | None:
    """torch's pins on ``machine`` for repair commands, read once per state of its
    site-packages folder (a wheels' scratch folder: every run, as its key would never recur)."""
    site = os.path.dirname(os.path.abspath(torch_dir))
    return once_per_state(
        site,
        lambda key: cache.requirements(f"{key}|{machine}"),
        lambda: torch_requirements(torch_dir, machine),
        lambda key, found: cache.store_requirements(f"{key}|{machine}", found),
        temporary=_is(scratch, site),
    )


def pins(
    torch_dir: str, cache: LinuxCache, scratch: str | None = None
) -> list[tuple[str, str, str | None]]:
    """What torchvision, torchaudio and torch-built packages pin, read once per state of the
    site-packages folder (listing its thousand names on every run otherwise)."""
    site = os.path.dirname(os.path.abspath(torch_dir))

    def read() -> list[tuple[str, str, str | None]]:
        return [(p.name, p.version, p.requires) for p in torch_pins(site)]

    found = once_per_state(site, cache.pins, read, cache.store_pins, temporary=_is(scratch, site))
    return found if found is not None else read()


def conflicts(
    torch_dir: str, cache: LinuxCache, scratch: str | None = None
) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """Shared objects two NVIDIA distributions claim, read once per site-packages state (a
    wheels' scratch folder: every run, its RECORDs are small and its key would never recur)."""
    site = os.path.dirname(os.path.abspath(torch_dir))

    def read() -> dict[str, list[tuple[str, int | None]]]:
        return {
            path: [(c.dist, c.size) for c in found]
            for path, found in shared_object_claims(site).items()
        }

    claims = once_per_state(
        site, cache.claims, read, cache.store_claims, temporary=_is(scratch, site)
    )
    return {
        path: (tuple(d for d, _ in found), on_disk(path, [Claim(d, s, None) for d, s in found]))
        for path, found in (claims or {}).items()
    }


def _is(scratch: str | None, site: str) -> bool:
    return scratch is not None and os.path.abspath(scratch) == site


def driver_store(store: str, cache: LinuxCache) -> tuple[tuple[str, ...], ...]:
    """:func:`driver_store_dlls`, listed once per state of the store folder (a driver
    installed or removed on Windows changes it): a warm run costs one ``stat``."""
    found = once_per_state(
        store, cache.driver_store, lambda: driver_store_dlls(store), cache.store_driver_store
    )
    return () if found is None else found


def host_driver(
    folders: tuple[tuple[str, ...], ...], files: PosixFiles, cache: LinuxCache
) -> tuple[tuple[int, int], str] | None:
    """The WSL2 host's driver (``(560, 94)``) and the DLL it was read from: in each NVIDIA
    driver-store folder the first DLL whose FileVersion is a driver's; of several folders (an
    older driver left behind) the newest, so a warning never rests on a stale folder."""
    best: tuple[tuple[int, int], str] | None = None
    for dlls in folders:
        for path in dlls:
            driver = driver_version(file_version(path, files, cache))
            if driver is not None:
                if best is None or driver > best[0]:
                    best = (driver, path)
                break
    return best


def file_version(
    path: str, files: PosixFiles, cache: LinuxCache
) -> tuple[int, int, int, int] | None:
    """A Windows DLL's FileVersion, read as a file (never loaded) once per file state."""
    from torchguard._binary.pe.errors import FileUnreadable, PEReadError
    from torchguard._binary.pe.image import read_pe

    fingerprint = files.fingerprint(path)
    known = cache.file_version(fingerprint)
    if known is None:
        try:
            known = read_pe(path).file_version or ()
        except FileUnreadable:
            return None  # not the file's doing: read it again next run
        except PEReadError:
            known = ()
        cache.store_file_version(fingerprint, known)
    return (known[0], known[1], known[2], known[3]) if len(known) == 4 else None


def nvidia_pci(root: str, cache: LinuxCache) -> bool:
    """:func:`nvidia_on_pci`, looked up once per boot."""
    boot = boot_id(root)
    known = cache.nvidia_pci(boot) if boot else None
    if known is None:
        known = nvidia_on_pci(root)
        if boot:
            cache.store_nvidia_pci(boot, known)
    return known


def torch_archs(torch_dir: str, files: PosixFiles, cache: LinuxCache) -> FatbinArchs | None:
    """The architectures in ``libtorch_cuda.so``'s ``.nv_fatbin``, read once per file state
    (a warm run reads nothing); None when it is absent or unreadable."""
    return file_archs(os.path.join(torch_dir, "lib", "libtorch_cuda.so"), files, cache)


def file_archs(path: str, files: PosixFiles, cache: LinuxCache) -> FatbinArchs | None:
    """A shared object's ``.nv_fatbin`` architectures, cached by file state."""
    if not files.is_file(path):
        return None
    fingerprint = files.fingerprint(path)
    known = cache.fatbin(fingerprint)
    if known is None:
        try:
            read = files.fatbin(path, read_fatbin_archs)
        except (ElfReadError, FatbinError):
            return None
        known = (read.sass, read.ptx) if read else (frozenset(), frozenset())
        cache.store_fatbin(fingerprint, *known)
    return FatbinArchs(known[0], known[1], 0, 0)
