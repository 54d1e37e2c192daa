"""The extensions' architecture table against the readings of their PyPI wheels."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from torchguard._facts.extension_archs import builds, known_builds, pick

READINGS = Path(__file__).resolve().parent / "readings"
#: GPUs from Pascal to Blackwell, by compute capability.
CAPABILITIES = [(6, 1), (7, 0), (7, 5), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]


def readings() -> list[dict[str, object]]:
    path = READINGS / "extension_archs_readings.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _runs(sass: set[int], ptx: set[int], capability: tuple[int, int]) -> bool:
    """Written apart from the table's own: SASS of the GPU's major at or below its minor, or
    PTX at or below its architecture."""
    major, minor = capability
    return any(s // 10 == major and s % 10 <= minor for s in sass) or any(
        p <= major * 10 + minor for p in ptx
    )


def _accepts(requires: object, torch: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return requires in (None, "any") or torch in SpecifierSet(str(requires))


Key = tuple[str, str, str, object]


def _unions() -> dict[Key, tuple[set[int], set[int], dict[str, object]]]:
    """(package, release, platform, library CUDA or None) -> the union of its readings."""
    import re

    found: dict[Key, tuple[set[int], set[int], dict[str, object]]] = {}
    for line in readings():
        library = re.search(r"libbitsandbytes_cuda(\d\d)(\d+)\.", str(line["member"]))
        cuda = (int(library[1]), int(library[2])) if library else None
        key = (str(line["package"]), str(line["version"]), str(line["platform"]), cuda)
        sass, ptx, _first = found.setdefault(key, (set(), set(), line))
        sass.update(line["sass"])  # type: ignore[arg-type]
        ptx.update(line["ptx"])  # type: ignore[arg-type]
    return found


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p.removeprefix("post")) for p in text.split("."))


def test_every_row_is_the_union_of_its_wheels_readings() -> None:
    """Each row is exactly what its wheel's binaries said; every reading has its row."""
    unions = _unions()
    assert {(b.package, b.version, b.platform, b.cuda) for b in builds()} == set(unions)
    assert len(builds()) == len(unions)
    for build in builds():
        sass, ptx, line = unions[build.package, build.version, build.platform, build.cuda]
        assert (build.sass, build.ptx) == (frozenset(sass), frozenset(ptx)), build
        assert build.wheel == line["wheel"] and build.uploaded == line["uploaded"]
        assert build.requires_torch == line["requires_torch"]
        assert build.platform in build.wheel.replace("manylinux", "linux").replace(
            "win_amd64", "windows"
        )


def test_the_readings_cover_the_packages_with_cuda_wheels_on_pypi() -> None:
    found = {(str(r["package"]), str(r["platform"])) for r in readings()}
    for package in ("xformers", "bitsandbytes", "onnxruntime-gpu"):
        assert {(package, "linux"), (package, "windows")} <= found
    assert all(str(r["uploaded"]) >= "2024-06-01" for r in readings())


@pytest.mark.parametrize("capability", CAPABILITIES)
@pytest.mark.parametrize("platform", ["linux", "windows"])
def test_xformers_pick_follows_the_readings_and_the_torch_pin(
    capability: tuple[int, int], platform: str
) -> None:
    """For each torch xformers was pinned to: the newest release accepting that torch whose
    binaries run on the GPU, or none."""
    unions = {k: v for k, v in _unions().items() if k[0] == "xformers" and k[2] == platform}
    assert all(key[3] is None for key in unions)
    pins = {str(v[2]["requires_torch"]) for v in unions.values()}
    for pin in (p for p in pins if p.startswith("==")):
        torch = pin[2:]
        good = sorted(
            (
                key[1]
                for key, (sass, ptx, line) in unions.items()
                if _accepts(line["requires_torch"], torch) and _runs(sass, ptx, capability)
            ),
            key=_version,
        )
        found = pick("xformers", platform, capability, f"{torch}+cu128")
        assert found is not None
        assert (found.build.version if found.build else None) == (good[-1] if good else None)
        if found.build is None:
            assert found.other_torch is None or _runs(
                set(found.other_torch.sass), set(found.other_torch.ptx), capability
            )


