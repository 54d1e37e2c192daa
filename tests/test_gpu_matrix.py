"""Issue 23's whole matrix: 8 GPUs (Maxwell to Blackwell) x every torch release from 2.4 to the
newest x each of its CUDA variants, on Windows and Linux.

For each cell, torch of that (release, variant) is installed and the GPU named:

- the ``gpu-arch-unsupported`` warning torchguard gives (or not) must agree with the
  architectures of that build, on each path that judges it: an offline Windows wheel whose
  ``torch_cuda.dll`` fatbin cannot be read (judged by the build-policy table), an installed
  Windows torch and a Linux torch whose fatbin carries exactly the build's lists;
- every command its hints recommend, and the ``check --gpu`` answer for the GPU, must name a
  (release, variant) that exists, whose architectures run the GPU and whose wheel exists for
  the Python (and, under an old Windows driver, whose minimum driver it meets); the
  ``check --gpu`` answer is among them, so ``doctor`` says what ``check`` answers. The same
  for ``cpu-build-on-gpu``'s hints on a CPU build of each release.

"The architectures of a build" are this file's own: the recorded fatbin reading of the real
wheel (``tests/readings/torch_archs_readings.jsonl``) where that build was read, else the row
of ``BUILD_ARCHS`` found here by a plain scan of the data, judged by NVIDIA's SASS/PTX rules
written out below. Nothing goes through :func:`build_archs`, :func:`carries_kernels` or
:func:`cuda_can_build`, so a rule that judges from the CUDA version instead of the build
(CUDA 12.8 compiles sm_61; PyTorch's cu128 builds of 2.8 carry none) fails here.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from fakes import FakeTorch, system32
from gpu_names import GPUS
from pe_builder import build_pe
from test_gpu_arch import torch_cuda

import torchguard
from torchguard._binary.fatbin import FatbinArchs
from torchguard._facts.companions import WINDOWS_PYTHONS
from torchguard._facts.cuda_builds import MINIMUM_DRIVER, RELEASES
from torchguard._facts.gpus import compute_capability
from torchguard._facts.torch_archs import BUILD_ARCHS
from torchguard._frontends.gpu_answer import answer
from torchguard._report.findings import Finding
from torchguard._rules.linux_gpu_arch import gpu_arch_findings
from torchguard._rules.linux_hints import LinuxHints

READINGS = Path(__file__).resolve().parent / "readings" / "torch_archs_readings.jsonl"

Cuda = tuple[int, int]
Archs = tuple[frozenset[int], frozenset[int]]

CELLS = [
    (version, cuda)
    for row in RELEASES
    if row.series >= (2, 4)
    for version in row.releases
    for cuda in row.variants
]
#: The newest patch of each release, for the (slower) scans of fake installs.
NEWEST_CELLS = [
    (row.releases[-1], cuda) for row in RELEASES if row.series >= (2, 4) for cuda in row.variants
]


def _series(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@cache
def _readings() -> dict[tuple[str, Cuda], Archs]:
    found: dict[tuple[str, Cuda], Archs] = {}
    for line in READINGS.read_text().splitlines():
        reading = json.loads(line)
        major, minor = reading["cuda"].split(".")
        found[(reading["version"], (int(major), int(minor)))] = (
            frozenset(reading["sass"]),
            frozenset(reading["ptx"]),
        )
    return found


def archs_of(version: str, cuda: Cuda) -> Archs:
    """The build's SASS and PTX lists: read from its wheel where it was, else its one row."""
    base = version.partition("+")[0]
    if (base, cuda) in _readings():
        return _readings()[(base, cuda)]
    series = _series(base)
    rows = [r for r in BUILD_ARCHS if r.cuda == cuda and r.first <= series <= r.last]
    assert len(rows) == 1, f"torch {base}+cu{cuda[0]}{cuda[1]}: {len(rows)} rows in the table"
    return rows[0].sass, rows[0].ptx


