"""The persistent facts cache seen through Windows scans: warm runs read no DLL, changes are
seen, damage is harmless."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakes import FakeTorch

import torchguard
from torchguard._binary.cache import FOLDER, SCHEMA, scope_file


def _cache() -> Path:
    return Path(os.environ["TORCHGUARD_CACHE_DIR"])


def _files() -> list[Path]:
    """The environment files of the cache."""
    folder = _cache() / FOLDER
    found = folder.glob("*.json") if folder.is_dir() else []
    return sorted(path for path in found if not path.name.endswith(".cold.json"))


def _only() -> Path:
    """The one environment file a scan of one tree writes."""
    (found,) = _files()
    return found


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
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, damage: bytes, reads: list[str]
) -> None:
    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    path = _only()
    path.write_bytes(damage)
    neighbour = path.parent / "someone-elses-file.txt"
    neighbour.write_text("keep me")
    reads.clear()
    report = torchguard.scan([site], system32=[runtime_dir])
    assert report.ok and "c10.dll" in reads
    assert json.loads(path.read_text())["schema"] == SCHEMA
    assert neighbour.read_text() == "keep me"


def test_damaged_entries_are_read_again(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    site = fake_torch.write(tmp_path / "site")
    torchguard.scan([site], system32=[runtime_dir])
    path = _only()
    data = json.loads(path.read_text())
    damaged = 0
    for name, entry in data["entries"].items():
        if name.startswith("pe|"):
            entry[1]["imports"] = 42
            damaged += 1
    assert damaged
    path.write_text(json.dumps(data))
    reads.clear()
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert "c10.dll" in reads


def test_cache_off_writes_nothing(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHGUARD_CACHE", "off")
    torchguard.scan([fake_torch.write(tmp_path / "site")])
    assert not (_cache() / FOLDER).exists()


def test_an_unwritable_cache_folder_is_ignored(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(blocker / "cache"))
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], clean_windows=True)
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


def _planted_lie(site: Path, scope: str) -> dict[str, object]:
    """A cache document that calls every DLL of ``site`` corrupt, as a buggy release might."""
    from torchguard._binary.cache import host_key

    entries = {
        f"pe|{host_key(str(dll))}": [20_000, {"error": "planted: not a valid PE image"}]
        for dll in (site / "torch" / "lib").iterdir()
    }
    return {"schema": SCHEMA, "scope": scope, "entries": entries}


def test_a_cache_written_by_another_version_is_ignored_and_replaced(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    from torchguard._binary.cache import writer

    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    path = _only()
    lie = _planted_lie(site, json.loads(path.read_text())["scope"])
    path.write_text(json.dumps({**lie, "writer": "torchguard 0.0.1, reader 1, schema 3"}))
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert json.loads(path.read_text())["writer"] == writer()
    # the same lie, stamped with this version, is believed: the stamp is what protects
    path.write_text(json.dumps({**lie, "writer": writer()}))
    assert not torchguard.scan([site], system32=[runtime_dir]).ok


def test_an_internal_error_is_never_cached(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside the reader propagates; it is not remembered as a fact about the file."""
    from torchguard._binary.pe import image as _pe

    site = fake_torch.write(tmp_path / "site")
    original = _pe._facts

    def broken(pe: object) -> object:
        raise TypeError("planted bug")

    monkeypatch.setattr(_pe, "_facts", broken)
    with pytest.raises(torchguard.InternalError) as raised:
        torchguard.scan([site], system32=[runtime_dir])
    assert isinstance(raised.value.__cause__, TypeError)
    monkeypatch.setattr(_pe, "_facts", original)
    assert torchguard.scan([site], system32=[runtime_dir]).ok


