"""The finding that stops ``import torch`` on Linux, from the ld.so replay.

Only a failure the replay proves is an error: a NEEDED library that resolves nowhere
(``missing-dll``), a symbol or a version node that binds nowhere (``missing-symbol``), a C/C++
runtime without the version a binary needs (``runtime-too-old``), a damaged file
(``corrupt-dll``), a strict preload that finds nothing (``missing-dll``). An unread object or
one of unknown scope that might supply what is missing turns it into a warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.ldso import (
    CORRUPT,
    MISSING,
    SYMBOL,
    VERSION,
    LoadError,
    SharedObject,
)
from torchguard._platforms.linux.simulate import LinuxImport
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints, base_name, nvidia_wheel, reinstall
from torchguard._rules.registry import LINUX, rule

_RUNTIME_VERSION = re.compile(r"^(GLIBCXX|CXXABI|GLIBC|GCC)_[0-9.]+$")
_NVIDIA_MINOR = re.compile(r"_(\d+)_(\d+)$")
_TORCH_SYMBOL = re.compile(r"^_ZN(K?)(3c10|2at|5torch|6caffe2)")


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
            hints=reinstall(hints, wheel),
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
    obj = base_name(error.obj)
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
            hints=reinstall(hints, wheel),
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
            hints=reinstall(hints, owner),
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
                f"{obj} needs version {error.missing} of {base_name(provider or '?')}, which the "
                f"copy that loads ({provider}) does not define: {error.message()}"
            ),
            dll=chain[0],
            missing=base_name(provider or error.missing),
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
        missing=base_name(provider) if provider else obj,
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
            f"{base_name(provider)}, and the copy that loads ({provider}) is older"
        )
    elif _TORCH_SYMBOL.match(error.missing):
        text += f": {obj} was built for another torch (or another C++ ABI) than the one installed"
    elif provider:
        text += f" (the copy of {base_name(provider)} that loads is {provider})"
    return text


def _runtime_too_old(
    error: LoadError, hints: LinuxHints, chain: tuple[str, ...], package: str | None
) -> Finding:
    provider = error.provider or "?"
    library = base_name(provider)
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
            f"{base_name(error.obj)} needs {error.missing}, and the {library} that loads "
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
        wheel = nvidia_wheel(base_name(provider), hints.cuda_major)
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
    return reinstall(hints, None)


def _at_least(version: str, major: int, minor: int) -> bool:
    parts = re.match(r"(\d+)\.(\d+)", version)
    return parts is not None and (int(parts.group(1)), int(parts.group(2))) >= (major, minor)


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from import_findings(context.replay, context.hints, context.objects)
