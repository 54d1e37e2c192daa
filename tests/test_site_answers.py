"""A site-packages folder's answers kept whole (one cache entry per folder): a warm offline
Windows scan asks no distribution of an unchanged folder, and every change to the folder,
to torch\\lib or to the entry itself gives what a cold run gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, write_tree
from pe_builder import DEFAULT_SYMBOL, build_pe
from test_openmp import llvm_runtime, spy_on_cache, torch_with_runtime
from test_records import age, cache_file, cold, entry_key, extension, packages, same, scan

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.site_answers import KIND
from torchguard._report.report import Report

PLAIN = 12
#: Per-distribution entries a folder's answers stand in for.
PER_DIST = ("dist-records", "openmp-dist-v2", "torch-linked", "wheel-tags")
KMP = build_pe(
    list(KERNEL),
    exports=[DEFAULT_SYMBOL, "__kmpc_fork_call", "omp_get_max_threads"],
    strings=[b"__KMP_REGISTERED_LIB_"],
)


def plain(index: int) -> dict[str, bytes]:
    """A binary distribution that has nothing to do with torch (most of a real site)."""
    return companion(
        f"plain{index}",
        "1.0",
        {
            f"plain{index}/_ext.cp311-win_amd64.pyd": build_pe(["python311.dll", *KERNEL]),
            f"plain{index}/helper{index}.dll": build_pe(list(KERNEL)),
        },
        {},
    )


def wheel_tag(files: dict[str, bytes], tag: str) -> dict[str, bytes]:
    info = next(name.split("/")[0] for name in files if name.endswith("/RECORD"))
    return {**files, f"{info}/WHEEL": f"Wheel-Version: 1.0\nTag: {tag}\n".encode()}


@pytest.fixture
def site(tmp_path: Path, fake_torch: FakeTorch) -> Path:
    """torch, one extension, many plain binary distributions (each with a WHEEL), long ago."""
    root = fake_torch.write(tmp_path / "site")
    write_tree(root, wheel_tag(extension("torch-ext", "1.0"), "cp311-cp311-win_amd64"))
    for index in range(PLAIN):
        write_tree(root, wheel_tag(plain(index), "cp311-cp311-win_amd64"))
    age(root)
    return root


@pytest.fixture
def looked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds of the cache entries looked up from now on."""
    return spy_on_cache(monkeypatch)


def settled(site: Path, looked: list[str]) -> Report:
    """Scans until the folder's answers serve: the last one asks no distribution."""
    scan(site)
    scan(site)
    looked.clear()
    report = scan(site)
    assert looked.count(KIND) == 1
    assert looked.count("wheel-tags") == 1  # torch's own, by its .dist-info folder's state
    assert not [kind for kind in looked if kind in PER_DIST and kind != "wheel-tags"], looked
    looked.clear()
    return report


def kept_again(
    site: Path, looked: list[str], warm: Report, monkeypatch: pytest.MonkeyPatch
) -> Report:
    """``warm``, the first scan after a change, says what a cold run says; the next scan keeps
    the folder's answers again, which then serve (:func:`settled`) and say the same."""
    same(warm, cold(site, monkeypatch))
    scan(site)
    again = settled(site, looked)
    same(again, cold(site, monkeypatch))
    return again


def changed(site: Path, *paths: Path) -> None:
    """An install's changes, settled half an hour ago (the folder's state is trusted)."""
    age(*paths, seconds=1800)
    age(site, seconds=1800, below=False)