def test_a_symlinked_cache_file_never_touches_its_target(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    path = _only()
    path.unlink()
    precious = tmp_path / "precious.json"
    precious.write_text('{"mine": true}')
    path.symlink_to(precious)
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert precious.read_text() == '{"mine": true}'
    assert not path.is_symlink()


def test_a_huge_cache_file_is_not_parsed(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, reads: list[str]
) -> None:
    from torchguard._binary.cache import MAX_BYTES

    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    path = _only()
    with path.open("wb") as handle:  # sparse: costs no disk
        handle.truncate(MAX_BYTES + 1)
    reads.clear()
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert "c10.dll" in reads
    assert path.stat().st_size < MAX_BYTES


def test_many_processes_at_once_lose_nothing(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """Concurrent cold scans of two trees: same verdicts, one valid cache holding both."""
    import subprocess
    import sys

    sites = [fake_torch.write(tmp_path / "a"), FakeTorch(version="2.4.0+cpu").write(tmp_path / "b")]
    code = (
        "import sys, torchguard\n"
        "r = torchguard.scan([sys.argv[1]], system32=[sys.argv[2]])\n"
        "print(r.ok)\n"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(sites[index % 2]), str(runtime_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(6)
    ]
    outputs = [process.communicate(timeout=120)[0].split() for process in processes]
    assert outputs == [["True"]] * 6
    from torchguard._binary.cache import cold_file

    every = [*_files(), *(cold_file(p) for p in _files() if cold_file(p).exists())]
    documents = [json.loads(path.read_text()) for path in every]
    cached = " ".join(name for data in documents for name in data["entries"])
    assert str(sites[0]) in cached and str(sites[1]) in cached


def test_a_killed_processs_lock_is_broken_and_a_busy_one_skips_the_save(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    from torchguard._binary.cache import LOCK_NAME, LOCK_STALE

    cache = Path(os.environ["TORCHGUARD_CACHE_DIR"])
    cache.mkdir(parents=True, exist_ok=True)
    lock = cache / LOCK_NAME
    lock.write_text("")
    site = fake_torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok  # a live lock: nothing saved
    assert not _files() and lock.exists()
    old = lock.stat().st_mtime - LOCK_STALE - 1
    os.utime(lock, (old, old))
    assert torchguard.scan([site], system32=[runtime_dir]).ok  # a stale lock: broken, saved
    assert _files() and not lock.exists()


_SAVE_AGAINST_AN_UNBREAKABLE_LOCK = """
import os, sys, time
from pathlib import Path
from torchguard._binary.pe.image import PEFacts
from torchguard._binary import cache as _cache

directory, how = Path(sys.argv[1]), sys.argv[2]
lock = directory / _cache.LOCK_NAME
old = time.time() - _cache.LOCK_STALE - 60
if how == "folder":  # a folder where the lock file should be: unlink always fails
    lock.mkdir()
else:  # another user's lock in a shared folder, or a lock held open on Windows
    lock.write_text("")
    real_unlink = Path.unlink

    def refused(self, missing_ok=False):
        if self == lock:
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, missing_ok)

    Path.unlink = refused
os.utime(lock, (old, old))
store = _cache.FactsCache(directory)
store.put("file|x|1|2|3", PEFacts(0x8664, True, (), (), (14, 42)))
started = time.monotonic()
store.save()
print(round(time.monotonic() - started, 3), _cache.scope_file(directory, "default").exists())
"""


@pytest.mark.parametrize("how", ["folder", "refused"])
def test_a_lock_that_cannot_be_broken_gives_up_in_bounded_time(tmp_path: Path, how: str) -> None:
    """A stale lock whose unlink fails made ``save`` spin at 100 % CPU forever (issue 13.5)."""
    import subprocess
    import sys

    from torchguard._binary.cache import LOCK_WAIT

    directory = tmp_path / "cache"
    directory.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _SAVE_AGAINST_AN_UNBREAKABLE_LOCK, str(directory), how],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    elapsed, saved = done.stdout.split()
    assert float(elapsed) < LOCK_WAIT + 2 and saved == "False"  # gave up: nothing written


def test_a_full_cache_drops_the_least_recently_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eviction kept the most recently *inserted* entries: a DLL read on every run but first
    cached long ago was dropped before a one-off (issue 13.9)."""
    from torchguard._binary import cache as _cache
    from torchguard._binary.pe.image import PEFacts

    monkeypatch.setattr(_cache, "MAX_ENTRIES", 4)
    facts = PEFacts(0x8664, True, ("KERNEL32.dll",), (), (14, 42))
    first = _cache.FactsCache(tmp_path)
    for key in "abcd":
        first.put(key, facts)
    first.save()
    warm = _cache.FactsCache(tmp_path)  # a warm run uses "a" only, inserts nothing
    assert warm.get("a") == facts
    warm.save()
    later = _cache.FactsCache(tmp_path)  # another run inserts two new entries
    later.put("e", facts)
    later.put("f", facts)
    later.save()
    kept = _cache.FactsCache(tmp_path)
    assert [key for key in "abcdef" if kept.get(key) is not None] == ["a", "d", "e", "f"]


def test_a_warm_run_writes_nothing_while_what_it_used_is_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._binary import cache as _cache
    from torchguard._binary.pe.image import PEFacts

    monkeypatch.setattr(_cache, "MAX_ENTRIES", 8)
    facts = PEFacts(0x8664, True, (), (), (14, 42))
    first = _cache.FactsCache(tmp_path)
    for key in "abcd":
        first.put(key, facts)
    first.save()
    stamp = scope_file(tmp_path, "default").stat().st_mtime_ns
    warm = _cache.FactsCache(tmp_path)
    assert warm.get("a") == facts  # half full at most: nothing is at risk
    warm.save()
    assert scope_file(tmp_path, "default").stat().st_mtime_ns == stamp
