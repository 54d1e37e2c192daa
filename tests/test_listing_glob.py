"""ListingGlob answers as glob.glob does, listing each folder at most once per run, and a
folder an entry lacks not at all."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest
from linux_elf import write_so

from torchguard._platforms.linux.listing import ListingGlob


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    for folder in ("cuda_runtime", "cusparse", "cu13"):
        lib = site / "nvidia" / folder / "lib"
        lib.mkdir(parents=True)
        for name in ("libcudart.so.12", "libcusparse.so.12", ".hidden.so.1", "README"):
            (lib / name).write_text("")
    (site / "nvidia" / "notes.txt").write_text("")  # a file where a folder may be expected
    (site / "cudnn" / "lib").mkdir(parents=True)
    (site / "cudnn" / "lib" / "libcudnn.so.9").write_text("")
    (site / "torch").mkdir()
    (site / "torch" / "_C.cpython-311-x86_64-linux-gnu.so").write_text("")
    (site / "linked").symlink_to(site / "nvidia" / "cusparse")
    (site / "dangling").symlink_to(site / "nowhere")
    return site


PATTERNS = [
    "nvidia/cuda_runtime/lib/libcudart.so.*[0-9]",
    "nvidia/missing/lib/libcudart.so.*[0-9]",
    "nvidia/*/lib/lib*.so*",
    "nvidia/*/lib/.hidden*",
    "nvidia/*/lib/*",
    "nvidia/*/lib",
    "nvidia/*/",
    "nvidia/*",
    "*/lib/libcudnn.so.[0-9]*",
    "cudnn/lib/libcudnn.so.*",
    "torch/_C.*so",
    "torch/_C.so",
    "linked/lib/lib*",
    "dangling",
    "dangl*",
    "missing/*/lib/x",
    "nvidia/cu1[0-9]/lib/*.so.1[0-2]",
    "nvidia/../cudnn/lib/*",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_answers_as_glob_does(tree: Path, pattern: str) -> None:
    full = os.path.join(str(tree), pattern)
    search = ListingGlob((str(tree),))
    assert search(full) == glob.glob(full)
    assert search(full) == glob.glob(full)  # answered again from the listings taken


@pytest.mark.parametrize("pattern", PATTERNS)
def test_answers_relative_patterns_from_the_current_folder(
    tree: Path, pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    assert ListingGlob(("",))(pattern) == glob.glob(pattern)


def test_each_folder_is_listed_once_and_absent_ones_never(tmp_path: Path) -> None:
    """torch's preload asks every sys.path entry for every CUDA library: the listings follow
    the folders that exist, however many libraries and entries are searched."""
    entries = [tmp_path / f"entry{index}" for index in range(8)]
    for entry in entries:
        entry.mkdir()
    write_so(entries[3] / "nvidia" / "cuda_runtime" / "lib", "libcudart.so.12")
    roots = tuple(str(e) for e in entries)
    search = ListingGlob(roots)
    folders = [f"lib{index}" for index in range(16)]
    found = []
    for folder in [*folders, "cuda_runtime"]:
        for entry in roots:
            found += search(os.path.join(entry, "nvidia", folder, "lib", "lib*.so.*[0-9]"))
            found += search(os.path.join(entry, folder, "lib", "lib*.so.*[0-9]"))
    assert found == [str(entries[3] / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")]
    # the 8 entries, entry3's nvidia, its cuda_runtime and that folder's lib
    assert search.listed == 8 + 3
