"""RECORD summaries remembered across runs: a warm run reads no RECORD, and every install,
removal or reinstall (and a damaged cache) gives what a cold run gives."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import KERNEL, FakeTorch, companion, system32, write_tree, write_wheel
from pe_builder import DEFAULT_SYMBOL, build_pe

import torchguard
from torchguard._binary.cache import FOLDER
from torchguard._platforms.windows.records import KIND
from torchguard._platforms.windows.tree import WinTree
from torchguard._report.report import Report

TORCH = ("c10.dll", "torch_cpu.dll")
PURE = 30


def extension(name: str, version: str, *broken: str) -> dict[str, bytes]:
    """A torch extension: ``_C.pyd`` linking torch, plus a ``.pyd`` per name in ``broken``
    that also imports a DLL nobody ships."""
    module = name.replace("-", "_")
    imports = "".join(f"from . import {stem}\n" for stem in ("_C", *broken))
    files = {
        f"{module}/__init__.py": imports.encode(),  # what import runs: every extension
        f"{module}/_C.pyd": build_pe([*TORCH, *KERNEL]),
    }
    for stem in broken:
        files[f"{module}/{stem}.pyd"] = build_pe([*TORCH, "missing_helper.dll", *KERNEL])
    return companion(name, version, files, {})


def age(*paths: Path, seconds: float = 3600.0, below: bool = True) -> None:
    """Date ``paths`` (and everything below a folder, unless not ``below``) ``seconds`` ago:
    installed long before."""
    when = time.time() - seconds
    for path in paths:
        for item in [*(path.rglob("*") if below and path.is_dir() else ()), path]:
            os.utime(item, (when, when))


@pytest.fixture
def site(tmp_path: Path, fake_torch: FakeTorch) -> Path:
    """torch, one healthy extension and many pure-Python distributions, installed long ago."""
    root = fake_torch.write(tmp_path / "site")
    write_tree(root, extension("torch-ext", "1.0"))
    for index in range(PURE):
        write_tree(root, companion(f"pure{index}", "1.0", {f"pure{index}/a.py": b"x = 1\n"}, {}))
    age(root)
    return root


def scan(site: Path) -> Report:
    s32 = site.parent / "s32"
    if not s32.exists():  # written once: a rewritten DLL is new facts to save
        system32(s32, ("msvcp140.dll", "vcruntime140_1.dll"))
    return torchguard.scan([site], system32=[s32], clean_windows=True)


def cold(site: Path, monkeypatch: pytest.MonkeyPatch) -> Report:
    with monkeypatch.context() as patch:
        patch.setenv("TORCHGUARD_CACHE", "off")
        return scan(site)


def same(warm: Report, fresh: Report) -> None:
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in fresh.findings]
    assert [p.to_dict() for p in warm.packages] == [p.to_dict() for p in fresh.packages]
    assert warm.import_torch == fresh.import_torch


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``.dist-info`` folders whose RECORD is read from now on."""
    seen: list[str] = []
    real = WinTree.read_text

    def reading(tree: WinTree, path: str) -> str | None:
        if path.endswith("\\RECORD"):
            seen.append(path.split("\\")[-2])
        return real(tree, path)

    monkeypatch.setattr(WinTree, "read_text", reading)
    return seen


def others(records: list[str]) -> list[str]:
    """The RECORDs read but torch's (a finding's rules read torch's to name its files)."""
    return [name for name in records if not name.startswith("torch-")]


def packages(report: Report) -> dict[str, str]:
    return {p.name: p.status for p in report.packages}


def test_a_warm_run_reads_no_record(site: Path, records: list[str]) -> None:
    first = scan(site)
    assert len(records) >= PURE + 1
    assert packages(first) == {"torch-ext": "ok"}
    records.clear()
    warm = scan(site)
    assert records == []
    assert packages(warm) == {"torch-ext": "ok"}
    same(warm, first)


