"""Which command a fix runs pip with: the Python the user installs into, as near as known.

``py -3.X -m pip`` reaches the newest python.org 3.X, not the venv the user has activated nor
ComfyUI's portable ``python_embeded\\python.exe``: a fix run with it lands in another
environment and changes nothing. A portable layout (a ``python_embeded`` folder holding
``python.exe`` where ``check`` runs, beside or above a requirements file) gives that
interpreter; ``check`` run on Windows inside a venv or conda environment of the same Python
version gives its ``python``; ``py -3.X`` only when nothing better is known.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

PORTABLE = "python_embeded"
"""ComfyUI's portable folder (its spelling)."""


def install_python(
    version: str,
    files: Sequence[str],
    *,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
    windows: bool | None = None,
    running: str | None = None,
) -> str:
    """The command (``python``, ``..\\python_embeded\\python.exe``, ``py -3.11``) whose pip
    installs into the Python that runs the user's program."""
    here = os.path.abspath(cwd or os.getcwd())
    portable = _portable(here, files)
    if portable is not None:
        return portable
    environ = os.environ if environ is None else environ
    windows = sys.platform == "win32" if windows is None else windows
    running = running or f"{sys.version_info[0]}.{sys.version_info[1]}"
    active = environ.get("VIRTUAL_ENV") or environ.get("CONDA_PREFIX")
    if windows and active and running == version:
        return "python"  # the activated environment's, which is this Python's version
    return f"py -{version}"


def _portable(here: str, files: Sequence[str]) -> str | None:
    folders = [here] + [os.path.dirname(os.path.abspath(f)) for f in files]
    for folder in folders:
        for candidate in (folder, os.path.dirname(folder)):
            if os.path.isfile(os.path.join(candidate, PORTABLE, "python.exe")):
                relative = os.path.relpath(candidate, here)
                prefix = "" if relative == "." else relative.replace(os.sep, "\\") + "\\"
                if relative.startswith(".." + os.sep + ".."):
                    prefix = candidate.replace(os.sep, "\\") + "\\"
                return f"{prefix}{PORTABLE}\\python.exe"
    return None
