"""A warm run's cost follows what changed, not what exists: counted in file-system calls (a
seam around ``os``), never timed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, write_tree
from pe_builder import build_pe
from test_records import age, extension

import torchguard
from torchguard._binary import cache as _cache
from torchguard._binary.cache import FactsCache, cold_file, scope_file

CALLS = ("stat", "lstat", "scandir", "listdir")


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every stat, lstat, scandir and listdir call made meanwhile (the path it was given)."""
    seen: list[str] = []
    with monkeypatch.context() as patch:
        for name in CALLS:
            real = getattr(os, name)

            def spy(*args: object, _real: object = real, **kwargs: object) -> object:
                seen.append(str(args[0]) if args else ".")
                return _real(*args, **kwargs)  # type: ignore[operator]

            patch.setattr(os, name, spy)
        yield seen


def binary_dists(site: Path, count: int, each: int = 7, first: int = 0) -> None:
    """``count`` ordinary distributions of ``each`` compiled modules (none links torch)."""
    pyd = build_pe(["python311.dll", *KERNEL])
    for index in range(first, first + count):
        name = f"pkg{index}"
        files = {f"{name}/_ext{j}.pyd": pyd for j in range(each)}
        write_tree(site, companion(name, "1.0", files, {}))


def settled(site: Path, runtime_dir: Path) -> torchguard.Report:
    """Scans until the cache holds what a warm run needs (the first two may write)."""
    age(site)
    for _ in range(3):
        report = torchguard.scan([site], system32=[runtime_dir])
    return report


