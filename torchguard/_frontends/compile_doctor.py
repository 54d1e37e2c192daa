"""``torchguard doctor --compile``: what ``torch.compile`` needs from this interpreter.

The questions are :mod:`torchguard._rules.compile_facts`' (the ``compile-not-ready`` rules ask
the same of an analysed tree); here they are asked of the running process: its ``sysconfig``,
environment, PATH and installed distributions. Facts only: the doctor's exit code is the
report's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from torchguard._rules.compile_facts import (
    TRITON_LINUX,
    TRITON_WINDOWS,
    CompileFacts,
    CompileInputs,
    Triton,
    compile_facts,
)


def _include_dir() -> str:
    """Where triton's build looks for ``Python.h`` (its ``posix_local`` -> ``posix_prefix``)."""
    import sysconfig

    scheme = getattr(sysconfig, "get_default_scheme", lambda: None)()
    if scheme == "posix_local":  # Debian's scheme; triton asks for posix_prefix instead
        scheme = "posix_prefix"
    paths = sysconfig.get_paths(scheme) if scheme else sysconfig.get_paths()
    return str(paths["include"])


def live_inputs(windows: bool | None = None) -> CompileInputs:
    """The compile facts' questions about this interpreter."""
    import importlib.metadata as metadata
    import sysconfig

    windows = sys.platform == "win32" if windows is None else windows
    torch_version: str | None = None
    torch_metadata = ""
    try:
        torch = metadata.distribution("torch")
        torch_version = torch.version
        torch_metadata = torch.read_text("METADATA") or ""
    except metadata.PackageNotFoundError:
        pass
    triton = None
    for name in TRITON_WINDOWS if windows else TRITON_LINUX:
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        triton = Triton(name, found.version, os.path.abspath(str(found.locate_file(""))))
        break
    pin, pin_name = None, "triton"
    if not windows and torch_metadata:
        import platform

        from torchguard._platforms.linux.requirements import parse_pins

        pins, _ = parse_pins(torch_metadata, platform.machine())
        names = [triton.name] if triton is not None else list(TRITON_LINUX)
        pin_name = next((n for n in names if n in pins), pin_name)
        pin = pins.get(pin_name)
    executable = os.path.abspath(sys.executable) if sys.executable else sys.prefix
    return CompileInputs(
        windows=windows,
        python_version=(sys.version_info[0], sys.version_info[1]),
        include_dir=_include_dir(),
        free_threaded=bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        lib_homes=(sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(executable)),
        environ=dict(os.environ),
        path_dirs=tuple(d for d in os.environ.get("PATH", "").split(os.pathsep) if d),
        torch_version=torch_version,
        triton=triton,
        triton_pin=pin,
        triton_pin_name=pin_name,
        is_file=os.path.isfile,
    )


def compile_section(inputs: CompileInputs | None = None) -> tuple[list[str], dict[str, Any]]:
    """The doctor's lines and its JSON ``compile`` object, for this interpreter."""
    asked = live_inputs() if inputs is None else inputs
    facts = compile_facts(asked)
    return render(facts, asked), {
        "python": sys.executable,
        "platform": "windows" if asked.windows else "linux",
        "torch": asked.torch_version,
        **facts.to_dict(),
    }


def render(facts: CompileFacts, inputs: CompileInputs) -> list[str]:
    major, minor = inputs.python_version
    lines = [
        "",
        f"torch.compile needs (this interpreter, Python {major}.{minor}: {sys.executable}):",
    ]
    for fact in facts.all:
        state = "found  " if fact.found else "MISSING"
        lines.append(f"  {state} {fact.name}: {fact.detail}")
        if fact.looked_at and not (fact.found and fact.looked_at == (fact.detail,)):
            lines.append(f"          looked at: {', '.join(fact.looked_at)}")
    paired = facts.pairing
    if paired is not None and not paired.pairs:  # the command compile-not-ready's hint gives
        executable = sys.executable
        python = f'"{executable}"' if " " in executable else executable
        upgrade = "-U " if inputs.windows else ""
        lines.append(f'  fix: {python} -m pip install {upgrade}"{paired.spec}"')
    return lines