def test_a_warm_run_asks_no_distribution_and_answers_as_a_cold_one(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    warm = settled(site, looked)
    assert packages(warm) == {"torch-ext": "ok"}
    same(warm, cold(site, monkeypatch))


def test_an_added_distribution_is_seen(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(site, looked)
    write_tree(site, extension("new-ext", "2.0", "_ops"))  # pip install new-ext
    changed(site, site / "new_ext", site / "new_ext-2.0.dist-info")
    warm = scan(site)
    assert packages(warm) == {"new-ext": "fails", "torch-ext": "ok"}
    again = kept_again(site, looked, warm, monkeypatch)  # with the new distribution
    assert packages(again) == {"new-ext": "fails", "torch-ext": "ok"}


def test_a_removed_distribution_is_gone(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(site, looked)
    shutil.rmtree(site / "torch_ext-1.0.dist-info")  # pip uninstall torch-ext
    shutil.rmtree(site / "torch_ext")
    changed(site)
    warm = scan(site)
    assert packages(warm) == {}
    same(warm, cold(site, monkeypatch))
    same(settled(site, looked), cold(site, monkeypatch))


def test_a_changed_distribution_is_seen_and_only_its_record_read(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip reinstalls a rebuilt plain distribution: it now links torch and misses a DLL."""
    from torchguard._platforms.windows.tree import WinTree

    settled(site, looked)
    shutil.rmtree(site / "plain3-1.0.dist-info")
    rebuilt = {"plain3/_ext.cp311-win_amd64.pyd": build_pe(["torch_cpu.dll", "gone.dll"])}
    write_tree(site, wheel_tag(companion("plain3", "1.1", rebuilt, {}), "cp311-cp311-win_amd64"))
    changed(site, site / "plain3", site / "plain3-1.1.dist-info")
    read: list[str] = []
    real = WinTree.read_text

    def reading(tree: WinTree, path: str) -> str | None:
        if path.endswith("\\RECORD") and "torch-" not in path:
            read.append(path.split("\\")[-2])
        return real(tree, path)

    monkeypatch.setattr(WinTree, "read_text", reading)
    warm = scan(site)
    assert read[:1] == ["plain3-1.1.dist-info"] and set(read) <= {"plain3-1.1.dist-info"}
    assert packages(warm)["plain3"] != "ok"  # it links torch now, and misses a DLL
    kept_again(site, looked, warm, monkeypatch)


def test_a_file_removed_from_torch_lib_is_seen(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = settled(site, looked)
    assert first.import_torch.ok
    lib = site / "torch" / "lib"
    (lib / "c10.dll").unlink()
    changed(site, lib)
    age(lib, seconds=1800, below=False)
    warm = scan(site)
    assert not warm.import_torch.ok and warm.errors
    same(warm, cold(site, monkeypatch))
    same(scan(site), cold(site, monkeypatch))


def test_a_wheel_built_for_another_python_is_judged_from_the_answers(
    tmp_path: Path, fake_torch: FakeTorch, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's WHEEL texts are judged once each: a distribution whose text misfits is
    named on every warm run, as on a cold one."""
    root = fake_torch.write(tmp_path / "site")
    for index in range(PLAIN):
        tag = "cp312-cp312-win_amd64" if index == 5 else "cp311-cp311-win_amd64"
        write_tree(root, wheel_tag(plain(index), tag))
    age(root)
    warm = settled(root, looked)
    found = [f for f in warm.findings if f.code == Code.WHEEL_TAG_MISMATCH]
    assert [f.package for f in found] == ["plain5"]
    same(warm, cold(root, monkeypatch))


def test_a_runtime_pasted_over_a_plain_dll_is_seen(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DLL replaced behind pip's back by renaming (its folder's state changes) is checked
    as the distribution's own summary is: the folder is asked one by one, then kept again."""
    settled(site, looked)
    folder = site / "plain2"
    (folder / "helper2.dll").rename(folder / "old.dll")
    (folder / "helper2.dll").write_bytes(KMP)
    (folder / "old.dll").unlink()
    age(folder, seconds=1800)
    kept_again(site, looked, scan(site), monkeypatch)


def test_answers_kept_half_a_month_are_asked_again_once(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-distribution entries an answer stands for are not used meanwhile: after half
    of KEEP_DAYS one run asks them (renewing them) and keeps the answers anew."""
    from torchguard._binary import cache as _cache

    settled(site, looked)
    later = _cache._today() + _cache.KEEP_DAYS // 2
    monkeypatch.setattr(_cache, "_today", lambda: later)
    asking = scan(site)
    assert "openmp-dist-v2" in looked and "dist-records" in looked
    same(asking, cold(site, monkeypatch))
    looked.clear()
    warm = scan(site)
    assert looked.count(KIND) == 1 and "openmp-dist-v2" not in looked
    same(warm, cold(site, monkeypatch))


def test_a_sibling_is_answered_from_the_folder_entry_and_its_break_is_seen(
    tmp_path: Path, fake_torch: FakeTorch, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchvision's loaders need all its binaries: its RECORD summary is kept in the folder's
    answers, so a warm run looks up no RECORD summary; its uninstall is seen."""
    from test_ecosystem import torchvision

    root = fake_torch.write(tmp_path / "site")
    write_tree(root, torchvision())
    for index in range(PLAIN):
        write_tree(root, plain(index))
    age(root)
    warm = settled(root, looked)
    assert "dist-records" not in looked
    assert packages(warm) == {"torchvision": "ok"}
    same(warm, cold(root, monkeypatch))
    shutil.rmtree(root / "torchvision-0.19.1.dist-info")  # pip uninstall torchvision
    shutil.rmtree(root / "torchvision")
    changed(root)
    gone = scan(root)
    assert packages(gone) == {}
    same(gone, cold(root, monkeypatch))


def test_a_runtime_user_with_a_dll_is_found_without_asking_a_record_summary(
    tmp_path: Path, fake_torch: FakeTorch, looked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution whose DLL imports another one's OpenMP runtime is kept whole in the
    folder's answers with its cache key: a warm run reads its briefs without asking for its
    RECORD summary, and says what a cold run says."""
    root = torch_with_runtime(fake_torch).write(tmp_path / "site")  # torch's libiomp5md.dll
    write_tree(root, companion("llvm-omp", "1.0", {"llvm_omp/libomp.dll": llvm_runtime()}, {}))
    user = {"uses_omp/core.dll": build_pe(["libomp.dll", *KERNEL])}
    write_tree(root, companion("uses-omp", "1.0", user, {}))
    for index in range(PLAIN):
        write_tree(root, plain(index))
    age(root)
    warm = settled(root, looked)
    assert "dist-records" not in looked
    fresh = cold(root, monkeypatch)
    assert [f.package for f in fresh.findings if f.code == Code.OPENMP_CONFLICT] == ["uses-omp"]
    same(warm, fresh)


@pytest.mark.parametrize(
    "damage",
    [
        "not a dict",
        {"state": None},
        {"dists": "other"},
        {"day": "today"},
        {"day": 10**9},
        {"linked": []},
        {"linked": {"torch_ext-1.0.dist-info": [3]}},
        {"openmp": {"check": [], "groups": {}}},
        {"openmp": {"check": {"plain1-1.0.dist-info": 7}, "groups": {}}},
        {"openmp": {"check": {}, "groups": {"x": "not a list"}}},
        {"tags": {"Tag: x": [1]}},
        {"tags": None},
        {"records": []},
    ],
)
def test_a_damaged_entry_is_asked_again(
    site: Path, looked: list[str], monkeypatch: pytest.MonkeyPatch, damage: object
) -> None:
    write_tree(site, extension("torch-ext", "1.0", "_ops"))  # its RECORD lists a broken pyd
    age(site)
    settled(site, looked)
    cache = cache_file()
    document = json.loads(cache.read_text())
    key = entry_key(document, KIND)
    value = document["entries"][key][1]
    document["entries"][key][1] = {**value, **damage} if isinstance(damage, dict) else damage
    cache.write_text(json.dumps(document))
    warm = scan(site)
    assert packages(warm) == {"torch-ext": "fails"}
    same(warm, cold(site, monkeypatch))
    same(settled(site, looked), cold(site, monkeypatch))
