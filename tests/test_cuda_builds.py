"""The table of torch releases and their Windows CUDA variants, and cpu-build-on-gpu."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, companion, system32, write_tree
from pe_builder import build_pe

import torchguard
from torchguard._facts.cuda_builds import (
    MINIMUM_DRIVER,
    RELEASES,
    all_variants,
    install_command,
    newest_runnable,
    release_of,
)


def test_every_variant_has_a_documented_minimum_driver() -> None:
    """The release table only names CUDA versions the driver table lists exactly."""
    missing = [v for v in all_variants() if v not in MINIMUM_DRIVER]
    assert missing == []


def test_release_rows_are_ordered_sourced_and_consistent() -> None:
    series = [row.series for row in RELEASES]
    assert series == sorted(series) and len(set(series)) == len(series)
    for row in RELEASES:
        assert row.source
        assert list(row.variants) == sorted(set(row.variants))
        assert all(r.startswith("{}.{}.".format(*row.series)) for r in row.releases)
        # a newer CUDA variant never needs an older driver than an older one
        drivers = [MINIMUM_DRIVER[v] for v in row.variants]
        assert drivers == sorted(drivers)
    # official conda packages stop at one release and never come back
    conda = [row.conda for row in RELEASES]
    assert conda == sorted(conda, reverse=True)


def test_release_lookup() -> None:
    row = release_of("2.4.1+cpu")
    assert row is not None and row.variants == ((11, 8), (12, 1), (12, 4))
    assert release_of("1.12.1") is None
    assert release_of("unknown") is None


@pytest.mark.parametrize(
    ("version", "driver", "best"),
    [
        ("2.4.1", (560, 94), (12, 4)),
        ("2.4.1", (551, 60), (12, 1)),  # one below 12.4's 551.61
        ("2.4.1", (551, 61), (12, 4)),
        ("2.7.1", (560, 94), (12, 6)),
        ("2.7.1", (572, 16), (12, 8)),
        ("2.9.1", (581, 57), (13, 0)),
        ("2.9.1", (528, 0), None),  # below 12.6: no 2.9 build runs
        ("2.6.0", (522, 6), (11, 8)),
    ],
)
def test_newest_runnable_variant(
    version: str, driver: tuple[int, int], best: tuple[int, int] | None
) -> None:
    row = release_of(version)
    assert row is not None
    assert newest_runnable(row.variants, driver) == best


def test_install_commands_for_pip_and_conda() -> None:
    old = release_of("2.4.1")
    new = release_of("2.7.1")
    assert install_command("python", "2.4.1", (12, 4), conda=False, release=old) == (
        "python -m pip install --force-reinstall torch==2.4.1 "
        "--index-url https://download.pytorch.org/whl/cu124"
    )
    assert install_command("python", "2.4.1", (12, 4), conda=True, release=old) == (
        "conda install pytorch==2.4.1 pytorch-cuda=12.4 -c pytorch -c nvidia"
    )
    # no official conda packages of 2.7: pip inside the conda environment
    assert install_command("python", "2.7.1", (12, 8), conda=True, release=new).endswith(
        "torch==2.7.1 --index-url https://download.pytorch.org/whl/cu128"
    )


def gpu_machine(tmp_path: Path, file_version: tuple[int, int, int, int]) -> Path:
    folder = system32(tmp_path / "s32")
    (folder / "nvcuda.dll").write_bytes(build_pe(["KERNEL32.dll"], file_version=file_version))
    return folder


def scan(
    tmp_path: Path, version: str, file_version: tuple[int, int, int, int]
) -> torchguard.Report:
    site = FakeTorch(version=version).write(tmp_path / "site")
    return torchguard.scan([site], system32=[gpu_machine(tmp_path, file_version)])


def test_cpu_build_with_driver_560_94_gets_the_cu124_command(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.4.1+cpu", (32, 0, 15, 6094))
    assert report.ok
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("cpu-build-on-gpu", "warning")
    assert "560.94" in finding.message
    (hint,) = finding.hints
    assert hint.commands[0].endswith(
        "-m pip install --force-reinstall torch==2.4.1 "
        "--index-url https://download.pytorch.org/whl/cu124"
    )


def test_plain_pypi_build_is_a_cpu_build(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.7.1", (31, 0, 15, 3623))  # 536.23: below 12.6 and 12.8
    (finding,) = report.findings
    assert finding.code == "cpu-build-on-gpu"
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.7.1 --index-url https://download.pytorch.org/whl/cu118")
    )


def test_driver_too_old_for_every_build_of_the_release(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.9.1", (31, 0, 15, 3623))  # 536.23 < 560.76 (CUDA 12.6)
    (finding,) = report.findings
    assert "too old for every CUDA build of torch 2.9.1" in finding.hints[0].summary
    assert "560.76 or newer" in finding.hints[0].summary
    assert finding.hints[0].commands[0].endswith("/whl/cu126")


def test_release_newer_than_the_table_uses_the_newest_row(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.16.0", (32, 0, 15, 8157))  # 581.57; the table ends at 2.15
    (finding,) = report.findings
    assert "table ends at 2.15" in finding.hints[0].summary
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.16.0 --index-url https://download.pytorch.org/whl/cu132")
    )


def test_215_is_in_the_table(tmp_path: Path) -> None:
    report = scan(tmp_path, "2.15.0", (32, 0, 15, 8157))
    (finding,) = report.findings
    assert "table ends at" not in finding.hints[0].summary
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.15.0 --index-url https://download.pytorch.org/whl/cu132")
    )


def test_no_driver_no_warning_and_gpu_builds_not_judged_here(tmp_path: Path) -> None:
    site = FakeTorch(version="2.4.1+cpu").write(tmp_path / "site")
    assert torchguard.scan([site], system32=[system32(tmp_path / "s32")]).findings == ()
    for version in ("2.5.1+xpu", "2.5.1+rocm6.2"):
        other = FakeTorch(version=version).write(tmp_path / version)
        report = torchguard.scan(
            [other], system32=[gpu_machine(tmp_path / version, (32, 0, 15, 6094))]
        )
        assert "cpu-build-on-gpu" not in [f.code for f in report.findings]


def test_unreadable_driver_still_warns_with_the_newest_variant(tmp_path: Path) -> None:
    site = FakeTorch(version="2.4.1+cpu").write(tmp_path / "site")
    folder = system32(tmp_path / "s32")
    (folder / "nvcuda.dll").write_bytes(b"MZ not a real driver")
    report = torchguard.scan([site], system32=[folder])
    (finding,) = report.findings
    assert finding.code == "cpu-build-on-gpu"
    assert "needs driver 551.61 or newer" in finding.hints[0].summary
    assert finding.hints[0].commands[0].endswith("/whl/cu124")


def test_a_gpu_older_than_every_build_since_gets_the_newest_release_that_runs_it(
    tmp_path: Path,
) -> None:
    """No build of 2.15 carries Pascal kernels: the hint goes back to 2.14.1+cu126."""
    site = FakeTorch(version="2.15.0").write(tmp_path / "site")
    machine = gpu_machine(tmp_path, (32, 0, 15, 8157))  # 581.57
    report = torchguard.scan([site], system32=[machine], gpus=["NVIDIA GeForce GTX 1080"])
    (finding,) = [f for f in report.findings if f.code == "cpu-build-on-gpu"]
    assert "no CUDA build of torch 2.15.0 runs on" in finding.message
    assert "2.14 is the newest release with a CUDA build for sm_61" in finding.hints[0].summary
    assert (
        finding.hints[0]
        .commands[0]
        .endswith("torch==2.14.1 --index-url https://download.pytorch.org/whl/cu126")
    )


def test_the_cuda_command_keeps_torchvision_and_torchaudio_pinned(tmp_path: Path) -> None:
    """Changing torch's build alone would leave torchvision on the CPU build's index."""
    site = FakeTorch(version="2.4.1").write(tmp_path / "site")
    write_tree(site, companion("torchvision", "0.19.1", {"torchvision/__init__.py": b""}, {}))
    write_tree(site, companion("torchaudio", "2.4.1", {"torchaudio/__init__.py": b""}, {}))
    report = torchguard.scan([site], system32=[gpu_machine(tmp_path, (32, 0, 15, 6094))])
    (finding,) = report.findings
    assert (
        finding.hints[0]
        .commands[0]
        .endswith(
            "torch==2.4.1 torchvision==0.19.1 torchaudio==2.4.1 "
            "--index-url https://download.pytorch.org/whl/cu124"
        )
    )
