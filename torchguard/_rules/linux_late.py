"""Libraries loaded by name after ``import torch`` (cuDNN's sub-libraries, ``libcuda.so.1``).

Warnings only: ``import torch`` works; the first call that needs one fails or aborts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from torchguard._facts.vocab import Code
from torchguard._platforms.linux.late_loads import Late
from torchguard._platforms.linux.ldso import (
    LateLoad,
)
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints, base_name, drop_hints, nvidia_wheel, reinstall
from torchguard._rules.registry import LINUX, rule

MAX_SHOWN = 4


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
        caller = base_name(load.requester)
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
                hints=reinstall(hints, nvidia_wheel(late.soname, hints.cuda_major)),
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
            drop_hints(hints, late.provider, late.provider_via),
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
            drop_hints(hints, path, late.load.via),
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
            drop_hints(hints, path, late.load.via),
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
        hints=drop_hints(hints, path, late.load.via),
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
    caller = base_name(load.requester)
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
        hints=drop_hints(hints, load.path, load.via),
        rank=58,
    )


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    if context.replay.ok:
        yield from late_load_findings(
            context.late, context.pinned, context.same_file, context.hints
        )


@rule(LINUX)
def check_driver_library(context: LinuxContext) -> Iterator[Finding]:
    if context.replay.ok and context.driver_load is not None:
        yield from driver_library_findings(context.driver_load, context.driver_lacks, context.hints)
