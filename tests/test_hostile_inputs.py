"""Small hostile files cost a small multiple of their size, never GiBs (issue 13, finding 6).

Each scan runs in a fresh process and reports its peak RSS (``ru_maxrss``); a healthy scan
measured in the same run is the baseline. An input of N bytes may add at most
``max(32 N, 16 MiB)``. Without budgets the thunk bomb took 4 GiB, the overlapping names
2 GiB, the deflate bombs 1 and 2 GiB (1 GiB members; these tests use 256 MiB ones).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from hostile import deflate_bomb_wheel, peak_rss, thunk_bomb

MIB = 1 << 20
BOMB = 256 * MIB


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    root = tmp_path_factory.mktemp("healthy")
    s32 = system32(root / "s32")
    peak, findings = peak_rss([str(FakeTorch().write(root / "site"))], [str(s32)])
    assert findings == []
    return peak, s32


def allowed(baseline: int, size: int) -> int:
    return baseline + max(32 * size, 16 * MIB)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHGUARD_CACHE", "off")  # every run reads the file itself


@pytest.mark.parametrize("overlapping", [False, True])
def test_import_thunks_naming_one_long_name(
    tmp_path: Path, baseline: tuple[int, Path], overlapping: bool
) -> None:
    base, s32 = baseline
    site = FakeTorch().write(tmp_path / "site")
    bomb = site / "torch" / "lib" / "asmjit.dll"
    bomb.write_bytes(thunk_bomb(overlapping))
    peak, findings = peak_rss([str(site)], [str(s32)])
    assert peak <= allowed(base, bomb.stat().st_size), f"peak RSS {peak / MIB:.0f} MiB"
    if overlapping:  # over the names budget: said so, as a warning
        assert [f[:3] for f in findings] == [["unreadable-dll", "warning", "asmjit.dll"]]
        assert "overlapping names" in findings[0][3]
    else:  # one name, read once: nothing to report
        assert findings == []


@pytest.mark.parametrize("layout", ["overlay", "section", "headers"])
def test_a_deflate_bomb_in_a_wheel(tmp_path: Path, baseline: tuple[int, Path], layout: str) -> None:
    base, s32 = baseline
    wheel = deflate_bomb_wheel(tmp_path, layout, BOMB)
    peak, findings = peak_rss([str(wheel)], [str(s32)])
    assert peak <= allowed(base, wheel.stat().st_size), f"peak RSS {peak / MIB:.0f} MiB"
    if layout == "overlay":  # a small DLL and a long tail nobody needs: read as usual
        assert findings == []
    else:
        assert [f[:3] for f in findings] == [["unreadable-dll", "warning", "asmjit.dll"]]
        assert "deflate bomb" in findings[0][3]


def test_a_deflate_bomb_as_metadata_is_not_read(tmp_path: Path) -> None:
    """RECORD, METADATA and version.py are read whole: only within the member's budget."""
    import zipfile

    from torchguard._platforms.windows.tree import OversizedMember, WinTree, ZipMember

    archive = tmp_path / "x.whl"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        handle.writestr("x-1.dist-info/RECORD", bytes(64 * MIB))
    tree = WinTree()
    tree.add_file("C:\\s\\RECORD", ZipMember(str(archive), "x-1.dist-info/RECORD", 64 * MIB))
    with pytest.raises(OversizedMember):
        tree.read_bytes("C:\\s\\RECORD")
    assert tree.read_text("C:\\s\\RECORD") is None
    assert os.path.getsize(archive) < MIB