def runs(archs: Archs, arch: int) -> bool:
    """NVIDIA's rules: SASS runs on its own major at an equal or higher minor; PTX is compiled
    by the driver for any equal or newer architecture."""
    sass, ptx = archs
    return any(s // 10 == arch // 10 and s <= arch for s in sass) or any(p <= arch for p in ptx)


def wheel_for(version: str, python: int) -> bool:
    """torch ``version`` has a CPython 3.``python`` wheel (the recorded PyPI tags)."""
    first, last = WINDOWS_PYTHONS[version]
    return first <= python <= last


_TORCH = re.compile(r"\btorch==(\S+)")
_INDEX = re.compile(r"download\.pytorch\.org/whl/cu(\d+)(\d)\b")


def recommended(command: str) -> tuple[str, Cuda]:
    """The torch version and CUDA variant a pip command installs."""
    torch, index = _TORCH.search(command), _INDEX.search(command)
    assert torch is not None and index is not None, command
    return torch.group(1), (int(index.group(1)), int(index.group(2)))


def assert_runs_here(command: str, arch: int, python: int, where: str) -> None:
    version, cuda = recommended(command)
    release = next((r for r in RELEASES if version in r.releases), None)
    assert release is not None and cuda in release.variants, (where, command)
    assert runs(archs_of(version, cuda), arch), (where, command, "no kernels for", arch)
    assert wheel_for(version, python), (where, command, f"no wheel for 3.{python}")


def assert_hints_run(finding: Finding, arch: int, python: int, where: str) -> None:
    commands = [c for hint in finding.hints for c in hint.commands]
    some = any(
        runs(archs_of(row.releases[-1], cuda), arch) and wheel_for(row.releases[-1], python)
        for row in RELEASES
        if row.series >= (2, 0)  # 1.13's builds: no architectures known, never recommended
        for cuda in row.variants
    )
    assert bool(commands) == some, (where, finding.hints)  # a command whenever a build runs
    for command in commands:
        assert_runs_here(command, arch, python, where)


def assert_check_agrees(finding: Finding, gpu: str, python: int, where: str) -> None:
    """``doctor`` says what ``check --gpu`` answers: the answer for the GPU and the Python (any
    driver, as in these scans) is among the builds the hints name."""
    given = answer([gpu], None, (3, python), [])
    if given is None or given.command is None:
        return
    named = {recommended(c) for hint in finding.hints for c in hint.commands}
    assert recommended(given.command) in named, (where, given.command, named)


def _pythons(version: str) -> tuple[int, ...]:
    first, last = WINDOWS_PYTHONS[version]
    return (first,) if first == last else (first, last)


def test_the_matrix_is_issue_23s() -> None:
    releases = {_series(v) for v, _ in CELLS}
    assert min(releases) == (2, 4) and (2, 15) in releases
    assert max(releases) == max(r.series for r in RELEASES)
    for gpu, arch in GPUS.items():
        capability = compute_capability(gpu)
        assert capability is not None and capability[0] * 10 + capability[1] == arch, gpu
    for version, cuda in CELLS:
        archs_of(version, cuda)  # each build has its architectures: one row, or a reading
    # the rule the table exists for: CUDA 12.8 compiles sm_61, yet 2.8.0+cu128 has none
    assert not runs(archs_of("2.8.0", (12, 8)), 61) and runs(archs_of("2.8.0", (12, 6)), 61)


@pytest.mark.parametrize("gpu", list(GPUS))
def test_linux_warning_and_hints_agree_with_the_builds(gpu: str) -> None:
    arch = GPUS[gpu]
    for version, cuda in CELLS:
        sass, ptx = archs_of(version, cuda)
        for python in _pythons(version):
            where = f"linux {version}+cu{cuda[0]}{cuda[1]} 3.{python} {gpu}"
            findings = list(
                gpu_arch_findings(
                    f"{version}+cu{cuda[0]}{cuda[1]}",
                    f"{cuda[0]}.{cuda[1]}",
                    (gpu,),
                    FatbinArchs(sass, ptx, 0, 0),
                    None,
                    LinuxHints(),
                    python=(3, python),
                )
            )
            assert bool(findings) != runs((sass, ptx), arch), where
            for finding in findings:
                assert_hints_run(finding, arch, python, where)
                assert_check_agrees(finding, gpu, python, where)


def _windows(
    tmp_path: Path,
    gpu: str,
    version: str,
    cuda: Cuda,
    python: int,
    *,
    read: bool,
    driver: tuple[int, int, int, int] | None = None,
) -> torchguard.Report:
    """torch ``version`` of variant ``cuda`` for CPython 3.``python`` on Windows: installed,
    its ``torch_cuda.dll`` carrying the build's lists (``read``), or as a wheel checked offline
    whose DLL has no readable fatbin (judged by the build-policy table)."""
    sass, ptx = archs_of(version, cuda)
    dll = (
        torch_cuda(tuple(sorted(sass)), tuple(sorted(ptx))) if read else build_pe(["KERNEL32.dll"])
    )
    fake = FakeTorch(
        version=f"{version}+cu{cuda[0]}{cuda[1]}",
        cuda=f"{cuda[0]}.{cuda[1]}",
        python_tag=f"cp3{python}",
        extra={"torch/lib/torch_cuda.dll": dll},
    )
    folder = tmp_path / f"{version}-{cuda[0]}{cuda[1]}-{python}-{int(read)}"
    if read:
        target = fake.write(folder / "site")
    else:
        (folder / "wheels").mkdir(parents=True)
        target = fake.wheel(folder / "wheels")
    s32 = system32(folder / "s32")
    if driver is not None:
        (s32 / "nvcuda.dll").write_bytes(build_pe(["KERNEL32.dll"], file_version=driver))
    return torchguard.scan([target], system32=[s32], gpus=[gpu])


@pytest.mark.parametrize("read", [True, False], ids=["installed", "offline-wheel"])
@pytest.mark.parametrize("gpu", list(GPUS))
def test_windows_warning_and_hints_agree_with_the_builds(
    tmp_path: Path, gpu: str, read: bool
) -> None:
    arch = GPUS[gpu]
    for version, cuda in NEWEST_CELLS:
        # both paths give the same hints: the Python's range is swept on the offline one
        for python in _pythons(version)[-1:] if read else _pythons(version):
            where = f"windows {version}+cu{cuda[0]}{cuda[1]} 3.{python} {gpu} read={read}"
            report = _windows(tmp_path, gpu, version, cuda, python, read=read)
            findings = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
            assert bool(findings) != runs(archs_of(version, cuda), arch), where
            for finding in findings:
                assert_hints_run(finding, arch, python, where)
                assert_check_agrees(finding, gpu, python, where)


@pytest.mark.parametrize("gpu", list(GPUS))
def test_windows_hints_fit_an_old_driver(tmp_path: Path, gpu: str) -> None:
    """Driver 552.22 starts CUDA 12.4 builds, not 12.6: each build the hints name has kernels
    for the GPU and a minimum driver (NVIDIA's table) that 552.22 meets (a GTX 1080 under
    2.9.1+cu130 goes back to 2.7.1+cu118, not to 2.9.1+cu126)."""
    arch, driver = GPUS[gpu], (552, 22)
    for version, cuda in NEWEST_CELLS:
        python = _pythons(version)[0]  # the oldest: older releases have wheels for it
        where = f"windows {version}+cu{cuda[0]}{cuda[1]} 3.{python} {gpu} driver 552.22"
        report = _windows(
            tmp_path, gpu, version, cuda, python, read=False, driver=(32, 0, 15, 5222)
        )
        findings = [f for f in report.findings if f.code == "gpu-arch-unsupported"]
        assert bool(findings) != runs(archs_of(version, cuda), arch), where
        some = any(
            runs(archs_of(row.releases[-1], v), arch)
            and wheel_for(row.releases[-1], python)
            and MINIMUM_DRIVER[v] <= driver
            for row in RELEASES
            if row.series >= (2, 0)
            for v in row.variants
        )
        for finding in findings:
            commands = [c for hint in finding.hints for c in hint.commands]
            assert bool(commands) == some, (where, finding.hints)
            for command in commands:
                assert_runs_here(command, arch, python, where)
                assert MINIMUM_DRIVER[recommended(command)[1]] <= driver, (where, command)
            if (gpu, version, cuda) == ("NVIDIA GeForce GTX 1080", "2.9.1", (13, 0)):
                assert recommended(commands[0]) == ("2.7.1", (11, 8)), commands


DRIVER_CUDAS: tuple[Cuda | None, ...] = (None, (11, 8), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))


