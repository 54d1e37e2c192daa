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
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

RANK = 150
TRITON = ("triton-windows", "triton")
COMPILERS = ("cl.exe", "gcc.exe", "clang.exe")
URL = "https://github.com/woct0rdho/triton-windows#readme"


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    from torchguard._platforms.windows.tree import join

    system = context.system
    python = system.interpreter
    triton = next((d for d in context.dists if d.name.lower() in TRITON), None)
    if not system.live or triton is None:
        return
    tree = system.tree
    build = f"{python.version[0]}.{python.version[1]}"
    lib = f"python{python.version[0]}{python.version[1]}{'t' if python.free_threaded else ''}.lib"
    homes = list(dict.fromkeys((python.exec_prefix, python.base_exec_prefix, python.app_dir)))
    lacks: list[str] = []
    header = join(python.base_exec_prefix, "Include", "Python.h")
    if not tree.is_file(header):
        lacks.append(f"'Python.h' (looked for at {header})")
    if not any(tree.is_file(join(home, "libs", lib)) for home in homes):
        lacks.append(f"{lib} (looked for in libs\\ of {', '.join(homes)})")
    environ = {k.upper(): v for k, v in python.environ.items()}
    tcc = join(triton.site_dir, "triton", "runtime", "tcc", "tcc.exe")
    compiler = (
        "CC" in environ
        or "VCTOOLSINSTALLDIR" in environ
        or tree.is_file(tcc)
        or any(tree.is_file(join(d, name)) for d in python.path_dirs for name in COMPILERS)
    )
    files_missing = bool(lacks)
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
