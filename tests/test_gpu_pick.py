"""The build recommended for a GPU has kernels for it, read from the binaries where they were.

For the GPUs of issue 23 (Maxwell to Blackwell) x torch releases 2.4 to the newest x drivers,
the (release, variant) :func:`pick` recommends must run the GPU by the architectures recorded
from the real wheel (``tests/readings/torch_archs_readings.jsonl``) wherever that build was
read, judged here by this file's own reading of SASS/PTX rules, not the table's; and no newer
build whose recording runs the GPU may be passed over.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_names import GPUS

from torchguard._facts.companions import SIBLING_PINS, WINDOWS_PYTHONS, matching_siblings
from torchguard._facts.cuda_builds import RELEASES, release_of
from torchguard._facts.gpu_pick import cuda_starts, driver_starts, pick
from torchguard._facts.gpus import compute_capability

READINGS = Path(__file__).resolve().parent / "readings"
DRIVERS = (None, (11, 8), (12, 4), (12, 6), (12, 8), (13, 0))


def _recorded() -> dict[tuple[str, tuple[int, int]], tuple[set[int], set[int]]]:
    found = {}
    for line in (READINGS / "torch_archs_readings.jsonl").read_text().splitlines():
        reading = json.loads(line)
        cuda = tuple(int(p) for p in reading["cuda"].split("."))
        found[(reading["version"], cuda)] = (set(reading["sass"]), set(reading["ptx"]))
    return found  # type: ignore[return-value]


RECORDED = _recorded()


def runs(sass: set[int], ptx: set[int], arch: int) -> bool:
    """NVIDIA's rules: SASS runs on its major at an equal or higher minor; PTX is compiled by
    the driver for any equal or newer architecture."""
    return any(s // 10 == arch // 10 and s <= arch for s in sass) or any(p <= arch for p in ptx)


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("cuda", DRIVERS)
def test_pick_per_release_runs_the_gpu_by_the_binaries(
    gpu: str, cuda: tuple[int, int] | None
) -> None:
    capability = compute_capability(gpu)
    assert capability is not None and capability[0] * 10 + capability[1] == GPUS[gpu]
    checked = 0
    for row in RELEASES:
        if row.series < (2, 4):
            continue
        chosen = pick([capability], starts=cuda_starts(cuda), releases=[row])
        if chosen is None:
            continue
        assert cuda is None or chosen.cuda <= cuda
        recorded = RECORDED.get((chosen.version, chosen.cuda))
        if recorded is not None:
            assert runs(*recorded, GPUS[gpu]), (gpu, chosen.label)
            checked += 1
        # a newer variant of the same release that was read and runs the GPU was not skipped
        for variant in row.variants:
            reading = RECORDED.get((chosen.version, variant))
            if reading and variant > chosen.cuda and (cuda is None or variant <= cuda):
                assert not runs(*reading, GPUS[gpu]), (gpu, chosen.label, variant)
    if cuda is None and GPUS[gpu] >= 75:
        assert checked > 0  # the newest releases' default builds were read: judged by them


@pytest.mark.parametrize("gpu", list(GPUS))
def test_no_newer_read_build_that_runs_the_gpu_is_passed_over(gpu: str) -> None:
    capability = compute_capability(gpu)
    assert capability is not None
    chosen = pick([capability], python=(3, 11))
    assert chosen is not None
    for (version, _cuda), reading in RECORDED.items():
        release = release_of(version)
        assert release is not None
        if release.series > chosen.release.series:
            assert not runs(*reading, GPUS[gpu]), (gpu, chosen.label, version)


def test_pascal_gets_cu126_not_cu128_from_28_on() -> None:
    pascal = compute_capability("NVIDIA GeForce GTX 1080")
    assert pascal == (6, 1)
    for row in RELEASES:
        if (2, 8) <= row.series <= (2, 14):
            chosen = pick([pascal], releases=[row])
            assert chosen is not None and chosen.cuda == (12, 6), row.series
    assert not runs(*RECORDED[("2.8.0", (12, 8))], 61)  # what the cu128 wheel really carries
    assert pick([pascal], releases=[r for r in RELEASES if r.series == (2, 15)]) is None


def test_blackwell_needs_cu128_and_27() -> None:
    blackwell = compute_capability("NVIDIA GeForce RTX 5090")
    assert blackwell == (12, 0)
    chosen = pick([blackwell], starts=cuda_starts((12, 8)))
    assert chosen is not None and chosen.cuda == (12, 8) and chosen.release.series >= (2, 7)
    assert pick([blackwell], starts=cuda_starts((12, 6))) is None  # no cu126 build has sm_120
    old = pick([blackwell], releases=[r for r in RELEASES if r.series <= (2, 7)])
    assert old is not None and old.label == "2.7.1+cu128"
    assert runs(*RECORDED[("2.8.0", (12, 8))], 120)


def test_every_named_gpu_is_covered_at_once() -> None:
    """A GTX 1080 beside an RTX 5090: only a build with both sm_61 and sm_120 kernels."""
    both = [compute_capability("GeForce GTX 1080"), compute_capability("GeForce RTX 5090")]
    assert None not in both
    assert pick([c for c in both if c], python=(3, 11)) is None  # no build carries both
    maxwell_and_ampere = [(5, 2), (8, 6)]
    chosen = pick(maxwell_and_ampere)
    assert chosen is not None and chosen.label == "2.14.1+cu126"


def test_windows_driver_limits_the_variants() -> None:
    ampere = (8, 6)
    chosen = pick([ampere], starts=driver_starts((551, 61)))  # CUDA 12.4's minimum driver
    assert chosen is not None and chosen.cuda <= (12, 4)
    assert chosen.label == "2.7.1+cu118"  # 2.7 still had cu118; 2.8 starts at cu126


def test_python_limits_the_release() -> None:
    ampere = (8, 6)
    newest = pick([ampere], python=(3, 11))
    assert newest is not None and newest.version == "2.15.0"
    assert WINDOWS_PYTHONS["2.15.0"][0] == 11
    older = pick([ampere], python=(3, 10))  # 2.15 has no cp310 wheel
    assert older is not None and older.version == "2.14.1"
    oldest = pick([ampere], python=(3, 8))
    assert oldest is not None and oldest.version == "2.4.1"


def test_siblings_follow_the_recorded_requirements() -> None:
    """Each pinned sibling's recorded Requires-Dist admits the torch it is pinned with."""
    recorded = {}
    for line in (READINGS / "siblings_readings.jsonl").read_text().splitlines():
        reading = json.loads(line)
        if reading["project"] == "torch":
            pythons = [int(p.split(".")[1]) for p in reading["pythons"]]
            assert WINDOWS_PYTHONS[reading["version"]] == (min(pythons), max(pythons))
        elif reading["torch"] is not None:
            recorded[(reading["project"], reading["version"])] = reading["torch"]
    assert {(p, v) for p, v, _, _ in SIBLING_PINS} == set(recorded)
    from packaging.requirements import Requirement

    for row in RELEASES:
        if row.series < (2, 0):
            continue
        for version in row.releases:
            pins = dict(matching_siblings(version, ("torchvision", "torchaudio")))
            assert "torchvision" in pins, version
            text = recorded[("torchvision", pins["torchvision"])]
            assert Requirement(text.replace("(", "").replace(")", "")).specifier.contains(version)
    assert matching_siblings("2.4.1", ("torchvision", "torchaudio")) == (
        ("torchvision", "0.19.1"),
        ("torchaudio", "2.4.1"),
    )
    assert matching_siblings("2.0.1", ("torchaudio",)) == (("torchaudio", "2.0.2"),)
    assert matching_siblings("1.13.1", ("torchvision",)) == ()


