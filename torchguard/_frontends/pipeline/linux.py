"""The Linux analysis: locate torch, replay its import on the ld.so model, check, report."""

from __future__ import annotations

import glob as _glob
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from torchguard._binary.cache import cache_dir
from torchguard._binary.elf import ElfReadError, ElfUnreadable, read_fatbin_archs
from torchguard._binary.elf.strings import DlopenFacts, read_dlopen_facts
from torchguard._binary.fatbin import FatbinArchs, FatbinError
from torchguard._facts.cuda_builds import driver_version, linux_minimum_driver
from torchguard._facts.gpus import compute_capability
from torchguard._facts.import_reach import lost_feature, module_sources, place, reach
from torchguard._facts.vocab import Analysis, Code, Step
from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.extensions import (
    extension_module,
    find_extensions,
    package_sources,
    torch_pins,
)
from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.late_driver import DRIVER, driver_lacks, driver_load
from torchguard._platforms.linux.late_exact import exact_loads
from torchguard._platforms.linux.late_loads import Late, late_loads
from torchguard._platforms.linux.ldso import Environment, Ldso, SharedObject
from torchguard._platforms.linux.listing import ListingGlob
from torchguard._platforms.linux.nvidia import (
    boot_id,
    is_compat_dir,
    libcuda_version,
    nvidia_on_pci,
)
from torchguard._platforms.linux.preload import PreloadPlan, read_plan
from torchguard._platforms.linux.records import Claim, on_disk, shared_object_claims
from torchguard._platforms.linux.records import owner as record_owner
from torchguard._platforms.linux.requirements import TorchRequirements, torch_requirements
from torchguard._platforms.linux.simulate import LinuxImport, simulate_torch_linux
from torchguard._platforms.linux.system import CacheView, LinuxSystem
from torchguard._platforms.linux.wsl import driver_store_dlls
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._report.report import ImportOutcome, ModuleRecord, Report, TorchSummary
from torchguard._rules.kernels import extension_losses
from torchguard._rules.linux_context import ExtensionLoad, LinuxContext
from torchguard._rules.linux_driver_facts import LinuxDriverFacts, parse_cuda
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.registry import LINUX, run_rules


def glob_sorted(pattern: str) -> list[str]:
    """``glob.glob`` as torch calls it (directory order, which we cannot know offline)."""
    return _glob.glob(pattern)


def environment(system: LinuxSystem) -> Environment:
    return Environment(
        ld_library_path=system.ld_library_path,
        secure=system.secure,
        cache=system.cache,
        default_dirs=system.default_dirs,
        machine=system.machine,
        assume_python_symbols=system.executable is None,
        preload=system.preload,
        preload_file=system.preload_file,
        lib=system.dst_lib,
        cpu=system.cpu,
        glibc=system.glibc,
        machine_name={62: "x86_64", 183: "aarch64"}.get(system.machine, "x86_64"),
        library_path_doubt=system.library_path_doubt,
    )


