"""The CPU facts ld.so's search depends on: hwcaps subdirectories and ``$PLATFORM``.

glibc 2.33+ tries ``glibc-hwcaps/x86-64-v4``, ``-v3``, ``-v2`` under every search directory
(the levels the CPU supports, best first) before the directory itself, and picks the matching
hwcaps entry of ``ld.so.cache``. Before 2.37 it also tries the legacy subdirectories built from
``tls``, the platform and the ``x86_64`` hwcap (``tls/x86_64/x86_64`` ... ``x86_64``, as
``LD_DEBUG=libs`` prints them). ``$PLATFORM`` is ``haswell`` (or ``xeon_phi``) on Intel CPUs
with those features (glibc's ``cpu-features.c``), else the kernel's ``AT_PLATFORM``.

Live, the features come from the first processor of ``/proc/cpuinfo`` (no subprocess; read only
when some search directory has such a subdirectory); offline an assumed level is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CPUINFO = "/proc/cpuinfo"

#: glibc's x86-64 ISA levels (sysdeps/x86/get-isa-level.h) in ``/proc/cpuinfo`` flag names.
LEVELS: tuple[tuple[int, frozenset[str]], ...] = (
    (2, frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})),
    (3, frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})),
    (4, frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})),
)
_HASWELL = frozenset({"avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "popcnt"})
_LEGACY_TOPS = ("tls", "x86_64", "haswell", "xeon_phi")


@dataclass(frozen=True)
class Cpu:
    """What ld.so derives from the CPU: the x86-64 level and ``$PLATFORM``."""

    level: int
    platform: str


def parse_cpuinfo(text: str, machine: str = "x86_64") -> Cpu:
    """The first processor's vendor and flags as glibc classifies them."""
    vendor = ""
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if vendor or flags:
                break  # the end of the first processor's block
            continue
        key = key.strip()
        if key == "vendor_id":
            vendor = value.strip()
        elif key == "flags":
            flags = frozenset(value.split())
    if machine != "x86_64":
        return Cpu(0, machine)
    level = 1
    for number, needed in LEVELS:
        if not needed <= flags:
            break
        level = number
    platform = "x86_64"
    if vendor == "GenuineIntel":
        if {"avx512cd", "avx512er", "avx512pf"} <= flags:
            platform = "xeon_phi"
        elif flags >= _HASWELL:
            platform = "haswell"
    return Cpu(level, platform)


def read_cpu(path: str = CPUINFO, machine: str = "x86_64") -> Cpu:
    """:func:`parse_cpuinfo` of the first processor (its first 16 KiB; a baseline CPU when
    the file cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_cpuinfo(handle.read(16384), machine)
    except OSError:
        return Cpu(1 if machine == "x86_64" else 0, machine)


def glibc_version() -> tuple[int, int] | None:
    """This process's glibc (``os.confstr``, no subprocess); None when not glibc."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, number = text.partition(" ")
    parts = number.split(".")
    if name != "glibc" or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def subdir_tops(glibc: tuple[int, int] | None, machine: str = "x86_64") -> tuple[str, ...]:
    """The first components worth a look in each search directory (cheap: one ``stat``)."""
    if machine != "x86_64":
        return ()
    tops: list[str] = []
    if glibc is None or glibc >= (2, 33):
        tops.append("glibc-hwcaps")
    if glibc is not None and glibc < (2, 37):
        tops += _LEGACY_TOPS
    return tuple(tops)


def subdirs(cpu: Cpu, glibc: tuple[int, int] | None, machine: str = "x86_64") -> tuple[str, ...]:
    """The subdirectories tried before each search directory, best first.

    ``glibc`` None (offline, unknown): the ``glibc-hwcaps`` ones only (2.37 and later)."""
    if machine != "x86_64":
        return ()
    found: list[str] = []
    if glibc is None or glibc >= (2, 33):
        found += [f"glibc-hwcaps/x86-64-v{n}" for n in (4, 3, 2) if n <= cpu.level]
    if glibc is not None and glibc < (2, 37):
        tls, plat, cap = "tls", cpu.platform, "x86_64"
        found += [
            f"{tls}/{plat}/{cap}",
            f"{tls}/{plat}",
            f"{tls}/{cap}",
            tls,
            f"{plat}/{cap}",
            plat,
            cap,
        ]
    return tuple(dict.fromkeys(found))


def hwcaps_names(cpu: Cpu, machine: str = "x86_64") -> tuple[str, ...]:
    """The ``glibc-hwcaps`` names the CPU supports, best first (what ``ld.so.cache`` hwcaps
    entries are matched against)."""
    if machine != "x86_64":
        return ()
    return tuple(f"x86-64-v{n}" for n in (4, 3, 2) if n <= cpu.level)
