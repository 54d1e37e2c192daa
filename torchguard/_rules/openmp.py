"""openmp-conflict: two OpenMP runtimes that start in one process abort it (OMP: Error #15).

The process dies with no Python traceback, so this is said before ``import torch``. Verdicts
(see ``_platforms.windows.openmp`` and the team's openmp.md, measured under Wine with the real
wheels):

- live, another KMP runtime already started and torch will start its own: a certain abort of
  ``import torch``: an **error**;
- two differently named runtimes both used (torch's and a package's): a certain abort once
  both run, in either order: an **error** of that package (``import torch`` itself works);
- MKL's sibling runtime is another file than torch's copy: aborts when torch starts first,
  which ``import torch`` does, and MKL's first threaded call follows; MKL first works: a
  **warning**, which ``ensure()`` prevents by preloading the sibling.

``KMP_DUPLICATE_LIB_OK`` makes KMP let both run (Intel: unsafe, may give wrong results): the
finding is then a warning that says so. It is never recommended.
"""

from __future__ import annotations

import ntpath
from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.openmp import NAMES, SIBLING_COPY, STARTED, Conflict, OpenMPState
from torchguard._report.findings import ERROR, WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.hints import install_release
from torchguard._rules.registry import WINDOWS, rule

ABORT = (
    'the second runtime to start aborts the process with "OMP: Error #15: Initializing '
    'libiomp5md.dll, but found libiomp5md.dll already initialized." (no Python traceback)'
)
MASKED = (
    "KMP_DUPLICATE_LIB_OK is set, so it does not abort: both runtimes run, which Intel calls "
    "unsafe (crashes or silently wrong results)"
)
SWITCH = "TORCHGUARD_OPENMP=keep"


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    state = context.openmp
    grouped: dict[tuple[str | None, str], list[Conflict]] = {}
    for conflict in state.conflicts:
        if conflict.kind == STARTED:
            yield _started(context, state, conflict)
        elif conflict.kind == NAMES:
            key = (conflict.torch_copy, _package(context, conflict.user))
            grouped.setdefault(key, []).append(conflict)
        elif conflict.kind == SIBLING_COPY:
            yield _sibling(context, state, conflict)
    for conflicts in grouped.values():  # one cause: this package's runtimes beside torch's
        yield _names(context, state, conflicts)


def _owner(context: CheckContext, path: str | None) -> str | None:
    if path is None:
        return None
    return context.file_owner(path) or context.conda_owner_of(path)


def _who(context: CheckContext, path: str | None) -> str:
    """``C:\\...\\libiomp5md.dll (intel-openmp==2021.4.0)``: a file and its owner."""
    owner = _owner(context, path)
    return f"{path} ({owner})" if owner else f"{path} (no installed package lists it)"


def _package(context: CheckContext, user: str) -> str:
    """The package whose use starts the other runtime (never None: torch is not blocked)."""
    owner = _owner(context, user)
    return owner.split("==")[0] if owner else ntpath.basename(user)


def _started(context: CheckContext, state: OpenMPState, conflict: Conflict) -> Finding:
    message = (
        f"an OpenMP runtime already runs in this process ({conflict.other}, started by an "
        f"earlier import); import torch starts its own ({conflict.torch_copy}): "
        + (MASKED if state.masked else ABORT)
    )
    return Finding(
        code=Code.OPENMP_CONFLICT,
        severity=WARNING if state.masked else ERROR,
        message=message,
        dll=ntpath.basename(conflict.torch_copy or ""),
        missing=ntpath.basename(conflict.other),
        path=conflict.other,
        hints=(
            RepairHint(
                "import torch (or call torchguard.ensure()) before the package that loads "
                f"{ntpath.basename(conflict.other)}: torch then shares its runtime",
            ),
            _one_source(context),
        ),
        rank=30,
    )


