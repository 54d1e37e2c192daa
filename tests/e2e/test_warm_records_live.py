"""Live, in a real Windows CPython under Wine: a warm analysis reads no RECORD, and a
distribution installed since the last run is seen (only its RECORD is read).

The scenario's site-packages holds the real torch 2.4.1 plus ordinary pure-Python
distributions, dated an hour ago; the live tree stats the real folders through Windows'
own ``os.stat``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pe_builder import build_pe
from wine import WineEnv, parse

pytestmark = pytest.mark.e2e

PURE = 40

#: Two analyses in one process: the first fills the cache, the second counts RECORD reads
#: (all of them, and those of the step that remembers RECORD summaries).
WARM = """
import json, torchguard
from torchguard._frontends.pipeline import windows as _pipeline
from torchguard._platforms.windows import tree as _tree
torchguard.diagnose()
reads, remembered, inside = [], [], []
real_read, real_remember = _tree.WinTree.read_text, _pipeline.remember_records
def counting(self, path):
    if path.upper().endswith("\\\\RECORD"):
        (remembered if inside else reads).append(path.split("\\\\")[-2])
    return real_read(self, path)
def remember(*args):
    inside.append(True)
    try:
        real_remember(*args)
    finally:
        inside.clear()
_tree.WinTree.read_text = counting
_pipeline.remember_records = remember
r = torchguard.diagnose()
print("TG-JSON " + json.dumps({
    "reads": reads + remembered,
    "remembered": remembered,
    "packages": sorted(p.name for p in r.packages),
}))
"""

#: One analysis in a fresh process, counting from the start.
ONCE = WARM.replace("torchguard.diagnose()\nreads", "reads", 1)


def _write(path: Path, data: bytes, when: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (when, when))


def _install(site: Path, name: str, files: dict[str, bytes], when: float) -> None:
    """A distribution as pip installs it (new files only: the scenario's own are hard links)."""
    info = site / f"{name}-1.0.dist-info"
    rows = [f"{relative},," for relative in files] + [f"{info.name}/METADATA,,"]
    rows.append(f"{info.name}/RECORD,,")
    for relative, data in files.items():
        _write(site / relative, data, when)
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(), when)
    _write(info / "RECORD", ("\n".join(rows) + "\n").encode(), when)
    for folder in {info, *((site / relative).parent for relative in files)}:
        os.utime(folder, (when, when))


def test_a_warm_live_analysis_reads_no_record_and_sees_a_new_install(
    wine_env: WineEnv, tmp_path: Path
) -> None:
    site = wine_env.make_scenario_site("warm-records")
    long_ago = time.time() - 3600
    for index in range(PURE):
        _install(site, f"pure{index}", {f"pure{index}/__init__.py": b"x = 1\n"}, long_ago)
    os.utime(site, (long_ago, long_ago))
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"TORCHGUARD_CACHE_DIR": wine_env.to_windows(cache)}

    warm = parse(wine_env.run(WARM, site, env=env))
    assert warm["reads"] == []
    assert "newext" not in warm["packages"]  # type: ignore[operator]

    since = time.time() - 1800  # pip install newext, an extension linking torch's DLLs
    pyd = build_pe(["c10.dll", "torch_cpu.dll", "KERNEL32.dll"])
    _install(site, "newext", {"newext/__init__.py": b"", "newext/_C.pyd": pyd}, since)
    os.utime(site, (since, since))
    installed = parse(wine_env.run(ONCE, site, env=env))
    assert "newext" in installed["packages"]  # type: ignore[operator]
    # only the new RECORD is read to learn what the distributions list (a finding's rules
    # read others' to name the owner of a file, as before)
    assert installed["remembered"] == ["newext-1.0.dist-info"]
