"""Overlay a wheel onto a virtual Windows install, reading members in place (never extracting).

Members land where an installer would put them: the package tree and ``*.data/purelib`` and
``*.data/platlib`` into site-packages, ``*.data/data`` into the prefix, ``*.data/scripts`` into
``Scripts``. The dist-info ``RECORD`` is rewritten to installed, site-relative paths, as pip
does, so ``importlib.metadata`` sees the same files an installed copy would list.
"""

from __future__ import annotations

import csv
import io
import ntpath
import zipfile

from torchguard._platforms.windows.tree import (
    ZIP_ERRORS,
    Entry,
    MemoryFile,
    WinTree,
    ZipMember,
    join,
)


class WheelError(Exception):
    """The file is not a readable wheel."""


def _wheel_tags(filename: str) -> list[tuple[str, str]] | None:
    """(interpreter, platform) of each tag a wheel file name carries, sorted; None if invalid."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    try:
        _, _, _, tags = parse_wheel_filename(ntpath.basename(filename))
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return sorted((tag.interpreter, tag.platform) for tag in tags)


def wheel_python_tag(filename: str) -> str | None:
    """The first Python tag of a wheel file name (``cp311`` for ``torch-2.4.1-cp311-...``)."""
    tags = _wheel_tags(filename)
    return tags[0][0] if tags else None


def wheel_platform_tag(filename: str) -> str | None:
    """The first platform tag of a wheel file name (``win_amd64``), or None."""
    tags = _wheel_tags(filename)
    return sorted(platform for _, platform in tags)[0] if tags else None


def mount_wheel(tree: WinTree, wheel: str, site_dir: str, prefix_dir: str) -> None:
    """Place every member of ``wheel`` into ``tree`` as if installed into ``prefix_dir``."""
    try:
        archive = tree.archive(wheel)
        infos = archive.infolist()
    except ZIP_ERRORS as exc:
        raise WheelError(f"{wheel}: not a readable wheel ({exc})") from None
    schemes = _scheme_dirs(site_dir, prefix_dir)
    relocated: dict[str, str] = {}  # member -> installed path relative to site-packages
    folders: dict[str, list[tuple[str, Entry]]] = {}
    dist_info: str | None = None
    for info in infos:
        member = info.filename
        parts = member.split("/")
        if info.is_dir() or ".." in parts or not parts[0]:
            continue
        base, relative = site_dir, parts
        if parts[0].endswith(".data") and len(parts) >= 3:
            if parts[1] not in schemes:
                continue
            base, to_site = schemes[parts[1]]
            relative = parts[2:]
            relocated[member] = "/".join([*to_site, *relative])
        elif parts[0].endswith(".dist-info") and len(parts) == 2:
            dist_info = parts[0]
        folder = base + "".join("\\" + part for part in relative[:-1])
        folders.setdefault(folder, []).append(
            (relative[-1], ZipMember(wheel, member, info.file_size))
        )
    if dist_info is None:
        raise WheelError(f"{wheel}: no .dist-info folder, so not a wheel")
    for folder, entries in folders.items():
        tree.add_files(folder, entries)
    record = _rewritten_record(archive, f"{dist_info}/RECORD", relocated)
    if record is not None:
        tree.add_file(join(site_dir, dist_info, "RECORD"), MemoryFile(record, f"{wheel}!RECORD"))


def _scheme_dirs(site_dir: str, prefix_dir: str) -> dict[str, tuple[str, list[str]]]:
    """Each ``*.data`` scheme: its folder, and the path from site-packages to that folder."""
    folders = {
        "purelib": site_dir,
        "platlib": site_dir,
        "data": prefix_dir,
        "scripts": join(prefix_dir, "Scripts"),
        "headers": join(prefix_dir, "Include"),
    }
    result: dict[str, tuple[str, list[str]]] = {}
    for scheme, folder in folders.items():
        relative = ntpath.relpath(folder, site_dir).replace("\\", "/")
        result[scheme] = (folder, [] if relative == "." else relative.split("/"))
    return result


def _rewritten_record(
    archive: zipfile.ZipFile, record_name: str, relocated: dict[str, str]
) -> bytes | None:
    """RECORD with ``*.data`` members at their installed, site-relative paths, as pip writes."""
    try:
        text = archive.read(record_name).decode("utf-8", "replace")
    except ZIP_ERRORS:
        return None
    if not relocated:
        return text.encode("utf-8")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in csv.reader(io.StringIO(text)):
        if row:
            row[0] = relocated.get(row[0], row[0])
            writer.writerow(row)
    return out.getvalue().encode("utf-8")