@pytest.mark.parametrize("gpu", list(GPUS))
def test_check_gpu_answers_the_newest_build_that_runs(gpu: str) -> None:
    """``check --gpu``: the newest (release, variant) the driver runs, with a wheel for the
    Python and kernels for the GPU; every newer one it says lacks kernels does lack them."""
    arch = GPUS[gpu]
    for python in range(8, 16):
        for limit in DRIVER_CUDAS:
            where = f"check --gpu {gpu} --python 3.{python} --cuda {limit}"
            given = answer([gpu], limit, (3, python), ["torch", "torchvision"])
            assert given is not None, where
            fitting = [
                (_series(version), cuda, version)
                for row in RELEASES
                if row.series >= (2, 0)  # 1.13's builds: no architectures known
                for version in row.releases[-1:]
                for cuda in row.variants
                if (limit is None or cuda <= limit)
                and wheel_for(version, python)
                and runs(archs_of(version, cuda), arch)
            ]
            if given.command is None:
                assert not fitting, (where, max(fitting))
                continue
            assert_runs_here(given.command, arch, python, where)
            _, newest_cuda, newest_version = max(fitting)
            assert recommended(given.command) == (newest_version, newest_cuda), where
            said = next((line for line in given.lines if "no kernels for it in" in line), "")
            left_out = said.partition("no kernels for it in ")[2].partition(";")[0]
            for label in re.findall(r"(\d+\.\d+\.\d+)\+cu(\d+)(\d)\b", left_out):
                assert not runs(archs_of(label[0], (int(label[1]), int(label[2]))), arch), where


@pytest.mark.parametrize("gpu", list(GPUS))
def test_windows_cpu_build_hints_name_builds_that_run(tmp_path: Path, gpu: str) -> None:
    """``cpu-build-on-gpu``: a CPU torch of each release on a machine with the GPU and a
    recent driver; every CUDA build its hints name runs the GPU and installs for the Python."""
    arch = GPUS[gpu]
    for row in RELEASES:
        if row.series < (2, 4):
            continue
        version = row.releases[-1]
        for python in _pythons(version):
            where = f"windows {version}+cpu 3.{python} {gpu}"
            folder = tmp_path / f"{version}-{python}"
            fake = FakeTorch(version=f"{version}+cpu", python_tag=f"cp3{python}")
            site = fake.write(folder / "site")
            s32 = system32(folder / "s32")
            nvcuda = build_pe(["KERNEL32.dll"], file_version=(32, 0, 15, 9159))  # 591.59
            (s32 / "nvcuda.dll").write_bytes(nvcuda)
            report = torchguard.scan([site], system32=[s32], gpus=[gpu])
            (finding,) = [f for f in report.findings if f.code == "cpu-build-on-gpu"]
            assert_hints_run(finding, arch, python, where)
            assert_check_agrees(finding, gpu, python, where)
