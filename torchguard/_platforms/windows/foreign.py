"""Wheels built for another OS: never judged as Windows.

A manylinux or macOS torch wheel (or a site-packages folder of a Linux or macOS install) holds
no Windows DLL, so a Windows analysis of it would say "no problems found" about nothing. Linux
wheels and Linux installs never come here: ``scan()`` sends them to the Linux analysis (ld.so's
rules). :func:`refuse_other_platforms` (wheels, by their platform tags) and
:func:`refuse_other_platform_install` (folders, by the contents of torch's ``_C`` extension)
refuse the rest (macOS, or a Linux target given to the Windows analysis directly).
"""

from __future__ import annotations

import ntpath
import re
from typing import TYPE_CHECKING

from torchguard._platforms.windows.tree import join

if TYPE_CHECKING:
    from torchguard._platforms.windows.tree import WinTree

_LINUX = ("manylinux", "musllinux", "linux")
_MACOS = ("macosx",)


def refuse_other_platforms(wheel: str) -> str | None:
    """Why ``wheel`` cannot be scanned by this version (a sentence saying what to run
    instead), or None for a Windows or pure-Python wheel."""
    name = ntpath.basename(wheel)
    parts = name[: -len(".whl")].split("-")
    if len(parts) < 5:
        return None
    tags = parts[-1].lower().split(".")
    if any(not tag.startswith(_LINUX + _MACOS) for tag in tags):
        return None  # win_amd64, any, or one tag this refusal does not know
    instead = _check_command(parts[0], parts[1], parts[-3])
    if all(tag.startswith(_LINUX) for tag in tags):
        return (
            f"{name} is a Linux wheel: scan it without Windows targets to judge it on Linux; "
            f"to ask whether this release works on Windows, run: {instead}"
        )
    return (
        f"{name} is a macOS wheel: macOS loads no Windows DLLs and torchguard does not analyse "
        f"macOS installs; to ask whether this release works on Windows, run: {instead}"
    )


#: The first bytes of an ELF file, and of 64-bit, 32-bit and universal Mach-O files.
_ELF = b"\x7fELF"
_MACHO = (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def refuse_other_platform_install(
    tree: WinTree, site_dir: str, package_dir: str | None
) -> str | None:
    """Why a folder holding a Linux or macOS torch cannot be scanned by this version (its
    ``_C`` extension is an ELF or Mach-O file and it has no ``_C*.pyd``), or None."""
    if package_dir is None:
        return None
    names = [name for name, _ in tree.listdir(package_dir).values()]
    if any(n.lower().startswith("_c.") and n.lower().endswith(".pyd") for n in names):
        return None
    for name in names:
        if not name.startswith("_C.") or name.lower().endswith(".pyd"):
            continue
        head = tree.read_head(join(package_dir, name), 4) or b""
        system = "Linux" if head == _ELF else "macOS" if head in _MACHO else None
        if system is None:
            continue
        origin = tree.origin(package_dir).rstrip("\\/")
        python = re.search(r"cpython-3(\d{1,2})", name)
        version = _torch_version(tree, site_dir)
        instead = _check_command("torch", version, f"cp3{python.group(1)}" if python else "")
        what = (
            "Linux scanning is not supported by this version of torchguard"
            if (system == "Linux")
            else "torchguard does not analyse macOS installs"
        )
        return (
            f"{origin} is a {system} install of torch (its {name} is not a Windows binary): "
            f"{what}, which judges Windows installs; to ask whether this release works on "
            f"Windows, run: {instead}"
        )
    return None


def _torch_version(tree: WinTree, site_dir: str) -> str:
    """torch's version from its ``.dist-info`` folder name, or an unpinned ``torch``."""
    for name in tree.subdirs(site_dir):
        found = re.fullmatch(r"torch-([0-9][^-]*)\.dist-info", ntpath.basename(name), re.I)
        if found:
            return found.group(1)
    return ""


def _check_command(project: str, version: str, python_tag: str) -> str:
    """The ``torchguard check`` that asks the same question about Windows."""
    requirement = project.replace("_", "-").lower()
    if version:
        requirement += f"=={version.split('+', 1)[0]}"
    found = re.fullmatch(r"cp3(\d{1,2})", python_tag.split(".")[0])
    python = f" --python 3.{found.group(1)}" if found else ""
    return f"torchguard check {requirement}{python}"
