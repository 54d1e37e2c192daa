"""The Windows rule set: every check of :class:`CheckContext`, in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torchguard._report.findings import Finding
from torchguard._rules import (
    bitsandbytes,
    closure,
    compile_ready,
    cpu_build,
    cuda_driver,
    cudnn_zlib,
    dll_dirs,
    extension_kernels,
    gpu_arch,
    openmp,
    packages,
    page_file,
    pairing,
    path_fallback,
    path_hazards,
    runtime_version,
    smart_app_control,
    symbols,
    unreadable,
    wheel_tags,
    xpu_driver,
)
from torchguard._rules.context import CheckContext

Rule = Callable[[CheckContext], Iterable[Finding]]

RULES: tuple[Rule, ...] = (
    closure.check,
    unreadable.check,
    symbols.check,
    dll_dirs.check,
    path_fallback.check,
    runtime_version.check,
    cuda_driver.check,
    cpu_build.check,
    xpu_driver.check,
    gpu_arch.check,
    extension_kernels.check,
    cudnn_zlib.check,
    page_file.check,
    path_hazards.check,
    pairing.check,
    packages.check,
    openmp.check,
    wheel_tags.check,
    bitsandbytes.check,
    smart_app_control.check,
    compile_ready.check,
)


def run_rules(context: CheckContext) -> list[Finding]:
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(context))
    return sorted(findings, key=Finding.sort_key)
