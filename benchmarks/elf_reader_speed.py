"""How fast the own ELF reader reads a real torch library, against pyelftools.

    python benchmarks/elf_reader_speed.py [LIBRARY.so ...]
    (default: libtorch_cpu.so from torch 2.9.1's manylinux_2_28 wheel, cached)

Both readers do the same work on the same file, in this process, alternating, after one
warm-up each (the file in the page cache): the dynamic section (NEEDED, SONAME, RPATH,
RUNPATH, FLAGS_1), the version needs and definitions, and every dynamic symbol with its
binding, section and version name. The header tier (facts without symbols) is timed too.
pyelftools is the baseline (``pip install pyelftools``; a test-time tool, never a
dependency); the shared Linux notes measured the own prototype 19x faster on
libtorch_cpu.so. Target: at least 10x. Exits 1 when missed, 2 without pyelftools.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from torchguard._binary.elf import read_elf_file  # noqa: E402

RUNS = 3
TARGET = 10.0


def own(path: Path) -> tuple[int, int]:
    image = read_elf_file(path, symbols=True)
    assert image.symbols is not None
    return len(image.symbols.defined) + len(image.symbols.undefined), len(image.facts.needed)


def own_facts(path: Path) -> tuple[int, int]:
    facts = read_elf_file(path).facts
    return len(facts.verneed), len(facts.needed)


def pyelftools(path: Path) -> tuple[int, int]:
    """The same facts and symbols through pyelftools' public API."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import (
        GNUVerDefSection,
        GNUVerNeedSection,
        GNUVerSymSection,
    )

    with path.open("rb") as handle:
        elf = ELFFile(handle)
        needed: list[str] = []
        names: dict[int, str] = {}
        versym: Any = None
        dynsym: Any = None
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_SONAME", "DT_RPATH", "DT_RUNPATH", "DT_FLAGS_1"):
                        pass
            elif isinstance(section, GNUVerNeedSection):
                for _need, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        names[aux.entry.vna_other] = aux.name
            elif isinstance(section, GNUVerDefSection):
                for definition, auxiliaries in section.iter_versions():
                    names[definition.entry.vd_ndx] = next(iter(auxiliaries)).name
            elif isinstance(section, GNUVerSymSection):
                versym = section
            elif section.name == ".dynsym":
                dynsym = section
        count = 0
        for index, symbol in enumerate(dynsym.iter_symbols()):
            binding = symbol.entry.st_info.bind
            if binding in ("STB_GLOBAL", "STB_WEAK", "STB_LOOS") and symbol.name:  # LOOS: UNIQUE
                ndx = versym.get_symbol(index).entry.ndx if versym is not None else 0
                if isinstance(ndx, int):
                    names.get(ndx & 0x7FFF)
                count += 1
        return count, len(needed)


def timed(function: Callable[[Path], tuple[int, int]], path: Path) -> tuple[float, tuple[int, int]]:
    start = time.perf_counter()
    result = function(path)
    return time.perf_counter() - start, result


def default_library() -> Path:
    from elf_realfiles import TORCH, shared_objects

    return shared_objects(TORCH, "libtorch_cpu.so")["libtorch_cpu.so"]


def main(argv: list[str]) -> int:
    try:
        import elftools
    except ImportError:
        print("pyelftools is not installed (pip install pyelftools): no baseline to compare")
        return 2
    paths = [Path(arg) for arg in argv] or [default_library()]
    worst = float("inf")
    print(f"pyelftools {elftools.__version__}, {RUNS} runs each, medians")
    for path in paths:
        for function in (own, own_facts, pyelftools):
            function(path)  # warm-up: the file in the page cache, modules imported
        mine, facts, theirs = [], [], []
        mine_result = their_result = (0, 0)
        for _ in range(RUNS):
            seconds, mine_result = timed(own, path)
            mine.append(seconds)
            facts.append(timed(own_facts, path)[0])
            seconds, their_result = timed(pyelftools, path)
            theirs.append(seconds)
        ratio = statistics.median(theirs) / statistics.median(mine)
        worst = min(worst, ratio)
        size = path.stat().st_size / 2**20
        print(
            f"{path.name} ({size:,.0f} MiB, {mine_result[0]:,} global/weak symbols; "
            f"pyelftools counted {their_result[0]:,}):\n"
            f"  own reader, symbols   {statistics.median(mine) * 1000:8.1f} ms\n"
            f"  own reader, facts     {statistics.median(facts) * 1000:8.2f} ms\n"
            f"  pyelftools, symbols   {statistics.median(theirs) * 1000:8.1f} ms\n"
            f"  ratio                 {ratio:8.1f}x (target >= {TARGET:.0f}x)"
        )
    return 0 if worst >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
