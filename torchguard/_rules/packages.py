"""Failures loading the binaries of torch's siblings and extensions, named by package.

Each failure is worded by the finding family of its kind (``missing-dll``, ``corrupt-dll``,
``arch-mismatch`` ...: :data:`FAILURE_FINDINGS`), with ``package`` set and the severity of its
consequence: an error when the package's import fails, a warning when only a feature is lost,
nothing when the package hides the failure and falls back (torchaudio's FFmpeg backends).
Ranked after torch's own failures, which block every package.
"""

from __future__ import annotations

import ntpath
from collections.abc import Callable, Iterator
from dataclasses import replace

from torchguard._facts.cuda_builds import (
    PREVIOUS_VERSIONS_URL,
    Release,
    install_command,
    release_of,
)
from torchguard._facts.vocab import Code
from torchguard._platforms.windows.builds import BuildTarget
from torchguard._platforms.windows.ecosystem import CORE, OPTIONAL, PackageSimulation, is_torch_dll
from torchguard._platforms.windows.loader import ARCH, CORRUPT, INIT, MISSING, SYMBOL, Failure
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules import closure, runtime_version, symbols
from torchguard._rules.context import CheckContext
from torchguard._rules.cpu_build import installed_siblings
from torchguard._rules.hints import is_cuda_dll
from torchguard._rules.registry import WINDOWS, rule

FindingBuilder = Callable[[CheckContext, str, Failure], Finding]

#: How a load failure of each kind (every key of ``_platforms.windows.loader.WINERROR``) becomes
#: a finding.
FAILURE_FINDINGS: dict[str, FindingBuilder] = {
    MISSING: closure.failure_finding,
    CORRUPT: closure.failure_finding,
    ARCH: closure.failure_finding,
    SYMBOL: symbols.symbol_finding,
    INIT: runtime_version.init_finding,
}

_SEVERITY = {CORE: ERROR, OPTIONAL: WARNING}

#: After every finding about torch itself.
RANK_OFFSET = 100


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    for simulation in context.packages:
        yield from _package(context, simulation)


def _package(context: CheckContext, simulation: PackageSimulation) -> Iterator[Finding]:
    if not any(r.load is not None and r.load.failures for r in simulation.results):
        return  # the common case: nothing to word, so its RECORD is not even parsed
    plan = simulation.plan
    owned = {ntpath.basename(p).lower() for p in plan.dist.record_paths()}
    pin = f"{plan.name}=={plan.dist.version}"
    command = (
        context.hints.pip("install", "--force-reinstall", "--no-deps", pin)
        if plan.sibling  # built per torch variant, on torch's own index
        else f"{context.hints.python_cmd} -m pip install --force-reinstall --no-deps {pin}"
    )
    reinstall = RepairHint(
        f"the file is part of {plan.name} {plan.dist.version}, whose install is damaged: "
        "reinstall it",
        (command,),
    )
    built = _built_for(context, simulation)
    seen: set[tuple[str, str]] = set()
    outside: set[str] = set()
    for result in simulation.results:
        group = result.step.group
        if group is not None and not simulation.group_failed(group):
            continue  # an alternative loaded: the ones tried before it cost nothing
        severity = _SEVERITY.get(result.step.role)
        new_group = severity is not None and group is not None and group not in outside
        if new_group and group is not None and _from_outside(simulation, group, owned):
            outside.add(group)
            yield _prerequisite_missing(simulation, group)
        if severity is None or result.load is None:
            continue
        root = ntpath.basename(result.step.path)
        for failure in result.load.all_failures():
            if group is not None and _outside(failure, owned):
                continue  # an outside DLL: said once for the group, or not the cause
            identity = (failure.kind, failure.leaf.lower())
            builder = FAILURE_FINDINGS.get(failure.kind)
            if identity in seen or builder is None:
                continue
            seen.add(identity)
            base = builder(context, root, failure)
            if failure.leaf.lower() in owned:
                hints: tuple[RepairHint, ...] = (reinstall,)
            elif built is not None and _torch_side(failure):
                hints = (built,)  # the torch it was built for brings exactly these DLLs
            else:
                hints = base.hints + ((built,) if built is not None else ())
            yield replace(
                base,
                severity=WARNING if failure.delay else severity,
                message=f"{_consequence(plan.import_name, result.step.feature, severity)}: "
                f"{base.message}",
                package=plan.name,
                hints=hints,
                rank=RANK_OFFSET + base.rank,
            )


def _group_failures(simulation: PackageSimulation, group: str) -> list[tuple[str, Failure]]:
    """(feature, failure) of every alternative of ``group`` tried."""
    return [
        (r.step.feature, f)
        for r in simulation.results
        if r.step.group == group and r.load is not None
        for f in r.load.all_failures()
        if not f.delay
    ]


def _from_outside(simulation: PackageSimulation, group: str, owned: set[str]) -> bool:
    """Every alternative of ``group`` misses DLLs no wheel brings (torchcodec's FFmpeg builds):
    a prerequisite of the machine, which an offline check cannot see installed. Said once,
    beside any other cause its alternatives share (a torch they were not built for)."""
    by_feature: dict[str, bool] = {}
    for feature, failure in _group_failures(simulation, group):
        by_feature[feature] = by_feature.get(feature, False) or _outside(failure, owned)
    return bool(by_feature) and all(by_feature.values())


