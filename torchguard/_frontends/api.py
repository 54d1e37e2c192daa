"""The public entry points: ensure(), diagnose(), scan()."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable

from torchguard._facts.internal import guarded
from torchguard._facts.vocab import Analysis, Code
from torchguard._report.errors import TorchDllError, TorchNotFoundError, error_for
from torchguard._report.findings import WARNING, Finding
from torchguard._report.report import Report, TorchSummary

_ensure_lock = threading.Lock()  # guards the two names below, held only for a moment
_ensured: Report | None = None
_running: _Analysis | None = None


class _Analysis:
    """The one ``ensure()`` analysis in progress: who runs it, and its outcome for the others."""

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.done = threading.Event()
        self.report: Report | None = None
        self.error: BaseException | None = None

    def outcome(self) -> Report:
        """What the analysis gave: the same report, or the same exception raised again."""
        if self.error is not None:
            raise self.error
        assert self.report is not None
        return self.report


def _nothing_checked(code: Code, message: str) -> Report:
    """A live report of one warning: ensure() had nothing it could check."""
    finding = Finding(code=code, severity=WARNING, message=message, rank=90)
    return Report(findings=(finding,), mode=Analysis.LIVE)


def _already_imported() -> Report:
    return _nothing_checked(
        Code.TORCH_ALREADY_IMPORTED,
        "torch was imported before torchguard.ensure() ran, so there is nothing left to "
        "protect; call ensure() before the first `import torch`",
    )


def _reentered() -> Report:
    return _nothing_checked(
        Code.ENSURE_REENTERED,
        "ensure() was called again from inside its own analysis (by code that runs while "
        "torchguard looks torch up, such as an import hook); this inner call checked nothing",
    )


def _non_windows() -> Report:
    """Off Windows there is no DLL work: only say where torch is, or that it is missing."""
    from torchguard._facts.interpreter import torch_package_dir
    from torchguard._frontends.pipeline.windows import torch_not_found
    from torchguard._platforms.windows.dists import importlib_metadata
    from torchguard._rules.hints import HintContext

    location = torch_package_dir()
    if location is None:
        return Report(findings=(torch_not_found(HintContext()),), mode=Analysis.NON_WINDOWS)
    try:
        version = importlib_metadata.version("torch")
    except importlib_metadata.PackageNotFoundError:
        version = "unknown"
    return Report(torch=TorchSummary(version, location), mode=Analysis.NON_WINDOWS)


def _live_linux_report() -> Report:
    from torchguard._facts.interpreter import torch_package_dir
    from torchguard._frontends.pipeline import analyze_linux, linux_cache
    from torchguard._platforms.linux.system import live_linux

    return analyze_linux(live_linux(torch_package_dir()), cache=linux_cache())


def _memoized_linux_report() -> Report:
    """The live Linux analysis; after the hook's memo missed, a clean one leaves a memo
    (:mod:`torchguard._binary.memo`) of every state it validated, for the next process."""
    from torchguard._binary import memo

    if memo.pending is None:
        return _live_linux_report()
    from torchguard._binary.state import watching

    try:
        with watching() as seen:
            report = _live_linux_report()
        if not report.blocking:
            try:
                memo.save(seen)
            except Exception:  # the memo only ever skips work: then none is kept
                return report
    finally:
        memo.pending = None
    return report


def _memo_passed() -> bool:
    """The start-up hook let ``import torch`` proceed from the memo: no analysis ran yet."""
    from torchguard._binary import memo

    return memo.passed


def _live_report() -> Report:
    from torchguard._binary.cache import user_cache
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.live import live_windows

    system = live_windows()
    try:
        return analyze(system, cwd=os.getcwd(), cache=user_cache())
    finally:
        system.close()


def diagnose() -> Report:
    """Analyse this environment as ``ensure()`` would; registers nothing.

    Problems in the environment are findings in the report; a fault of torchguard's own
    raises :class:`~torchguard.InternalError`.
    """
    if "torch" in sys.modules:
        return _already_imported()
    if sys.platform.startswith("linux"):
        return guarded("diagnose()", _live_linux_report, ())
    if sys.platform != "win32":
        return guarded("diagnose()", _non_windows, ())
    return guarded("diagnose()", _live_report, ())


def ensure() -> Report:
    """Prepare this process for ``import torch``, or raise why it would fail.

    On Windows: find torch without importing it, register the DLL directories it needs
    (including the ones torch forgets), check the whole DLL closure, and raise the most
    fundamental :class:`~torchguard.TorchDllError`. Errors of torch's siblings and extensions
    (a finding with ``package`` set) are in the returned report but never raised: ``import
    torch`` works, and a program that never imports torchvision must not be stopped by it.
    A successful result is remembered, so later calls in the process cost nothing. Callers in
    other threads while it runs wait for that one analysis and get its outcome; a call from
    inside the analysis itself (the same thread) never waits: it returns an
    ``ensure-reentered`` warning. Elsewhere there is no DLL work: it returns the report,
    raising only when torch is not installed at all. A fault of torchguard's own raises
    :class:`~torchguard.InternalError` (never a ``TorchDllError``).
    """
    global _ensured, _running
    if _ensured is not None:
        return _ensured
    if "torch" in sys.modules and not _memo_passed():
        return _already_imported()  # after the hook's memo: analyse now, as the hook would have
    while True:
        with _ensure_lock:
            if _ensured is not None:
                return _ensured
            current = _running
            if current is None:
                current = _running = _Analysis()
                break
        if current.owner == threading.get_ident():
            return _reentered()  # never wait for ourselves
        current.done.wait()
        if current.error is None or isinstance(current.error, Exception):
            return current.outcome()
        # the analysing thread was interrupted (KeyboardInterrupt...): analyse here instead
    try:
        current.report = guarded("ensure()", _prepare, (TorchDllError,))
    except BaseException as exc:
        current.error = exc
        raise
    finally:
        with _ensure_lock:
            _ensured = current.report
            _running = None
        current.done.set()
    return current.report


def _prepare() -> Report:
    if sys.platform == "win32":
        return _prepare_windows()
    if sys.platform.startswith("linux"):
        report = _memoized_linux_report()  # nothing to register: ld.so's inputs are fixed
    else:
        report = _non_windows()
    if report.blocking:
        _raise_first(report)
    return report


def _raise_first(report: Report) -> None:
    first = report.blockers[0]
    if first.code == "torch-not-found":
        raise TorchNotFoundError(first, report)
    raise error_for(first, report)


def _prepare_windows() -> Report:
    """Analyse, register the folders torch forgets, raise, preload. After the hook's memo
    missed, a clean run whose every preload loaded leaves a memo of the states it validated
    and of what it registered and preloaded, in order (:mod:`torchguard._binary.memo`)."""
    from torchguard._binary import memo
    from torchguard._binary.state import watching
    from torchguard._platforms.windows.register import register

    try:
        with watching() as seen:
            report = _live_report()
        # only the folders torch forgets, each safe and needed (torch registers its own)
        added = register(d.path for d in report.dll_directories if not d.by_torch)
        if report.blocking:
            _raise_first(report)
        if report.preloads:
            report = _preload(report)
        if memo.pending is not None and all(record.done for record in report.preloads):
            steps = [("register", path) for path in added]
            steps += [("preload", record.path) for record in report.preloads]
            try:
                memo.save(seen, steps)
            except Exception:  # the memo only ever skips work: then none is kept
                return report
    finally:
        memo.pending = None
    return report


def _preload(report: Report) -> Report:
    """Load each DLL the analysis chose by full path, before torch; the report says how it went."""
    from dataclasses import replace

    from torchguard._platforms.windows.live import preload

    done = []
    for record in report.preloads:
        try:
            preload(record.path)
        except OSError as exc:
            done.append(replace(record, error=str(exc)))
        else:
            done.append(replace(record, done=True))
    return replace(report, preloads=tuple(done))


def scan(
    targets: Iterable[str | os.PathLike[str]],
    *,
    system32: Iterable[str | os.PathLike[str]] = (),
    python_dir: str | os.PathLike[str] | None = None,
    gpus: Iterable[str] = (),
    sysroot: str | os.PathLike[str] = "/",
    ld_library_path: Iterable[str] = (),
    cuda: str | None = None,
    clean_windows: bool = False,
    ld_preload: Iterable[str] = (),
    x86_64_level: int = 3,
) -> Report:
    """Diagnose a Windows or Linux install offline (Windows ones from any OS).

    ``targets`` are ``.whl`` files (read in place) and folders laid out like site-packages,
    overlaid as one site-packages. ``system32`` folders add DLLs as if they were in System32;
    ``python_dir`` stands for python.exe's folder; ``gpus`` names the machine's display
    adapters as Windows lists them (``"NVIDIA GeForce RTX 5090"``, also for a Linux target);
    ``cuda`` the newest CUDA version the machine's NVIDIA driver supports (``"12.4"``).
    Linux: ``ld_library_path`` and ``ld_preload`` are the environment the process would start
    with; ``x86_64_level`` (1-4) the CPU's x86-64 level, which decides the ``glibc-hwcaps``
    subdirectories ld.so tries (default 3: any x86-64 CPU since 2013-2015).
    Raises :class:`ValueError` (a ``TargetError``) when a target cannot be read,
    :class:`~torchguard.InternalError` for a fault of torchguard's own.
    """
    if isinstance(targets, (str, bytes, os.PathLike)):
        raise TypeError("scan() takes a list of targets, not a single path")
    paths = [os.fspath(t) for t in targets]
    if not paths:
        raise ValueError("scan() needs at least one target")
    if not all(isinstance(p, str) for p in paths):
        raise TypeError("scan() targets must be str or os.PathLike[str]")
    from torchguard._platforms.linux.targets import is_linux_target

    linux = [p for p in paths if os.path.exists(p) and is_linux_target(p)]
    if linux:
        return _scan_linux(
            paths,
            linux,
            sysroot=sysroot,
            ld_library_path=ld_library_path,
            gpus=tuple(str(g) for g in gpus),
            driver_cuda=_cuda_version(cuda),
            ld_preload=tuple(str(e) for e in ld_preload),
            x86_64_level=x86_64_level,
        )
    from torchguard._binary.cache import user_cache
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.assumptions import assumed_system32
    from torchguard._platforms.windows.system import TargetError, offline_windows

    system32_dirs = [os.fspath(d) for d in system32]
    python_folder = os.fspath(python_dir) if python_dir is not None else None
    adapters = [str(g) for g in gpus]
    driver_cuda = _cuda_version(cuda)

    def run() -> Report:
        system = offline_windows(
            paths,
            system32_dirs=system32_dirs,
            python_dir=python_folder,
            assumed_system32=assumed_system32(bool(clean_windows)),
            gpus=adapters,
            driver_cuda=driver_cuda,
        )
        try:
            return analyze(system, cache=user_cache())
        finally:
            system.close()

    return guarded("scan()", run, (TargetError,))


def _scan_linux(
    paths: list[str],
    linux: list[str],
    *,
    sysroot: str | os.PathLike[str],
    ld_library_path: Iterable[str],
    gpus: tuple[str, ...] = (),
    driver_cuda: tuple[int, int] | None = None,
    ld_preload: tuple[str, ...] = (),
    x86_64_level: int = 3,
) -> Report:
    """A Linux site-packages (folders and manylinux wheels) on ``sysroot``'s libraries;
    ``gpus`` and ``driver_cuda`` describe the machine's GPUs and driver as on Windows."""
    import tempfile
    import zipfile

    from torchguard._frontends.pipeline import analyze_linux, linux_cache
    from torchguard._platforms.linux.system import offline_linux
    from torchguard._platforms.linux.targets import is_pure_wheel
    from torchguard._platforms.linux.wheel_files import lay_out_wheels
    from torchguard._platforms.windows.system import TargetError

    pure = [p for p in paths if p not in linux and is_pure_wheel(p)]
    others = [p for p in paths if p not in linux and p not in pure]
    root = os.fspath(sysroot)
    search = tuple(os.fspath(d) for d in ld_library_path)
    if x86_64_level not in (1, 2, 3, 4):
        raise ValueError(f"x86_64_level must be 1, 2, 3 or 4, not {x86_64_level!r}")

    def run() -> Report:
        if others:
            raise TargetError(f"not a Linux site-packages folder or wheel: {others[0]}")
        if not os.path.isdir(root):
            raise TargetError(f"--sysroot is not a folder: {root}")
        folders = [p for p in linux if os.path.isdir(p)]
        wheels = [p for p in paths if p in pure or (p in linux and not os.path.isdir(p))]
        with tempfile.TemporaryDirectory(prefix="torchguard-wheels-") as scratch:
            layout = None
            if wheels:
                try:
                    layout = lay_out_wheels(wheels, scratch)
                except (OSError, zipfile.BadZipFile) as exc:
                    raise TargetError(f"cannot read the wheels: {exc}") from None
                folders.append(scratch)
            system = offline_linux(
                folders,
                sysroot=root,
                ld_library_path=search,
                gpus=gpus,
                driver_cuda=driver_cuda,
                wheels=layout,
                preload=ld_preload,
                cpu_level=x86_64_level,
            )
            return analyze_linux(system, cache=linux_cache())

    return guarded("scan()", run, (TargetError,))


def _cuda_version(text: str | None) -> tuple[int, int] | None:
    """``"12.4"`` -> (12, 4); ValueError for anything else."""
    if text is None:
        return None
    parts = str(text).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"cuda={text!r}: expected a CUDA version such as 12.4")
    return (int(parts[0]), int(parts[1]))


def _reset_for_tests() -> None:
    global _ensured, _running
    _ensured = None
    _running = None
