"""The Linux platform: glibc's ld.so model over a :class:`LinuxSystem`, step by step.

locate: torch and its version (``torch/version.py`` read as text); plan: torch's preload
lists; read: the shared objects' reader (files or wheels read in place) and the process as
it starts, through the one facts cache; resolve: ``import torch`` replayed on the ld.so
model; check: the Linux rules over what it read, with what loads later (cuDNN, NVRTC,
``libcuda.so.1``), each package binary that links torch and torch's native neighbours
replayed into the process torch left; report. What is read once per file or folder state
lives in :mod:`torchguard._platforms.linux.cached`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.bitsandbytes import cuda_tuple
from torchguard._facts.cuda_builds import linux_minimum_driver
from torchguard._facts.gpus import compute_capability
from torchguard._facts.import_reach import lost_feature, module_sources, place, reach
from torchguard._facts.vocab import Analysis, Code, Step
from torchguard._facts.wheel_tags import Interpreter
from torchguard._platforms.linux import cached
from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.extensions import extension_module, package_sources, torch_pins
from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.late_driver import DRIVER, driver_lacks, driver_load
from torchguard._platforms.linux.late_exact import exact_loads
from torchguard._platforms.linux.late_loads import Late, late_loads
from torchguard._platforms.linux.ldso import Ldso, SharedObject
from torchguard._platforms.linux.listing import ListingGlob
from torchguard._platforms.linux.locate import environment, pinned_copies, torch_version
from torchguard._platforms.linux.neighbour_loads import replay_order
from torchguard._platforms.linux.neighbours import find_neighbours
from torchguard._platforms.linux.nvidia import is_compat_dir, libcuda_version
from torchguard._platforms.linux.preload import PreloadPlan
from torchguard._platforms.linux.records import owner as record_owner
from torchguard._platforms.linux.simulate import LinuxImport, simulate_torch_linux
from torchguard._platforms.linux.system import CacheView, LinuxSystem, machine_label
from torchguard._platforms.linux.wheel_dists import (
    bitsandbytes_install,
    folder_wheels,
    linux_platform,
    site_folders,
)
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._report.report import ImportOutcome, ModuleRecord, Report, TorchSummary
from torchguard._rules.bitsandbytes import OVERRIDE as BNB_OVERRIDE
from torchguard._rules.kernels import extension_losses
from torchguard._rules.linux_context import (
    Bitsandbytes,
    ExtensionLoad,
    LinuxContext,
    NeighbourReplay,
    WheelTags,
)
from torchguard._rules.linux_driver_facts import LinuxDriverFacts, parse_cuda
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.registry import LINUX, run_rules

if TYPE_CHECKING:
    from torchguard._platforms.linux.wheel_files import WheelFiles


class LinuxPlatform:
    """Linux: a live process, an installed environment, or manylinux wheels read in place."""

    name = "linux"

    def start(self, system: LinuxSystem, cache: LinuxCache | None) -> LinuxAnalysis:
        return LinuxAnalysis(system, cache if cache is not None else LinuxCache(None))


class LinuxAnalysis:
    """One Linux analysis; each step keeps what the next needs."""

    def __init__(self, system: LinuxSystem, cache: LinuxCache) -> None:
        self.system = system
        self.cache = cache
        self.started = time.perf_counter()
        # one file per environment: a warm run parses only its own (wheels: all in one, as
        # their scratch folder is new each run and their facts are keyed by content)
        wheels = system.wheels is not None
        cache.use_scope("linux-wheels" if wheels else f"linux|{system.torch_package_dir}")
        self.scratch = system.wheels.site if system.wheels is not None else None
        self.wheel_files: WheelFiles | None = None
        if system.wheels is None:
            self.files = PosixFiles(cache, 2, system.machine)
        else:
            from torchguard._platforms.linux.wheel_files import WheelFiles  # zipfile: wheels only

            self.files = self.wheel_files = WheelFiles(system.wheels, cache, 2, system.machine)
            cache.transient = system.wheels.site

    def locate(self) -> Report | None:
        system = self.system
        if system.torch_package_dir is None:
            return Report(findings=(torch_not_found(),), mode=_mode(system))
        self.torch_dir = system.torch_package_dir
        self.version, self.cuda = torch_version(self.torch_dir)
        if isinstance(system.cache, CacheView):
            system.cache.memo.update(self.cache.lookups(system.cache.key))
        return None

    def plan(self) -> None:
        self.preload_plan: PreloadPlan = cached.preload_plan(
            self.torch_dir, self.version, self.cuda, self.files, self.cache
        )

    def read(self) -> None:
        system = self.system
        self.ldso = Ldso(self.files, environment(system), self.cache)
        self.ldso.start(system.executable, system.mapped, live=system.live)
        self.first_new = len(self.ldso.objects)

    def resolve(self) -> None:
        system = self.system
        # each folder listed once: see _platforms.linux.listing
        self.search = ListingGlob(tuple(system.site_dirs))
        self.replay: LinuxImport = simulate_torch_linux(
            self.ldso, self.torch_dir, self.preload_plan, system.site_dirs, self.search
        )

    def check(self) -> list[Finding]:
        system, cache, files, ldso = self.system, self.cache, self.files, self.ldso
        torch_dir, version, cuda, replay = self.torch_dir, self.version, self.cuda, self.replay
        first_new = self.first_new
        hints = LinuxHints(
            torch_version=version,
            cuda=cuda,
            conda=system.conda,
            ld_library_path=tuple(system.ld_library_path),
            requirements=cached.requirements(
                torch_dir, cache, self.scratch, machine_label(system.machine)
            ),
        )
        site = os.path.dirname(os.path.abspath(torch_dir))
        conflicts = cached.conflicts(torch_dir, cache, self.scratch)
        driver, torch_archs, extension_archs = self._gpu_facts()
        loaded = ldso.objects[first_new:]
        pinned: dict[str, str] = {}
        late: list[Late] = []
        driver_late, lacks = None, []
        if replay.ok:
            pinned = pinned_copies(system.site_dirs, self.preload_plan.cuda_major, self.search)
            late_facts = cached.LateFacts(files, cache)
            late = late_loads(ldso, ldso.objects, late_facts)
            late += exact_loads(ldso, ldso.objects, late_facts, cuda)
            driver_late = driver_load(ldso)
            if driver_late is not None:
                lacks = driver_lacks(ldso, driver_late, late_facts)
        pins = cached.pins(torch_dir, cache, self.scratch)
        # offline, the Python is inferred from torch's own tag: no WHEEL is judged
        wheel_tags = _wheel_tags(system, files, cache) if system.live else None
        bitsandbytes = _bitsandbytes(system, cuda)
        self.torch_end = len(ldso.objects)
        extension_loads: list[ExtensionLoad] = []
        neighbours: list[NeighbourReplay] = []
        if replay.ok:  # each package binary that links torch, loaded into the process torch left
            for package, path in self._extensions():
                opened = ldso.dlopen(path)  # as torch.ops.load_library or the extension import
                if opened.error is not None:
                    extension_loads.append(ExtensionLoad(package, path, opened.error))
            neighbours = _neighbours(system, files, cache, ldso)  # into that process too
        context = LinuxContext(
            replay,
            hints,
            version,
            cuda,
            objects=ldso.objects,
            ignored_preloads=ldso.ignored_preloads,
            conflicts=conflicts,
            gpus=system.gpus,
            python=system.python_version,
            siblings=lambda: _siblings(torch_dir),
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
            python_cmd=os.path.basename(system.executable or "") or "python3",
            wheel_tags=wheel_tags,
            bitsandbytes=bitsandbytes,
            neighbours=neighbours,
        )
        findings = run_rules(context, LINUX)
        if isinstance(system.cache, CacheView):
            cache.store_lookups(system.cache.key, system.cache.memo)
        cache.save()
        return findings

    def report(self, findings: list[Finding], timings: dict[str, float]) -> Report:
        system, version = self.system, self.version
        return Report(
            findings=tuple(findings),
            torch=TorchSummary(
                version, self.torch_dir, version.partition("+")[2] or None, self.cuda
            ),
            mode=_mode(system),
            python={
                "version": "{}.{}".format(*system.python_version),
                "executable": system.executable or "",
                "platform": "linux",
            },
            import_torch=None if self.replay.unjudged else _outcome(self.replay),
            modules=tuple(_modules(self.ldso.objects[self.first_new : self.torch_end])),
            timings=timings,
        )

    def close(self) -> None:
        if self.wheel_files is not None:
            self.cache.transient = None
            self.wheel_files.close()

    def _extensions(self) -> list[tuple[str, str]]:
        return cached.extensions(self.system.site_dirs, self.files, self.cache, self.scratch)

    def _gpu_facts(
        self,
    ) -> tuple[LinuxDriverFacts | None, FatbinArchs | None, dict[str, FatbinArchs]]:
        """The driver and the kernels a CUDA build's warnings judge: read only what they need."""
        system, cache, files = self.system, self.cache, self.files
        wanted = parse_cuda(self.cuda)
        if wanted is None:
            return None, None, {}
        driver = _driver_numbers(system.driver)
        source = system.driver_source
        host = None
        if driver is None and system.host_driver_store is not None:
            stores = cached.driver_store(system.host_driver_store, cache)
            host = cached.host_driver(stores, files, cache)
            if host is not None:
                driver = host[0]
                source = f"the Windows host's driver, FileVersion of {host[1]}"
        if driver is None and system.driver_cuda is not None:
            driver = linux_minimum_driver(system.driver_cuda)
            source = "--cuda {}.{}: at least that CUDA's minimum".format(*system.driver_cuda)
        libcuda, via = None, ""
        if system.driver is not None or system.wsl_libcuda is not None:
            libcuda, via = _libcuda(self.ldso)
        pci = not system.driver_present and system.pci_root is not None
        facts = LinuxDriverFacts(
            driver=driver,
            source=source,
            loaded=system.driver_present,
            wsl_libcuda=system.wsl_libcuda,
            libcuda=libcuda,
            nvidia_pci=pci and cached.nvidia_pci(system.pci_root or "/", cache),
            host=host is not None,
            module=system.driver,
            libcuda_version=libcuda_version(libcuda) if libcuda and system.driver else None,
            libcuda_via=via,
            libcuda_compat=bool(libcuda) and is_compat_dir(libcuda or ""),
            gpus=system.gpus,
        )
        if not any(compute_capability(g) is not None for g in system.gpus):
            return facts, None, {}
        return facts, cached.torch_archs(self.torch_dir, files, cache), self._extension_kernels()

    def _extension_kernels(self) -> dict[str, FatbinArchs]:
        """Extensions that carry their own kernels (xformers, flash-attn, torchvision ...): the
        union of each package's binaries' ``.nv_fatbin`` (judged against each named GPU)."""
        by_package: dict[str, tuple[set[int], set[int]]] = {}
        for package, path in self._extensions():
            if extension_losses(package) is None:
                continue
            archs = cached.file_archs(path, self.files, self.cache)
            if archs is not None and (archs.sass or archs.ptx):
                sass, ptx = by_package.setdefault(package, (set(), set()))
                sass.update(archs.sass)
                ptx.update(archs.ptx)
        return {
            package: FatbinArchs(frozenset(sass), frozenset(ptx), 0, 0)
            for package, (sass, ptx) in by_package.items()
        }


