"""The one facts cache itself: per environment files, bounds, eviction, damage, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from torchguard._binary import cache as _cache
from torchguard._binary.cache import FOLDER, FactsCache, cold_file, scope_file


def _fill(directory: Path, scope: str, names: str, value: object = 1) -> None:
    store = FactsCache(directory, scope)
    for name in names:
        store.store("k", name, value)
    store.save()


def _kept(directory: Path, scope: str, names: str) -> str:
    store = FactsCache(directory, scope)
    return "".join(name for name in names if store.found("k", name) is not None)


def test_each_environment_has_its_own_file_and_reads_only_it(tmp_path: Path) -> None:
    _fill(tmp_path, "env-a", "ab")
    _fill(tmp_path, "env-b", "cd")
    assert _kept(tmp_path, "env-a", "abcd") == "ab"
    assert _kept(tmp_path, "env-b", "abcd") == "cd"
    assert len(list((tmp_path / FOLDER).glob("*.json"))) == 2  # nothing cold yet


def test_an_environment_file_holds_no_more_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "MAX_ENTRIES", 3)
    _fill(tmp_path, "env", "abcdef")
    assert _kept(tmp_path, "env", "abcdef") == "def"


def test_a_file_over_the_byte_bound_drops_its_oldest_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "MAX_BYTES", 2000)
    _fill(tmp_path, "env", "abcdefgh", "x" * 300)
    assert scope_file(tmp_path, "env").stat().st_size < 2000
    kept = _kept(tmp_path, "env", "abcdefgh")
    assert kept and kept == "abcdefgh"[-len(kept) :]  # the newest are the ones kept


def test_entries_unused_for_a_month_leave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm read follows this environment, not its history: an entry no run used for
    KEEP_DAYS days (the facts of a file since upgraded) is dropped at the next write."""
    monkeypatch.setattr(_cache, "_today", lambda: 20_000)
    _fill(tmp_path, "env", "ou")
    monkeypatch.setattr(_cache, "_today", lambda: 20_000 + _cache.KEEP_DAYS + 1)
    store = FactsCache(tmp_path, "env")
    assert store.found("k", "u") == 1  # used: renewed by this write
    store.store("k", "n", 2)
    store.save()
    assert _kept(tmp_path, "env", "oun") == "un"


def test_a_warm_run_renews_what_it_uses_before_it_would_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "_today", lambda: 20_000)
    _fill(tmp_path, "env", "u")
    path = scope_file(tmp_path, "env")
    before = path.read_bytes()
    monkeypatch.setattr(_cache, "_today", lambda: 20_000 + _cache.KEEP_DAYS // 2 - 1)
    store = FactsCache(tmp_path, "env")
    assert store.found("k", "u") == 1
    store.save()
    assert path.read_bytes() == before  # still safe: nothing written
    later = 20_000 + _cache.KEEP_DAYS // 2 + 1
    monkeypatch.setattr(_cache, "_today", lambda: later)
    store = FactsCache(tmp_path, "env")
    assert store.found("k", "u") == 1
    store.save()
    assert json.loads(path.read_text())["entries"]["k|u"][0] == later


def test_the_least_recently_used_environments_go_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "MAX_SCOPES", 3)
    for index, scope in enumerate("abcd"):
        _fill(tmp_path, scope, "x")
        stamp = 1_000_000 + index  # each later than the one before
        os.utime(scope_file(tmp_path, scope), (stamp, stamp))
    _fill(tmp_path, "e", "x")
    assert [s for s in "abcde" if scope_file(tmp_path, s).exists()] == ["c", "d", "e"]


def test_a_used_environment_has_its_time_renewed_without_a_rewrite(tmp_path: Path) -> None:
    _fill(tmp_path, "env", "a")
    path = scope_file(tmp_path, "env")
    os.utime(path, (1_000_000, 1_000_000))
    content = path.read_bytes()
    store = FactsCache(tmp_path, "env")
    assert store.found("k", "a") == 1
    store.save()
    assert path.read_bytes() == content and path.stat().st_mtime > 1_000_000


