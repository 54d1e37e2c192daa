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

from torchguard._model.ecosystem import CORE, OPTIONAL, PackageSimulation
from torchguard._model.loader import ARCH, CORRUPT, INIT, MISSING, SYMBOL, Failure
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules import closure, runtime_version, symbols
from torchguard._rules.context import CheckContext

FindingBuilder = Callable[[CheckContext, str, Failure], Finding]

#: How a load failure of each kind (every key of ``_loader.WINERROR``) becomes a finding.
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
    seen: set[tuple[str, str]] = set()
    for result in simulation.results:
        severity = _SEVERITY.get(result.step.role)
        if severity is None or result.load is None:
            continue
        root = ntpath.basename(result.step.path)
        for failure in result.load.all_failures():
            identity = (failure.kind, failure.leaf.lower())
            builder = FAILURE_FINDINGS.get(failure.kind)
            if identity in seen or builder is None:
                continue
            seen.add(identity)
            base = builder(context, root, failure)
            hints = (reinstall,) if failure.leaf.lower() in owned else base.hints
            yield replace(
                base,
                severity=WARNING if failure.delay else severity,
                message=f"{_consequence(plan.import_name, result.step.feature, severity)}: "
                f"{base.message}",
                package=plan.name,
                hints=hints,
                rank=RANK_OFFSET + base.rank,
            )


def _consequence(import_name: str, feature: str, severity: str) -> str:
    if severity == ERROR:
        return f"`import {import_name}` fails ({feature} does not load)"
    return f"`import {import_name}` loses {feature}"
