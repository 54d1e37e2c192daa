"""missing-dll, corrupt-dll, arch-mismatch: failures in the import closure of torch's binaries."""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._binary.pe.image import machine_name
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import ARCH, CORRUPT, MISSING, Failure
from torchguard._report.findings import ERROR, WARNING, Finding
from torchguard._rules import hints as _hints
from torchguard._rules.context import CheckContext
from torchguard._rules.hints_missing import for_missing
from torchguard._rules.registry import WINDOWS, rule

RANK = {ARCH: 10, CORRUPT: 20, MISSING: 30}


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    seen: set[tuple[str, str]] = set()
    for load in context.guarded.loads:
        root = ntpath.basename(load.root)
        for failure in load.final_failures():
            if failure.kind not in RANK:
                continue  # missing symbols: see the symbols rule
            identity = (failure.kind, failure.leaf.lower())
            if identity in seen:
                continue
            seen.add(identity)
            yield failure_finding(context, root, failure)


def failure_finding(context: CheckContext, root: str, failure: Failure) -> Finding:
    """The finding for one failed load of ``root`` (also used for torch's siblings)."""
    leaf = failure.leaf
    importer = failure.chain[-2] if len(failure.chain) > 1 else None
    tree = context.system.tree
    origin = tree.origin(failure.path) if failure.path else None
    if failure.kind == MISSING:
        owned = leaf.lower() in context.torch_dll_names
        if failure.delay:
            message = (
                f"{leaf} is missing; {importer} delay-loads it, so torch imports but a feature "
                "that needs it fails when first used"
            )
        else:
            message = (
                f"{leaf} is missing; {importer} needs it and no folder the Windows loader "
                "searches has it"
            )
        return Finding(
            code=Code.MISSING_DLL,
            severity=WARNING if failure.delay else ERROR,
            message=message,
            dll=root,
            missing=leaf,
            chain=failure.chain,
            hints=for_missing(leaf, context.hints, owned),
            rank=60 if failure.delay else RANK[MISSING],
        )
    if failure.kind == CORRUPT:
        return Finding(
            code=Code.CORRUPT_DLL,
            severity=ERROR,
            message=f"{leaf} is not a loadable image: {failure.detail}",
            dll=root,
            missing=leaf,
            chain=failure.chain,
            path=origin,
            hints=_hints.for_corrupt(leaf, context.hints, context.owner_of(failure.path)),
            rank=RANK[CORRUPT],
        )
    machine = failure.detail or "another CPU"
    return Finding(
        code=Code.ARCH_MISMATCH,
        severity=ERROR,
        message=(
            f"{leaf} is built for {machine}, but this Python is "
            f"{machine_name(context.system.interpreter.machine)}"
        ),
        dll=root,
        missing=leaf,
        chain=failure.chain,
        path=origin,
        hints=_hints.for_arch(leaf, context.hints, machine),
        rank=RANK[ARCH],
    )
