"""Findings for torch's native neighbours (onnxruntime-gpu, ctranslate2) on Linux, from the
replay of their library in two import orders (:mod:`torchguard._platforms.linux.neighbour_loads`).

- ``neighbour-load-order`` (warning): the library, or a CUDA library it loads later by name,
  is found only because torch loaded that soname first; loaded alone (torch not imported yet,
  or never), it fails. Hints: the order that works, ``onnxruntime.preload_dlls()``, the folders
  for ``LD_LIBRARY_PATH``.
- ``missing-dll`` with ``package`` (warning): found in neither order; the message names the
  CUDA major it was built for against torch's, and the hint the release built for torch's.
A neighbour's failure costs its CUDA path only (onnxruntime falls back to the CPU provider,
ctranslate2 fails at its first CUDA call), so every finding here is a warning. :func:`check`
is the rule, over the replays the pipeline ran (:attr:`LinuxContext.neighbours`).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import replace

from torchguard._facts.neighbours import Kind
from torchguard._facts.vocab import Code
from torchguard._platforms.linux.ldso import SharedObject
from torchguard._platforms.linux.neighbour_loads import Order
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints, nvidia_wheel
from torchguard._rules.linux_missing import load_error_finding
from torchguard._rules.neighbour_text import cuda_pin_hint, found_through_torch, order_finding
from torchguard._rules.registry import LINUX, rule

RANK = 140
_MAJOR = re.compile(r"\.so\.(\d+)")


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    for each in context.neighbours:
        kind, version, library = each.neighbour.kind, each.neighbour.version, each.neighbour.library
        yield from neighbour_findings(
            kind, version, library, each.after, each.solo, context.hints, each.objects
        )


def neighbour_findings(
    kind: Kind,
    version: str,
    library: str,
    after_torch: Order,
    alone: Order,
    hints: LinuxHints,
    objects: Sequence[SharedObject],
) -> list[Finding]:
    label = f"{kind.package} {version}"
    file = posixpath.basename(library)
    if after_torch.error is not None:
        base = load_error_finding(after_torch.error, hints, objects, kind.package)
        return [
            replace(
                base,
                severity=WARNING,
                message=f"{label}: {kind.role} ({file}) does not load even after `import "
                f"torch`: {base.message}",
                hints=_pin(kind, after_torch.error.missing, hints) + base.hints,
                rank=RANK,
            )
        ]
    findings: list[Finding] = []
    # names of one library with other majors (libcudart.so.12, .so.13) are alternatives the
    # binary tries in turn: one found is enough
    found_stems = {_stem(late.name) for late in after_torch.late if late.path is not None}
    nowhere = [
        late
        for late in after_torch.late
        if late.path is None and _stem(late.name) not in found_stems
    ]
    for late in nowhere:
        findings.append(
            Finding(
                code=Code.MISSING_DLL,
                severity=WARNING,
                message=(
                    f"{label}: {file} loads {late.name} by name at its first CUDA call, and it "
                    "is found nowhere, whether torch is imported first or not "
                    f'("Library {late.name} is not found or cannot be loaded")'
                    + _built(late.name, hints)
                ),
                missing=late.name,
                path=library,
                package=kind.package,
                hints=_pin(kind, late.name, hints) + _wheel(late.name, hints),
                rank=RANK,
            )
        )
    alone_found = {_stem(late.name) for late in alone.late if late.path is not None}
    by_torch = [
        late
        for late in after_torch.late
        if late.path is not None and late.via == "loaded" and _stem(late.name) not in alone_found
    ]
    if alone.error is None and not by_torch:
        return findings
    if alone.error is not None:
        needs = [alone.error.missing]
        folders = [
            path for soname, path in after_torch.loaded_from if soname == alone.error.missing
        ]
        when = f"{file} itself does not load ({alone.error.message()})"
    else:
        needs, folders, when = found_through_torch(by_torch)
    dirs = list(dict.fromkeys(posixpath.dirname(p) for p in folders))
    findings.append(
        order_finding(
            label=label,
            kind=kind,
            file=file,
            needs=needs,
            dirs=dirs,
            when=when,
            library=library,
            hints=_order_hints(kind, version, dirs),
            rank=RANK,
        )
    )
    return findings


def _order_hints(kind: Kind, version: str, dirs: list[str]) -> tuple[RepairHint, ...]:
    hints = [
        RepairHint(
            f"import torch before {kind.module} first uses CUDA (the order that works)",
            (f"import torch  # then: import {kind.module}",),
        )
    ]
    if kind.module == "onnxruntime" and _at_least(version, (1, 21)):
        hints.append(
            RepairHint(
                "or, without torch, let onnxruntime load the NVIDIA wheels' libraries first "
                "(onnxruntime-gpu 1.21+)",
                ("import onnxruntime; onnxruntime.preload_dlls()",),
            )
        )
    if dirs:
        joined = ":".join(dirs)
        hints.append(
            RepairHint(
                "or put those folders on the library path before Python starts",
                (
                    f"export LD_LIBRARY_PATH={shlex.quote(joined)}"
                    "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
                ),
            )
        )
    return tuple(hints)


def _built(name: str, hints: LinuxHints) -> str:
    major, torch_major = _major(name), hints.cuda_major
    if major is None or torch_major is None or not name.startswith(("libcublas", "libcudart")):
        return ""
    if str(major) == torch_major:
        return ""
    return f"; it was built for CUDA {major}, and this torch is a CUDA {torch_major} build"


def _pin(kind: Kind, name: str, hints: LinuxHints) -> tuple[RepairHint, ...]:
    major, torch_major = _major(name), hints.cuda_major
    if major is None or torch_major is None or not torch_major.isdigit():
        return ()
    if not name.startswith(("libcublas", "libcudart")) or str(major) == torch_major:
        return ()
    return cuda_pin_hint(kind, torch_major, lambda pin: hints.pip("install", shlex.quote(pin)))


def _wheel(name: str, hints: LinuxHints) -> tuple[RepairHint, ...]:
    major = _major(name)
    wheel = nvidia_wheel(name, str(major) if major is not None else None)
    if wheel is None:
        return ()
    return (
        RepairHint(f"or install NVIDIA's wheel that ships {name}", (hints.pip("install", wheel),)),
    )


def _stem(name: str) -> str:
    """``libcudart.so.12`` -> ``libcudart.so``."""
    return name.split(".so", 1)[0] + ".so"


def _major(name: str) -> int | None:
    match = _MAJOR.search(name)
    return int(match[1]) if match else None


def _at_least(version: str, wanted: tuple[int, int]) -> bool:
    parts = re.findall(r"\d+", version)
    return len(parts) >= 2 and (int(parts[0]), int(parts[1])) >= wanted