def warm_calls(site: Path, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    with counted(monkeypatch) as seen:
        torchguard.scan([site], system32=[runtime_dir])
    return len([path for path in seen if str(site) in path])


def test_a_warm_scan_touches_as_many_files_with_300_binaries_as_with_7(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    for site, count in ((small, 1), (large, 40)):
        fake_torch.write(site)
        write_tree(site, extension("torch-ext", "1.0"))
        binary_dists(site, count)
        settled(site, runtime_dir)
    assert warm_calls(large, runtime_dir, monkeypatch) == warm_calls(
        small, runtime_dir, monkeypatch
    )


@pytest.mark.parametrize("just_now", [False, True])
def test_an_install_costs_its_own_files_and_the_answer_follows_it(
    just_now: bool,
    tmp_path: Path,
    fake_torch: FakeTorch,
    runtime_dir: Path,
    reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site = fake_torch.write(tmp_path / "site")
    binary_dists(site, 20)
    assert settled(site, runtime_dir).packages == ()
    write_tree(site, extension("torch-ext", "1.0", "_ops"))  # one install: a broken extension
    if not just_now:  # just now: the folder is too fresh to be trusted, RECORDs are asked
        age(site / "torch_ext", site / "torch_ext-1.0.dist-info")
        age(site, below=False)  # the folder's own time changes too: others' files keep theirs
    reads.clear()
    with counted(monkeypatch) as seen:
        report = torchguard.scan([site], system32=[runtime_dir])
    assert not [p for p in seen if os.sep + "pkg" in p and p.endswith(".pyd")]  # nobody else
    assert {"_C.pyd", "_ops.pyd"} <= set(reads)  # its own binaries (and what they bind to)
    assert not [name for name in reads if name.startswith("_ext")]  # no other distribution's
    assert [p.status for p in report.packages] == ["fails"]
    warm = torchguard.scan([site], system32=[runtime_dir])
    assert [p.status for p in warm.packages] == ["fails"]


def test_a_warm_scan_in_an_unchanged_environment_rewrites_nothing(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    site = fake_torch.write(tmp_path / "site")
    write_tree(site, extension("torch-ext", "1.0"))
    binary_dists(site, 5)
    settled(site, runtime_dir)
    folder = Path(os.environ["TORCHGUARD_CACHE_DIR"]) / _cache.FOLDER
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
    torchguard.scan([site], system32=[runtime_dir])
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
    assert after == before


def test_a_warm_run_parses_only_what_it_used_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a change left in the hot file (every binary's facts, read once) moves to the cold
    file at the next run that needs far less; later runs never parse the cold file."""
    big = FactsCache(tmp_path, "env")
    for index in range(2 * _cache.SMALL_HOT):
        big.store("k", str(index), [index] * 10)
    big.save()
    assert not cold_file(scope_file(tmp_path, "env")).exists()
    first = FactsCache(tmp_path, "env")
    assert [first.found("k", str(i)) for i in range(3)] == [[0] * 10, [1] * 10, [2] * 10]
    first.save()  # used 3 of 512: the rest goes cold
    loaded: list[str] = []
    real = _cache._load

    def spy(path: Path, scope: str) -> object:
        loaded.append(path.name)
        return real(path, scope)

    monkeypatch.setattr(_cache, "_load", spy)
    warm = FactsCache(tmp_path, "env")
    assert warm.found("k", "2") == [2] * 10
    warm.save()
    assert loaded == [scope_file(tmp_path, "env").name]
    assert len(json.loads(scope_file(tmp_path, "env").read_text())["entries"]) == 3
    assert FactsCache(tmp_path, "env").found("k", "300") == [300] * 10  # cold: still there


def test_a_warm_linux_analysis_rewrites_nothing(tmp_path: Path) -> None:
    """The Linux cache rewrote its whole file on every warm diagnose() (issue 22)."""
    from test_linux_import import torch_site

    from torchguard._frontends.pipeline import analyze_linux
    from torchguard._platforms.linux.cache import LinuxCache
    from torchguard._platforms.linux.system import offline_linux

    site = torch_site(tmp_path)
    binary_dists(site, 3)
    age(site)
    folder = tmp_path / "cache"
    for _ in range(3):
        analyze_linux(offline_linux([str(site)]), cache=LinuxCache(folder))
    files = sorted((folder / _cache.FOLDER).iterdir())
    assert files
    before = [(p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in files]
    report = analyze_linux(offline_linux([str(site)]), cache=LinuxCache(folder))
    assert report.import_torch is not None and report.import_torch.ok
    after = [(p.name, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(files)]
    assert after == before


def test_a_warm_linux_analysis_lists_no_site_packages_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """site-packages holds a thousand names in a large environment: a warm run neither lists
    it for torch's preload search nor for what torchvision and friends pin (issue 22.1); an
    install is seen at once (the folder's state changes)."""
    from test_linux_import import _dist, torch_site

    from torchguard._frontends.pipeline import analyze_linux
    from torchguard._platforms.linux import cached, listing
    from torchguard._platforms.linux.cache import LinuxCache
    from torchguard._platforms.linux.system import offline_linux

    site = torch_site(tmp_path)
    binary_dists(site, 3)
    _dist(site, "torchvision", "0.24.1", "2.9.1")
    age(site)
    folder = tmp_path / "cache"

    def analyze() -> torchguard.Report:
        return analyze_linux(offline_linux([str(site)]), cache=LinuxCache(folder))

    assert analyze().warnings == ()
    listed: list[str] = []
    real_list, real_listdir = listing._list, os.listdir

    def spy_list(path: str) -> object:
        listed.append(path)
        return real_list(path)

    def spy_listdir(path: str | None = None) -> list[str]:
        listed.append(str(path))
        return real_listdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(listing, "_list", spy_list)
    monkeypatch.setattr(os, "listdir", spy_listdir)
    monkeypatch.setattr(cached, "torch_pins", lambda site: pytest.fail("read again"))
    assert analyze().warnings == ()
    assert str(site) not in listed, listed
    monkeypatch.undo()
    _dist(site, "torchaudio", "2.8.0", "2.8.0")  # pinned to another torch
    assert [(f.code, f.package) for f in analyze().warnings] == [("package-mismatch", "torchaudio")]


def _garbage_of(scan: object) -> list[object]:
    """What the garbage collector alone would free of what ``scan()`` left (reference
    cycles: reference counting frees everything else as the call returns)."""
    import gc

    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        scan()  # type: ignore[operator]
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_a_scan_leaves_no_reference_cycles(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """A warm run's objects are freed as it returns: a cycle (an error kept and raised again
    with its traceback's frames, a method of the analysis held by what it holds) kept the
    whole analysis alive until the collector ran, which then walked thousands of objects."""
    site = fake_torch.write(tmp_path / "site")
    write_tree(site, companion("broken", "1.0", {"broken/x.dll": b"MZ not an image"}, {}))
    binary_dists(site, 3)
    age(site)

    def scan() -> None:
        torchguard.scan([site], system32=[runtime_dir])

    scan()
    assert [type(o).__qualname__ for o in _garbage_of(scan)] == []