def test_command_pins_the_siblings_and_the_variant_index() -> None:
    chosen = pick([(6, 1)], python=(3, 11), siblings=("torchvision", "torchaudio"))
    assert chosen is not None
    assert chosen.command("py -3.11") == (
        "py -3.11 -m pip install --force-reinstall torch==2.14.1 torchvision==0.29.2 "
        "torchaudio==2.11.1 --index-url https://download.pytorch.org/whl/cu126"
    )


@pytest.mark.realwheel
def test_pypi_lists_no_sibling_or_torch_wheel_the_tables_do_not_know() -> None:
    """A new torchvision/torchaudio release, or a torch release's Windows Pythons, appearing
    on PyPI fails here: rerun ``tests/readings/read_siblings.py`` and update the tables."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("read_siblings", READINGS / "read_siblings.py")
    assert spec is not None and spec.loader is not None
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    known = {(p, v) for p, v, _, _ in SIBLING_PINS}
    for project in ("torchvision", "torchaudio"):
        listed = {(project, version) for version, _, _ in reader.wheels(project)}
        # torchaudio 2.11.0 names no torch requirement: the only release left out on purpose
        assert listed - known <= {("torchaudio", "2.11.0")}, listed - known
    for version, pythons in reader.torch_pythons().items():
        minors = [int(p.split(".")[1]) for p in pythons]
        assert WINDOWS_PYTHONS.get(version) == (min(minors), max(minors)), version
