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

from torchguard._fs import MemoryFile, WinTree, ZipMember, join


class WheelError(Exception):
    """The file is not a readable wheel."""


def wheel_python_tag(filename: str) -> str | None:
    """The first Python tag of a wheel file name (``cp311`` for ``torch-2.4.1-cp311-...``)."""
    parts = ntpath.basename(filename)[: -len(".whl")].split("-")
    return parts[-3].split(".")[0] if len(parts) >= 5 else None


def mount_wheel(tree: WinTree, wheel: str, site_dir: str, prefix_dir: str) -> None:
    """Place every member of ``wheel`` into ``tree`` as if installed into ``prefix_dir``."""
    try:
        archive = tree.archive(wheel)
        infos = archive.infolist()
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise WheelError(f"{wheel}: not a readable wheel ({exc})") from None
    relocated: dict[str, str] = {}
    dist_info: str | None = None
    for info in infos:
        if info.is_dir():
            continue
        member = info.filename
        target = _install_path(member, site_dir, prefix_dir)
        if target is None:
            continue
        relocated[member] = target
        tree.add_file(target, ZipMember(wheel, member, info.file_size))
        top = member.split("/", 1)[0]
        if top.endswith(".dist-info") and member.count("/") == 1:
            dist_info = top
    if dist_info is None:
        raise WheelError(f"{wheel}: no .dist-info folder, so not a wheel")
    record = _rewritten_record(archive, f"{dist_info}/RECORD", relocated, site_dir)
    if record is not None:
        tree.add_file(join(site_dir, dist_info, "RECORD"), MemoryFile(record, f"{wheel}!RECORD"))


def _install_path(member: str, site_dir: str, prefix_dir: str) -> str | None:
    parts = member.split("/")
    if ".." in parts or member.startswith("/"):
        return None
    top = parts[0]
    if top.endswith(".data") and len(parts) >= 3:
        scheme, rest = parts[1], parts[2:]
        base = {
            "purelib": site_dir,
            "platlib": site_dir,
            "data": prefix_dir,
            "scripts": join(prefix_dir, "Scripts"),
            "headers": join(prefix_dir, "Include"),
        }.get(scheme)
        return join(base, *rest) if base else None
    return join(site_dir, *parts)


def _rewritten_record(
    archive: zipfile.ZipFile, record_name: str, relocated: dict[str, str], site_dir: str
) -> bytes | None:
    try:
        text = archive.read(record_name).decode("utf-8", "replace")
    except (KeyError, zipfile.BadZipFile, EOFError, OSError):
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        target = relocated.get(row[0])
        if target is not None:
            row[0] = ntpath.relpath(target, site_dir).replace("\\", "/")
        writer.writerow(row)
    return out.getvalue().encode("utf-8")
