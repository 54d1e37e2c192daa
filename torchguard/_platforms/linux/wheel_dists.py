"""The ``WHEEL`` files of the distributions in a live interpreter's site folders.

Read for :mod:`torchguard._rules.wheel_tags`; a few hundred bytes each, so every
distribution is read (a pure ``py3-none-any`` one fits any interpreter and costs one open).
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Iterator

from torchguard._facts.bitsandbytes import Install

#: ELF ``e_machine`` -> the wheel platform's CPU.
_CPU = {62: "x86_64", 183: "aarch64", 3: "i686", 21: "ppc64le", 22: "s390x"}


def free_threaded() -> bool:
    """Whether the running interpreter is a free-threaded build (``Py_GIL_DISABLED``)."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def linux_platform(machine: int) -> str:
    return "linux_" + _CPU.get(machine, "x86_64")


def site_folders(site_dirs: Iterable[str]) -> Iterator[str]:
    """The real ``site-packages``/``dist-packages`` folders among ``site_dirs``, each once."""
    seen: set[str] = set()
    for site in site_dirs:
        real = os.path.realpath(site or ".")
        if real not in seen and os.path.basename(real) in ("site-packages", "dist-packages"):
            seen.add(real)
            yield real


def site_wheels(site_dirs: Iterable[str]) -> Iterator[tuple[str, str, str | None]]:
    """(name, version, WHEEL text or None) of each ``*.dist-info`` in the site folders."""
    for folder in site_folders(site_dirs):
        yield from folder_wheels(folder)


def folder_wheels(folder: str) -> list[tuple[str, str, str | None]]:
    """(name, version, WHEEL text or None) of each ``*.dist-info`` in one folder."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".dist-info"))
    except OSError:
        return []
    rows: list[tuple[str, str, str | None]] = []
    for info in names:
        name, _, version = info[: -len(".dist-info")].partition("-")
        try:
            with open(os.path.join(folder, info, "WHEEL"), encoding="utf-8") as handle:
                text: str | None = handle.read(4096)
        except (OSError, UnicodeDecodeError):
            text = None
        rows.append((name.replace("_", "-").lower(), version, text))
    return rows


def bitsandbytes_install(site_dirs: Iterable[str]) -> Install | None:
    """The ``bitsandbytes`` package Python would import from ``site_dirs`` (the first), with
    its version from the ``.dist-info`` beside it; None when there is none."""
    for site in site_dirs:
        folder = os.path.join(site or ".", "bitsandbytes")
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            continue
        try:
            names = tuple(os.listdir(folder))
            infos = [n for n in os.listdir(site or ".") if n.lower().startswith("bitsandbytes-")]
        except OSError:
            return None
        version = next(
            (
                n[len("bitsandbytes-") : -len(".dist-info")]
                for n in infos
                if n.endswith(".dist-info")
            ),
            "?",
        )
        try:
            with open(os.path.join(folder, "cextension.py"), encoding="utf-8") as handle:
                source: str | None = handle.read(1 << 20)
        except (OSError, UnicodeDecodeError):
            source = None
        return Install(version, folder, names, source, separator="/")
    return None
