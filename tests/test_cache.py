"""The persistent PE-facts cache: warm runs read no DLL, changes are seen, damage is harmless."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakes import FakeTorch

import torchguard
from torchguard import _binaries
from torchguard._cache import FILE_NAME, SCHEMA


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths whose PE facts were really read (not taken from the cache)."""
    seen: list[str] = []
    real = _binaries._read

    def counting(tree: object, path: str) -> object:
        seen.append(path.rsplit("\\", 1)[-1])
        return real(tree, path)  # type: ignore[arg-type]

    monkeypatch.setattr(_binaries, "_read", counting)
    return seen


def test_a_warm_scan_reads_no_dll(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    site = fake_torch.write(tmp_path / "site")
    cold = torchguard.scan([site], system32=[runtime_dir])
    assert "c10.dll" in reads
    reads.clear()
    warm = torchguard.scan([site], system32=[runtime_dir])
    assert reads == []
    assert warm.findings == cold.findings and warm.import_torch == cold.import_torch


def test_a_warm_wheel_scan_reads_no_member(
    tmp_path: Path, fake_torch: FakeTorch, reads: list[str]
) -> None:
    wheel = fake_torch.wheel(tmp_path)
    first = torchguard.scan([wheel])
    reads.clear()
    assert torchguard.scan([wheel]).findings == first.findings
    assert reads == []


def test_a_changed_file_is_read_again(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    dll = site / "torch" / "lib" / "fbgemm.dll"
    dll.write_bytes(dll.read_bytes()[:700])  # same path, new size and time
    reads.clear()
    report = torchguard.scan([site], system32=[runtime_dir])
    assert reads == ["fbgemm.dll"]
    assert report.errors[0].code == "corrupt-dll"


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{not json",
        b'{"schema": 1, "entries": []}',
        b'{"schema": 99}',
        b'{"schema": 1, "entries": {"file|x|1|2|3": {"machine": "bogus"}}}',
        bytes(range(256)),
    ],
)
def test_a_damaged_cache_is_rebuilt(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, damage: bytes
) -> None:
    cache = Path(os.environ["TORCHGUARD_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    (cache / FILE_NAME).write_bytes(damage)
    neighbour = cache / "someone-elses-file.txt"
    neighbour.write_text("keep me")
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], system32=[runtime_dir])
    assert report.ok
    assert json.loads((cache / FILE_NAME).read_text())["schema"] == SCHEMA
    assert neighbour.read_text() == "keep me"


def test_damaged_entries_are_read_again(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    site = fake_torch.write(tmp_path / "site")
    torchguard.scan([site], system32=[runtime_dir])
    path = Path(os.environ["TORCHGUARD_CACHE_DIR"]) / FILE_NAME
    data = json.loads(path.read_text())
    for entry in data["facts"].values():
        entry["imports"] = 42
    path.write_text(json.dumps(data))
    reads.clear()
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert "c10.dll" in reads


def test_cache_off_writes_nothing(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHGUARD_CACHE", "off")
    torchguard.scan([fake_torch.write(tmp_path / "site")])
    assert not (Path(os.environ["TORCHGUARD_CACHE_DIR"]) / FILE_NAME).exists()


def test_an_unwritable_cache_folder_is_ignored(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(blocker / "cache"))
    report = torchguard.scan([fake_torch.write(tmp_path / "site")])
    assert report.errors and blocker.read_text() == "x"


def test_a_warm_scan_does_not_even_import_pefile(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    import subprocess
    import sys

    site = fake_torch.write(tmp_path / "site")
    code = (
        "import sys, torchguard\n"
        f"r = torchguard.scan([{str(site)!r}], system32=[{str(runtime_dir)!r}])\n"
        "print(r.ok, 'pefile' in sys.modules)\n"
    )

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )

    assert run().stdout.split() == ["True", "True"]
    assert run().stdout.split() == ["True", "False"]
