"""The tree's fast path normalisation, and distribution names, answer exactly what ``ntpath``
and ``packaging`` answer."""

from __future__ import annotations

import ntpath
import os
import random
from pathlib import Path

from torchguard._platforms.windows.tree import HostFile, normpath, path_key, split

COMPONENTS = ("a", "B", ".", "..", "", ".x", "x.", "..y", "a b", "C:", ":", "É")
PREFIXES = (
    "C:\\",
    "c:",
    "C:",
    "C:/",
    "\\\\srv\\share\\",
    "\\\\srv\\share",
    "\\",
    "/",
    "//",
    "",
    "\\\\?\\C:\\",
    "\\\\.\\x\\",
)
SEPARATORS = ("\\", "/", "\\\\", "")


def test_normpath_and_split_agree_with_ntpath_on_any_path() -> None:
    draw = random.Random(17)
    for _ in range(8000):
        parts = [draw.choice(COMPONENTS) for _ in range(draw.randint(0, 5))]
        path = draw.choice(PREFIXES) + "".join(p + draw.choice(SEPARATORS) for p in parts)
        if draw.random() < 0.5:
            path = path.rstrip("\\/")
        assert normpath(path) == ntpath.normpath(path), path
        assert split(path) == ntpath.split(ntpath.normpath(path)), path
        assert path_key(path) == ntpath.normcase(ntpath.normpath(path)), path


def test_common_paths_keep_their_meaning() -> None:
    assert normpath("C:\\Python\\Lib\\site-packages\\torch\\lib") == (
        "C:\\Python\\Lib\\site-packages\\torch\\lib"
    )
    assert normpath("C:\\Python\\Lib\\..\\DLLs\\.\\x.dll") == "C:\\Python\\DLLs\\x.dll"
    assert normpath("C:\\sklearn\\.libs\\vcomp140.dll") == "C:\\sklearn\\.libs\\vcomp140.dll"
    assert split("C:\\x.dll") == ("C:\\", "x.dll")
    assert path_key("C:/Python/Lib/") == "c:\\python\\lib"
    # not a drive: what ntpath answers differs by Python (3.13 changed it), so ask it
    for odd in ("\\:\\", "1:\\x", "\u00c9:\\x\\"):
        assert normpath(odd) == ntpath.normpath(odd), odd
        assert split(odd) == ntpath.split(ntpath.normpath(odd)), odd


def test_canonical_names_are_packagings() -> None:
    """Every analysis names every distribution, without importing packaging: the same rule."""
    from packaging.utils import canonicalize_name

    from torchguard._platforms.windows.dists import canonical_name

    draw = random.Random(3)
    for _ in range(5000):
        name = "".join(draw.choice("aZ1-_.") for _ in range(draw.randint(1, 8)))
        assert canonical_name(name) == canonicalize_name(name), name


def test_one_name_is_found_as_the_whole_listing_finds_it(tmp_path: Path) -> None:
    """A lookup that builds no listing answers what the listing answers: the last mount with
    a file of that name wins, a folder of that name is no file, a file held in memory wins."""
    from torchguard._platforms.windows.tree import MemoryFile, WinTree

    first, second = tmp_path / "a", tmp_path / "b"
    for folder, files, dirs in (
        (first, ("x.dll", "y.dll", "only_a.dll"), ("z.dll",)),
        (second, ("X.DLL", "z.dll", "w.dll"), ("y.dll", "only_b")),
    ):
        folder.mkdir()
        for name in files:
            (folder / name).write_bytes(folder.name.encode())
        for name in dirs:
            (folder / name).mkdir()

    def tree() -> WinTree:
        made = WinTree()
        made.mount_host_dir("C:\\bin", str(first))
        made.mount_host_dir("C:\\bin", str(second))
        made.add_file("C:\\bin\\w.dll", MemoryFile(b"memory", "w"))
        return made

    names = ("x.dll", "X.dll", "y.dll", "z.dll", "w.dll", "only_a.dll", "only_b", "none.dll")
    listed = tree().listdir("C:\\bin")
    for name in names:
        assert tree().lookup("C:\\bin", name) == listed.get(name.lower()), name
    assert tree().names("C:\\bin") == set(listed)
    assert tree().lookup("C:\\bin", "y.dll") == ("y.dll", HostFile(str(first / "y.dll")))


