"""Folders a program registers with ``os.add_dll_directory`` before ``ensure()``, judged by
the real Windows loader under Wine: a torch 2.4.1 whose ``uv.dll`` lives only in such a folder
imports, and torchguard must not call that a missing DLL (issue 21, finding 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wine import WineEnv, parse

pytestmark = pytest.mark.e2e

PROGRAM = """
import json, os
{before}
import torchguard
{after}
try:
    report = torchguard.ensure()
    verdict = {{"raised": None, "warnings": [f.missing for f in report.warnings]}}
except torchguard.TorchDllError as exc:
    verdict = {{"raised": exc.code, "warnings": []}}
try:
    import torch
    real = bool((torch.ones(2) * 2).sum() == 4)
except OSError as exc:
    real = str(exc)
print("TG-JSON " + json.dumps({{"verdict": verdict, "real": real}}))
"""


@pytest.fixture(scope="module")
def moved(wine_env: WineEnv) -> tuple[Path, str]:
    """One scenario for the module, whose uv.dll and asmjit.dll sit in a folder of their own:
    each test's Windows process only reads it (``python -B``, a folder registered, a DLL
    loaded), so a second copy of the 17,000-file tree would prove nothing more."""
    site = wine_env.make_scenario_site("user-dirs")
    extra = site.parent / "extra"
    for dll in ("uv.dll", "asmjit.dll"):
        wine_env.move(site / "torch" / "lib" / dll, extra)
    return site, wine_env.to_windows(extra)


def test_a_folder_registered_after_import_torchguard_is_searched(
    wine_env: WineEnv, moved: tuple[Path, str]
) -> None:
    site, extra = moved
    code = PROGRAM.format(before="", after=f"os.add_dll_directory({extra!r})")
    data = parse(wine_env.run(code, site))
    assert data["real"] is True  # the real loader finds both in the registered folder
    assert data["verdict"] == {"raised": None, "warnings": []}


def test_a_folder_registered_unseen_makes_missing_dll_a_doubt(
    wine_env: WineEnv, moved: tuple[Path, str]
) -> None:
    """Registered before torchguard was imported, and asmjit.dll already loaded from it:
    uv.dll beside it may well be found there, so no proof."""
    site, extra = moved
    before = (
        f"os.add_dll_directory({extra!r})\n"
        f"import ctypes; ctypes.CDLL(os.path.join({extra!r}, 'asmjit.dll'))"
    )
    data = parse(wine_env.run(PROGRAM.format(before=before, after=""), site))
    assert data["real"] is True
    assert data["verdict"]["raised"] is None  # type: ignore[index]
    assert "uv.dll" in data["verdict"]["warnings"]  # type: ignore[index]
