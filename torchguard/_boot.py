"""The start-up watcher: a finder on ``sys.meta_path`` that wakes up on the first ``import torch``.

Python 3.15+ runs :func:`activate` from the PEP 829 ``.start`` file that ``torchguard hook
install`` writes; older Pythons run the same watcher from the ``.pth`` line (see
``_hook.PTH_LINE``), which defines it inline so that a process that never imports torch never
imports torchguard either. This module imports nothing beyond ``sys`` and ``os`` (loaded at
start-up anyway) and never raises: a hook must not break Python itself.
"""

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is not loaded at start-up
if TYPE_CHECKING:
    from typing import Any


class TorchImportWatcher:
    """Runs torchguard once, right before the first ``import torch``, then steps aside.

    It never supplies a module: ``find_spec`` returns None, so torch is then found and loaded
    by the normal machinery.
    """

    def find_spec(self, fullname: "str", path: "Any" = None, target: "Any" = None) -> None:
        if fullname != "torch":
            return None
        self.remove()
        from torchguard._hook import run_guard

        run_guard()
        return None

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def installed_watcher() -> "Any":
    """The watcher on ``sys.meta_path`` (from ``install_hook()`` or a start-up file), or None."""
    for finder in sys.meta_path:
        if type(finder).__name__ == "TorchImportWatcher":
            return finder
    return None


def activate() -> None:
    """Entry point of the ``.start`` file; honours ``TORCHGUARD=off``."""
    try:
        if os.environ.get("TORCHGUARD", "").strip().lower() == "off":
            return
        if "torch" in sys.modules or installed_watcher() is not None:
            return
        sys.meta_path.insert(0, TorchImportWatcher())
    except Exception:  # a start-up hook must never break the interpreter
        return
