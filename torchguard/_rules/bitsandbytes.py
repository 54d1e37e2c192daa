"""bitsandbytes-binary-missing: the CUDA library bitsandbytes will pick for this torch's CUDA
is not in its install (:mod:`torchguard._facts.bitsandbytes` says how each release picks it).

A warning: ``import bitsandbytes`` works and its CUDA functions fail at first use. Shared
wording: both platforms' rules (:mod:`~torchguard._rules.windows_bitsandbytes`,
:mod:`~torchguard._rules.linux_bitsandbytes`) use :func:`binary_findings`.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.bitsandbytes import (
    FALLBACK_MARK,
    FIRST_WINDOWS,
    Install,
    binary_name,
    chosen,
    cuda_tuple,
    releases_with,
    shipped,
)
from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint

OVERRIDE = "BNB_CUDA_VERSION"
RANK = 130


def binary_findings(
    install: Install,
    cuda: tuple[int, int],
    platform: str,
    override: str | None,
    python_cmd: str,
) -> Iterator[Finding]:
    """The finding for one install against torch's ``cuda``, if the binary it picks is absent."""
    if not install.names:
        return  # its folder could not be listed: nothing is known
    present = shipped(list(install.names), platform)
    wanted = cuda_tuple(override) if override else None
    fallback = None if install.source is None else FALLBACK_MARK in install.source
    if wanted is not None:  # the override names one file, with no fallback
        if wanted in present:
            return
        target, why = wanted, f"{OVERRIDE}={override} names"
    else:
        if chosen(cuda, set(present), fallback=fallback) is not None:
            return
        target, why = cuda, f"for torch's CUDA {cuda[0]}.{cuda[1]} it loads"
    name = binary_name(target, platform)
    path = f"{install.folder}{install.separator}{name}"
    if not present:
        has = (
            f"it ships no Windows CUDA binary at all (Windows builds start with {FIRST_WINDOWS})"
            if platform == "windows"
            else "it ships no CUDA binary for this platform"
        )
    else:
        has = "it ships CUDA " + ", ".join(f"{v[0]}.{v[1]}" for v in sorted(present))
    yield Finding(
        code=Code.BITSANDBYTES_BINARY_MISSING,
        severity=WARNING,
        message=(
            f"bitsandbytes {install.version}: {why} {name}, which its install does not have "
            f"({has}); `import bitsandbytes` works and every CUDA function fails at first use "
            f'("Could not find the bitsandbytes CUDA binary at {path}")'
        ),
        missing=name,
        path=path,
        package="bitsandbytes",
        hints=_hints(target, platform, override, python_cmd),
        rank=RANK,
    )


def _hints(
    cuda: tuple[int, int], platform: str, override: str | None, python_cmd: str
) -> tuple[RepairHint, ...]:
    hints: list[RepairHint] = []
    if override:
        hints.append(
            RepairHint(
                f"{OVERRIDE} is set and overrides torch's CUDA version: unset it, unless it "
                "names a binary you built",
                ("set BNB_CUDA_VERSION=" if platform == "windows" else "unset BNB_CUDA_VERSION",),
            )
        )
    found = releases_with(cuda, platform)
    label = f"CUDA {cuda[0]}.{cuda[1]} on {'Windows' if platform == 'windows' else 'Linux'}"
    if found is not None:
        first, newest = found
        hints.append(
            RepairHint(
                f"bitsandbytes {first} is the first release that loads a binary for {label} "
                f"(newest known: {newest}); a pinned older release cannot",
                (f'{python_cmd} -m pip install --upgrade "bitsandbytes>={first}"',),
            )
        )
    else:
        hints.append(
            RepairHint(
                f"no bitsandbytes release on PyPI ships a binary for {label}: install a torch "
                "built for a CUDA version it ships, or build bitsandbytes from source",
                (),
                "https://huggingface.co/docs/bitsandbytes/main/en/installation",
            )
        )
    return tuple(hints)