def _mode(system: LinuxSystem) -> Analysis:
    return Analysis.LIVE if system.live else Analysis.OFFLINE


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _wheel_tags(system: LinuxSystem, files: PosixFiles, cache: LinuxCache) -> WheelTags:
    """Each distribution's WHEEL text in the real site folders; each folder's texts are kept
    by the folder's state (an install changes it), so a warm run reads none."""
    interpreter = Interpreter(
        system.python_version, system.free_threaded, linux_platform(system.machine)
    )
    rows: list[tuple[str, str, str | None]] = []
    for folder in site_folders(system.site_dirs):
        state = files.dir_state(folder)
        key = f"{folder}|{state}"
        known = cache.wheel_tags(key) if state else None
        if known is None:
            read = folder_wheels(folder)
            if state:
                cache.store_wheel_tags(key, [(n, v, t or "") for n, v, t in read])
            rows += read
        else:
            rows += known
    return WheelTags(interpreter, tuple(rows))


def _bitsandbytes(system: LinuxSystem, cuda: str | None) -> Bitsandbytes | None:
    """The bitsandbytes Python would import, if torch is a CUDA build."""
    wanted = cuda_tuple(cuda)
    install = bitsandbytes_install(system.site_dirs) if wanted is not None else None
    if install is None or wanted is None:
        return None
    override = system.environ.get(BNB_OVERRIDE) if system.live else None
    return Bitsandbytes(install, wanted, override)


