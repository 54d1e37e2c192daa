"""The start-up watcher: a finder on ``sys.meta_path`` that guards the first ``import torch``.

The one implementation of the watcher. Python 3.15+ imports this module from the PEP 829
``.start`` file (``torchguard._boot:activate``); older Pythons import a byte-compiled copy of
this same source that ``torchguard hook install`` writes beside the ``.pth`` file (see
``_hook.pth_line``), so that a process that never imports torch never imports torchguard.
It imports nothing beyond ``sys`` and ``os`` (loaded at start-up anyway) and never raises: a
hook must not break Python.

The guard runs when torch is imported, never when it is looked up: transformers, accelerate,
diffusers and huggingface_hub ask ``importlib.util.find_spec("torch")`` whether torch exists,
and torchguard's own analysis asks the same. So ``find_spec`` only hands back the spec the
other finders give (same object: origin, search locations, loader class), its loader armed
to run the guard in ``create_module``, the step of ``import torch`` that comes before torch
is put in ``sys.modules`` and before any of its code runs.
"""

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is not loaded at start-up
if TYPE_CHECKING:
    from typing import Any

WATCHER = "TorchImportWatcher"


class TorchImportWatcher:
    """Runs torchguard once, as the first ``import torch`` creates the module, then steps aside.

    It never supplies a module of its own: the spec it returns is the one the finders after it
    on ``sys.meta_path`` found, with the guard armed on that spec's own loader object.
    """

    def find_spec(self, fullname: "str", path: "Any" = None, target: "Any" = None) -> "Any":
        if fullname != "torch" or self not in sys.meta_path:
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1 :]
        for finder in later:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue  # a legacy finder: let the import system ask it, unguarded
            spec = find(fullname, path, target)
            if spec is not None:
                return spec if self.arm(spec.loader) else None
        return None

    def arm(self, loader: "Any") -> bool:
        """Make ``loader.create_module`` run the guard first (once); False if it cannot be."""
        try:
            real = loader.create_module
        except AttributeError:
            return False
        watcher = self

        def create_module(spec: "Any") -> "Any":
            vars(loader).pop("create_module", None)  # back to the loader's own method
            watcher.remove()
            watcher.guard()
            return real(spec)

        try:
            loader.create_module = create_module
        except (AttributeError, TypeError):  # no instance attributes: import it unguarded
            return False
        return True

    def guard(self) -> None:
        try:  # an unchanged environment that passed last time: no analysis to import
            if "torchguard._frontends.api" not in sys.modules:  # else ensure() ran or runs
                from torchguard._binary.memo import check

                if check():
                    return
        except Exception:  # the memo only ever skips work: analyse
            pass
        try:
            from torchguard._hook import run_guard
        except Exception as exc:  # fail open: import torch proceeds unguarded
            if not (isinstance(exc, ModuleNotFoundError) and exc.name == "torchguard"):
                sys.stderr.write(
                    "torchguard: internal error ignored, import torch continues: "
                    f"{type(exc).__name__}: {exc}\n"
                )  # silent only when torchguard is gone and its start-up file left behind
            return
        run_guard()

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def installed_watcher() -> "Any":
    """The watcher on ``sys.meta_path``, from whichever copy of this source, or None.

    Found by class name: the ``.pth`` line defines its own class object from this source.
    """
    for finder in sys.meta_path:
        if type(finder).__name__ == WATCHER:
            return finder
    return None


def activate() -> None:
    """Install the watcher unless ``TORCHGUARD=off``, torch is imported or one is there."""
    try:
        if os.environ.get("TORCHGUARD", "").strip().lower() == "off":
            return
        if "torch" in sys.modules or installed_watcher() is not None:
            return
        observe_dll_directories()
        sys.meta_path.insert(0, TorchImportWatcher())
    except Exception:  # a start-up hook must never break the interpreter
        return


def observe_dll_directories() -> None:
    """From now on, keep each handle ``os.add_dll_directory`` returns (Windows only).

    Windows lists the folders a process registered nowhere a program can read, so the ones a
    package registered before the analysis (delvewheel's patch, onnxruntime, user code) would
    be unknown to it. The handles say it: ``handle.path`` is the folder, None once closed.
    The function is wrapped once, transparently: same argument, result and errors.
    """
    try:
        add = getattr(os, "add_dll_directory", None)
        if add is None or hasattr(add, "torchguard_handles"):
            return
        handles: list[Any] = []

        def add_dll_directory(path: "Any") -> "Any":
            handle = add(path)
            handles.append(handle)
            return handle

        add_dll_directory.torchguard_handles = handles  # type: ignore[attr-defined]
        add_dll_directory.__wrapped__ = add  # type: ignore[attr-defined]
        add_dll_directory.__doc__ = add.__doc__
        setattr(os, "add_dll_directory", add_dll_directory)  # noqa: B010 (Windows only)
    except Exception:  # a start-up hook must never break the interpreter
        return
