"""Plant faults of torchguard's own, and run the real ensure() on a fake Windows.

``fake_windows`` makes ``_api`` take its Windows path (``sys.platform`` seen as ``win32``)
with ``live_windows()`` describing an offline install instead of this process: everything
after that (analysis, registration, raising) is the real code.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from torchguard._frontends import api as _api
from torchguard._platforms.windows import live as _live
from torchguard._platforms.windows.system import offline_windows


class PlantedFault(TypeError):
    """The fault a test plants; a TypeError, as a programming error would be."""


def boom(*args: object, **kwargs: object) -> None:
    raise PlantedFault("planted fault")


def fake_windows(monkeypatch: pytest.MonkeyPatch, site: Path, system32: Path) -> None:
    fake_sys = types.SimpleNamespace(platform="win32", modules=sys.modules)
    monkeypatch.setattr(_api, "sys", fake_sys)
    monkeypatch.setattr(
        _live, "live_windows", lambda: offline_windows([str(site)], system32_dirs=[str(system32)])
    )