def _dist_version(torch_dir: str) -> str:
    """torch's version from its ``.dist-info`` beside the package (``unknown`` without)."""
    for metadata in sorted(
        _glob.glob(os.path.join(torch_dir, "..", "torch-*.dist-info", "METADATA"))
    ):
        try:
            with open(metadata, encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except (OSError, UnicodeDecodeError):
            continue
    return "unknown"


def torch_version(torch_dir: str) -> tuple[str, str | None]:
    """(``__version__``, ``cuda``) from ``torch/version.py``, read as text (never imported)."""
    version, cuda = "unknown", None
    try:
        with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return _dist_version(torch_dir), cuda
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        name, value = name.split(":")[0].strip(), value.strip().strip("'\"")
        if name == "__version__":
            version = value
        elif name == "cuda" and value not in ("None", ""):
            cuda = value
    return version, cuda


def pinned_copies(
    site_dirs: tuple[str, ...],
    cuda_major: str | None = None,
    glob: Callable[[str], list[str]] = _glob.glob,
) -> dict[str, str]:
    """soname -> the copy under ``<site>/nvidia/*/lib`` (what torch's wheels pin). Two
    CUDA majors' wheels share sonames (``libcusparse.so.12``, ``libcurand.so.10``): torch's
    own major's ``nvidia/cu<major>/lib`` comes first, another major's folder last, whatever
    order the directory lists them in."""
    pinned: dict[str, str] = {}
    for site in site_dirs:
        found = glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so*"))
        for path in sorted(found, key=lambda p: (_pin_rank(p, cuda_major), p)):
            pinned.setdefault(os.path.basename(path), path)
    return pinned


def _pin_rank(path: str, cuda_major: str | None) -> int:
    folder = os.path.basename(os.path.dirname(os.path.dirname(path)))
    if cuda_major is not None and folder == f"cu{cuda_major}":
        return 0
    return 2 if re.fullmatch(r"cu\d+", folder) else 1


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class _LateFacts:
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


def linux_cache() -> LinuxCache:
    """The user's persistent Linux cache (a run-only one when caching is off)."""
    return LinuxCache(cache_dir())


def _plan(
    torch_dir: str, version: str, cuda: str | None, files: PosixFiles, cache: LinuxCache
) -> PreloadPlan:
    fingerprint = files.fingerprint(os.path.join(torch_dir, "__init__.py")) + f"|{cuda}"
    plan = cache.plan(fingerprint)
    if plan is None:
        plan = read_plan(torch_dir, version, cuda)
        cache.store_plan(fingerprint, plan)
    return plan


def analyze_linux(system: LinuxSystem, *, cache: LinuxCache | None = None) -> Report:
    """The whole Linux analysis of ``system``; problems become findings."""
    cache = cache if cache is not None else LinuxCache(None)
    # one file per environment: a warm run parses only its own (wheels: all in one, as their
    # scratch folder is new each run and their facts are keyed by content)
    wheels = system.wheels is not None
    cache.use_scope("linux-wheels" if wheels else f"linux|{system.torch_package_dir}")
    if system.wheels is None:
        return _analyze(system, cache, PosixFiles(cache, 2, system.machine))
    from torchguard._platforms.linux.wheel_files import WheelFiles  # zipfile: only for wheels

    files = WheelFiles(system.wheels, cache, 2, system.machine)
    cache.transient = system.wheels.site
    try:
        return _analyze(system, cache, files)
    finally:
        cache.transient = None
        files.close()


def _analyze(system: LinuxSystem, cache: LinuxCache, files: PosixFiles) -> Report:
    start = time.perf_counter()
    mode = Analysis.LIVE if system.live else Analysis.OFFLINE
    if system.torch_package_dir is None:
        return Report(findings=(torch_not_found(),), mode=mode)
    torch_dir = system.torch_package_dir
    version, cuda = torch_version(torch_dir)
    if isinstance(system.cache, CacheView):
        system.cache.memo.update(cache.lookups(system.cache.key))
    plan = _plan(torch_dir, version, cuda, files, cache)
    ldso = Ldso(files, environment(system), cache)
    ldso.start(system.executable, system.mapped, live=system.live)
    first_new = len(ldso.objects)
    # each folder listed once: see _platforms.linux.listing
    search = ListingGlob(tuple(system.site_dirs))
    replay = simulate_torch_linux(ldso, torch_dir, plan, system.site_dirs, search)
    hints = LinuxHints(
        torch_version=version,
        cuda=cuda,
        conda=system.conda,
        ld_library_path=tuple(system.ld_library_path),
        requirements=_requirements(torch_dir, cache, _scratch(system)),
    )
    conflicts = _conflicts(torch_dir, cache, _scratch(system))
    driver, torch_archs, extension_archs = _gpu_facts(system, torch_dir, cuda, ldso, files, cache)
    site = os.path.dirname(os.path.abspath(torch_dir))
    loaded = ldso.objects[first_new:]
    pinned: dict[str, str] = {}
    late: list[Late] = []
    driver_late, lacks = None, []
    if replay.ok:
        pinned = pinned_copies(system.site_dirs, plan.cuda_major, search)
        late_facts = _LateFacts(files, cache)
        late = late_loads(ldso, ldso.objects, late_facts)
        late += exact_loads(ldso, ldso.objects, late_facts, cuda)
        driver_late = driver_load(ldso)
        if driver_late is not None:
            lacks = driver_lacks(ldso, driver_late, late_facts)
    pins = [(p.name, p.version, p.requires) for p in torch_pins(site)]
    torch_end = len(ldso.objects)
    extension_loads: list[ExtensionLoad] = []
    if replay.ok:  # each package binary that links torch, loaded into the process torch left
        for package, path in _extensions(system, files, cache):
            opened = ldso.dlopen(path)  # as torch.ops.load_library or the extension import
            if opened.error is not None:
                extension_loads.append(ExtensionLoad(package, path, opened.error))
    context = LinuxContext(
        replay,
        hints,
        version,
        cuda,
        objects=ldso.objects,
        ignored_preloads=ldso.ignored_preloads,
        conflicts=conflicts,
        gpus=system.gpus,
        driver_shown=_driver_shown(system),
        driver=driver,
        torch_archs=torch_archs,
        extension_archs=extension_archs,
        loaded=loaded,
        pinned=pinned,
        same_file=_same_file,
        owner=lambda path: record_owner(site, path),
        late=late,
        driver_load=driver_late,
        driver_lacks=lacks,
        pins=pins,
        extension_loads=extension_loads,
        claim=_claimed,
        used=_used(ldso.objects[first_new:]),
    )
    findings = run_rules(context, LINUX)
    if isinstance(system.cache, CacheView):
        cache.store_lookups(system.cache.key, system.cache.memo)
    cache.save()
    return Report(
        findings=tuple(findings),
        torch=TorchSummary(version, torch_dir, version.partition("+")[2] or None, cuda),
        mode=mode,
        python={
            "version": "{}.{}".format(*system.python_version),
            "executable": system.executable or "",
            "platform": "linux",
        },
        import_torch=None if replay.unjudged else _outcome(replay),
        modules=tuple(_modules(ldso.objects[first_new:torch_end])),
        timings={"total": time.perf_counter() - start},
    )


def _claimed(finding: Finding, package: str, path: str) -> Finding:
    """A package binary's failed load as its consequence: an error only where the package's
    code imports it whenever ``import package`` runs (:mod:`torchguard._facts.import_reach`);
    otherwise a warning naming what is lost. Read only for a failing binary."""
    found = extension_module(path)
    if found is None:
        return finding
    site, module = found
    sources = module_sources(package_sources(site, package))
    feature = lost_feature(package, module, place(reach(package, sources), module, sources))
    if feature is None:
        return finding
    return replace(
        finding,
        severity=WARNING,
        message=f"`import {package}` loses {feature}: {finding.message}",
        rank=finding.rank + 40,
    )


def _used(objects: list[SharedObject]) -> list[SharedObject]:
    """``objects`` (what the replay loaded) and what they use, breadth first: an unreadable
    library another package mapped that torch never touches is none of its business."""
    order = list(objects)
    for obj in order:
        order += [dep for dep in obj.deps if dep not in order]
    return order


def _driver_shown(system: LinuxSystem) -> str | None:
    """The driver as a CPU-build warning names it (None: no driver)."""
    if system.driver is not None:
        return f"the NVIDIA driver {system.driver}"
    if system.wsl_libcuda is not None:
        return f"the Windows host's NVIDIA driver ({system.wsl_libcuda})"
    return None


def _gpu_facts(
    system: LinuxSystem,
    torch_dir: str,
    cuda: str | None,
    ldso: Ldso,
    files: PosixFiles,
    cache: LinuxCache,
) -> tuple[LinuxDriverFacts | None, FatbinArchs | None, dict[str, FatbinArchs]]:
    """The driver and the kernels a CUDA build's warnings judge: read only what they need."""
    wanted = parse_cuda(cuda)
    if wanted is None:
        return None, None, {}
    driver = _driver_numbers(system.driver)
    source = system.driver_source
    host = None
    if driver is None and system.host_driver_store is not None:
        host = _host_driver(_driver_store_dlls(system.host_driver_store, cache), files, cache)
        if host is not None:
            driver = host[0]
            source = f"the Windows host's driver, FileVersion of {host[1]}"
    if driver is None and system.driver_cuda is not None:
        driver = linux_minimum_driver(system.driver_cuda)
        source = "--cuda {}.{}: at least that CUDA's minimum".format(*system.driver_cuda)
    libcuda, via = None, ""
    if system.driver is not None or system.wsl_libcuda is not None:
        libcuda, via = _libcuda(ldso)
    pci = not system.driver_present and system.pci_root is not None
    facts = LinuxDriverFacts(
        driver=driver,
        source=source,
        loaded=system.driver_present,
        wsl_libcuda=system.wsl_libcuda,
        libcuda=libcuda,
        nvidia_pci=pci and _nvidia_pci(system.pci_root or "/", cache),
        host=host is not None,
        module=system.driver,
        libcuda_version=libcuda_version(libcuda) if libcuda and system.driver else None,
        libcuda_via=via,
        libcuda_compat=bool(libcuda) and is_compat_dir(libcuda or ""),
        gpus=system.gpus,
    )
    if not any(compute_capability(g) is not None for g in system.gpus):
        return facts, None, {}
    return facts, _torch_archs(torch_dir, files, cache), _extension_kernels(system, files, cache)


def _extension_kernels(
    system: LinuxSystem, files: PosixFiles, cache: LinuxCache
) -> dict[str, FatbinArchs]:
    """Extensions that carry their own kernels (xformers, flash-attn, torchvision ...): the
    union of each package's binaries' ``.nv_fatbin`` (judged against each named GPU)."""
    by_package: dict[str, tuple[set[int], set[int]]] = {}
    for package, path in _extensions(system, files, cache):
        if extension_losses(package) is None:
            continue
        archs = _file_archs(path, files, cache)
        if archs is not None and (archs.sass or archs.ptx):
            sass, ptx = by_package.setdefault(package, (set(), set()))
            sass.update(archs.sass)
            ptx.update(archs.ptx)
    return {
        package: FatbinArchs(frozenset(sass), frozenset(ptx), 0, 0)
        for package, (sass, ptx) in by_package.items()
    }


def _driver_store_dlls(store: str, cache: LinuxCache) -> tuple[tuple[str, ...], ...]:
    """:func:`driver_store_dlls`, listed once per state of the store folder (a driver
    installed or removed on Windows changes it): a warm run costs one ``stat``."""
    try:
        key = f"{store}|{os.stat(store).st_mtime_ns}"
    except OSError:
        return ()
    known = cache.driver_store(key)
    if known is None:
        known = driver_store_dlls(store)
        cache.store_driver_store(key, known)
    return known


def _host_driver(
    folders: tuple[tuple[str, ...], ...], files: PosixFiles, cache: LinuxCache
) -> tuple[tuple[int, int], str] | None:
    """The WSL2 host's driver (``(560, 94)``) and the DLL it was read from: in each NVIDIA
    driver-store folder the first DLL whose FileVersion is a driver's; of several folders (an
    older driver left behind) the newest, so a warning never rests on a stale folder."""
    best: tuple[tuple[int, int], str] | None = None
    for dlls in folders:
        for path in dlls:
            driver = driver_version(_file_version(path, files, cache))
            if driver is not None:
                if best is None or driver > best[0]:
                    best = (driver, path)
                break
    return best


def _file_version(
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


def _libcuda(ldso: Ldso) -> tuple[str, str]:
    """Where the first ``dlopen("libcuda.so.1")`` lands ("": nowhere) and how it is found:
    cuBLASLt's while torch imports, else cudart's at CUDA initialisation
    (:func:`driver_load`); without either, the interpreter's search."""
    load = driver_load(ldso)
    if load is None:
        return ldso.locate(DRIVER) or "", ""
    return load.path or "", load.via


def _nvidia_pci(root: str, cache: LinuxCache) -> bool:
    """:func:`nvidia_on_pci`, looked up once per boot."""
    boot = boot_id(root)
    known = cache.nvidia_pci(boot) if boot else None
    if known is None:
        known = nvidia_on_pci(root)
        if boot:
            cache.store_nvidia_pci(boot, known)
    return known


def _driver_numbers(text: str | None) -> tuple[int, ...] | None:
    parts = (text or "").split(".")
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


def _torch_archs(torch_dir: str, files: PosixFiles, cache: LinuxCache) -> FatbinArchs | None:
    """The architectures in ``libtorch_cuda.so``'s ``.nv_fatbin``, read once per file state
    (a warm run reads nothing); None when it is absent or unreadable."""
    return _file_archs(os.path.join(torch_dir, "lib", "libtorch_cuda.so"), files, cache)


def _file_archs(path: str, files: PosixFiles, cache: LinuxCache) -> FatbinArchs | None:
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


def _extensions(system: LinuxSystem, files: PosixFiles, cache: LinuxCache) -> list[tuple[str, str]]:
    """Package binaries that link torch, listed once per state of each site-packages folder
    (installing or removing a distribution changes the folder's mtime)."""
    found: list[tuple[str, str]] = []
    for site in dict.fromkeys(d for d in system.site_dirs if d):
        try:
            key = f"{os.path.abspath(site)}|{os.stat(site).st_mtime_ns}"
        except OSError:
            continue
        # a wheels' scratch folder is new each run: listed again (its files' facts are cached
        # by content), never stored under a key no run will use again
        listed = None if site == _scratch(system) else cache.extensions(key)
        if listed is None:
            listed = [
                (e.package, e.path)
                for e in find_extensions([site], lambda path: files.facts(path).needed)
            ]
            if site != _scratch(system):
                cache.store_extensions(key, listed)
        found += [item for item in listed if files.is_file(item[1])]
    return found


def _requirements(
    torch_dir: str, cache: LinuxCache, scratch: str | None = None
) -> TorchRequirements | None:
    """torch's pins for repair commands, read once per state of its site-packages folder (a
    wheels' scratch folder: every run, as its key would never recur)."""
    site = os.path.dirname(os.path.abspath(torch_dir))
    try:
        key = f"{site}|{os.stat(site).st_mtime_ns}"
    except OSError:
        return None
    temporary = scratch is not None and os.path.abspath(scratch) == site
    found = None if temporary else cache.requirements(key)
    if found is None:
        found = torch_requirements(torch_dir)
        if not temporary:
            cache.store_requirements(key, found)
    return found


def _scratch(system: LinuxSystem) -> str | None:
    """The scratch folder mirroring wheels (None: no wheel scanned)."""
    return system.wheels.site if system.wheels is not None else None


def _conflicts(
    torch_dir: str, cache: LinuxCache, scratch: str | None = None
) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """Shared objects two NVIDIA distributions claim, read once per site-packages state (a
    wheels' scratch folder: every run, its RECORDs are small and its key would never recur)."""
    site = os.path.dirname(os.path.abspath(torch_dir))
    try:
        key = f"{site}|{os.stat(site).st_mtime_ns}"
    except OSError:
        return {}
    temporary = scratch is not None and os.path.abspath(scratch) == site
    claims = None if temporary else cache.claims(key)
    if claims is None:
        claims = {
            path: [(c.dist, c.size) for c in found]
            for path, found in shared_object_claims(site).items()
        }
        if not temporary:
            cache.store_claims(key, claims)
    return {
        path: (tuple(d for d, _ in found), on_disk(path, [Claim(d, s, None) for d, s in found]))
        for path, found in claims.items()
    }


def _outcome(replay: LinuxImport) -> ImportOutcome | None:
    if replay.doubt:
        return None  # not judged: what is missing may be supplied after all
    if replay.ok:
        return ImportOutcome(True)
    name = replay.not_found or (replay.error.obj.rsplit("/", 1)[-1] if replay.error else None)
    return ImportOutcome(False, None, name)


_STEPS = (
    ("RPATH", Step.RPATH),
    ("RUNPATH", Step.RUNPATH),
    ("LD_LIBRARY_PATH", Step.LD_LIBRARY_PATH),
    ("ld.so.cache", Step.LD_SO_CACHE),
    ("default", Step.DEFAULT_DIR),
    ("loaded", Step.LOADED),
)


def _step(via: str) -> Step:
    return next((step for prefix, step in _STEPS if via.startswith(prefix)), Step.OPENED_BY_PATH)


def _modules(objects: list[SharedObject]) -> Iterator[ModuleRecord]:
    for obj in objects:
        yield ModuleRecord(obj.soname, obj.path, _step(obj.via))


def torch_not_found() -> Finding:
    return Finding(
        code=Code.TORCH_NOT_FOUND,
        severity=ERROR,
        message="torch is not installed where this Python imports packages from",
        hints=(
            RepairHint(
                "Install torch into the environment of this Python",
                ("python -m pip install torch",),
                "https://pytorch.org/get-started/locally/",
            ),
        ),
        rank=0,
    )
