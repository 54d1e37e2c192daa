"""Whole-environment protection: the guard the start-up watcher runs, and its installers.

``TORCHGUARD`` selects the mode: ``strict`` (default: a failing environment makes
``import torch`` raise the precise :class:`~torchguard.TorchDllError`), ``warn`` (print the
diagnosis to stderr and let the import proceed) or ``off``. ``TORCHGUARD_REPORT=FILE`` writes
the JSON report of each run. Anything unexpected inside torchguard becomes one warning line and
the import proceeds: only genuine diagnoses raise.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from torchguard._boot import TorchImportWatcher, installed_watcher
from torchguard._facts.vocab import Code, Mode

__all__ = ["HookHandle", "install_hook", "installed_watcher", "pth_line", "run_guard"]

MODES = tuple(str(m) for m in Mode)
HOOK_NAME = "torchguard-hook"
BOOT_MODULE = "_torchguard_hook"
START_LINE = "torchguard._boot:activate\n"


def watcher_source() -> str:
    """The start-up module's source: ``_boot``'s own (the one watcher), then ``activate()``."""
    import inspect

    from torchguard import _boot

    return inspect.getsource(_boot) + "\nactivate()\n"


def pth_line(directory: Path | None = None) -> str:
    """The ``.pth`` line: run the start-up module, silently doing nothing if it fails.

    ``site`` executes ``.pth`` lines that start with ``import``. The module is a copy of
    ``_boot`` beside the ``.pth`` file, byte-compiled at install (importing
    ``torchguard._boot`` would import the torchguard package too). Given the ``directory``
    it is written to, the line runs that bytecode by its full path (``marshal``, already
    loaded): no search of ``sys.path`` (whose site-packages listing can hold a thousand
    names), no compile. A bytecode file that is missing, of another Python (its name carries
    the interpreter's cache tag, its header the magic number) or damaged falls back to
    ``import``, which finds the copy wherever the folder now is; a failure of that must not
    break Python either.
    """
    fallback = f"try:\n import {BOOT_MODULE}\nexcept Exception:\n pass\n"
    if directory is None:
        return f"import sys; exec({fallback!r})\n"
    stem = ascii(f"{directory.resolve() / '__pycache__' / BOOT_MODULE}.")  # the .pth's encoding
    direct = (
        "try:\n"
        " import marshal\n"
        " from _frozen_importlib_external import MAGIC_NUMBER\n"
        f" with open({stem}+sys.implementation.cache_tag+'.pyc','rb') as f: b=f.read()\n"
        " if b[:4]!=MAGIC_NUMBER: raise ImportError\n"
        f" m=type(sys)({BOOT_MODULE!r}); m.__file__=f.name; sys.modules[m.__name__]=m\n"
        " exec(marshal.loads(memoryview(b)[16:]),m.__dict__)\n"
        "except Exception:\n"
        f" sys.modules.pop({BOOT_MODULE!r},None)\n"
        + "".join(f" {line}\n" for line in fallback.splitlines())
    )
    return _precompiled(direct, fallback)


def _precompiled(source: str, fallback: str) -> str:
    """The line that runs ``source`` compiled at install: a start compiles only the line.

    ``site`` compiles a ``.pth`` line on every start, and compiling ``source`` there too cost
    about 0.1 ms. The line carries ``source``'s code object marshalled as a bytes literal,
    run when the starting Python's bytecode magic number is the installing one's. Another
    Python (whose bytecode file install did not write) runs ``fallback``: the import.
    """
    import marshal
    from importlib.util import MAGIC_NUMBER

    code = marshal.dumps(compile(source, f"<{HOOK_NAME}.pth>", "exec"))
    magic = "getattr(sys.modules.get('_frozen_importlib_external'),'MAGIC_NUMBER',None)"
    return (
        f"import sys; exec(__import__('marshal').loads({code!r}) "
        f"if {magic}=={MAGIC_NUMBER!r} else {fallback!r})\n"
    )


def mode() -> Mode:
    value = os.environ.get("TORCHGUARD", "").strip().lower() or Mode.STRICT
    if value not in MODES:
        _say(f"unknown TORCHGUARD={value!r}; using strict (choose one of {', '.join(MODES)})")
        return Mode.STRICT
    return Mode(value)


def _say(message: str) -> None:
    print(f"torchguard: {message}", file=sys.stderr)


_ran = False


def run_guard() -> None:
    """What the watcher does as the first ``import torch`` creates the module (once per process)."""
    global _ran
    if _ran:
        return
    _ran = True
    try:  # even importing torchguard's own modules may fail (a broken install): fail open
        current = mode()
        if current == Mode.OFF:
            return
        from torchguard._frontends import api as _api
        from torchguard._report.errors import TorchDllError
    except Exception as exc:
        _ignored(exc)
        return
    try:
        try:
            report = _api.ensure()
        except TorchDllError as exc:
            _write_report(exc.report.to_dict())
            if exc.code == Code.TORCH_NOT_FOUND:
                return  # let Python raise its own ModuleNotFoundError
            if current == Mode.STRICT:
                raise
            _say(f"{exc}\n(TORCHGUARD=warn: import torch continues)")
            return
        _write_report(report.to_dict())
    except TorchDllError:
        raise
    except Exception as exc:  # fail open: torchguard's own bugs never block import torch
        _ignored(exc)


def _ignored(exc: BaseException) -> None:
    """Say that an internal error was ignored; describing it must not fail in turn."""
    try:
        from torchguard._facts.internal import describe

        text = describe(exc)
    except Exception:
        text = f"{type(exc).__name__}: {exc}"
    _say(f"internal error ignored, import torch continues: {text}")


def _write_report(data: dict[str, object]) -> None:
    """Write ``TORCHGUARD_REPORT`` atomically; a bad path is one warning, never a crash."""
    target = os.environ.get("TORCHGUARD_REPORT")
    if not target:
        return
    path = Path(target)
    try:
        handle, temporary = tempfile.mkstemp(prefix=".torchguard-", dir=path.parent or ".")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(data, stream, indent=2)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        _say(f"cannot write TORCHGUARD_REPORT={target}: {exc.strerror or exc}")


class _Watcher(Protocol):
    """What both copies of ``_boot.TorchImportWatcher`` (module and ``.pth`` line) offer."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any: ...

    def remove(self) -> None: ...


@dataclass
class HookHandle:
    """The installed watcher; ``uninstall()`` removes it (also on leaving a ``with`` block)."""

    watcher: _Watcher

    @property
    def installed(self) -> bool:
        return any(finder is self.watcher for finder in sys.meta_path)

    def uninstall(self) -> None:
        self.watcher.remove()

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.uninstall()


def install_hook() -> HookHandle:
    """Run ``ensure()`` right before the first ``import torch`` of this process.

    Never stacks a second watcher: when one is already installed (by an earlier call, or by
    the start-up file), its handle is returned. If torch is already imported there is nothing
    to guard; the handle then reports ``installed == False``.
    """
    watcher: _Watcher | None = installed_watcher()
    if watcher is None:
        watcher = TorchImportWatcher()
        if "torch" not in sys.modules:
            sys.meta_path.insert(0, watcher)
    return HookHandle(watcher)


# -- the start-up files -------------------------------------------------------------------
def site_dir(user: bool) -> Path:
    """The current environment's site-packages, or the user site with ``user``."""
    if user:
        import site

        return Path(site.getusersitepackages())
    return Path(sysconfig.get_paths()["purelib"])


def why_hook_never_runs(user: bool) -> str | None:
    """Why start-up files in :func:`site_dir` would never run in this Python, or None.

    Without the ``site`` module (``-S``, or an embedded Python whose ``._pth`` file lacks
    ``import site``) no ``.pth`` file runs at all; the user site-packages is skipped in a
    venv (without system site-packages), in isolated mode and with ``-s`` or
    ``PYTHONNOUSERSITE``.
    """
    if sys.flags.no_site:
        return (
            "this Python starts without the site module (-S, or an embedded Python whose "
            "._pth file lacks the line `import site`), so it runs no start-up file; add "
            "`import site` to its ._pth file, or call torchguard.ensure() before "
            "`import torch` in your program"
        )
    import site

    if user and not site.ENABLE_USER_SITE:
        where = "this virtual environment" if sys.prefix != sys.base_prefix else "this Python"
        return (
            f"{where} does not read the user site-packages (a venv, -s, PYTHONNOUSERSITE or "
            "isolated mode), so a hook there would never run; install it without --user"
        )
    return None


def hook_files(directory: Path) -> tuple[Path, Path]:
    """The ``.pth`` (every Python) and PEP 829 ``.start`` (3.15+) files, by name."""
    return directory / f"{HOOK_NAME}.pth", directory / f"{HOOK_NAME}.start"


def boot_module(directory: Path) -> Path:
    """The start-up module the ``.pth`` line imports."""
    return directory / f"{BOOT_MODULE}.py"


def write_hook_files(directory: Path) -> list[Path]:
    """Write both start-up files (3.15+ runs the ``.start`` one and skips the ``.pth`` line),
    and the start-up module with its bytecode, before the ``.pth`` file that imports it."""
    import py_compile

    directory.mkdir(parents=True, exist_ok=True)
    pth, start = hook_files(directory)
    module = boot_module(directory)
    _replace(module, watcher_source())
    py_compile.compile(str(module), doraise=True)  # written even under PYTHONDONTWRITEBYTECODE
    for path, content in ((start, START_LINE), (pth, pth_line(directory))):
        _replace(path, content)
    return [pth, start, module]


def _replace(path: Path, content: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(content, encoding="utf-8")
    os.replace(temporary, path)


def remove_hook_files(directory: Path) -> list[Path]:
    """Remove the start-up files, the module and its bytecode (of any Python version)."""
    removed = []
    module = boot_module(directory)
    cache = directory / "__pycache__"
    compiled = sorted(cache.glob(f"{BOOT_MODULE}.*.pyc")) if cache.is_dir() else []
    for path in (*hook_files(directory), module, *compiled):
        if path.exists():
            path.unlink()
            removed.append(path)
    if compiled:
        with contextlib.suppress(OSError):
            cache.rmdir()  # only when nothing else is cached there
    return removed
