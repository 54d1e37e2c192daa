"""Run pip as if on a Windows CPython (x64, or ARM64).

``python -m torchguard._frontends.pip_windows X.Y[t][:PLATFORM] ARGS...``, or ``python
pip_windows.py X.Y ARGS...`` with any Python that has pip (see :mod:`.pip_python`); ``3.13t``
is a free-threaded 3.13 (the markers are the same), ``PLATFORM`` ``win_amd64`` (the default) or
``win_arm64``.

``pip download --platform win_amd64 --python-version X.Y`` picks Windows wheels but still
evaluates environment markers against the running interpreter, so on Linux it would pull
torch's ``platform_system == "Linux"`` dependencies (triton, nvidia-*) and skip the Windows
ones. This runs pip's own command line with its marker environment replaced by a Windows one;
nothing else of pip changes.
"""

from __future__ import annotations

import runpy
import sys

_MACHINES = {"win_amd64": "AMD64", "win_arm64": "ARM64"}
"""``platform.machine()`` of a python.org CPython for each platform tag: the
``PROCESSOR_ARCHITECTURE`` Windows gives a native process (``AMD64``, ``ARM64``)."""


def windows_markers(python: str, platform: str = "win_amd64") -> dict[str, str]:
    """PEP 508 marker values of a 64-bit python.org CPython ``python`` (``3.13`` or the
    free-threaded ``3.13t``, whose markers are the same) on Windows 10/11 for ``platform``."""
    python = python.rstrip("t")
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "nt",
        "platform_machine": _MACHINES.get(platform, "AMD64"),
        "platform_python_implementation": "CPython",
        "platform_release": "10",
        "platform_system": "Windows",
        "platform_version": "10.0.19045",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "win32",
    }


def lazy_metadata(args: list[str]) -> list[str]:
    """pip's arguments, with ``--use-feature=fast-deps`` for a dry run where it saves the
    downloads: an index that serves no separate metadata file (PEP 658) makes pip download
    each candidate wheel whole (torch's is 100-250 MB, and a backtrack fetches several), where
    fast-deps reads only its zip directory and METADATA with HTTP range requests (pip falls
    back to the whole file where a server refuses ranges). Only for a pip whose dry run then
    downloads nothing more (the wheels' ``set_dist``, pip 25.3 and later): an older pip
    downloads every wheel after resolving anyway, so the range requests would come on top.
    ``TORCHGUARD_FAST_DEPS=off`` runs pip as asked (a proxy that mishandles ranges)."""
    import os

    if os.environ.get("TORCHGUARD_FAST_DEPS", "").strip().lower() in ("off", "0", "no"):
        return args
    if args[:1] != ["install"] or "--dry-run" not in args:
        return args
    if any("fast-deps" in argument for argument in args):
        return args
    try:
        from pip._internal.cli import cmdoptions  # type: ignore[import-not-found, unused-ignore]
        from pip._internal.req.req_install import (  # type: ignore[import-not-found, unused-ignore]
            InstallRequirement,
        )

        option = cmdoptions.use_new_feature  # a functools.partial of optparse's Option
        choices = getattr(option, "keywords", {}).get("choices", ())
    except Exception:  # another pip's layout: run it as asked
        return args
    if not hasattr(InstallRequirement, "set_dist") or "fast-deps" not in choices:
        return args
    return [args[0], "--use-feature=fast-deps", *args[1:]]


def main(argv: list[str]) -> None:
    target, args = argv[0], argv[1:]
    python, _, platform = target.partition(":")
    try:
        from pip._vendor.packaging import markers  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        print(f"ERROR: {sys.executable} has no pip (install it with: -m ensurepip)")
        raise SystemExit(1) from None

    environment = windows_markers(python, platform or "win_amd64")
    # setattr: pip's vendored packaging may or may not carry types, by pip version
    setattr(markers, "default_environment", lambda: dict(environment))  # noqa: B010
    sys.argv = ["pip", *lazy_metadata(args)]
    runpy.run_module("pip", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    # Run as a file (by a Python without torchguard), this folder would come first on
    # sys.path and its modules (check, download, progress ...) could shadow pip's imports.
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main(sys.argv[1:])
