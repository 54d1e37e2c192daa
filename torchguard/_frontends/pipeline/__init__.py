"""One pipeline for every platform: locate -> plan -> read -> resolve -> check -> report.

A platform is a value that implements :class:`Platform`: it starts an :class:`Analysis` of
one system, whose steps the pipeline runs in order and times. Windows (the Windows loader
model over a :class:`~torchguard._platforms.windows.system.System`) and Linux (glibc's ld.so
model over a :class:`~torchguard._platforms.linux.system.LinuxSystem`) are two such values
(:mod:`.windows`, :mod:`.linux`); what each knows of its machine and loader lives in its own
room under ``torchguard/_platforms/``. This module imports neither: a Linux run loads no
Windows module, and a third platform is one more value.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from torchguard._report.findings import Finding
from torchguard._report.report import Report

if TYPE_CHECKING:
    from torchguard._binary.cache import FactsCache
    from torchguard._platforms.linux.cache import LinuxCache
    from torchguard._platforms.linux.system import LinuxSystem
    from torchguard._platforms.windows.system import System

__all__ = ["STEPS", "Analysis", "Platform", "analyze", "analyze_linux", "linux_cache", "run"]

#: The steps of every analysis, in order; the report's ``timings`` name each, and ``total``.
STEPS = ("locate", "plan", "read", "resolve", "check")

SystemT = TypeVar("SystemT", contravariant=True)
CacheT = TypeVar("CacheT", contravariant=True)


@runtime_checkable
class Analysis(Protocol):
    """One analysis of one system: each step keeps what it learned for the next."""

    def locate(self) -> Report | None:
        """Find torch and what came with it; a report (torch is missing) ends the run."""

    def plan(self) -> None:
        """What the loader will search: the folders, the preload lists."""

    def read(self) -> None:
        """Open the binaries' reader, through the one facts cache."""

    def resolve(self) -> None:
        """Replay ``import torch`` on the platform's loader model."""

    def check(self) -> list[Finding]:
        """Run the platform's rules over what the replay found."""

    def report(self, findings: list[Finding], timings: dict[str, float]) -> Report:
        """The report of this run."""

    def close(self) -> None:
        """Release what the run opened (wheels, scratch state); called whatever happened."""


@runtime_checkable
class Platform(Protocol[SystemT, CacheT]):
    """A platform: its name and how it starts an analysis of one of its systems."""

    @property
    def name(self) -> str: ...

    def start(self, system: SystemT, cache: CacheT | None) -> Analysis: ...


def run(platform: Platform[SystemT, CacheT], system: SystemT, cache: CacheT | None) -> Report:
    """The whole analysis of ``system`` on ``platform``; bad input becomes findings."""
    start = last = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(step: str) -> None:
        nonlocal last
        now = time.perf_counter()
        timings[step] = now - last
        last = now

    analysis = platform.start(system, cache)
    try:
        missing = analysis.locate()
        if missing is not None:
            return missing
        lap("locate")
        analysis.plan()
        lap("plan")
        analysis.read()
        lap("read")
        analysis.resolve()
        lap("resolve")
        findings = analysis.check()
        lap("check")
        timings["total"] = time.perf_counter() - start
        return analysis.report(findings, timings)
    finally:
        analysis.close()


def analyze(system: System, *, cwd: str | None = None, cache: FactsCache | None = None) -> Report:
    """The Windows analysis; ``cwd``: the current folder torch's PATH fallback searches."""
    from torchguard._frontends.pipeline.windows import WindowsPlatform

    return run(WindowsPlatform(cwd=cwd), system, cache)


def analyze_linux(system: LinuxSystem, *, cache: LinuxCache | None = None) -> Report:
    """The Linux analysis of ``system``; problems become findings."""
    from torchguard._frontends.pipeline.linux import LinuxPlatform

    return run(LinuxPlatform(), system, cache)


def linux_cache() -> LinuxCache:
    """The user's persistent Linux cache (a run-only one when caching is off)."""
    from torchguard._platforms.linux.cached import linux_cache as user_linux_cache

    return user_linux_cache()
