"""The live API off Windows, and the Windows-only module importable everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import torchguard
from torchguard._platforms.windows import live as _live


@pytest.mark.skipif(sys.platform == "win32", reason="non-Windows behaviour")
def test_live_functions_refuse_off_windows() -> None:
    for function in (
        _live.process_image_dir,
        _live.known_dlls,
        _live.loaded_modules,
        _live.live_windows,
    ):
        with pytest.raises(NotImplementedError):
            function()


def _stand_in_torch(root: Path) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(
        "raise SystemExit('stand-in torch must not be imported')\n"
    )
    info = root / "torch-2.4.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n")
    return root


def _python(code: str, path: Path | None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(path) if path else ""}
    import os

    env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.skipif(sys.platform == "win32", reason="non-Windows behaviour")
def test_ensure_off_windows_finds_torch_without_importing_it(tmp_path: Path) -> None:
    result = _python(
        "import sys, torchguard; r = torchguard.ensure(); "
        "print(r.mode, r.torch.version, 'torch' in sys.modules)",
        _stand_in_torch(tmp_path),
    )
    mode = "live" if sys.platform.startswith("linux") else "non-windows"  # Linux: ld.so model
    assert result.stdout.split() == [mode, "2.4.1", "False"], result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="non-Windows behaviour")
def test_ensure_without_torch_raises_torch_not_found() -> None:
    result = _python(
        "import importlib.util, torchguard\n"
        "importlib.util.find_spec = lambda name, *a: None\n"
        "try:\n    torchguard.ensure()\nexcept torchguard.TorchNotFoundError as e:\n    print('raised', e.code)\n"
        "print(torchguard.diagnose().errors[0].code)",
        None,
    )
    assert result.stdout.split() == ["raised", "torch-not-found", "torch-not-found"], result.stderr


def test_ensure_after_torch_is_imported_warns_and_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", type(sys)("torch"))
    report = torchguard.ensure()
    assert report.ok
    assert [f.code for f in report.findings] == ["torch-already-imported"]


def test_import_torchguard_is_cheap() -> None:
    result = _python(
        "import sys, torchguard; torchguard.Report; "
        "print(sorted(m for m in ('pefile', 'packaging', 'platformdirs', 'zipfile', 'ctypes') if m in sys.modules))",
        None,
    )
    assert result.stdout.strip() == "[]", result.stderr