def test_assumed_names_land_where_one_file_at_a_time_would_put_them(tmp_path: Path) -> None:
    """System32's assumed DLLs are added in one batch: the same files, in the same folders,
    the same one winning between names that differ only in case, and a folder left with no
    file of the tree's own when every name is already there (its state still the host's)."""
    from torchguard._platforms.windows.system import _assume
    from torchguard._platforms.windows.tree import AssumedFile, WinTree, join

    host = tmp_path / "sys32"
    host.mkdir()
    (host / "Present.dll").write_bytes(b"MZ")
    os.utime(host, (1e9, 1e9))  # settled long ago: its state is trusted

    def one_at_a_time(tree: WinTree, folder: str, names: list[str], source: str) -> None:
        present = set(tree.listdir(folder))
        for name in sorted(names):
            if name.lower() not in present:
                tree.add_file(join(folder, name), AssumedFile(f"part of {source}"))

    def tree() -> WinTree:
        made = WinTree()
        made.mount_host_dir("C:\\Windows\\System32", str(host))
        return made

    folders = ("C:\\Windows\\System32", "C:\\Windows\\System32\\", "c:/windows/system32")
    pool = ("a.dll", "A.DLL", "b.dll", "present.dll", "PRESENT.DLL", "sub\\c.dll", "..\\d.dll")
    pool += ("./e.dll", "x/y.dll", "f:g.dll", ".", "..")
    draw = random.Random(22)
    for _ in range(300):
        folder = draw.choice(folders)
        names = draw.sample(pool, draw.randint(0, 6))
        batched, single = tree(), tree()
        _assume(batched, folder, names, "a test")
        one_at_a_time(single, folder, names, "a test")
        assert batched._files == single._files, names
        for where in ("C:\\Windows\\System32", "C:\\Windows", "C:\\Windows\\System32\\sub"):
            assert batched.listdir(where) == single.listdir(where), (names, where)
            assert batched.subdirs(where) == single.subdirs(where), (names, where)
            assert batched.folder_state(where) == single.folder_state(where), (names, where)


def test_an_environment_is_told_from_its_folder_as_before(tmp_path: Path) -> None:
    """``_kind`` lists the folder once and matches only ``python3*`` names against its
    patterns: the same answer as one pass per marker over every name (any case)."""
    from torchguard._platforms.windows import environment
    from torchguard._platforms.windows.environment import CONDA, EMBEDDED, PLAIN, VENV

    def before(root: str) -> str | None:
        names = os.listdir(root)
        meta = environment.child(root, "conda-meta")
        if meta is not None and os.path.isdir(meta):
            return CONDA
        if any(n.lower() == "pyvenv.cfg" for n in names):
            return VENV
        if any(environment._PTH.fullmatch(n) for n in names):
            return EMBEDDED
        if any(n.lower() == "python.exe" or environment._PYTHON_DLL.fullmatch(n) for n in names):
            return PLAIN
        return None

    pool = ("pyvenv.cfg", "PyVenv.CFG", "python311._pth", "PYTHON3._PTH", "python3111._pth")
    pool += ("Python.EXE", "python3.dll", "PYTHON312T.DLL", "python3.11.dll", "python2.dll")
    pool += ("xpython3.dll", "python3.dllx", "conda-meta", "Conda-Meta", "numpy", "İpython3.dll")
    draw = random.Random(22)
    kinds = set()
    for index in range(200):
        root = tmp_path / str(index)
        root.mkdir()
        for name in draw.sample(pool, draw.randint(0, 4)):
            if "conda" in name.lower() and draw.random() < 0.7:
                (root / name).mkdir(exist_ok=True)
            elif not (root / name).exists():
                (root / name).write_text("")
        kinds.add(before(str(root)))
        assert environment._kind(str(root)) == before(str(root)), sorted(os.listdir(root))
    assert kinds == {CONDA, VENV, EMBEDDED, PLAIN, None}
