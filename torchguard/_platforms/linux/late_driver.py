"""Where the first ``dlopen("libcuda.so.1")`` lands, and whether it is a driver CUDA can use.

Measured with ``LD_DEBUG=files`` on torch 2.9.1+cu128: cuBLASLt's initialisation loads the
driver library while ``import torch`` loads cuBLASLt, with cuBLASLt's own search; cudart looks
at CUDA initialisation only when that found nothing. A copy without ``cuGetProcAddress`` is no
driver to cudart 12/13 (measured with a built stand-in: "Found no NVIDIA driver on your
system").
"""

from __future__ import annotations

from torchguard._binary.elf import ElfReadError
from torchguard._platforms.linux.late_loads import LateFacts
from torchguard._platforms.linux.ldso import LateLoad, Ldso

#: The driver library CUDA loads by name.
DRIVER = "libcuda.so.1"

#: Who ``dlopen``s ``libcuda.so.1`` first, in order (measured with LD_DEBUG=files on torch
#: 2.9.1+cu128): cuBLASLt's initialisation while ``import torch`` loads it, with cuBLASLt's
#: own search (``LD_LIBRARY_PATH``, its RUNPATH ``$ORIGIN``, the cache, the default folders);
#: cudart at CUDA initialisation only when that found nothing, with torch's RPATH first. Every
#: later caller (cuDNN, cuFFT, cuSPARSE, NCCL ... name ``libcuda.so.1`` too) reuses the loaded
#: one by soname.
DRIVER_LOADERS = ("libcublasLt.so", "libcudart.so")

#: cudart 12/13 takes every driver entry point through one of these (read from the real
#: cudart's ``.rodata`` with ``cuInit``): a copy without them is no driver to CUDA.
ENTRY_POINTS = ("cuGetProcAddress", "cuGetProcAddress_v2")
DRIVER_CALLS = ("cuInit",)

#: Every NVIDIA driver library exports it, whatever its age: a copy that has it is a driver
#: (one older than CUDA 11.3 lacks ``cuGetProcAddress``, and the driver-version rules judge
#: that), never "no driver".
DRIVER_MARK = "cuDeviceGet"


def driver_load(ldso: Ldso) -> LateLoad | None:
    """Where ``libcuda.so.1`` lands after ``import torch`` (already mapped: reused), or None
    when no library that loads it is loaded (a CPU-only torch)."""
    mapped = ldso.loaded(DRIVER)
    if mapped is not None:
        return LateLoad(DRIVER, mapped.path, mapped.path, "loaded", (mapped.path,))
    found: LateLoad | None = None
    for prefix in DRIVER_LOADERS:
        loader = next((o for o in ldso.objects if o.soname.startswith(prefix)), None)
        if loader is None:
            continue
        load = ldso.late_load(DRIVER, loader)
        if load.path is not None:
            return load
        found = found or load
    return found


def driver_lacks(ldso: Ldso, load: LateLoad, facts: LateFacts) -> list[str]:
    """The entry points CUDA needs that the ``libcuda.so.1`` landing at ``load`` lacks."""
    if load.path is None or load.via == "loaded" or load.facts is None:
        return []
    key = f"libcuda|{ldso.files.fingerprint(load.path)}"
    known = facts.verdict(key)
    if known is None:
        try:
            offered = ldso.files.symbols(load.path).default
        except ElfReadError:
            return []
        if any(n in offered for n in ENTRY_POINTS) or DRIVER_MARK in offered:
            known = []  # a driver (one without the entry points is old: the version rules')
        else:
            known = [*ENTRY_POINTS, *(n for n in DRIVER_CALLS if n not in offered)]
        facts.store_verdict(key, known)
    return known
