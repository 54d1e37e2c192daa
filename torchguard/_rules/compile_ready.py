"""compile-not-ready: ``torch.compile`` on Windows will fail to build triton's launcher.

triton-windows compiles a small C launcher with this interpreter's headers and import library
the first time a compiled kernel runs (``triton/runtime/build.py``, read from the 3.8 wheel):
``Python.h`` from the interpreter's ``Include`` folder, ``python3XY.lib`` (``python3XYt.lib``
free-threaded) from ``libs`` beside ``sys.exec_prefix``, ``sys.base_exec_prefix`` or
python.exe, and a C compiler: ``CC``, a Visual Studio developer shell, the TinyCC it bundles
(``triton\\runtime\\tcc\\tcc.exe``), else ``cl``, ``gcc`` or ``clang`` on PATH. An embeddable
Python (ComfyUI's ``python_embeded``) has neither ``include`` nor ``libs``: "'Python.h' file
not found", "LINK : fatal error LNK1104: cannot open file 'python310.lib'". Judged live, only
when triton is installed (the sign that torch.compile is meant to run); a warning, since
``import torch`` is unaffected.

Also, live or offline (the installed distributions are enough): a triton-windows whose minor
is not the one the installed torch's minor pairs with (:mod:`torchguard._facts.triton_pairs`,
from triton-windows' README), the cause of "cannot import name 'AttrsDescriptor' from
'triton.compiler.compiler'" and its kin. A torch the table does not know gives nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.compile_facts import (
    TRITON_WINDOWS,
    CompileFacts,
    CompileInputs,
    Pairing,
    Triton,
    compile_facts,
)
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

RANK = 150
URL = "https://github.com/woct0rdho/triton-windows#readme"
PAIRS_URL = "https://github.com/triton-lang/triton-windows#3-pytorch"


def inputs(context: CheckContext) -> CompileInputs:
    """The compile facts' questions, asked of the analysed Windows tree."""
    from torchguard._platforms.windows.tree import join

    system = context.system
    python = system.interpreter
    triton = next((d for d in context.dists if d.name.lower() in TRITON_WINDOWS), None)
    return CompileInputs(
        windows=True,
        python_version=python.version,
        include_dir=join(python.base_exec_prefix, "Include"),
        free_threaded=python.free_threaded,
        lib_homes=(python.exec_prefix, python.base_exec_prefix, python.app_dir),
        environ=python.environ,
        path_dirs=python.path_dirs,
        torch_version=context.torch.version,
        triton=None if triton is None else Triton(triton.name, triton.version, triton.site_dir),
        is_file=system.tree.is_file,
    )


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    asked = inputs(context)
    facts = compile_facts(asked)
    if facts.pairing is not None and not facts.pairing.pairs:  # dists alone: offline too
        yield pairing_finding(facts.pairing, context.hints.python_cmd)
    if context.system.live and asked.triton is not None:  # the files: live only
        yield from _launcher(context, asked.triton, facts)


def pairing_finding(paired: Pairing, python_cmd: str) -> Finding:
    """The installed triton-windows is of another minor than the one torch's minor pairs with."""
    triton = paired.triton
    return Finding(
        code=Code.COMPILE_NOT_READY,
        severity=WARNING,
        message=(
            f"{triton.name} {triton.version} does not pair with torch {paired.torch_version}, "
            f"which pairs with {triton.name} {paired.wanted}: torch.compile (inductor's triton "
            "kernels) may fail, e.g. \"cannot import name 'AttrsDescriptor' from "
            "'triton.compiler.compiler'\". `import torch` is unaffected"
        ),
        package=triton.name,
        hints=(
            RepairHint(
                f"install the {triton.name} {paired.wanted} that pairs with torch "
                f"{paired.torch_version}",
                (f'{python_cmd} -m pip install -U "{paired.spec}"',),
                PAIRS_URL,
            ),
        ),
        rank=RANK,
    )


def _launcher(context: CheckContext, triton: Triton, facts: CompileFacts) -> Iterator[Finding]:
    """Live, with triton installed: what its launcher build will not find."""
    python = context.system.interpreter
    build = f"{python.version[0]}.{python.version[1]}"
    lacks: list[str] = []
    if not facts.header.found:
        lacks.append(f"'Python.h' (looked for at {facts.header.looked_at[0]})")
    library = facts.library
    if library is not None and not library.found:
        homes = ", ".join(
            dict.fromkeys((python.exec_prefix, python.base_exec_prefix, python.app_dir))
        )
        lacks.append(f"{library.name} (looked for in libs\\ of {homes})")
    files_missing = bool(lacks)
    compiler = facts.compiler.found
    if not compiler:
        lacks.append("a C compiler (no CC, no bundled TinyCC, no cl, gcc or clang on PATH)")
    if not lacks:
        return
    hints = []
    if files_missing:
        hints.append(
            RepairHint(
                f"copy the include\\ and libs\\ folders of the full python.org installer of "
                f"Python {build} (same version) into {python.base_exec_prefix}: an embeddable "
                "Python ships neither",
                (),
                "https://www.python.org/downloads/windows/",
            )
        )
    if not compiler:
        hints.append(
            RepairHint(
                "upgrade triton-windows (its recent releases bundle TinyCC), or install the "
                "Visual Studio Build Tools and run from a developer prompt",
                (f"{context.hints.python_cmd} -m pip install --upgrade {triton.name}",),
                URL,
            )
        )
    yield Finding(
        code=Code.COMPILE_NOT_READY,
        severity=WARNING,
        message=(
            f"torch.compile will fail when {triton.name} {triton.version} builds its launcher: "
            f"this Python has no {'; no '.join(lacks)}. `import torch` is unaffected"
        ),
        package=triton.name,
        hints=tuple(hints),
        rank=RANK,
    )