def test_an_installed_extension_is_seen_and_only_its_record_read(
    site: Path, records: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scan(site)
    write_tree(site, extension("new-ext", "2.0", "_ops"))  # pip install new-ext
    age(site / "new_ext", site / "new_ext-2.0.dist-info", seconds=1800)
    age(site, seconds=1800, below=False)
    records.clear()
    warm = scan(site)
    assert others(records) == ["new_ext-2.0.dist-info"]
    assert packages(warm) == {"new-ext": "fails", "torch-ext": "ok"}
    assert [f.package for f in warm.errors] == ["new-ext"]
    same(warm, cold(site, monkeypatch))


def test_a_removed_extension_is_gone(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_torch.write(tmp_path / "site")
    write_tree(root, extension("torch-ext", "1.0", "_ops"))
    age(root)
    assert packages(scan(root)) == {"torch-ext": "fails"}
    shutil.rmtree(root / "torch_ext-1.0.dist-info")  # pip uninstall torch-ext
    shutil.rmtree(root / "torch_ext")
    age(root, seconds=1800, below=False)
    warm = scan(root)
    assert packages(warm) == {} and warm.ok
    same(warm, cold(root, monkeypatch))


def test_a_reinstall_that_rewrites_the_record_is_seen(
    site: Path, records: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip removes the old ``.dist-info`` and writes a new one: the same name, a new RECORD."""
    scan(site)
    shutil.rmtree(site / "torch_ext-1.0.dist-info")
    write_tree(site, extension("torch-ext", "1.0", "_ops"))  # a rebuild with one more binary
    age(site / "torch_ext", site / "torch_ext-1.0.dist-info", seconds=1800)
    age(site, seconds=1800, below=False)
    records.clear()
    warm = scan(site)
    assert others(records) == ["torch_ext-1.0.dist-info"]
    assert packages(warm) == {"torch-ext": "fails"}
    same(warm, cold(site, monkeypatch))


def test_a_record_written_moments_ago_is_read_again(
    tmp_path: Path, fake_torch: FakeTorch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installer may still be writing: a RECORD (or folder) changed within the last two
    seconds is not remembered, so a RECORD finished after a run is read by the next one."""
    root = fake_torch.write(tmp_path / "site")
    write_tree(root, extension("torch-ext", "1.0"))
    assert packages(scan(root)) == {"torch-ext": "ok"}
    assert packages(scan(root)) == {"torch-ext": "ok"}
    write_tree(root, extension("torch-ext", "1.0", "_ops"))  # RECORD rewritten in place
    warm = scan(root)
    assert packages(warm) == {"torch-ext": "fails"}
    same(warm, cold(root, monkeypatch))


def cache_file() -> Path:
    """The one environment file the scans of a test write."""
    folder = Path(os.environ["TORCHGUARD_CACHE_DIR"], FOLDER)
    (found,) = (p for p in folder.glob("*.json") if not p.name.endswith(".cold.json"))
    return found


def test_a_dist_info_without_a_record_is_remembered_and_nothing_is_saved_warm(
    site: Path, records: list[str]
) -> None:
    """Some installers write no RECORD: that is remembered too (by its folder's state), so a
    warm run neither looks for it again nor rewrites the cache file."""
    (site / "pure0-1.0.dist-info" / "RECORD").unlink()
    age(site / "pure0-1.0.dist-info", below=False)
    scan(site)
    scan(site)
    before = cache_file().stat().st_mtime_ns, cache_file().read_bytes()
    records.clear()
    warm = scan(site)
    assert records == []
    assert (cache_file().stat().st_mtime_ns, cache_file().read_bytes()) == before
    assert packages(warm) == {"torch-ext": "ok"}


def test_a_warm_scan_of_wheels_and_folders_saves_nothing(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    """A wheel's RECORD is held in memory, so it is not remembered (and costs no file read);
    it must not make every run rewrite the cache file."""
    torch = fake_torch.wheel(tmp_path)
    ext = tmp_path / "torch_ext-1.0-cp311-cp311-win_amd64.whl"
    write_wheel(ext, extension("torch-ext", "1.0"))
    extra = tmp_path / "extra"
    for index in range(3):
        write_tree(extra, companion(f"pure{index}", "1.0", {f"pure{index}/a.py": b""}, {}))
    age(extra)
    targets = [torch, ext, extra]
    torchguard.scan(targets)
    torchguard.scan(targets)
    before = cache_file().stat().st_mtime_ns, cache_file().read_bytes()
    assert packages(torchguard.scan(targets)) == {"torch-ext": "ok"}
    assert (cache_file().stat().st_mtime_ns, cache_file().read_bytes()) == before


def entry_key(document: dict[str, Any], kind: str) -> str:
    """The key of the one entry of ``kind`` in the cache file's ``document``."""
    (key,) = [k for k in document["entries"] if k.startswith(f"{kind}|")]
    return key


@pytest.mark.parametrize(
    "damage",
    [
        "not a dict",
        {"state": None},
        {"dists": {"torch_ext-1.0.dist-info": 7}},
        {"dists": {"torch_ext-1.0.dist-info": ["state", {"not": "paths"}, [], "x"]}},
        {"dists": {"torch_ext-1.0.dist-info": ["state", "a.pyd", 7, "x"]}},
        {"dists": {"torch_ext-1.0.dist-info": [1, [], [], "x"]}},
        {"dists": {"torch_ext-1.0.dist-info": []}},
        {"dists": {"torch_ext-1.0.dist-info": ["state", [3], [], "x"]}},
    ],
)
def test_a_damaged_cache_entry_is_read_again(
    site: Path, monkeypatch: pytest.MonkeyPatch, damage: object
) -> None:
    write_tree(site, extension("torch-ext", "1.0", "_ops"))  # its RECORD lists a broken pyd
    age(site)
    scan(site)
    cache = cache_file()
    document = json.loads(cache.read_text())
    key = entry_key(document, KIND)
    entry = document["entries"][key][1]
    if isinstance(damage, dict):
        entry = {**entry, **damage}
        if "dists" in damage:  # keep the real state: only the distribution's entry is bad
            entry["dists"] = {**document["entries"][key][1]["dists"], **damage["dists"]}
    else:
        entry = damage
    document["entries"][key][1] = entry
    cache.write_text(json.dumps(document))
    warm = scan(site)
    assert packages(warm) == {"torch-ext": "fails"}
    same(warm, cold(site, monkeypatch))


def test_summaries_kept_as_lists_still_serve_a_warm_run(
    site: Path, records: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each summary's paths are kept as one joined string; an entry holding them as lists
    (as written before, or for a name holding the separator) gives the same summary: no
    RECORD read, the same verdict."""
    from torchguard._platforms.windows.records import SEPARATOR

    write_tree(site, extension("torch-ext", "1.0", "_ops"))
    age(site)
    scan(site)
    records.clear()
    scan(site)
    read_warm = others(records)  # the failing extension's, read to name its files
    cache = cache_file()
    document = json.loads(cache.read_text())
    dists = document["entries"][entry_key(document, KIND)][1]["dists"]
    (joined,) = [raw for raw in dists.values() if len(raw) == 4]
    assert type(joined[1]) is str and joined[1].count(SEPARATOR) == 1  # _C.pyd, _ops.pyd
    for raw in dists.values():
        if len(raw) == 4:
            raw[1:3] = [raw[1].split(SEPARATOR), []]
    cache.write_text(json.dumps(document))
    before = cache.read_bytes()
    records.clear()
    warm = scan(site)
    assert cache.read_bytes() == before  # served as it is: nothing read again, nothing new
    assert others(records) == read_warm == ["torch_ext-1.0.dist-info"]
    assert packages(warm) == {"torch-ext": "fails"}
    same(warm, cold(site, monkeypatch))


def test_a_name_holding_the_separator_is_kept_exact() -> None:
    from torchguard._platforms.windows.dists import RecordSummary
    from torchguard._platforms.windows.records import _decode, _encode

    for binaries in [("a/x.pyd", "b/y.pyd"), ("a/x|y.pyd", "b.pyd"), ("one.pyd",), ()]:
        summary = RecordSummary(binaries, ("../../Library/bin/z.dll",), "digest")
        assert _decode(_encode("state", summary)) == summary


# -- a conda environment's Library\bin ---------------------------------------------------------
KMP = build_pe(
    list(KERNEL),
    exports=[DEFAULT_SYMBOL, "__kmpc_fork_call", "omp_get_max_threads"],
    strings=[b"__KMP_REGISTERED_LIB_"],
)


def conda_env(tmp_path: Path, fake_torch: FakeTorch) -> tuple[Path, Path]:
    """torch (with its own libiomp5md.dll) in a conda environment whose Library\\bin holds
    many ordinary DLLs; the environment's prefix and its Library\\bin, installed long ago."""
    fake_torch.extra["torch/lib/libiomp5md.dll"] = KMP
    root = fake_torch.write(tmp_path / "site")
    prefix = tmp_path / "prefix"
    files = {
        "python311.dll": build_pe(list(KERNEL)),
        "vcruntime140.dll": build_pe(["KERNEL32.dll"]),
        "vcruntime140_1.dll": build_pe(["KERNEL32.dll"]),
        "msvcp140.dll": build_pe(["KERNEL32.dll"]),
    }
    files.update({f"Library/bin/plain{i}.dll": build_pe(list(KERNEL)) for i in range(20)})
    write_tree(prefix, files)
    age(root, prefix)
    return root, prefix / "Library" / "bin"


def conda_scan(root: Path, prefix: Path, runtime_dir: Path, *, cached: bool = True) -> Report:
    import dataclasses

    from torchguard._binary.cache import user_cache
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.system import offline_windows

    found = offline_windows([str(root)], system32_dirs=[str(runtime_dir)], python_dir=str(prefix))
    found.interpreter = dataclasses.replace(found.interpreter, is_conda=True)  # type: ignore[misc]
    try:
        return analyze(found, cache=user_cache() if cached else None)
    finally:
        found.close()


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the files in a Library\\bin whose identity (size, time, id) is taken."""
    from torchguard._platforms.windows import binaries

    seen: list[str] = []
    real = binaries.host_key

    def counting(path: str) -> str | None:
        if os.sep + "Library" + os.sep in path:
            seen.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(binaries, "host_key", counting)
    return seen


def test_a_warm_run_takes_no_conda_library_bin_file_apart(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, stats: list[str]
) -> None:
    root, library_bin = conda_env(tmp_path, fake_torch)
    first = conda_scan(root, library_bin.parents[1], runtime_dir)
    assert len(stats) >= 20
    stats.clear()
    warm = conda_scan(root, library_bin.parents[1], runtime_dir)
    assert stats == []
    same(warm, first)


def test_a_conda_install_and_removal_in_library_bin_are_seen(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """conda install llvm-openmp and a package using it: a second runtime starts (a certain
    OMP: Error #15); conda remove: it is gone. Each warm run says what a cold one says."""
    root, library_bin = conda_env(tmp_path, fake_torch)
    prefix = library_bin.parents[1]
    assert conda_scan(root, prefix, runtime_dir).findings == ()
    conda_scan(root, prefix, runtime_dir)
    (library_bin / "libomp.dll").write_bytes(KMP)
    (library_bin / "faiss.dll").write_bytes(build_pe(["libomp.dll", *KERNEL]))
    age(library_bin / "libomp.dll", library_bin / "faiss.dll", seconds=1800)
    age(library_bin, seconds=1800, below=False)
    installed = conda_scan(root, prefix, runtime_dir)
    assert [f.code for f in installed.findings] == ["openmp-conflict"]
    fresh = conda_scan(root, prefix, runtime_dir, cached=False)
    same(installed, fresh)
    same(conda_scan(root, prefix, runtime_dir), fresh)  # warm: faiss.dll from the cache
    (library_bin / "libomp.dll").unlink()
    (library_bin / "faiss.dll").unlink()
    age(library_bin, seconds=900, below=False)
    removed = conda_scan(root, prefix, runtime_dir)
    assert removed.findings == ()
    same(removed, conda_scan(root, prefix, runtime_dir, cached=False))


def test_a_runtime_pasted_over_in_place_is_seen(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path
) -> None:
    """Copying a DLL over another in place leaves Library\\bin's own state as it was; a runtime
    is still checked against its file on every run."""
    root, library_bin = conda_env(tmp_path, fake_torch)
    prefix = library_bin.parents[1]
    (library_bin / "libomp.dll").write_bytes(KMP)
    (library_bin / "faiss.dll").write_bytes(build_pe(["libomp.dll", *KERNEL]))
    age(library_bin)
    first = conda_scan(root, prefix, runtime_dir)
    assert [f.code for f in first.findings] == ["openmp-conflict"]
    same(conda_scan(root, prefix, runtime_dir), first)
    (library_bin / "libomp.dll").write_bytes(build_pe(list(KERNEL), exports=["omp_stub"]))
    age(library_bin / "libomp.dll", seconds=1800)
    replaced = conda_scan(root, prefix, runtime_dir)
    assert replaced.findings == ()
    same(replaced, conda_scan(root, prefix, runtime_dir, cached=False))


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: "not a list",
        lambda entry: [[*e[:2], 7, *e[3:]] if e[0].endswith("faiss.dll") else e for e in entry],
        lambda entry: [
            [*e[:5], "a dist", e[6]] if e[0].endswith("faiss.dll") else e for e in entry
        ],
        lambda entry: [[e[0], 5, *e[2:]] if e[0].endswith("libomp.dll") else e for e in entry],
        lambda entry: [e[:3] for e in entry],
    ],
)
def test_a_damaged_library_bin_entry_is_listed_again(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, damage: Any
) -> None:
    root, library_bin = conda_env(tmp_path, fake_torch)
    prefix = library_bin.parents[1]
    (library_bin / "libomp.dll").write_bytes(KMP)
    (library_bin / "faiss.dll").write_bytes(build_pe(["libomp.dll", *KERNEL]))
    age(library_bin)
    fresh = conda_scan(root, prefix, runtime_dir, cached=False)
    assert [f.code for f in fresh.findings] == ["openmp-conflict"]
    conda_scan(root, prefix, runtime_dir)
    document = json.loads(cache_file().read_text())
    (key,) = [k for k in document["entries"] if k.startswith("openmp-conda-bin|")]
    document["entries"][key][1] = damage(document["entries"][key][1])
    cache_file().write_text(json.dumps(document))
    same(conda_scan(root, prefix, runtime_dir), fresh)


def test_cached_lists_of_names_are_checked_as_before() -> None:
    """The checks of cached name lists (a RECORD summary's, an OpenMP summary's, the
    torch-linked answers') answer what one test per item answered: a ``str`` subclass is a
    string where ``isinstance`` was asked, and not where the exact type was."""
    from torchguard._platforms.windows import linked, openmp, records

    class Sub(str):
        pass

    values: list[object] = [[], ["a"], ["a", "b"], ["a", 1], [None], [["a"]], [Sub("a")]]
    values += [["a", Sub("b")], ("a",), "ab", None, {"a": 1}, [b"a"], [1.0, "a"]]
    for value in values:
        items = list(value) if isinstance(value, list) else []
        exact = type(value) is list and all(type(item) is str for item in items)
        assert records._strings(value) == (
            isinstance(value, list) and all(isinstance(item, str) for item in items)
        ), value
        assert openmp._names(value) == exact, value
        assert linked._entry(value) == (exact and bool(items)), value
