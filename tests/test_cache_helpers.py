"""The shared download caches of the heavy tiers are built so that concurrent test processes
(CI and developers on one machine) never see a half-written folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from realwheels import build_once


def test_a_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "nvidia-dlls" / "cudart"

    def fill(scratch: Path) -> None:
        (scratch / "cudart64_12.dll").write_bytes(b"MZ")
        assert not target.exists(), "a concurrent reader would see a half-written folder"

    assert build_once(target, fill) == target
    assert sorted(p.name for p in target.iterdir()) == [".complete", "cudart64_12.dll"]
    assert [p.name for p in target.parent.iterdir()] == ["cudart"]  # no scratch left
    assert build_once(target, lambda scratch: 1 / 0) == target  # built once, never again


def test_a_concurrent_builder_that_finishes_first_wins(tmp_path: Path) -> None:
    target = tmp_path / "cudart"

    def slow(scratch: Path) -> None:
        (scratch / "a.dll").write_text("mine")
        build_once(target, lambda theirs: (theirs / "a.dll").write_text("theirs"))

    build_once(target, slow)
    assert (target / "a.dll").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["cudart"]


def test_a_half_made_folder_of_a_killed_process_is_rebuilt(tmp_path: Path) -> None:
    target = tmp_path / "torch-2.4.1"
    target.mkdir()
    (target / "c10.dll").write_bytes(b"MZ\0")  # truncated, no .complete
    build_once(target, lambda scratch: (scratch / "c10.dll").write_bytes(b"MZ whole"))
    assert (target / "c10.dll").read_bytes() == b"MZ whole"


def test_a_second_maker_waits_for_the_first_instead_of_downloading_again(tmp_path: Path) -> None:
    """``tests/prefetch.py`` and a test (or two test processes) needing the same entry: the
    entry is filled once, and the waiter returns it whole."""
    import threading
    import time

    target = tmp_path / "torch-wheels"
    fills: list[str] = []
    started = threading.Event()

    def slow(scratch: Path) -> None:
        fills.append("first")
        started.set()
        time.sleep(0.5)
        (scratch / "torch.whl").write_bytes(b"PK whole")

    first = threading.Thread(target=build_once, args=(target, slow))
    first.start()
    assert started.wait(10)
    got = build_once(target, lambda scratch: fills.append("second"))  # waits for the first
    first.join()
    assert fills == ["first"]
    assert (got / "torch.whl").read_bytes() == b"PK whole"


def test_a_cached_wheel_for_another_python_is_never_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --python 3.12 --cache-dir CACHE`` leaves cp312 wheels beside the cp311 ones:
    a lookup for 3.11 must download its own instead of replaying 3.11 with a cp312 torch."""
    import realwheels

    (tmp_path / "torch-2.14.1-cp312-cp312-win_amd64.whl").write_bytes(b"PK")
    (tmp_path / "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    asked: list[tuple[str, str]] = []

    def download(spec: str, folder: Path, platform: str = "", python: str = "") -> None:
        asked.append((spec, python))
        (folder / "torch-2.14.1-cp311-cp311-win_amd64.whl").write_bytes(b"PK")

    monkeypatch.setattr(realwheels, "CACHE", tmp_path)
    monkeypatch.setattr(realwheels, "download", download)
    got = realwheels.wheel("torch", "2.14.1", "3.11")
    assert got.name == "torch-2.14.1-cp311-cp311-win_amd64.whl"
    assert asked == [("torch==2.14.1", "3.11")]
    assert realwheels.wheel("torch", "2.14.1", "3.11") == got  # cached now: no second download
    assert asked == [("torch==2.14.1", "3.11")]


@pytest.mark.parametrize(
    ("name", "python", "fits"),
    [
        ("torch-2.4.1-cp311-cp311-win_amd64.whl", "3.11", True),
        ("torch-2.4.1-cp312-cp312-win_amd64.whl", "3.11", False),
        ("torch-2.4.1-cp311-cp311-linux_x86_64.whl", "3.11", False),
        ("sympy-1.14.0-py3-none-any.whl", "3.13", True),
        ("msvc_runtime-14.44.35112-cp311-cp311-win_amd64.whl", "3.12", False),
        ("ext-1.0-cp39-abi3-win_amd64.whl", "3.11", True),
        ("ext-1.0-cp312-abi3-win_amd64.whl", "3.11", False),
        ("torch-2.4.1-1-cp311-cp311-win_amd64.whl", "3.11", True),
        ("xformers-0.0.35-py39-none-win_amd64.whl", "3.11", True),
        ("xformers-0.0.35-py39-none-win_amd64.whl", "3.9", True),
        ("future-1.0-py312-none-win_amd64.whl", "3.11", False),
        ("broken.whl", "3.11", False),
    ],
)
def test_a_wheel_fits_a_python_by_its_tags(name: str, python: str, fits: bool) -> None:
    from realwheels import installs_on

    assert installs_on(name, python) is fits
