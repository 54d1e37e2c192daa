"""Run pip as if on a Windows x64 CPython.

``python -m torchguard._frontends.pip_windows X.Y ARGS...``, or ``python pip_windows.py X.Y
ARGS...`` with any Python that has pip (see :mod:`.pip_python`).

``pip download --platform win_amd64 --python-version X.Y`` picks Windows wheels but still
evaluates environment markers against the running interpreter, so on Linux it would pull
torch's ``platform_system == "Linux"`` dependencies (triton, nvidia-*) and skip the Windows
ones. This runs pip's own command line with its marker environment replaced by a Windows one;
nothing else of pip changes.
"""

from __future__ import annotations

import runpy
import sys


def windows_markers(python: str) -> dict[str, str]:
    """PEP 508 marker values of a 64-bit python.org CPython ``python`` on Windows 10/11."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "nt",
        "platform_machine": "AMD64",
        "platform_python_implementation": "CPython",
        "platform_release": "10",
        "platform_system": "Windows",
        "platform_version": "10.0.19045",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "win32",
    }


def main(argv: list[str]) -> None:
    python, args = argv[0], argv[1:]
    try:
        from pip._vendor.packaging import markers  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        print(f"ERROR: {sys.executable} has no pip (install it with: -m ensurepip)")
        raise SystemExit(1) from None

    environment = windows_markers(python)
    # setattr: pip's vendored packaging may or may not carry types, by pip version
    setattr(markers, "default_environment", lambda: dict(environment))  # noqa: B010
    sys.argv = ["pip", *args]
    runpy.run_module("pip", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    # Run as a file (by a Python without torchguard), this folder would come first on
    # sys.path and its modules (check, download, progress ...) could shadow pip's imports.
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main(sys.argv[1:])