def _outside(failure: Failure, owned: set[str]) -> bool:
    leaf = failure.leaf
    return (
        failure.kind == MISSING
        and leaf.lower() not in owned
        and not is_torch_dll(leaf)
        and not is_cuda_dll(leaf)
    )


def _prerequisite_missing(simulation: PackageSimulation, group: str) -> Finding:
    """One finding for a group of alternatives none of which finds its outside DLLs: the
    package loads whichever is present. A warning: ``import torch`` is not what fails, and
    the machine may have one of them where this check cannot look."""
    plan = simulation.plan
    owned = {ntpath.basename(p).lower() for p in plan.dist.record_paths()}
    failures = [(n, f) for n, f in _group_failures(simulation, group) if _outside(f, owned)]
    first: dict[str, Failure] = {}
    count: dict[str, int] = {}
    for feature, failure in failures:
        first.setdefault(feature, failure)
        count[feature] = count.get(feature, 0) + 1
    alternatives = ", ".join(first)
    needs = "; ".join(
        f"{f.chain[-2] if len(f.chain) > 1 else f.leaf} needs {f.leaf}"
        + (f" (and {count[feature] - 1} more)" if count[feature] > 1 else "")
        for feature, f in first.items()
    )
    outcome = next(
        (r.step.reaction for r in simulation.results if r.step.group == group and r.step.reaction),
        "fails",
    )
    head = next(iter(first.values()))
    return Finding(
        code=Code.MISSING_DLL,
        severity=WARNING,
        message=f"`import {plan.import_name}` {outcome}: {plan.name} {plan.dist.version} loads "
        f"whichever of {alternatives} is present, and no folder the Windows loader searches "
        f"has one ({needs}); torch itself imports",
        dll=head.chain[0] if head.chain else None,
        missing=head.leaf,
        chain=head.chain,
        hints=(
            RepairHint(
                f"install one of {alternatives} as shared libraries (DLLs) and put their "
                f"folder on PATH, before `import {plan.import_name}`",
                (),
                _PREREQUISITE_URLS.get(plan.name),
            ),
        ),
        package=plan.name,
        rank=RANK_OFFSET + 30,
    )


#: Where a package documents the outside libraries it loads.
_PREREQUISITE_URLS = {
    "torchcodec": "https://github.com/pytorch/torchcodec#installing-torchcodec",
}


def _torch_side(failure: Failure) -> bool:
    """A failure that the torch the extension was built for would not have."""
    leaf = failure.leaf
    return failure.kind == SYMBOL or is_torch_dll(leaf) or is_cuda_dll(leaf)


def _built_for(context: CheckContext, simulation: PackageSimulation) -> RepairHint | None:
    """Install the torch the package's build metadata names, when this torch is another."""
    target = simulation.built_for
    torch = context.torch
    if target is None or target.matches(torch.version, torch.cuda):
        return None
    plan, ctx = simulation.plan, context.hints
    release = release_of(target.torch)
    version = target.torch
    if version.count(".") < 2 and release is not None:
        version = release.releases[-1]  # a series (torch2.8): its newest release
    summary = (
        f"{plan.name} {plan.dist.version} was built for {target.label} ({target.source}), and "
        f"this is torch {torch.version}: install the torch it was built for, or a build "
        f"of {plan.name} for this torch"
    )
    wants_cuda, cuda = _cuda_of(target, release, simulation, torch.cuda)
    if wants_cuda and cuda is None:  # no known CUDA variant of that release to name
        return RepairHint(summary, (), PREVIOUS_VERSIONS_URL)
    same_release = version.partition("+")[0] == (torch.version or "").partition("+")[0]
    command = install_command(
        ctx.python_cmd,
        version,
        cuda,
        conda=ctx.conda,
        release=release,
        siblings=installed_siblings(context) if same_release else (),
    )
    return RepairHint(summary, (command,))


def _cuda_of(
    target: BuildTarget,
    release: Release | None,
    simulation: PackageSimulation,
    current: str | None,
) -> tuple[bool, tuple[int, int] | None]:
    """Whether a CUDA build is wanted, and which variant: the metadata's, else the newest of
    its CUDA major, else (for a package that needs CUDA DLLs) this torch's or the release's
    newest."""
    if target.cuda is not None:
        return True, target.cuda
    variants = release.variants if release is not None else ()
    if target.cuda_major is not None:
        return True, max((v for v in variants if v[0] == target.cuda_major), default=None)
    needs_cuda = any(
        r.load is not None and any(is_cuda_dll(f.leaf) for f in r.load.all_failures())
        for r in simulation.results
    )
    parts = (current or "").split(".")
    numeric = len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit()
    have = (int(parts[0]), int(parts[1])) if numeric else None
    if have is not None and have in variants:
        return True, have
    if needs_cuda:
        return True, variants[-1] if variants else None
    return False, None


def _consequence(import_name: str, feature: str, severity: str) -> str:
    if severity == ERROR:
        return f"`import {import_name}` fails ({feature} does not load)"
    return f"`import {import_name}` loses {feature}"