def _names(context: CheckContext, state: OpenMPState, conflicts: list[Conflict]) -> Finding:
    """One finding for one package's runtimes beside torch's: each runtime it ships, with
    the binaries that use it, folded under the one cause."""
    conflict = conflicts[0]
    torch_name = ntpath.basename(conflict.torch_copy or "")
    package = _package(context, conflict.user)
    users: dict[str, list[str]] = {}
    for each in conflicts:
        users.setdefault(each.other, []).append(ntpath.basename(each.user))
    started = " and ".join(
        f"{ntpath.basename(other)} ({_who(context, other)}, used by {', '.join(names)})"
        for other, names in users.items()
    )
    message = (
        f"two different OpenMP runtimes: torch starts {torch_name} ({conflict.torch_copy}); "
        f"{package} starts {started}. Using both in one process, in either order: "
        + (MASKED if state.masked else ABORT)
    )
    owner = _owner(context, conflict.user)
    hints = [_one_source(context)]
    if owner is not None and "==" in owner and not context.hints.conda:
        name = owner.split("==")[0]
        hints.insert(
            0,
            RepairHint(
                f"another release of {name} may be built on another OpenMP runtime: upgrade "
                "it (`torchguard check` resolves and scans this fix before printing it)",
                (context.hints.pip("install", "--upgrade", name),),
            ),
        )
    if context.torch.base_version == "2.4.0":
        hints.insert(
            0,
            RepairHint(
                "torch 2.4.0 uses LLVM OpenMP (libomp140.x86_64.dll); 2.4.1 returned to "
                "Intel's runtime",
                (install_release(context.hints, "2.4.1"),),
            ),
        )
    return Finding(
        code=Code.OPENMP_CONFLICT,
        severity=WARNING if state.masked else ERROR,
        message=message,
        dll=torch_name,
        missing=ntpath.basename(conflict.other),
        path=conflict.other,
        hints=tuple(hints),
        package=package,
        rank=130,
    )


def _sibling(context: CheckContext, state: OpenMPState, conflict: Conflict) -> Finding:
    package = _package(context, conflict.user)
    sibling = conflict.other
    order = (
        f"import torch starts {_who(context, conflict.torch_copy)}; the first threaded call "
        f"of MKL ({ntpath.basename(conflict.user)}, e.g. numpy or scipy built with MKL) then "
        f"loads and starts {_who(context, sibling)} by full path, a second runtime: "
        + (MASKED if state.masked else ABORT)
        + ". MKL running before torch works: torch then binds to MKL's copy"
    )
    preload = state.preload
    if preload is not None and preload.gap is not None:
        order += (
            f". torchguard does not preload {ntpath.basename(sibling)}: "
            f"{ntpath.basename(preload.importer or '')} imports {preload.gap.count} name(s) it "
            f"lacks ({', '.join(preload.gap.missing[:3])})"
        )
    return Finding(
        code=Code.OPENMP_CONFLICT,
        severity=WARNING,
        message=f"MKL and torch would start two OpenMP runtimes: {order}",
        dll=ntpath.basename(conflict.torch_copy or ""),
        missing=ntpath.basename(sibling),
        path=sibling,
        hints=_sibling_hints(context, state, sibling),
        package=package,
        rank=135,
    )


def _sibling_hints(
    context: CheckContext, state: OpenMPState, sibling: str
) -> tuple[RepairHint, ...]:
    hints: list[RepairHint] = []
    preload = state.preload
    if preload is not None and preload.gap is None:
        hints.append(
            RepairHint(
                f"automatic: torchguard.ensure() loads {sibling} before torch, so torch and MKL "
                f"share one runtime (torch's imports all bind to it; {SWITCH} turns this off)",
            )
        )
    if context.hints.conda or context.conda_owner_of(sibling):
        hints.append(
            RepairHint(
                "use numpy and scipy built on OpenBLAS instead of MKL", ("conda install nomkl",)
            )
        )
    hints.append(_one_source(context))
    hints.append(
        RepairHint(
            "run MKL single-threaded: it then loads no OpenMP runtime at all",
            ("set MKL_THREADING_LAYER=SEQUENTIAL",),
        )
    )
    return tuple(hints)


def _one_source(context: CheckContext) -> RepairHint:
    if context.hints.conda:
        return RepairHint(
            "install torch and numpy from one source, so they share one OpenMP runtime: "
            "conda's pytorch with conda's numpy, or pip's torch with pip's numpy (OpenBLAS)",
            ("conda install pytorch numpy -c pytorch",),
        )
    return RepairHint(
        "install torch and the other package from one source, so they share one OpenMP "
        "runtime (pip's numpy uses OpenBLAS; a package built on vcomp140, as pip's "
        "scikit-learn is, never conflicts)",
    )