def test_the_nearest_release_to_the_installed_one_is_picked() -> None:
    """onnxruntime-gpu names no torch: the read release nearest the installed one wins."""
    rows = known_builds("onnxruntime-gpu", "linux")
    assert len(rows) >= 3
    middle = rows[len(rows) // 2]
    capability = next(c for c in reversed(CAPABILITIES) if middle.runs_on(c))
    found = pick("onnxruntime-gpu", "linux", capability, "2.9.1", installed=middle.version)
    assert found is not None and found.build is middle


@pytest.mark.parametrize("platform", ["linux", "windows"])
def test_bitsandbytes_is_judged_by_the_library_it_loads_for_torchs_cuda(platform: str) -> None:
    """A GTX 1080 (sm_61) under torch cu128: bitsandbytes loads its CUDA 12.8 library (or
    falls back within 12.x from 0.50), so a release counts only if that library has Pascal
    kernels, whatever its CUDA 11.8 library carries."""
    unions = _unions()
    expected = []
    for (package, version, plat, cuda), (sass, ptx, _line) in unions.items():
        wanted = package == "bitsandbytes" and plat == platform and cuda == (12, 8)
        if wanted and _runs(sass, ptx, (6, 1)):
            expected.append(version)
    found = pick("bitsandbytes", platform, (6, 1), "2.9.1+cu128", torch_cuda=(12, 8))
    assert found is not None
    got = found.build.version if found.build else None
    assert got == (max(expected, key=_version) if expected else None)
    if found.build is not None:
        assert found.build.cuda == (12, 8)
    anywhere = pick("bitsandbytes", platform, (6, 1), "2.9.1+cu128")  # CUDA unknown: union
    assert anywhere is not None and anywhere.build is not None


def test_a_package_the_data_does_not_cover_gets_no_pick() -> None:
    assert pick("flash-attn", "linux", (12, 0), "2.8.0") is None
    assert pick("sageattention", "windows", (12, 0), "2.8.0") is None


def _reader() -> ModuleType:
    """``tests/readings/read_extension_archs.py`` (it imports its torch sibling)."""
    sys.path.insert(0, str(READINGS))
    path = READINGS / "read_extension_archs.py"
    spec = importlib.util.spec_from_file_location("read_extension_archs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.realwheel
@pytest.mark.parametrize("package", ["xformers", "bitsandbytes", "onnxruntime-gpu"])
def test_pypi_has_no_release_the_table_does_not_know(package: str) -> None:
    """Fails the day PyPI publishes a newer CUDA wheel of a covered package: rerun the
    reading script and ``--emit``."""
    wheels = _reader().pypi_wheels(package, since="")
    newest = max((w.version for w in wheels), key=_version)
    assert any(b.package == package and b.version == newest for b in builds()), (
        f"{package} {newest} is on PyPI: read it (tests/readings/read_extension_archs.py)"
    )


@pytest.mark.realwheel
def test_the_newest_xformers_wheels_read_as_recorded() -> None:
    """Re-reads the two newest xformers releases with kernels, Linux and Windows (the newest is
    a few MiB; the one before carries flash_attn_3, about 200 MiB of range requests), and
    compares each member with the recorded readings."""
    reader = _reader()
    recorded = readings()
    newest = sorted(
        {str(r["version"]) for r in recorded if r["package"] == "xformers" and r["containers"]},
        key=_version,
    )[-2:]
    wheels = [w for w in reader.pypi_wheels("xformers") if w.version in newest]
    assert {(w.version, w.platform) for w in wheels} == {
        (v, p) for v in newest for p in ("linux", "windows")
    }
    for wheel in wheels:
        members = []
        for reading in reader.read_wheel(wheel):
            (line,) = [
                r
                for r in recorded
                if r["wheel"] == wheel.filename and r["member"] == reading.member
            ]
            assert list(reading.sass) == line["sass"] and list(reading.ptx) == line["ptx"]
            assert reading.containers == line["containers"]
            assert reading.requires_torch == line["requires_torch"]
            members.append(reading.member)
        assert sorted(members) == sorted(
            str(r["member"]) for r in recorded if r["wheel"] == wheel.filename
        )
