"""Every rule, registered once with the platforms it applies to, and run for one platform.

A rule is a function of a platform's context (:class:`~torchguard._rules.context.CheckContext`
on Windows, :class:`~torchguard._rules.linux_context.LinuxContext` on Linux) to findings, marked
with :func:`rule`. :data:`MODULES` names the modules that hold each platform's rules, in the
order their findings are produced (findings of equal severity and rank keep it); only the asked
platform's modules are imported, so the Linux analysis never imports the Windows rules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from torchguard._report.findings import Finding

WINDOWS = "windows"
LINUX = "linux"
PLATFORMS = frozenset({WINDOWS, LINUX})

MODULES: Mapping[str, tuple[str, ...]] = {
    WINDOWS: (
        "closure",
        "unreadable",
        "symbols",
        "dll_dirs",
        "path_fallback",
        "runtime_version",
        "cuda_driver",
        "cpu_build",
        "xpu_driver",
        "gpu_arch",
        "extension_kernels",
        "cudnn_zlib",
        "page_file",
        "path_hazards",
        "pairing",
        "packages",
        "openmp",
        "windows_wheel_tags",
        "windows_bitsandbytes",
        "smart_app_control",
        "compile_ready",
        "windows_neighbours",
    ),
    LINUX: (
        "linux_missing",
        "linux_preload",
        "linux_conflicts",
        "linux_cpu_build",
        "linux_driver",
        "linux_gpu_arch",
        "linux_extension_kernels",
        "linux_shadowed",
        "linux_late",
        "linux_package_mismatch",
        "linux_extensions",
        "linux_unread",
        "linux_compile",
        # last, as their findings followed the others' before they became rules (issue 26)
        "linux_wheel_tags",
        "linux_bitsandbytes",
        "neighbours",
    ),
}

Check = Callable[[Any], Iterable[Finding]]
C = TypeVar("C")


class RuleRegistrationError(ValueError):
    """A rule registered twice, or for no known platform: a programming error."""


@dataclass(frozen=True)
class Rule:
    name: str
    """``module.function`` under ``torchguard._rules``: unique."""
    platforms: frozenset[str]
    check: Check

    @property
    def module(self) -> str:
        return self.name.rpartition(".")[0]


_REGISTERED: dict[str, Rule] = {}


def rule(
    *platforms: str,
) -> Callable[[Callable[[C], Iterable[Finding]]], Callable[[C], Iterable[Finding]]]:
    """Register the decorated function once, as a rule of ``platforms``."""
    unknown = set(platforms) - PLATFORMS
    if not platforms or unknown:
        raise RuleRegistrationError(f"a rule needs known platforms, not {sorted(unknown)}")

    def register(check: Callable[[C], Iterable[Finding]]) -> Callable[[C], Iterable[Finding]]:
        name = f"{check.__module__.rpartition('.')[2]}.{check.__qualname__}"
        if name in _REGISTERED:
            raise RuleRegistrationError(f"rule {name} is registered twice")
        _REGISTERED[name] = Rule(name, frozenset(platforms), check)
        return check

    return register


def rules(platform: str) -> tuple[Rule, ...]:
    """The rules of ``platform``, in :data:`MODULES` order (importing only those modules).

    Every analysis asks: the answer is kept for as long as the platform's modules and every
    rule registered are the same (a rule registered since, or replaced, makes it asked again).
    """
    modules = MODULES[platform]
    kept = _RULES.get(platform)
    if kept is not None and kept[0] is modules and kept[1] == tuple(_REGISTERED.values()):
        return kept[2]
    found: list[Rule] = []
    for module in modules:
        importlib.import_module(f"torchguard._rules.{module}")
        found += [r for r in _REGISTERED.values() if r.module == module and platform in r.platforms]
    _RULES[platform] = (modules, tuple(_REGISTERED.values()), tuple(found))
    return tuple(found)


#: :func:`rules`' answer per platform: (its modules, every rule registered then, its rules).
_RULES: dict[str, tuple[tuple[str, ...], tuple[Rule, ...], tuple[Rule, ...]]] = {}


def registered() -> tuple[Rule, ...]:
    """Every rule registered so far (all of them once :func:`rules` ran for each platform)."""
    return tuple(_REGISTERED.values())


def run_rules(context: object, platform: str) -> list[Finding]:
    """Every finding of ``platform``'s rules over ``context``, most fundamental first."""
    findings: list[Finding] = []
    for each in rules(platform):
        findings.extend(each.check(context))
    return sorted(findings, key=Finding.sort_key)
