"""Findings on Linux from the ld.so replay: what fails, why, and what to run.

Only a failure the replay proves is an error: a NEEDED library that resolves nowhere
(``missing-dll``), a symbol or a version node that binds nowhere (``missing-symbol``), a C/C++
runtime without the version a binary needs (``runtime-too-old``), a damaged file
(``corrupt-dll``), a strict preload that finds nothing (``missing-dll``). A winning copy that
is not the one torch's own packages ship (``library-shadowed``) is a warning while everything
binds: it loads, but it is another build.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.late_loads import Late
from torchguard._platforms.linux.ldso import (
    CORRUPT,
    MISSING,
    SYMBOL,
    VERSION,
    IgnoredPreload,
    LateLoad,
    LoadError,
    SharedObject,
)
from torchguard._platforms.linux.requirements import TorchRequirements, canonical
from torchguard._platforms.linux.simulate import LinuxImport
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint

_RUNTIME_VERSION = re.compile(r"^(GLIBCXX|CXXABI|GLIBC|GCC)_[0-9.]+$")
_NVIDIA_MINOR = re.compile(r"_(\d+)_(\d+)$")
MAX_SHOWN = 4
_TORCH_SYMBOL = re.compile(r"^_ZN(K?)(3c10|2at|5torch|6caffe2)")

#: soname prefix -> the NVIDIA wheel (without the -cuNN suffix) that ships it.
NVIDIA_WHEELS: Mapping[str, str] = {
    "libnvJitLink.so": "nvidia-nvjitlink",
    "libcusparse.so": "nvidia-cusparse",
    "libcusparseLt.so": "nvidia-cusparselt",
    "libcublas.so": "nvidia-cublas",
    "libcublasLt.so": "nvidia-cublas",
    "libcudnn": "nvidia-cudnn",
    "libcudart.so": "nvidia-cuda-runtime",
    "libnvrtc": "nvidia-cuda-nvrtc",
    "libcufft.so": "nvidia-cufft",
    "libcurand.so": "nvidia-curand",
    "libcusolver.so": "nvidia-cusolver",
    "libnccl.so": "nvidia-nccl",
    "libcupti.so": "nvidia-cuda-cupti",
    "libnvshmem_host.so": "nvidia-nvshmem",
    "libcufile.so": "nvidia-cufile",
    "libnvToolsExt.so": "nvidia-nvtx",
}


#: NVIDIA wheel -> the ``cuda-toolkit`` extra that installs it. From CUDA 13 these wheels
#: carry no ``-cuNN`` suffix and torch asks for them through ``cuda-toolkit[...]``.
_TOOLKIT_EXTRAS: Mapping[str, str] = {
    "nvidia-cublas": "cublas",
    "nvidia-cuda-runtime": "cudart",
    "nvidia-cufft": "cufft",
    "nvidia-cufile": "cufile",
    "nvidia-cuda-cupti": "cupti",
    "nvidia-curand": "curand",
    "nvidia-cusolver": "cusolver",
    "nvidia-cusparse": "cusparse",
    "nvidia-nvjitlink": "nvjitlink",
    "nvidia-cuda-nvrtc": "nvrtc",
    "nvidia-nvtx": "nvtx",
}


@dataclass(frozen=True)
class LinuxHints:
    """What repair commands must fit: pip or conda, the CUDA major, the interpreter, the
    process's LD_LIBRARY_PATH and torch's own pins."""

    python_cmd: str = "python"
    torch_version: str | None = None
    cuda: str | None = None
    conda: bool = False
    ld_library_path: tuple[str, ...] = ()
    requirements: TorchRequirements | None = None

    @property
    def cuda_major(self) -> str | None:
        return self.cuda.split(".")[0] if self.cuda else None

    def pip(self, *args: str) -> str:
        return f"{self.python_cmd} -m pip " + " ".join(args)

    def spec(self, wheel: str) -> str:
        """``wheel`` as torch pins it (``nvidia-cudnn-cu12==9.10.2.21``, or
        ``'cuda-toolkit[cublas]==13.0.3'`` for CUDA 13), else the bare name."""
        found = self.requirements
        if found is None:
            return wheel
        name = canonical(wheel)
        if name in found.pins:
            return f"{name}=={found.pins[name]}"
        extra = _TOOLKIT_EXTRAS.get(re.sub(r"-cu\d+$", "", name))
        for project, wanted in sorted(found.extras.items()):
            if extra is not None and extra in wanted and project in found.pins:
                return f"'{project}[{extra}]=={found.pins[project]}'"
        return wheel

    def pinned(self, wheel: str) -> str | None:
        """The version torch pins ``wheel`` at (None: unpinned, or unknown)."""
        found = self.requirements
        return None if found is None else found.pins.get(canonical(wheel))

    def without(self, folder: str) -> str:
        """The shell command that drops ``folder`` from LD_LIBRARY_PATH and keeps the rest."""
        target = folder.rstrip("/") or "/"
        rest = [d for d in self.ld_library_path if d and (d.rstrip("/") or "/") != target]
        if not rest:
            return "unset LD_LIBRARY_PATH"
        return "export LD_LIBRARY_PATH=" + shlex.quote(":".join(rest))


def nvidia_wheel(soname: str, cuda_major: str | None) -> str | None:
    """The PyPI distribution that ships ``soname`` for this CUDA major (None: not NVIDIA's).

    Up to CUDA 12 every NVIDIA wheel has a ``-cuNN`` suffix; from CUDA 13 the toolkit's own
    libraries (cuBLAS, cudart, nvJitLink ...) do not, while cuDNN, NCCL, cuSPARSELt and
    NVSHMEM keep it (``nvidia-cudnn-cu13``)."""
    for prefix, project in NVIDIA_WHEELS.items():
        if soname.startswith(prefix):
            major = cuda_major or _soname_major(soname)
            if not major:
                return project
            if project in _TOOLKIT_EXTRAS and major.isdigit() and int(major) >= 13:
                return project
            return f"{project}-cu{major}"
    return None


def _drop_commands(hints: LinuxHints, folder: str, via: str) -> tuple[str, ...]:
    """How to take ``folder`` out of the search that found it."""
    if via == "ld.so.cache":
        return (
            f"grep -rl {shlex.quote(folder)} /etc/ld.so.conf /etc/ld.so.conf.d   "
            "# delete that line, then: sudo ldconfig",
        )
    return (hints.without(folder),)


def _soname_major(soname: str) -> str | None:
    match = re.search(r"\.so\.(\d+)", soname)
    return match.group(1) if match else None


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def import_findings(
    replay: LinuxImport,
    hints: LinuxHints,
    objects: Sequence[SharedObject],
    package: str | None = None,
) -> Iterator[Finding]:
    """The finding that stops ``replay`` (if any), as its code family."""
    if replay.not_found is not None:
        name = replay.not_found.split("*")[0].rstrip(".")
        wheel = nvidia_wheel(name, hints.cuda_major)
        doubt = f". Not certain: {replay.doubt}" if replay.doubt else ""
        yield Finding(
            code=Code.MISSING_DLL,
            severity=WARNING if doubt else ERROR,
            message=(
                "torch could not load libtorch_global_deps.so for a missing CUDA library, "
                f"then looked for each one in sys.path: {replay.not_found} not found in the "
                f"system path (torch raises ValueError){doubt}"
            ),
            dll="libtorch_global_deps.so",
            missing=name,
            chain=("libtorch_global_deps.so", name),
            hints=_reinstall(hints, wheel),
            package=package,
            rank=50 if doubt else 10,
        )
        return
    if replay.error is not None:
        yield load_error_finding(replay.error, hints, objects, package)


def load_error_finding(
    error: LoadError, hints: LinuxHints, objects: Sequence[SharedObject], package: str | None
) -> Finding:
    """The finding for a failed load: an error when the replay proves it, a warning when an
    unread object or one of unknown scope might still supply what is missing."""
    finding = _load_error_finding(error, hints, objects, package)
    if not error.doubt:
        return finding
    return replace(
        finding,
        severity=WARNING,
        message=f"{finding.message}. Not certain: {error.doubt}",
        rank=finding.rank + 40,
    )


def _load_error_finding(
    error: LoadError, hints: LinuxHints, objects: Sequence[SharedObject], package: str | None
) -> Finding:
    obj = _base(error.obj)
    chain = error.chain or (obj,)
    if error.kind == MISSING:
        wheel = nvidia_wheel(error.missing, hints.cuda_major)
        where = ", ".join(error.trail[:3]) if error.trail else "no search directory has it"
        return Finding(
            code=Code.MISSING_DLL,
            severity=ERROR,
            message=(
                f"{error.missing} (needed by {obj}) is found nowhere ld.so looks "
                f"(RPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.cache, system directories): "
                f"{error.message()}"
            )
            + ("" if not error.trail else f"; tried {where}"),
            dll=chain[0],
            missing=error.missing,
            chain=chain,
            hints=_reinstall(hints, wheel),
            path=error.obj,
            package=package,
            rank=10,
        )
    if error.kind == CORRUPT:
        owner = nvidia_wheel(obj, hints.cuda_major)
        return Finding(
            code=Code.CORRUPT_DLL,
            severity=ERROR,
            message=(
                f"{obj} is not a loadable shared object and ld.so stops there (a cut-short "
                f"download or unpack): {error.message()}"
            ),
            dll=chain[0],
            missing=obj,
            chain=chain,
            hints=_reinstall(hints, owner),
            path=error.obj,
            package=package,
            rank=15,
        )
    provider = error.provider
    if error.kind == VERSION and _RUNTIME_VERSION.match(error.missing):
        return _runtime_too_old(error, hints, chain, package)
    if error.kind == VERSION:
        return Finding(
            code=Code.MISSING_SYMBOL,
            severity=ERROR,
            message=(
                f"{obj} needs version {error.missing} of {_base(provider or '?')}, which the copy "
                f"that loads ({provider}) does not define: {error.message()}"
            ),
            dll=chain[0],
            missing=_base(provider or error.missing),
            chain=chain,
            hints=_symbol_hints(error, hints, provider, objects),
            path=provider,
            symbols=(error.missing,),
            package=package,
            rank=30,
        )
    assert error.kind == SYMBOL
    return Finding(
        code=Code.MISSING_SYMBOL,
        severity=ERROR,
        message=_symbol_message(error, obj, provider),
        dll=chain[0],
        missing=_base(provider) if provider else obj,
        chain=chain,
        hints=_symbol_hints(error, hints, provider, objects),
        path=error.obj,
        symbols=error.symbols,
        package=package,
        rank=30,
    )


def _symbol_message(error: LoadError, obj: str, provider: str | None) -> str:
    text = f"{error.message()}"
    minor = _NVIDIA_MINOR.search(error.missing)
    if minor and provider:
        text += (
            f": {obj} was built against CUDA {minor.group(1)}.{minor.group(2)}'s "
            f"{_base(provider)}, and the copy that loads ({provider}) is older"
        )
    elif _TORCH_SYMBOL.match(error.missing):
        text += f": {obj} was built for another torch (or another C++ ABI) than the one installed"
    elif provider:
        text += f" (the copy of {_base(provider)} that loads is {provider})"
    return text


def _runtime_too_old(
    error: LoadError, hints: LinuxHints, chain: tuple[str, ...], package: str | None
) -> Finding:
    provider = error.provider or "?"
    library = _base(provider)
    commands: tuple[str, ...]
    if error.provider_via == "LD_LIBRARY_PATH":
        commands = (f"{hints.without(provider.rsplit('/', 1)[0])}   # it puts {provider} first",)
    elif hints.conda:
        commands = ("conda install -c conda-forge 'libstdcxx-ng>=12'",)
    else:
        commands = ()
    return Finding(
        code=Code.RUNTIME_TOO_OLD,
        severity=ERROR,
        message=(
            f"{_base(error.obj)} needs {error.missing}, and the {library} that loads "
            f"({provider}) is older: {error.message()}"
        ),
        dll=chain[0],
        missing=library,
        chain=chain,
        hints=(
            RepairHint(
                f"Make a {library} that defines {error.missing} the one that loads first "
                "(a newer system/conda runtime, or drop the directory that holds the old one)",
                commands,
            ),
        ),
        path=provider,
        symbols=(error.missing,),
        package=package,
        rank=20,
    )


def _symbol_hints(
    error: LoadError, hints: LinuxHints, provider: str | None, objects: Sequence[SharedObject]
) -> tuple[RepairHint, ...]:
    minor = _NVIDIA_MINOR.search(error.missing)
    if provider and error.provider_via == "LD_LIBRARY_PATH":
        folder = provider.rsplit("/", 1)[0]
        return (
            RepairHint(
                f"{provider} is a second copy on LD_LIBRARY_PATH that wins the search: "
                f"drop {folder} from LD_LIBRARY_PATH before Python starts",
                (hints.without(folder),),
            ),
        )
    if provider:
        wheel = nvidia_wheel(_base(provider), hints.cuda_major)
        if wheel is not None:
            spec = hints.spec(wheel)
            pin = hints.pinned(wheel)
            if minor and not (pin and _at_least(pin, int(minor.group(1)), int(minor.group(2)))):
                spec = f"'{wheel}>={minor.group(1)}.{minor.group(2)}'"
            return (
                RepairHint(
                    f"Install a {wheel} that matches the other NVIDIA wheels",
                    (hints.pip("install", "--force-reinstall", spec),),
                ),
            )
    if _TORCH_SYMBOL.match(error.missing):
        return (
            RepairHint(
                "Reinstall the extension built for this torch (its wheel tag names the torch "
                "version and cxx11abi), or rebuild it against the installed torch",
                (hints.pip("install", "--force-reinstall", "--no-deps", "<the extension>"),),
            ),
        )
    return _reinstall(hints, None)


def _at_least(version: str, major: int, minor: int) -> bool:
    parts = re.match(r"(\d+)\.(\d+)", version)
    return parts is not None and (int(parts.group(1)), int(parts.group(2))) >= (major, minor)


def _absent(hints: LinuxHints) -> list[str]:
    """torch's pinned NVIDIA (and cuda-toolkit) requirements with no distribution installed."""
    found = hints.requirements
    if found is None:
        return []
    return [
        name
        for name in sorted(found.pins)
        if name.startswith(("nvidia-", "cuda-toolkit")) and name not in found.installed
    ]


def _requested_as(hints: LinuxHints, wheel: str) -> str:
    """The project through which torch asks for ``wheel`` (``cuda-toolkit`` for CUDA 13's
    cuBLAS), else the wheel's own canonical name."""
    name = canonical(wheel)
    found = hints.requirements
    if found is None or name in found.pins:
        return name
    extra = _TOOLKIT_EXTRAS.get(re.sub(r"-cu\d+$", "", name))
    for project, wanted in sorted(found.extras.items()):
        if extra is not None and extra in wanted:
            return project
    return name


def _pinned_spec(hints: LinuxHints, name: str) -> str:
    found = hints.requirements
    pin = found.pins.get(name) if found else None
    extras = found.extras.get(name) if found else None
    if pin is None:
        return name
    return f"'{name}[{','.join(extras)}]=={pin}'" if extras else f"{name}=={pin}"


def _reinstall(hints: LinuxHints, wheel: str | None) -> tuple[RepairHint, ...]:
    absent = _absent(hints)
    if wheel is not None and len(absent) > 1 and _requested_as(hints, wheel) in absent:
        return (
            RepairHint(
                f"{len(absent)} of the NVIDIA wheels torch pins are not installed (was torch "
                "installed with --no-deps?): install them as torch pins them",
                (hints.pip("install", *(_pinned_spec(hints, name) for name in absent)),),
            ),
        )
    if wheel is not None:
        return (
            RepairHint(
                f"Reinstall {wheel}, the wheel that ships this library",
                (hints.pip("install", "--force-reinstall", hints.spec(wheel)),),
            ),
        )
    version, _, variant = (hints.torch_version or "").partition("+")
    spec = f"torch=={hints.torch_version}" if version else "torch"
    # the build variant kept: torch==2.4.1 alone would fetch PyPI's CUDA build for a +cpu one
    where = ("--index-url", f"https://download.pytorch.org/whl/{variant}") if variant else ()
    return (
        RepairHint(
            "Reinstall torch with its dependencies",
            (hints.pip("install", "--force-reinstall", spec, *where),),
        ),
    )


def shadowed(
    objects: Sequence[SharedObject],
    pinned: Mapping[str, str],
    same_file: Callable[[str, str], bool],
    package: str | None = None,
    owner: Callable[[str], str | None] | None = None,
    hints: LinuxHints | None = None,
) -> Iterator[Finding]:
    """``library-shadowed`` warnings: a loaded soname whose copy is not the shipped one.
    ``owner`` names the distribution whose RECORD lists a path (None: none does)."""
    for obj in objects:
        soname = obj.facts.soname
        shipped = pinned.get(soname or "")
        if shipped is None or same_file(shipped, obj.path):
            continue
        if obj.via == "path":  # a load by full path: torch's CUDA preload from sys.path
            how = (
                "loaded by full path: torch's CUDA preload takes the first match in sys.path, "
                "and it looks in nvidia/<library>/lib before nvidia/cu<major>/lib"
            )
            hint = _leftover_hint(obj.path, owner, hints or LinuxHints())
        else:
            how = f"found through {obj.via}"
            hint = RepairHint(
                f"Remove {obj.path.rsplit('/', 1)[0]} from LD_LIBRARY_PATH (or the cache) "
                "so that the shipped copy loads",
                _drop_commands(hints or LinuxHints(), obj.path.rsplit("/", 1)[0], obj.via),
            )
        yield Finding(
            code=Code.LIBRARY_SHADOWED,
            severity=WARNING,
            message=(
                f"{soname} loads from {obj.path} ({how}), not the copy "
                f"torch's packages ship ({shipped}); it binds, but it is another build"
            ),
            dll=soname,
            missing=soname,
            path=obj.path,
            hints=(hint,),
            package=package,
            rank=60,
        )


def _leftover_hint(
    path: str, owner: Callable[[str], str | None] | None, hints: LinuxHints
) -> RepairHint:
    """A copy torch's preload took from another distribution: uninstall that distribution."""
    dist = owner(path) if owner is not None else None
    if dist is None:
        return RepairHint(
            f"Remove {path.rsplit('/', 1)[0]}, which no installed distribution of torch's "
            "CUDA build ships, so that torch preloads the copy its packages pin",
            (),
        )
    name = dist.split(" ", 1)[0]
    return RepairHint(
        f"Uninstall {dist} (left by another CUDA build of torch): torch preloads its copy "
        "instead of the one its packages pin",
        (hints.pip("uninstall", "-y", name),),
    )


def conflicting_files(
    conflicts: Mapping[str, tuple[tuple[str, ...], str | None]], hints: LinuxHints
) -> Iterator[Finding]:
    """``conflicting-files`` warnings: path -> (the distributions claiming it, whose bytes).

    A warning: the replay of the load judges whether the copy on disk binds; this says why
    the copy is what it is and what a later uninstall would do."""
    for path, (dists, owner) in sorted(conflicts.items()):
        name = _base(path)
        whose = f"the file on disk is {owner}'s" if owner else "either may have written it"
        projects = [d.split(" ")[0] for d in dists]
        suffix = f"-cu{hints.cuda_major}" if hints.cuda_major else None
        keep = [p for p in projects if suffix and p.endswith(suffix)]
        drop = [p for p in projects if p not in keep]
        commands = tuple(hints.pip("uninstall", "-y", p) for p in drop if keep)
        commands += tuple(hints.pip("install", "--force-reinstall", p) for p in keep)
        yield Finding(
            code=Code.CONFLICTING_FILES,
            severity=WARNING,
            message=(
                f"{' and '.join(dists)} both install {name} ({path}); {whose}, and "
                "uninstalling either removes it"
            ),
            dll=name,
            missing=name,
            path=path,
            hints=(
                RepairHint(
                    "Keep only the distribution for torch's CUDA major"
                    + (f" (CUDA {hints.cuda_major})" if hints.cuda_major else "")
                    + ", then reinstall it so that its file is the one on disk",
                    commands,
                ),
            ),
            rank=55,
        )


_BUILD_TORCH = re.compile(r"torch(\d+)\.(\d+)")


def package_mismatch(
    pins: Sequence[tuple[str, str, str | None]], torch_version: str, hints: LinuxHints
) -> Iterator[Finding]:
    """``package-mismatch`` warnings from metadata: (name, version, torch requirement).

    A warning: ``import torch`` works. The binary replay stands next to it; a pair that binds
    can still fail when its operators register (torchvision 0.23.0 in torch 2.9.1 binds every
    symbol, then segfaults: measured), which no loader model sees."""
    base, _, local = torch_version.partition("+")
    release = tuple(base.split(".")[:2])
    for name, version, requires in pins:
        problem = None
        if requires and requires.startswith("=="):
            pinned = requires[2:]
            pinned_base, _, pinned_local = pinned.partition("+")
            if pinned_base != base or (pinned_local and local and pinned_local != local):
                problem = f"pins torch=={pinned}"
        tag = _BUILD_TORCH.search(version.partition("+")[2])
        if tag and (tag.group(1), tag.group(2)) != release:
            problem = f"is a build for torch {tag.group(1)}.{tag.group(2)} ({version})"
        variant = version.partition("+")[2]
        paired = name in ("torchvision", "torchaudio")
        if problem is None and paired and variant.startswith("cu") and local != variant:
            problem = f"is the {variant} build"
        if problem is None:
            continue
        yield Finding(
            code=Code.PACKAGE_MISMATCH,
            severity=WARNING,
            message=(
                f"{name} {version} {problem}, but torch {torch_version} is installed: its "
                "binaries may fail to bind (undefined symbol: _ZN3c10...) or bind and then "
                "crash when their operators register"
            ),
            missing=f"{name}=={version}",
            hints=(
                RepairHint(
                    f"Install the {name} release built for torch {base}"
                    + (" (its wheel tag names torch and cxx11abi)" if tag else ""),
                    (
                        hints.pip(
                            "install",
                            "--force-reinstall",
                            "--no-deps",
                            f"<{name} for torch {base}>",
                        ),
                    ),
                ),
            ),
            package=name.replace("-", "_"),
            rank=70,
        )


def cpu_build_on_gpu(
    torch_version: str,
    cuda: str | None,
    gpus: Sequence[str],
    hints: LinuxHints,
    driver: str | None = None,
    siblings: Callable[[], tuple[tuple[str, str], ...]] = tuple,
    python: tuple[int, int] | None = None,
) -> Iterator[Finding]:
    """``cpu-build-on-gpu``: a CPU-only torch where the NVIDIA driver lists a GPU, or where a
    driver is there at all (``driver`` names it; under WSL2 the host's ``libcuda.so.1``). A
    warning: torch imports, ``torch.cuda.is_available()`` is False. For a GPU whose
    architecture is known, the fix is a build with kernels for it (PyPI's Linux wheel is the
    release's default CUDA variant, which may have none: 2.15.0's has no sm_61)."""
    if cuda is not None or not (gpus or driver):
        return
    base = torch_version.split("+")[0]
    shown = ", ".join(gpus) if gpus else driver
    found = _gpu_builds(base, gpus, hints, siblings, python)
    yield Finding(
        code=Code.CPU_BUILD_ON_GPU,
        severity=WARNING,
        message=(
            f"torch {torch_version} is a CPU-only build, and this machine has "
            f"{shown}: torch imports, but CUDA is unavailable"
        ),
        hints=found
        or (
            RepairHint(
                "Install a CUDA build of torch (the PyPI wheel for Linux is one)",
                (hints.pip("install", "--force-reinstall", f"torch=={base}"),),
                "https://pytorch.org/get-started/locally/",
            ),
        ),
        rank=65,
    )


def _gpu_builds(
    base: str,
    gpus: Sequence[str],
    hints: LinuxHints,
    siblings: Callable[[], tuple[tuple[str, str], ...]],
    python: tuple[int, int] | None,
) -> tuple[RepairHint, ...]:
    """The CUDA build of this release with kernels for every named GPU, and the newest build
    for them (as ``check --gpu`` answers); empty when no GPU's architecture is known."""
    from torchguard._facts.cuda_builds import PREVIOUS_VERSIONS_URL, release_of
    from torchguard._facts.gpu_pick import pick_in
    from torchguard._facts.gpus import compute_capability
    from torchguard._rules.gpu_fix import newest_hint, newest_pick

    capabilities = sorted({c for g in gpus if (c := compute_capability(g)) is not None})
    if not capabilities:
        return ()
    installed = siblings()
    names = tuple(name for name, _ in installed)
    found: list[RepairHint] = []
    release = release_of(base)
    own = pick_in(release, capabilities, siblings=installed, version=base) if release else None
    arch = ", ".join(f"sm_{c[0]}{c[1]}" for c in capabilities)
    if own is not None:
        found.append(
            RepairHint(
                f"Install torch {base} built for CUDA {own.cuda[0]}.{own.cuda[1]}, the newest "
                f"variant of this release with {arch} kernels",
                (own.command(hints.python_cmd, conda=hints.conda),),
                PREVIOUS_VERSIONS_URL,
            )
        )
    newest = newest_hint(
        newest_pick(capabilities, lambda _: True, python=python, linux=True, siblings=names),
        capabilities,
        hints.python_cmd,
        conda=hints.conda,
        shown=(own.version, f"cu{own.cuda[0]}{own.cuda[1]}") if own else None,
    )
    if newest is not None:
        found.append(newest)
    return tuple(found)


def late_load_findings(
    loads: Sequence[Late],
    pinned: Mapping[str, str],
    same_file: Callable[[str, str], bool],
    hints: LinuxHints,
) -> Iterator[Finding]:
    """Warnings for libraries loaded by name at first use (cuDNN's sub-libraries).

    Never errors: ``import torch`` works; the first cuDNN call is what fails."""
    for late in loads:
        load = late.load
        caller = _base(load.requester)
        if load.path is None:
            yield Finding(
                code=Code.MISSING_DLL,
                severity=WARNING,
                message=(
                    f"{late.soname}, which {caller} loads by name at {late.when}, is found "
                    "nowhere: import torch works, but that call fails ("
                    + (
                        late.failure
                        or f'cuDNN says "Unable to load any of {{{_names(late.tried)}}}" then '
                        '"Invalid handle. Cannot load symbol ..."'
                    )
                    + ")"
                ),
                dll=caller,
                missing=late.soname,
                chain=(caller, late.soname),
                hints=_reinstall(hints, nvidia_wheel(late.soname, hints.cuda_major)),
                rank=62,
            )
            continue
        finding = _late_symbols(late, caller, hints) or _late_shadowed(
            late, caller, pinned, same_file, hints
        )
        if finding is not None:
            yield finding


def _names(names: Sequence[str]) -> str:
    return ", ".join(names)


def _drop(hints: LinuxHints, path: str, via: str) -> tuple[RepairHint, ...]:
    folder = path.rsplit("/", 1)[0]
    return (
        RepairHint(
            f"Remove {folder} from LD_LIBRARY_PATH (or the ld.so cache) so that the shipped "
            "copy loads",
            _drop_commands(hints, folder, via),
        ),
    )


def _late_warning(
    code: Code,
    late: Late,
    caller: str,
    path: str,
    message: str,
    hints: tuple[RepairHint, ...],
    symbols: tuple[str, ...],
) -> Finding:
    """A warning about a library ``caller`` loads later by name (import torch works)."""
    return Finding(
        code=code,
        severity=WARNING,
        message=message,
        dll=caller,
        missing=late.soname,
        chain=(caller, late.soname),
        path=path,
        symbols=symbols,
        hints=hints,
        rank=61,
    )


def _late_symbols(late: Late, caller: str, hints: LinuxHints) -> Finding | None:
    """A landing copy that lacks what its callers ask of it: the first call aborts."""
    path = late.load.path
    assert path is not None
    if late.unbound and late.provider:
        symbol, _, version = late.unbound[0].partition("@")
        return _late_warning(
            Code.MISSING_SYMBOL,
            late,
            caller,
            late.provider,
            (
                f"{late.soname}, which {caller} loads by name at the first cuDNN call that "
                f"needs it, cannot load: {path}: undefined symbol: {symbol}, version {version} "
                f"(it binds to the copy of {version} at {late.provider}, found through "
                f"{late.provider_via or 'another search'}): import torch works, but that call "
                f'aborts (cuDNN says "Unable to load any of {{{_names(late.tried)}}}")'
            ),
            _drop(hints, late.provider, late.provider_via),
            late.unbound,
        )
    if late.answers_version and late.expected and _older(late.version, late.expected):
        version = _triple(late.version or "")
        return _late_warning(
            Code.LIBRARY_SHADOWED,
            late,
            caller,
            path,
            (
                f"{late.soname}, which {caller} loads by name at the first cuDNN call, would "
                f"load from {path} (found through {late.load.via}): cuDNN {late.version}, "
                f"older than the cuDNN {late.expected} beside {caller}, and the one that "
                "answers cudnnGetVersion: torch.backends.cudnn compares it with the cuDNN "
                'torch was built against and raises "cuDNN version incompatibility: ... but '
                f'found runtime version {version}" when that minor is newer'
                + (
                    f"; it also lacks {', '.join(late.lacks[:MAX_SHOWN])} that {caller} looks "
                    "up in it"
                    if late.lacks
                    else ""
                )
            ),
            _drop(hints, path, late.load.via),
            late.lacks,
        )
    if late.lacks:
        return _late_warning(
            Code.MISSING_SYMBOL,
            late,
            caller,
            path,
            (
                f"{late.soname}, which {caller} loads by name at the first cuDNN call, would "
                f"load from {path} (found through {late.load.via}), which lacks "
                f"{', '.join(late.lacks[:MAX_SHOWN])} that {caller} looks up in it: import "
                "torch works, but the first call that needs one aborts (cuDNN says "
                f'"Could not load symbol {late.lacks[0]}")'
            ),
            _drop(hints, path, late.load.via),
            late.lacks,
        )
    return None


def _triple(version: str) -> str:
    return "(" + ", ".join(version.split(".")) + ")"


def _older(version: str | None, than: str) -> bool:
    if version is None:
        return False
    mine, theirs = version.split("."), than.split(".")
    return (int(mine[0]), int(mine[1])) < (int(theirs[0]), int(theirs[1]))


def _late_shadowed(
    late: Late,
    caller: str,
    pinned: Mapping[str, str],
    same_file: Callable[[str, str], bool],
    hints: LinuxHints,
) -> Finding | None:
    load = late.load
    path = load.path
    assert path is not None
    shipped = pinned.get(late.soname)
    if load.name.endswith(".so"):  # the bare-stem fallback: no versioned copy anywhere
        shipped = "none: no versioned copy is found"
    elif load.via == "loaded" or shipped is None or same_file(shipped, path):
        return None
    return Finding(
        code=Code.LIBRARY_SHADOWED,
        severity=WARNING,
        message=(
            f"{late.soname}, which {caller} loads by name at {late.when}, would load "
            f"from {path} (found through {load.via}"
            + (f", as {load.name}" if load.name != late.soname else "")
            + f"), not the copy torch's packages ship ({shipped}): import torch works, but "
            "that call can fail or abort"
            + (f" (this copy is cuDNN {late.version})" if late.version else "")
        ),
        dll=caller,
        missing=late.soname,
        chain=(caller, late.soname),
        path=path,
        hints=_drop(hints, path, late.load.via),
        rank=61,
    )


def driver_library_findings(
    load: LateLoad, lacks: Sequence[str], hints: LinuxHints
) -> Iterator[Finding]:
    """``cuda-driver-missing`` (a warning): the ``libcuda.so.1`` CUDA would load is no driver
    library it can use (it lacks the entry points cudart takes every call through), so CUDA
    reports no driver, whatever the kernel module. ``import torch`` works."""
    if not lacks or load.path is None:
        return
    caller = _base(load.requester)
    when = "at CUDA initialisation" if caller.startswith("libcudart") else "while torch imports"
    yield Finding(
        code=Code.CUDA_DRIVER_MISSING,
        severity=WARNING,
        message=(
            f"libcuda.so.1, which {caller} loads by name {when}, would load from {load.path} "
            f"(found through {load.via}), which lacks {', '.join(lacks)}: it is not an NVIDIA "
            "driver library CUDA can use, so CUDA finds no driver: torch.cuda.is_available() "
            'is False and torch.cuda.init() raises "Found no NVIDIA driver on your system"'
        ),
        dll=caller,
        missing="libcuda.so.1",
        chain=(caller, "libcuda.so.1"),
        path=load.path,
        symbols=tuple(lacks),
        hints=_drop(hints, load.path, load.via),
        rank=58,
    )


def unread_findings(objects: Sequence[SharedObject]) -> Iterator[Finding]:
    """``unreadable-dll`` warnings: loaded objects whose facts are unknown (not read now, or
    refused only by torchguard's reader). glibc may map them fine, so nothing is proven, and
    nothing below them was checked."""
    for obj in objects:
        if not obj.unread:
            continue
        name = _base(obj.path)
        yield Finding(
            code=Code.UNREADABLE_DLL,
            severity=WARNING,
            message=(
                f"{name} could not be checked: {obj.unread}. This is not proof of damage and "
                "ld.so may well load it, but nothing about it (what it needs, its symbols) "
                "was checked"
            ),
            dll=name,
            missing=name,
            path=obj.path,
            hints=(
                RepairHint(
                    "check that the file can be read by this user (permissions, a network or "
                    "cloud file system) and run the check again; if it stays unreadable, "
                    "reinstall the package that owns it"
                ),
            ),
            rank=70,
        )


def ignored_preload_findings(ignored: Sequence[IgnoredPreload]) -> Iterator[Finding]:
    """A preload entry ld.so cannot load: it prints an error and goes on without it, so
    ``import torch`` is unaffected; every process started with it prints that line."""
    for item in ignored:
        setting = "LD_PRELOAD" if item.source == "LD_PRELOAD" else f"the file {item.source}"
        yield Finding(
            code=Code.MISSING_DLL,
            severity=WARNING,
            message=(
                f"{setting} names {item.entry}, which ld.so cannot preload ({item.reason}); "
                f'every process prints "{item.message()}" and runs without it'
            ),
            dll=item.entry.rsplit("/", 1)[-1],
            missing=item.entry,
            path=item.entry if "/" in item.entry else None,
            hints=(
                RepairHint(
                    f"drop {item.entry} from {setting} (or install what it names)",
                    ("unset LD_PRELOAD",) if item.source == "LD_PRELOAD" else (),
                ),
            ),
            rank=75,
        )
