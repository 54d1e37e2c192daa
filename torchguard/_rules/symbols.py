"""missing-symbol: a DLL is found, but the copy that wins does not export what is imported.

That is the "wrong build" family: another release's ``c10.dll`` left in ``torch\\lib``, an
OpenMP or VC++ runtime that another package overwrote or shadows, an extension built for
another torch. Windows fails the load with WinError 127 (a name) or 182 (an ordinal).
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._binary.pe.errors import ImageUnavailable
from torchguard._binary.pe.openmp import ALIAS, KMP
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.loader import SYMBOL, Failure
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules import hints as _hints
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

RANK = 35


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    seen: set[tuple[str, str]] = set()
    for load in context.guarded.loads:
        for failure in load.all_failures():
            if failure.kind != SYMBOL or failure.gap is None:
                continue
            identity = (failure.chain[-2].lower(), failure.leaf.lower())
            if identity in seen:
                continue
            seen.add(identity)
            yield symbol_finding(context, ntpath.basename(load.root), failure)


def symbol_finding(context: CheckContext, root: str, failure: Failure) -> Finding:
    """The ``missing-symbol`` finding for one :data:`SYMBOL` failure of a load of ``root``."""
    assert failure.gap is not None
    gap = failure.gap
    exporter = failure.leaf
    importer = failure.chain[-2] if len(failure.chain) > 1 else failure.chain[0]
    origin = context.system.tree.origin(failure.path) if failure.path else None
    kind = {127: "name", 182: "ordinal"}.get(gap.winerror, "symbol")
    noun = f"{kind}s" if gap.count != 1 else kind
    if gap.bad_image:
        why = f" ({gap.bad_image}, and the loader refuses to bind to it)"
    elif gap.forward_missing:
        why = f" (forwarded to {gap.forward_missing}, which cannot be found)"
    else:
        why = ""
    if failure.delay:
        consequence = "torch imports, and the feature that needs it fails when first used"
    else:
        consequence = f"loading {root} fails with WinError {gap.winerror}"
    if gap.bad_image:
        cause = "no import from it can be bound"
    elif gap.damaged_exports:
        cause = f"its export table is damaged ({gap.damaged_exports})"
    else:
        cause = f"it is another build than the one {importer} was linked against"
    message = (
        f"{exporter} does not export {gap.count} {noun} that {importer} imports from it{why}: "
        f"{cause}, so {consequence}"
    )
    importer_path = failure.importer
    replaced = [
        f"{name} is not the file {context.owner_of(path)} installed (its SHA-256 differs "
        "from the package's RECORD)"
        for name, path in ((exporter, failure.path), (importer, importer_path))
        if context.replaced_since_install(path)
    ]
    if replaced:
        message += "; " + "; ".join(replaced)
    return Finding(
        code=Code.MISSING_SYMBOL,
        severity=WARNING if failure.delay else ERROR,
        message=message,
        dll=root,
        missing=exporter,
        chain=failure.chain,
        path=origin,
        symbols=gap.missing,
        hints=(
            _hints.for_corrupt(exporter, context.hints, context.owner_of(failure.path))
            if gap.damaged_exports
            else _hints_for(context, exporter, failure.path, importer, importer_path)
        ),
        rank=RANK + (30 if failure.delay else 0),
    )


def _hints_for(
    context: CheckContext,
    exporter: str,
    exporter_path: str | None,
    importer: str,
    importer_path: str | None,
) -> tuple[RepairHint, ...]:
    ctx = context.hints
    lowered = exporter.lower()
    exporter_owner = context.owner_of(exporter_path)
    importer_owner = context.owner_of(importer_path)
    if lowered in _hints.VC_RUNTIME:
        return (_hints.vc_redist(ctx, lowered),)
    conda = context.conda_owners_of(exporter_path) if exporter_owner is None else []
    if conda:
        return (_conda_reinstall(context, exporter, exporter_path, conda),)
    if exporter_owner is None and exporter_path is not None:
        origin = context.system.tree.origin(exporter_path)
        stray = RepairHint(
            f"{origin} belongs to no installed package and shadows the {exporter} that "
            f"{importer} was built with; remove or rename that copy (or the folder that puts "
            "it first: PATH, or a program that loaded it earlier)",
        )
        return (stray, *_reinstall_owner(context, importer_owner, importer))
    if _name(exporter_owner) == "torch" and _name(importer_owner) in (None, "torch"):
        return (
            _hints.reinstall_torch(
                ctx,
                f"torch's own DLLs come from different releases ({exporter} does not match "
                f"{importer}): a partial upgrade or an overwritten file; reinstall torch",
            ),
        )
    if _name(exporter_owner) == "torch":
        return _reinstall_owner(context, importer_owner, importer)
    return (
        RepairHint(
            f"{exporter} comes from {exporter_owner}, which is not the build {importer} needs; "
            "reinstall the version the package that imports it requires",
            (
                ctx.pip(
                    "install",
                    "--force-reinstall",
                    "--no-deps",
                    "--no-cache-dir",
                    str(exporter_owner),
                ),
            ),
        ),
        *_reinstall_owner(context, importer_owner, importer),
    )


def _conda_reinstall(
    context: CheckContext, exporter: str, path: str | None, owners: list[str]
) -> RepairHint:
    """A file a conda package installed: reinstall that package (never delete its file).

    For an OpenMP runtime that another package's copy overwrote (conda-forge's llvm-openmp
    ships a ``libiomp5md.dll`` too, without the ordinals torch <= 2.2 imports), Intel's.
    """
    names = [_name(owner) or owner for owner in owners]
    target = names[0]
    try:
        runtime = any(
            mark == KMP or mark.startswith(ALIAS) for mark in context.facts(path or "").openmp
        )
    except ImageUnavailable:
        runtime = False
    if runtime and "intel-openmp" in names:
        target = "intel-openmp"
    listed = " and ".join(owners)
    why = (
        f"{exporter} was installed by the conda package {listed}"
        + (", which overwrote each other's copy" if len(owners) > 1 else "")
        + f": reinstall {target} so the file is the build it ships"
    )
    return RepairHint(why, (f"conda install --force-reinstall {target}",))


def _reinstall_owner(
    context: CheckContext, owner: str | None, binary: str
) -> tuple[RepairHint, ...]:
    """Reinstall the package that owns the importing binary, matched to this torch."""
    ctx = context.hints
    name = _name(owner)
    if name is None or name == "torch":
        return (_hints.reinstall_torch(ctx, f"reinstall torch so that {binary} matches"),)
    torch_pin = f"torch=={ctx.base_version}" if ctx.base_version else "torch"
    return (
        RepairHint(
            f"{binary} belongs to {owner}, built for another torch than {ctx.torch_version}; "
            "install the release built for this torch, together with it",
            (ctx.pip("install", "--force-reinstall", name, torch_pin),),
        ),
    )


def _name(owner: str | None) -> str | None:
    return owner.split("==")[0] if owner else None
