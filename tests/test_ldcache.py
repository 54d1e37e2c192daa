"""The /etc/ld.so.cache parser: three layouts, hwcaps, ld.so's choice, damage; ldconfig judges."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ldcache_builder import X86_64, build_cache

from torchguard._platforms.linux.ldcache import (
    LdCacheError,
    cache_flags,
    parse_ld_cache,
    read_ld_cache,
)

ENTRIES = [
    ("libz.so.1", "/usr/lib/glibc-hwcaps/x86-64-v3/libz.so.1", X86_64, "x86-64-v3"),
    ("libz.so.1", "/usr/lib/glibc-hwcaps/x86-64-v2/libz.so.1", X86_64, "x86-64-v2"),
    ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", X86_64, None),
    ("libz.so.1", "/lib/i386-linux-gnu/libz.so.1", 0x0003, None),
    ("libstdc++.so.6", "/opt/conda/lib/libstdc++.so.6", X86_64, None),
    ("libstdc++.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6", X86_64, None),
]
LDCONFIG = shutil.which("ldconfig") or next(
    (p for p in ("/usr/sbin/ldconfig", "/sbin/ldconfig") if Path(p).exists()), None
)


@pytest.mark.parametrize(("layout", "big"), [("new", False), ("new", True), ("compat", False)])
def test_new_and_compat_layouts(layout: str, big: bool) -> None:
    cache = parse_ld_cache(build_cache(ENTRIES, layout, big_endian=big))
    assert cache.format == layout
    assert cache.generator == "ldconfig (test) 2.99"
    assert [(e.soname, e.path, e.flags, e.hwcaps_subdir) for e in cache.entries] == ENTRIES
    assert cache.entries[0].label == 'libc6,x86-64, hwcap: "x86-64-v3"'
    assert cache.entries[3].label == "libc6"


def test_old_layout_has_no_hwcaps() -> None:
    cache = parse_ld_cache(build_cache(ENTRIES, "old"))
    assert cache.format == "old" and cache.generator is None
    assert [(e.soname, e.path, e.flags) for e in cache.entries] == [e[:3] for e in ENTRIES]
    assert all(e.hwcaps_subdir is None and e.hwcap == 0 for e in cache.entries)


def test_lookup_keeps_cache_order() -> None:
    cache = parse_ld_cache(build_cache(ENTRIES))
    assert [e.path for e in cache.lookup("libstdc++.so.6")] == [
        "/opt/conda/lib/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
    ]
    assert len(cache.lookup("libz.so.1", X86_64)) == 3
    assert cache.lookup("libnope.so") == ()


def test_resolve_follows_search_cache() -> None:
    cache = parse_ld_cache(build_cache(ENTRIES))
    pick = cache.resolve
    assert pick("libz.so.1", 62, 2).path == "/lib/x86_64-linux-gnu/libz.so.1"  # type: ignore[union-attr]
    assert pick("libz.so.1", 62, 2, ("x86-64-v2",)).hwcaps_subdir == "x86-64-v2"  # type: ignore[union-attr]
    assert pick("libz.so.1", 62, 2, ("x86-64-v3", "x86-64-v2")).hwcaps_subdir == "x86-64-v3"  # type: ignore[union-attr]
    assert pick("libz.so.1", 62, 2, ("x86-64-v4",)).hwcaps_subdir is None  # type: ignore[union-attr]
    assert pick("libz.so.1", 3, 1).path == "/lib/i386-linux-gnu/libz.so.1"  # type: ignore[union-attr]
    assert pick("libz.so.1", 183, 2) is None  # no AArch64 entry
    assert pick("libstdc++.so.6", 62, 2).path == "/opt/conda/lib/libstdc++.so.6"  # type: ignore[union-attr]


def test_resolve_generic_machines_prefer_libc6_entries_and_skip_legacy_hwcaps() -> None:
    entries = [
        ("libx.so.1", "/legacy/libx.so.1", 0x0003, None),
        ("libx.so.1", "/elf/libx.so.1", 0x0001, None),
        ("libx.so.1", "/libc6/libx.so.1", 0x0003, None),
    ]
    cache = parse_ld_cache(build_cache(entries, legacy_hwcap={0: 1 << 5}))
    assert cache.resolve("libx.so.1", 3, 1).path == "/libc6/libx.so.1"  # type: ignore[union-attr]
    assert cache_flags(3, 1) == {1, 3}
    assert cache_flags(62, 2) == {X86_64}


def test_the_machine_cache_agrees_with_ldconfig() -> None:
    if LDCONFIG is None or not Path("/etc/ld.so.cache").exists():
        pytest.skip("no ldconfig or no /etc/ld.so.cache here")
    assert _as_ldconfig_prints(read_ld_cache()) == _ldconfig_p(None)


@pytest.mark.parametrize("layout", ["new", "old", "compat"])
def test_caches_written_by_ldconfig_agree(tmp_path: Path, layout: str) -> None:
    """ldconfig writes each layout (with glibc-hwcaps entries); ``ldconfig -p`` judges."""
    if LDCONFIG is None:
        pytest.skip("no ldconfig here")
    libz = next((p for p in Path("/lib/x86_64-linux-gnu").glob("libz.so.1*") if p.is_file()), None)
    if libz is None:
        pytest.skip("no libz to place")
    lib = tmp_path / "lib"
    for folder in (lib, lib / "glibc-hwcaps" / "x86-64-v3", lib / "glibc-hwcaps" / "x86-64-v2"):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(libz, folder / "libtgz.so.1")
    conf = tmp_path / "ld.so.conf"
    conf.write_text("")
    cache = tmp_path / "ld.so.cache"
    run = subprocess.run(
        [LDCONFIG, "-X", "-c", layout, "-C", str(cache), "-f", str(conf), str(lib)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    if run.returncode != 0 or not cache.exists():
        pytest.skip(f"ldconfig cannot write a {layout} cache here: {run.stderr!r}")
    parsed = read_ld_cache(str(cache))
    assert parsed.format == layout
    assert _as_ldconfig_prints(parsed) == _ldconfig_p(cache)
    if layout == "new":
        assert {e.hwcaps_subdir for e in parsed.entries if str(lib) in e.path} == {
            None,
            "x86-64-v3",
            "x86-64-v2",
        }


def _as_ldconfig_prints(cache: object) -> list[str]:
    return [f"\t{e.soname} ({e.label}) => {e.path}" for e in cache.entries]  # type: ignore[attr-defined]


def _ldconfig_p(cache: Path | None) -> list[str]:
    assert LDCONFIG is not None
    command = [LDCONFIG, "-p"] + (["-C", str(cache)] if cache else [])
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    lines = done.stdout.splitlines()
    return [line for line in lines[1:] if not line.startswith("Cache generated by")]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unknown magic"),
        (b"ELF\0" * 20, "unknown magic"),
        (b"glibc-ld.so.cache1.1" + b"\0" * 10, "truncated"),
        (b"ld.so-1.7.0\0" + struct.pack("<I", 1000), "truncated"),
    ],
)
def test_not_a_cache_or_cut_short(data: bytes, message: str) -> None:
    with pytest.raises(LdCacheError, match=message):
        parse_ld_cache(data)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(LdCacheError, match="cannot read"):
        read_ld_cache(str(tmp_path / "missing"))


def test_entry_counts_and_offsets_are_checked() -> None:
    data = bytearray(build_cache(ENTRIES))
    struct.pack_into("<I", data, 20, 10_000_000)  # nlibs
    with pytest.raises(LdCacheError, match="truncated"):
        parse_ld_cache(bytes(data))
    data = bytearray(build_cache(ENTRIES))
    struct.pack_into("<I", data, 48 + 4, 1 << 30)  # first entry's key offset
    with pytest.raises(LdCacheError, match="past the end"):
        parse_ld_cache(bytes(data))
    data = bytearray(build_cache(ENTRIES))
    struct.pack_into("<Q", data, 48 + 16, (1 << 62) | 99)  # hwcaps index past the table
    with pytest.raises(LdCacheError, match="hwcaps subdirectory 99"):
        parse_ld_cache(bytes(data))


def test_random_damage_parses_or_raises_the_narrow_error() -> None:
    rng = random.Random(5)
    for layout in ("new", "old", "compat"):
        data = build_cache(ENTRIES, layout)
        for length in range(len(data)):
            _parse_or_error(data[:length])
        for _ in range(1500):
            damaged = bytearray(data)
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(len(damaged))
                damaged[at] = rng.choice((0, 0xFF, rng.randrange(256)))
            _parse_or_error(bytes(damaged))


def _parse_or_error(data: bytes) -> None:
    try:
        parse_ld_cache(data)
    except LdCacheError as exc:
        assert str(exc)


def _supported_hwcaps() -> tuple[str, ...]:
    """The glibc-hwcaps subdirectories ld.so searches on this CPU, best first."""
    loader = Path("/lib64/ld-linux-x86-64.so.2")
    if not loader.exists():
        return ()
    done = subprocess.run([str(loader), "--help"], capture_output=True, text=True, timeout=120)
    text = done.stdout
    block = text.partition("Subdirectories of glibc-hwcaps directories, in priority order:")[2]
    return tuple(
        line.split()[0]
        for line in block.split("\n\n")[0].splitlines()
        if "supported, searched" in line
    )


def test_resolve_agrees_with_the_real_loader() -> None:
    """ld.so itself (LD_DEBUG=libs) says which path the cache gives for a few sonames."""
    if LDCONFIG is None or not Path("/etc/ld.so.cache").exists():
        pytest.skip("no ld.so cache here")
    cache = read_ld_cache()
    names = [
        name
        for name in (
            "libz.so.1",
            "libbz2.so.1.0",
            "libgomp.so.1",
            "libstdc++.so.6",
            "libexpat.so.1",
        )
        if cache.lookup(name)
    ]
    if not names:
        pytest.skip("none of the probe sonames is in this cache")
    script = "import ctypes\n" + "".join(f"ctypes.CDLL({name!r})\n" for name in names)
    env = {"LD_DEBUG": "libs", "PATH": "/usr/bin:/bin"}
    trace = subprocess.run(
        [sys.executable, "-S", "-c", script], capture_output=True, text=True, env=env, timeout=300
    ).stderr
    hwcaps = _supported_hwcaps()
    judged = 0
    for name in names:
        section = trace.partition(f"find library={name} ")[2]
        section = section.split("find library=", 1)[0]
        if "search cache=" not in section:
            continue  # found before the cache (a RUNPATH) or already loaded
        after = section.partition("search cache=")[2]
        tried = [
            line.split("trying file=", 1)[1].strip()
            for line in after.splitlines()
            if "trying file=" in line
        ]
        chosen = cache.resolve(name, 62, 2, hwcaps)
        assert chosen is not None and tried and tried[0] == chosen.path, (name, tried)
        judged += 1
    if not judged:
        pytest.skip("every probe was found before ld.so consulted its cache")


def test_a_cache_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    """A file of MAX_BYTES is never read whole: a real cache is a few hundred KiB."""
    from torchguard._platforms.linux.ldcache import MAX_BYTES

    huge = tmp_path / "ld.so.cache"
    with open(huge, "wb") as handle:
        handle.write(build_cache(ENTRIES))
        handle.truncate(MAX_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(LdCacheError, match="larger than"):
        read_ld_cache(str(huge))


def test_a_cache_path_that_is_no_regular_file_is_no_cache(tmp_path: Path) -> None:
    """ld.so maps only a regular file; a FIFO there must not block the analysis."""
    import os
    import threading

    from torchguard._platforms.linux.system import read_cache

    (tmp_path / "etc").mkdir()
    fifo = tmp_path / "etc" / "ld.so.cache"
    os.mkfifo(fifo)
    found: list[dict[str, tuple[str, ...]]] = []
    worker = threading.Thread(
        target=lambda: found.append(dict(read_cache(str(tmp_path)))), daemon=True
    )
    worker.start()
    worker.join(10)
    if worker.is_alive():
        with open(fifo, "wb"):
            pass  # release the blocked open
        worker.join(10)
        pytest.fail("reading a FIFO as ld.so.cache blocked")
    assert found == [{}]


def test_the_live_cache_view_matches_hwcaps_entries_to_the_cpu(tmp_path: Path) -> None:
    """The model's view of ld.so.cache picks the best hwcaps entry the CPU supports, and asks
    for the CPU only when a name has such entries."""
    from torchguard._platforms.linux.system import read_cache

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "ld.so.cache").write_bytes(build_cache(ENTRIES))
    asked: list[int] = []

    def levels(found: tuple[str, ...]) -> object:
        def cpu() -> tuple[str, ...]:
            asked.append(1)
            return found

        return cpu

    v3 = read_cache(str(tmp_path), 62, levels(("x86-64-v3", "x86-64-v2")))  # type: ignore[arg-type]
    assert v3.get("libz.so.1") == (f"{tmp_path}/usr/lib/glibc-hwcaps/x86-64-v3/libz.so.1",)
    v2 = read_cache(str(tmp_path), 62, levels(("x86-64-v2",)))  # type: ignore[arg-type]
    assert v2.get("libz.so.1") == (f"{tmp_path}/usr/lib/glibc-hwcaps/x86-64-v2/libz.so.1",)
    base = read_cache(str(tmp_path), 62, levels(()))  # type: ignore[arg-type]
    assert base.get("libz.so.1") == (f"{tmp_path}/lib/x86_64-linux-gnu/libz.so.1",)
    asked.clear()
    assert v3.get("libstdc++.so.6") == (f"{tmp_path}/opt/conda/lib/libstdc++.so.6",)
    assert asked == []
