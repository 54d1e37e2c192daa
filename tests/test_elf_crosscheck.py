"""The own ELF reader against GNU readelf on this machine's real shared libraries.

Every fact and every dynamic symbol (with its version, hidden or default, weak or not) must
agree. Skipped where readelf is not installed (binutils is a test-time tool only).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from readelf_judge import READELF, Judged, judge

from torchguard._binary.elf import ElfImage, elf_header, read_elf_file
from torchguard._binary.elf import constants as c

pytestmark = pytest.mark.skipif(READELF is None, reason="readelf (binutils) is not installed")

LIBDIRS = (Path("/lib/x86_64-linux-gnu"), Path("/usr/lib/x86_64-linux-gnu"), Path("/lib64"))
NAMED = ("libstdc++.so.6", "libc.so.6", "libm.so.6", "libgcc_s.so.1", "libgomp.so.1", "libz.so.1")
_FLAG_BITS = {"BIND_NOW": c.DF_BIND_NOW, "STATIC_TLS": c.DF_STATIC_TLS, "ORIGIN": c.DF_ORIGIN}
_FLAG_1_BITS = {
    "NOW": c.DF_1_NOW,
    "GLOBAL": c.DF_1_GLOBAL,
    "NODELETE": c.DF_1_NODELETE,
    "NODEFLIB": c.DF_1_NODEFLIB,
    "PIE": c.DF_1_PIE,
}


def system_libraries(limit: int = 40) -> list[Path]:
    """The named libraries plus a spread of other ELF shared objects found here."""
    found: dict[Path, Path] = {}
    for folder in LIBDIRS:
        for name in NAMED:
            path = folder / name
            if path.exists():
                found.setdefault(path.resolve(), path)
    interpreter = Path(os.path.realpath(sys.executable))  # an executable, with its RUNPATH
    if _is_elf(interpreter):
        found.setdefault(interpreter, interpreter)
    for folder in LIBDIRS:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.so*"))[::7]:
            if len(found) >= limit:
                break
            if path.is_file() and _is_elf(path):
                found.setdefault(path.resolve(), path)
    return sorted(found.values())


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return elf_header(handle.read(64)) is not None
    except OSError:
        return False


def agree(image: ElfImage, judged: Judged) -> None:
    facts = image.facts
    assert list(facts.needed) == judged.needed
    assert (facts.soname, facts.rpath, facts.runpath) == (
        judged.soname,
        judged.rpath,
        judged.runpath,
    )
    for name, bit in _FLAG_BITS.items():
        assert bool(facts.flags & bit) == (name in judged.flags), name
    for name, bit in _FLAG_1_BITS.items():
        assert bool(facts.flags_1 & bit) == (name in judged.flags_1), name
    assert [(n.file, n.name, n.index, n.weak) for n in facts.verneed] == judged.verneed
    assert [(d.name, d.index, d.base) for d in facts.verdef] == judged.verdef
    symbols = image.symbols
    assert symbols is not None
    if judged.count:  # readelf counts from the section header; the reader from the hash table
        assert symbols.count == judged.count
    assert [(s.name, s.version, s.hidden, s.weak, s.kind) for s in symbols.defined] == (
        judged.defined
    )
    assert [(s.name, s.version, s.weak) for s in symbols.undefined] == judged.undefined


@pytest.mark.parametrize("path", system_libraries(), ids=lambda p: p.name)
def test_system_libraries_agree_with_readelf(path: Path) -> None:
    agree(read_elf_file(path, symbols=True), judge(path))


def test_libstdcxx_versions_are_read() -> None:
    """The facts runtime-too-old rests on: libstdc++ defines its GLIBCXX_ nodes."""
    paths = [
        folder / "libstdc++.so.6" for folder in LIBDIRS if (folder / "libstdc++.so.6").exists()
    ]
    if not paths:
        pytest.skip("no libstdc++ here")
    facts = read_elf_file(paths[0]).facts
    assert facts.provides("GLIBCXX_3.4") and facts.provides("CXXABI_1.3")
    assert not facts.provides("GLIBCXX_9.9")
