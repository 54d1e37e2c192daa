"""``check --env`` for a Windows environment: pip's resolution laid over it the Windows way.

Nothing is copied or linked (a symlink needs a privilege on Windows): the environment's folders
are mounted in a :class:`~torchguard._platforms.windows.tree.WinTree` as ``torchguard scan``
mounts them, what pip would remove is hidden there (every file its ``RECORD`` lists, the
``__pycache__`` files of its modules, and the folders that leaves empty), and each wheel pip
would install is read in place at the paths pip installs its members to (the package and
``.data/purelib``/``platlib``: site-packages; ``.data/scripts``: ``Scripts``;
``.data/data``: the prefix). A pure-Python wheel is only its ``METADATA`` from pip's report,
written in a scratch folder mounted over site-packages. torch is then judged by the offline
Windows pipeline ``scan`` uses, with the machine ``scan`` assumes (Windows 10/11 with the
current Visual C++ runtime in System32), and on Windows this machine's own System32 read as
``scan --system32`` reads it (its NVIDIA driver included). The environment as it is gets the
same offline judgement, plus the live one when torchguard runs in it on Windows, so that only
what the install changes is said.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence

from torchguard._frontends.check_error import CheckError
from torchguard._frontends.env_overlay import ancestors, write_metadata
from torchguard._frontends.env_resolve import Item
from torchguard._frontends.env_target import Installed, TargetEnv
from torchguard._report.report import Report


def _key(path: str) -> str:
    return os.path.normcase(os.path.normpath(path))


def removed_paths(replaced: Iterable[Installed], folders: Sequence[str]) -> set[str]:
    """The host files and folders pip would remove: the replaced distributions' files (their
    ``RECORD``), the bytecode Python cached for their modules, and each folder inside the
    install ``folders`` that is then left empty (pip removes those too)."""
    files = {os.path.normpath(path) for dist in replaced for path in dist.files}
    gone = {_key(path) for path in files}
    folders_left: set[str] = set()
    compiled: dict[str, dict[str, list[str]]] = {}  # __pycache__ -> module stem -> its .pyc
    for path in files:  # __pycache__\name.cpython-311.pyc beside a removed name.py
        folder, name = os.path.split(path)
        if not name.endswith(".py"):
            continue
        cache = os.path.join(folder, "__pycache__")
        if cache not in compiled:  # listed once, however many of its modules go
            compiled[cache] = {}
            try:
                names = os.listdir(cache)
            except OSError:
                continue
            for entry in names:
                compiled[cache].setdefault(entry.split(".", 1)[0], []).append(entry)
            folders_left.add(cache)
        stem = name[: -len(".py")]
        gone.update(_key(os.path.join(cache, n)) for n in compiled[cache].get(stem, ()))
    for folder in folders:
        root = os.path.normpath(folder)
        folders_left |= ancestors([p for p in files if p.startswith(root + os.sep)], root)
    for folder in sorted(folders_left, key=lambda p: p.count(os.sep), reverse=True):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if all(_key(os.path.join(folder, name)) in gone for name in names):
            gone.add(_key(folder))
    return gone


def readable_here(target: TargetEnv) -> None:
    """:class:`CheckError` when the environment's folders cannot be read from this process
    (a Windows interpreter run from WSL reports ``C:\\`` paths)."""
    if not any(os.path.isdir(folder) for folder in target.folders):
        raise CheckError(
            f"{target.python}: its install folders ({', '.join(target.folders)}) cannot be "
            "read from here: run torchguard with that interpreter"
        )


def scan_both(
    target: TargetEnv,
    replaced: Sequence[Installed],
    wheels: Sequence[str],
    pure: Sequence[Item],
) -> tuple[Report | None, Report | None]:
    """(the environment as it is, as ``pip install`` would leave it); None: no torch there."""
    from torchguard._facts.internal import guarded

    def run() -> tuple[Report | None, Report | None]:
        now = _merged(scan_offline(list(target.folders)), _live(target))
        with tempfile.TemporaryDirectory(prefix="torchguard-env-") as scratch:
            for item in pure:
                write_metadata(item, scratch)
            folders = [*target.folders, scratch] if pure else list(target.folders)
            later = scan_offline([*folders, *wheels], removed_paths(replaced, target.folders))
        return now, later

    return guarded("check --env", run, (CheckError,))


def scan_offline(targets: Sequence[str], hidden: Iterable[str] = ()) -> Report | None:
    """The offline Windows analysis of ``targets`` (folders, then wheels) with ``hidden``
    left out; None when no torch is there."""
    from torchguard._binary.cache import user_cache
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.assumptions import assumed_system32
    from torchguard._platforms.windows.system import TargetError, offline_windows

    try:
        system = offline_windows(
            targets,
            system32_dirs=machine_system32(),
            assumed_system32=assumed_system32(False),
            hidden=hidden,
        )
    except TargetError as exc:
        raise CheckError(f"cannot lay out the install: {exc}") from None
    try:
        if system.torch_package_dir is None:
            return None
        return analyze(system, cache=user_cache())
    finally:
        system.close()


def machine_system32() -> list[str]:
    """This machine's System32 when torchguard runs on Windows (its DLLs and NVIDIA driver are
    read as they are, in both states); elsewhere none: assumed as ``scan`` assumes it."""
    if sys.platform != "win32":
        return []
    root = os.environ.get("SYSTEMROOT") or os.environ.get("WINDIR") or "C:\\Windows"
    folder = os.path.join(root, "System32")
    return [folder] if os.path.isdir(folder) else []


def assumed_note() -> str:
    """What the offline judgement took the machine to be (one of the check's notes)."""
    from torchguard._platforms.windows.assumptions import VC_REDIST

    read = machine_system32()
    machine = (
        f"this machine's System32 ({read[0]}) read as it is, and {VC_REDIST} assumed where "
        "it lacks it"
        if read
        else f"System32 assumed to hold Windows 10/11 x64's DLLs and {VC_REDIST}"
    )
    return (
        f"judged offline as `torchguard scan` judges a site-packages: {machine}; PATH and the "
        "folders a program registers are not read"
    )


def _live(target: TargetEnv) -> Report | None:
    """The live analysis, when torchguard runs on Windows in the target environment."""
    if sys.platform != "win32" or "torch" in sys.modules:
        return None
    if _key(os.path.abspath(target.prefix)) != _key(os.path.abspath(sys.prefix)):
        return None
    from torchguard._frontends.api import _live_report

    return _live_report()


def _merged(offline: Report | None, live: Report | None) -> Report | None:
    """One report of today's findings: the offline one's, and the live one's too (what only
    the live machine shows is not the install's doing)."""
    if offline is None or live is None:
        return offline or live
    return dataclasses.replace(offline, findings=(*offline.findings, *live.findings))