def _neighbours(
    system: LinuxSystem, files: PosixFiles, cache: LinuxCache, ldso: Ldso
) -> list[NeighbourReplay]:
    """onnxruntime-gpu's and ctranslate2's libraries, loaded after torch and without it."""
    found = find_neighbours(system.site_dirs)
    if not found:
        return []
    late_facts = cached.LateFacts(files, cache)
    alone = Ldso(files, environment(system), cache)
    alone.start(system.executable, system.mapped, live=system.live)
    replays: list[NeighbourReplay] = []
    for neighbour in found:
        folder = os.path.dirname(neighbour.library)
        first = [os.path.join(folder, name) for name in neighbour.kind.linux_globals]
        after = replay_order(ldso, neighbour.library, late_facts, first)
        solo = replay_order(alone, neighbour.library, late_facts, first)
        replays.append(NeighbourReplay(neighbour, after, solo, tuple(ldso.objects)))
    return replays


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


def _libcuda(ldso: Ldso) -> tuple[str, str]:
    """Where the first ``dlopen("libcuda.so.1")`` lands ("": nowhere) and how it is found:
    cuBLASLt's while torch imports, else cudart's at CUDA initialisation
    (:func:`driver_load`); without either, the interpreter's search."""
    load = driver_load(ldso)
    if load is None:
        return ldso.locate(DRIVER) or "", ""
    return load.path or "", load.via


def _driver_numbers(text: str | None) -> tuple[int, ...] | None:
    parts = (text or "").split(".")
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


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


def _siblings(torch_dir: str) -> tuple[tuple[str, str], ...]:
    """torchvision and torchaudio installed beside torch (release, no local tag)."""
    return tuple(
        (pin.name, pin.version.partition("+")[0])
        for pin in torch_pins(os.path.dirname(torch_dir))
        if pin.name in ("torchvision", "torchaudio")
    )
