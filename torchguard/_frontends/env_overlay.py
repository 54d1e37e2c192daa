"""The environment as ``pip install`` would leave it, built beside it without touching it.

A scratch folder stands for each install folder: the wheels pip would install are mirrored
into it (:func:`~torchguard._platforms.linux.wheel_files.lay_out_wheels`: shared objects as sparse
placeholders read from the zip), a pure-Python wheel gets only its ``METADATA`` (from pip's
report: its pins are all the analysis reads of it), and every installed entry that no replaced
distribution owns is a symlink to the real one. A folder that holds a replaced file, or that a
new wheel also fills, becomes a real folder of symlinks, recursively, so ``$ORIGIN`` paths and
folder listings see exactly the files that would be there. The environment is only read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchguard._frontends.env_resolve import Item
from torchguard._frontends.env_target import Installed

if TYPE_CHECKING:
    from torchguard._platforms.linux.wheel_files import WheelLayout


@dataclass
class Overlay:
    """The scratch folders (one per install folder, in order) and the wheels laid out."""

    folders: list[str]
    layout: WheelLayout | None = None


def removed_paths(replaced: Iterable[Installed], folder: str) -> set[str]:
    """The files the replaced distributions own inside ``folder`` (pip removes them)."""
    root = os.path.normpath(folder)
    gone: set[str] = set()
    for dist in replaced:
        for path in dist.files:
            normal = os.path.normpath(path)
            if normal.startswith(root + os.sep):
                gone.add(normal)
    return gone


def ancestors(paths: Iterable[str], root: str) -> set[str]:
    """The folders below ``root`` that hold ``paths``, at any depth."""
    found: set[str] = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent.startswith(root + os.sep) and parent not in found:
            found.add(parent)
            parent = os.path.dirname(parent)
    return found


def merge(source: str, target: str, gone: set[str], touched: set[str]) -> None:
    """Fill ``target`` with symlinks to ``source``'s entries, leaving out ``gone`` files and
    keeping what ``target`` already holds (the new wheels win)."""
    os.makedirs(target, exist_ok=True)
    try:
        names = sorted(os.listdir(source))
    except OSError:
        return
    for name in names:
        real = os.path.join(source, name)
        mirror = os.path.join(target, name)
        if real in gone:
            continue
        directory = os.path.isdir(real) and not os.path.islink(real)
        present = os.path.lexists(mirror)
        if directory and (real in touched or (present and os.path.isdir(mirror))):
            if present and not os.path.isdir(mirror):
                continue
            merge(real, mirror, gone, touched)
            if not present and not os.listdir(mirror):
                os.rmdir(mirror)  # everything in it goes: pip leaves no folder either
        elif not present:
            os.symlink(real, mirror)


def write_metadata(item: Item, site: str) -> None:
    """A pure-Python wheel's ``METADATA`` as pip's report gives it (its only file read)."""
    folder = os.path.join(site, f"{item.name.replace('-', '_')}-{item.version}.dist-info")
    os.makedirs(folder, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {item.name}", f"Version: {item.version}"]
    lines += [f"Requires-Dist: {r}" for r in item.requires]
    with open(os.path.join(folder, "METADATA"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "INSTALLER"), "w", encoding="utf-8") as handle:
        handle.write("pip\n")


def build_overlay(
    scratch: str,
    folders: Sequence[str],
    replaced: Sequence[Installed],
    wheels: Sequence[str],
    pure: Sequence[Item],
) -> Overlay:
    """The install ``folders`` as they would be, under ``scratch`` (which the caller removes).

    Raises ``OSError`` or ``zipfile.BadZipFile`` for a wheel that cannot be read."""
    from torchguard._platforms.linux.wheel_files import lay_out_wheels

    mirrors = [os.path.join(scratch, f"site{number}") for number in range(len(folders))]
    for mirror in mirrors:
        os.makedirs(mirror)
    layout = lay_out_wheels(list(wheels), mirrors[0]) if wheels else None
    for item in pure:
        write_metadata(item, mirrors[0])
    for folder, mirror in zip(folders, mirrors):
        root = os.path.normpath(folder)
        gone = removed_paths(replaced, root)
        merge(root, mirror, gone, ancestors(gone, root))
    return Overlay(mirrors, layout)
