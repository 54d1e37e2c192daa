"""Findings for torch's native neighbours (onnxruntime-gpu, ctranslate2) on Windows, from the
replay of their library in two import orders (:mod:`torchguard._platforms.windows.neighbours`).

- ``neighbour-load-order`` (warning): the library, or a CUDA DLL it loads later by name, is
  found only because torch loaded a module of that name first (a load by base name binds to
  it); in a process without torch it fails with WinError 126. Hints: import torch first,
  ``onnxruntime.preload_dlls()`` (1.21+), NVIDIA's wheels.
- ``missing-dll`` with ``package`` (warning): found in neither order; the message names the
  CUDA major it was built for against torch's, and the hint the release built for torch's.
A neighbour's failure costs its CUDA path only (onnxruntime falls back to the CPU provider,
ctranslate2 fails at its first CUDA call), so every finding here is a warning, as on Linux.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._facts.neighbours import Kind
from torchguard._facts.vocab import Code, FailureKind
from torchguard._platforms.windows.neighbours import NeighbourReplay, Order
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.hints import HintContext
from torchguard._rules.neighbour_text import found_through_torch, order_finding
from torchguard._rules.registry import WINDOWS, rule
from torchguard._rules.windows_neighbour_hints import (
    built,
    cuda_major_of,
    order_hints,
    pin,
    wheel_hints,
)
from torchguard._rules.windows_preload_order import preload_order_findings

RANK = 140


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    for replay in context.neighbours:
        yield from neighbour_findings(replay, context.hints)
        yield from preload_order_findings(replay, context.hints)


def neighbour_findings(replay: NeighbourReplay, hints: HintContext) -> list[Finding]:
    neighbour, after, solo = replay.neighbour, replay.after, replay.solo
    kind, library = neighbour.kind, neighbour.library
    label = f"{kind.package} {neighbour.version}"
    file = ntpath.basename(library)
    torch_major = cuda_major_of(hints)
    if not after.ok and solo.ok:
        return [_torch_first_breaks(replay, label, file)]
    if not after.ok:
        missing = after.missing()
        what = (
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} found nowhere"
            if missing
            else f"WinError {after.load.winerror} ({_failed(after)})"
        )
        leaf = missing[0] if missing else _failed(after)
        return [
            Finding(
                code=Code.MISSING_DLL if missing else _code(after),
                severity=WARNING,
                message=f"{label}: {kind.role} ({file}) does not load even after `import "
                f"torch`: {what}, whether torch is imported first or not"
                + built(missing, torch_major)
                + _said(kind, after.load.winerror or 126, file),
                missing=leaf,
                path=library,
                package=kind.package,
                hints=pin(kind, missing, torch_major, hints)
                + wheel_hints(missing, torch_major, hints),
                rank=RANK,
            )
        ]
    findings: list[Finding] = []
    nowhere = [late for late in after.late if late.path is None]
    for late in nowhere:
        findings.append(
            Finding(
                code=Code.MISSING_DLL,
                severity=WARNING,
                message=(
                    f"{label}: {file} loads {late.name} by name at its first CUDA call, and it "
                    "is found nowhere, whether torch is imported first or not "
                    f'("Library {late.name} is not found or cannot be loaded")'
                    + built([late.name], torch_major)
                ),
                missing=late.name,
                path=library,
                package=kind.package,
                hints=pin(kind, [late.name], torch_major, hints)
                + wheel_hints([late.name], torch_major, hints),
                rank=RANK,
            )
        )
    alone_found = {late.name.lower() for late in solo.late if late.path and not late.winerror}
    by_torch = [
        late
        for late in after.late
        if late.path and late.via == "loaded" and late.name.lower() not in alone_found
    ]
    if solo.ok and not by_torch:
        return findings
    if not solo.ok:
        needs = solo.missing()
        if not needs:  # not a missing DLL: another failure, not an order question
            return findings
        where = [after.load.modules.get(n.lower()) for n in needs]
        folders = [r.path for r in where if r is not None and r.path and r.via == "loaded"]
        when = f"{file} itself does not load (WinError 126: {', '.join(needs)} not found)" + _said(
            kind, 126, file
        )
    else:
        needs, folders, when = found_through_torch(by_torch)
    dirs = list(dict.fromkeys(ntpath.dirname(p) for p in folders))
    findings.append(
        order_finding(
            label=label,
            kind=kind,
            file=file,
            needs=needs,
            dirs=dirs,
            when=when,
            library=library,
            hints=order_hints(replay, needs, torch_major, hints),
            rank=RANK,
        )
    )
    return findings


def _torch_first_breaks(replay: NeighbourReplay, label: str, file: str) -> Finding:
    """The reverse order: alone it loads, after torch one of its imports binds to a module
    torch loaded that lacks what it takes (WinError 127: another cuDNN or cuBLAS minor)."""
    kind, after = replay.neighbour.kind, replay.after
    leaf = _failed(after)
    bound = after.load.modules.get(leaf.lower())
    where = f" (torch's copy, {bound.path})" if bound is not None and bound.path else ""
    return Finding(
        code=Code.NEIGHBOUR_LOAD_ORDER,
        severity=WARNING,
        message=f"{label}: {kind.role} ({file}) loads in a process without torch, but not after "
        f"`import torch`: WinError {after.load.winerror} on {leaf}{where}"
        + _said(kind, after.load.winerror or 127, file),
        missing=leaf,
        path=replay.neighbour.library,
        package=kind.package,
        hints=(
            RepairHint(
                f"install the {kind.package} built for the CUDA and cuDNN this torch ships, or "
                f"use {kind.module}'s CUDA before importing torch",
            ),
        ),
        rank=RANK,
    )


def _code(order: Order) -> Code:
    """The finding code of the first hard failure that is not a missing DLL."""
    hard = [f for f in order.load.failures if not f.delay]
    return _CODES.get(hard[0].kind, Code.MISSING_DLL) if hard else Code.MISSING_DLL


_CODES = {
    FailureKind.CORRUPT: Code.CORRUPT_DLL,
    FailureKind.ARCH: Code.ARCH_MISMATCH,
    FailureKind.SYMBOL: Code.MISSING_SYMBOL,
    FailureKind.INIT: Code.RUNTIME_TOO_OLD,
}


def _failed(order: Order) -> str:
    """The DLL of the first hard failure: what the loader reports."""
    hard = [f for f in order.load.failures if not f.delay]
    return hard[0].leaf if hard else ntpath.basename(order.load.root)


def _said(kind: Kind, winerror: int, file: str) -> str:
    """What the package prints, quoted from its own messages."""
    if kind.module != "onnxruntime":
        return ""
    return (
        f' (onnxruntime: "LoadLibrary failed with error {winerror} ... when trying to load '
        f'{file}", then "Failed to create CUDAExecutionProvider" and the CPU)'
    )
