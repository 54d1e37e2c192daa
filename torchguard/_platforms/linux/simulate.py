"""``import torch`` on Linux, replayed on the ld.so model, step by step as torch does it.

1. ``CDLL(torch/lib/libtorch_global_deps.so, RTLD_GLOBAL)``;
2. on success with a ``libcudart.so`` mapped: the release's preload by full path from the first
   ``sys.path`` entry holding each library, silently stopping at the first failure; on a
   failure naming a CUDA library: the strict preload of the whole list, then a retry;
3. ``from torch._C import *`` (``RTLD_NOW | RTLD_LOCAL``).
Then each sibling or extension that links torch loads into the process torch leaves behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torchguard._platforms.linux.ldso import Ldso, LoadError
from torchguard._platforms.linux.preload import PreloadPlan

Glob = Callable[[str], list[str]]

GLOBAL_DEPS = "global-deps"
PRELOAD = "preload"
STRICT_PRELOAD = "strict-preload"
EXTENSION = "extension"


@dataclass(frozen=True)
class LinuxStep:
    """One load torch (or a package) performs, and what the model says it does."""

    kind: str
    target: str
    ok: bool
    error: LoadError | None = None
    silent: bool = False
    """A failure torch swallows (its success-path preload stops there)."""


@dataclass(frozen=True)
class LinuxImport:
    """The replay's verdict: ``error`` is what ``import torch`` raises (None: it works)."""

    steps: tuple[LinuxStep, ...]
    error: LoadError | None
    not_found: str | None = None
    """A strict preload's ``ValueError``: this library is in no ``sys.path`` entry."""
    unjudged: bool = False
    """No ``torch/_C`` shared object: nothing native to replay (a stub or a foreign layout)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.not_found is None

    @property
    def doubt(self) -> str:
        """Why the failure is no proof (empty: it is, or there is none). torch's search of
        ``sys.path`` follows a failed load, whose doubt it inherits."""
        if self.error is not None:
            return self.error.doubt
        if self.not_found is not None:
            return next((s.error.doubt for s in self.steps if s.error and s.error.doubt), "")
        return ""

    def describe(self) -> str:
        """How the real import reports it."""
        if self.ok:
            return "succeeds"
        if self.not_found:
            return f"fails: ValueError: {self.not_found} not found in the system path"
        assert self.error is not None
        return f"fails: {self.error.message()}"


def cuda_candidates(
    glob: Glob, sys_path: Sequence[str], folder: str, pattern: str, cuda_major: str | None
) -> list[str]:
    """torch's ``_get_cuda_dep_paths`` over ``sys.path``: the first entry with a match wins."""
    for entry in sys_path:
        found = glob(os.path.join(entry, "nvidia", folder, "lib", pattern))
        if cuda_major is not None:
            found += glob(os.path.join(entry, "nvidia", f"cu{cuda_major}", "lib", pattern))
        found += glob(os.path.join(entry, folder, "lib", pattern))
        if found:
            return found
    return []


def extension_module(glob: Glob, torch_dir: str) -> str | None:
    """``torch/_C.cpython-*.so`` (or ``_C.abi3.so``/``_C.so``)."""
    found = sorted(glob(os.path.join(torch_dir, "_C.*so")) + glob(os.path.join(torch_dir, "_C.so")))
    return found[0] if found else None


def simulate_torch_linux(
    ldso: Ldso, torch_dir: str, plan: PreloadPlan, sys_path: Sequence[str], glob: Glob
) -> LinuxImport:
    """Replay ``import torch``'s native loads on ``ldso`` (which keeps the loaded state)."""
    steps: list[LinuxStep] = []
    global_deps = os.path.join(torch_dir, "lib", "libtorch_global_deps.so")
    if not ldso.files.is_file(global_deps):  # a build without it (conda-forge's layout)
        return _extension(ldso, torch_dir, glob, steps)
    first = ldso.dlopen(global_deps, global_=True)
    steps.append(LinuxStep(GLOBAL_DEPS, global_deps, first.ok, first.error))
    if first.ok:
        if any("libcudart.so" in obj.path for obj in ldso.objects):
            _silent_preload(ldso, plan, sys_path, glob, steps)
    else:
        assert first.error is not None
        text = first.error.message()
        if not any(pattern.split(".", 1)[0] in text for _, pattern, _ in plan.libs):
            return LinuxImport(tuple(steps), first.error)
        for folder, pattern, required in plan.libs:
            found = cuda_candidates(glob, sys_path, folder, pattern, plan.cuda_major)
            if not found:
                if required:
                    return LinuxImport(tuple(steps), None, not_found=pattern)
                continue
            result = ldso.dlopen(found[0])
            steps.append(LinuxStep(STRICT_PRELOAD, found[0], result.ok, result.error))
            if not result.ok:
                return LinuxImport(tuple(steps), result.error)
        retry = ldso.dlopen(global_deps, global_=True)
        steps.append(LinuxStep(GLOBAL_DEPS, global_deps, retry.ok, retry.error))
        if not retry.ok:
            return LinuxImport(tuple(steps), retry.error)
    return _extension(ldso, torch_dir, glob, steps)


def _extension(ldso: Ldso, torch_dir: str, glob: Glob, steps: list[LinuxStep]) -> LinuxImport:
    """``from torch._C import *``; no ``_C`` binary at all is no native import to judge."""
    module = extension_module(glob, torch_dir)
    if module is None:
        return LinuxImport(tuple(steps), None, unjudged=True)
    result = ldso.dlopen(module)
    steps.append(LinuxStep(EXTENSION, module, result.ok, result.error))
    return LinuxImport(tuple(steps), result.error)


def _silent_preload(
    ldso: Ldso, plan: PreloadPlan, sys_path: Sequence[str], glob: Glob, steps: list[LinuxStep]
) -> None:
    for folder, pattern, required in plan.on_success:
        found = cuda_candidates(glob, sys_path, folder, pattern, plan.cuda_major)
        if not found:
            if required:
                steps.append(LinuxStep(PRELOAD, pattern, False, silent=True))
                return  # ValueError inside ``except Exception: pass``
            continue
        result = ldso.dlopen(found[0])
        steps.append(LinuxStep(PRELOAD, found[0], result.ok, result.error, silent=not result.ok))
        if not result.ok:
            return
