"""A file that cannot be read *now* is not a damaged file (issue 13, finding 4).

An antivirus scan holding a DLL, a sharing violation or an online-only OneDrive file raises
an OSError while reading; running out of memory raises MemoryError. Neither says anything
about the file: no ``corrupt-dll`` error, nothing cached, an honest ``unreadable-dll`` warning
that names the real error, and the next run reads the file again.
"""

from __future__ import annotations

import builtins
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeTorch, system32
from faults import fake_windows

import torchguard
from torchguard._binary.pe.errors import FileUnreadable, PEReadError
from torchguard._platforms.windows import binaries as _binaries


def sharing_violation(path: str) -> OSError:
    error = PermissionError(13, "The process cannot access the file because it is being used")
    error.filename = path
    error.winerror = 32  # type: ignore[attr-defined]  # what Windows sets; absent elsewhere
    return error


def hold_open(
    monkeypatch: pytest.MonkeyPatch, name: str, error: type[BaseException] | None = None
) -> None:
    """Opening ``name`` fails as if a virus scanner held it (or memory ran out)."""
    real_open = builtins.open

    def guarded(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, Path)) and str(file).lower().endswith(name):
            raise error() if error is not None else sharing_violation(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)


@pytest.mark.parametrize("error", [None, MemoryError])
def test_a_held_dll_is_a_warning_never_cached(
    tmp_path: Path,
    fake_torch: FakeTorch,
    runtime_dir: Path,
    reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException] | None,
) -> None:
    site = fake_torch.write(tmp_path / "site")
    with monkeypatch.context() as patch:
        hold_open(patch, "c10.dll", error)
        report = torchguard.scan([site], system32=[runtime_dir])
    assert report.ok and report.import_torch.ok
    assert not [f for f in report.findings if f.code == "corrupt-dll"]
    (finding,) = [f for f in report.findings if f.code == "unreadable-dll"]
    assert finding.severity == "warning" and finding.missing == "c10.dll"
    expected = "out of memory" if error is MemoryError else "WinError 32"
    assert expected in finding.message and "not damage" in finding.message
    assert not any("reinstall" in hint.summary.lower() for hint in finding.hints)
    reads.clear()
    again = torchguard.scan([site], system32=[runtime_dir])  # the scanner let go
    assert "c10.dll" in reads  # read again: the failure was never cached
    assert again.ok and not again.findings


def test_ensure_does_not_block_on_a_held_dll(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, s32 = fake_torch.write(tmp_path / "site"), system32(tmp_path / "s32")
    fake_windows(monkeypatch, site, s32)
    hold_open(monkeypatch, "torch_cpu.dll")
    report = torchguard.ensure()  # raised CorruptDllError, and every later run too
    assert [f.code for f in report.findings] == ["unreadable-dll"]


def test_a_wheel_that_cannot_be_read_now_is_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = FakeTorch().wheel(tmp_path)
    s32 = system32(tmp_path / "s32")
    real_read = zipfile.ZipExtFile.read

    def failing(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        if self.name.endswith("c10.dll"):
            raise sharing_violation(self.name)
        return real_read(self, n)

    with monkeypatch.context() as patch:
        patch.setattr(zipfile.ZipExtFile, "read", failing)
        report = torchguard.scan([wheel], system32=[s32])
    assert report.ok and [f.code for f in report.findings] == ["unreadable-dll"]
    assert not torchguard.scan([wheel], system32=[s32]).findings


def test_damage_and_environment_stay_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchguard._platforms.windows.tree import HostFile, WinTree

    path = tmp_path / "c10.dll"
    path.write_bytes(b"MZ" + bytes(10))
    tree = WinTree()
    tree.add_file("C:\\t\\c10.dll", HostFile(str(path)))
    assert isinstance(_binaries._read(tree, "C:\\t\\c10.dll"), PEReadError)
    hold_open(monkeypatch, "c10.dll")
    found = _binaries._read(tree, "C:\\t\\c10.dll")
    assert isinstance(found, FileUnreadable) and not isinstance(found, PEReadError)
    assert found.winerror == 32