def test_a_warm_run_that_stores_what_it_found_writes_nothing(tmp_path: Path) -> None:
    _fill(tmp_path, "env", "ab", [1, 2])
    path = scope_file(tmp_path, "env")
    before = path.stat().st_mtime_ns, path.read_bytes()
    store = FactsCache(tmp_path, "env")
    store.store("k", "a", [1, 2])  # the same value again: a use, not news
    assert store.found("k", "b") == [1, 2]
    store.save()
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{not json",
        b"\xff\xfe\x00garbage",
        b'{"schema": 3, "entries": []}',
        b'{"schema": 3, "entries": {"k|a": [1]}}',
        b"[1, 2, 3]",
        b'{"schema": 3, "entries": {"k|a": "not a pair"}}',
        b"[" * 100_000,  # deep nesting: RecursionError inside json
    ],
)
def test_a_damaged_file_is_rebuilt_silently(tmp_path: Path, damage: bytes) -> None:
    path = scope_file(tmp_path, "env")
    path.parent.mkdir(parents=True)
    path.write_bytes(damage)
    neighbour = path.parent / "notes.txt"
    neighbour.write_text("mine")
    assert _kept(tmp_path, "env", "a") == ""
    _fill(tmp_path, "env", "a")
    assert _kept(tmp_path, "env", "a") == "a"
    assert json.loads(path.read_text())["schema"] == _cache.SCHEMA
    assert neighbour.read_text() == "mine"


def test_a_damaged_entry_is_skipped_and_the_others_kept(tmp_path: Path) -> None:
    _fill(tmp_path, "env", "ab")
    path = scope_file(tmp_path, "env")
    document = json.loads(path.read_text())
    document["entries"]["k|a"] = {"not": "a pair"}
    path.write_text(json.dumps(document))
    assert _kept(tmp_path, "env", "ab") == "b"


def test_only_the_caches_own_files_are_ever_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cache, "MAX_SCOPES", 1)
    folder = tmp_path / FOLDER
    folder.mkdir()
    mine = [folder / "notes.json", folder / "0123456789abcdef0123.txt", folder / ".facts-x"]
    for path in mine:
        path.write_text("keep")
        os.utime(path, (1, 1))
    leftover = folder / ".facts-killed.tmp"  # a killed writer's temporary file
    leftover.write_text("{")
    os.utime(leftover, (1, 1))
    _fill(tmp_path, "a", "x")
    _fill(tmp_path, "b", "x")
    assert all(path.read_text() == "keep" for path in mine)
    assert not leftover.exists() and not scope_file(tmp_path, "a").exists()


def _names(path: Path) -> set[str]:
    return set(json.loads(path.read_text())["entries"]) if path.exists() else set()


def _worker(directory: str, index: int) -> None:
    """One process of the concurrency test: stores its own entries and a shared one."""
    _cache.LOCK_WAIT = 60.0  # a loaded machine is slow: this test is about merging, not waiting
    for round_ in range(5):
        store = FactsCache(Path(directory), "env")
        store.store("k", f"{index}-{round_}", index)
        store.store("k", "shared", round_)
        store.save()


def test_concurrent_processes_never_corrupt_it_and_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_worker, args=(str(tmp_path), i)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    hot = scope_file(tmp_path, "env")
    names = {name for path in (hot, cold_file(hot)) for name in _names(path)}
    lost = {f"k|{i}-{r}" for i in range(6) for r in range(5)} - names
    # each writer read the file again under the lock: no writer's view replaced another's
    assert not lost and "k|shared" in names
    assert not list((tmp_path / FOLDER).glob(".facts-*"))


def test_caching_off_keeps_facts_for_the_run_only(tmp_path: Path) -> None:
    store = FactsCache(None)
    store.store("k", "a", 1)
    assert store.found("k", "a") == 1
    store.save()
    assert not any(tmp_path.iterdir())


def test_a_scope_switch_saves_what_the_first_scope_learned(tmp_path: Path) -> None:
    store = FactsCache(tmp_path, "a")
    store.store("k", "x", 1)
    store.use_scope("b")
    assert store.found("k", "x") is None
    assert _kept(tmp_path, "a", "x") == "x"
