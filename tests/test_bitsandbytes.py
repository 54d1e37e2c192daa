"""bitsandbytes-binary-missing: the libbitsandbytes_cuda{XY} library bitsandbytes picks for
torch's CUDA version, by each release's own policy (exact name up to 0.49, same-major
fallback from 0.50, read from its cextension.py), is absent from its install."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, companion, write_tree
from pe_builder import build_pe

import torchguard
from torchguard._facts.bitsandbytes import (
    FALLBACK_MARK,
    Install,
    chosen,
    cuda_tuple,
    releases_with,
    shipped,
)
from torchguard._facts.vocab import Code
from torchguard._platforms.linux.wheel_dists import bitsandbytes_install
from torchguard._report.findings import Finding
from torchguard._rules.bitsandbytes import binary_findings

EXACT_SOURCE = "def get_cuda_bnb_library_path(cuda_specs): ...\n"
FALLBACK_SOURCE = f"def {FALLBACK_MARK}(prefix, is_hip): ...\n"


def names(*codes: int, suffix: str = "dll") -> tuple[str, ...]:
    out = ["__init__.py", "cextension.py", f"libbitsandbytes_cpu.{suffix}"]
    for code in codes:
        out += [
            f"libbitsandbytes_cuda{code}.{suffix}",
            f"libbitsandbytes_cuda{code}_nocublaslt.{suffix}",
        ]
    return tuple(out)


def test_cuda_versions_read_from_torch_and_the_override() -> None:
    assert cuda_tuple("12.8") == (12, 8) and cuda_tuple("128") == (12, 8)
    assert cuda_tuple("118") == (11, 8) and cuda_tuple(None) is None and cuda_tuple("x") is None


def test_shipped_reads_this_platforms_binaries_only() -> None:
    found = shipped([*names(121, 128), "libbitsandbytes_cuda130.so"], "windows")
    assert set(found) == {(12, 1), (12, 8)}


@pytest.mark.parametrize(
    ("cuda", "present", "fallback", "expected"),
    [
        ((12, 8), {(12, 8)}, False, (12, 8)),
        ((12, 9), {(12, 8)}, False, None),  # an exact release has no 12.9
        ((12, 9), {(12, 8), (13, 0)}, True, (12, 8)),  # same major, at most 12.9
        ((12, 0), {(12, 1), (12, 4)}, True, (12, 1)),  # else the oldest newer one
        ((13, 2), {(12, 8)}, True, None),  # never another major
        ((12, 9), {(12, 8)}, None, (12, 8)),  # unknown policy: doubt makes no finding
    ],
)
def test_the_choice_of_each_policy(
    cuda: tuple[int, int],
    present: set[tuple[int, int]],
    fallback: bool | None,
    expected: tuple[int, int] | None,
) -> None:
    assert chosen(cuda, present, fallback=fallback) == expected


def test_the_releases_that_have_a_binary() -> None:
    assert releases_with((12, 8), "windows") == ("0.45.3", "0.50.2")
    assert releases_with((12, 9), "windows") == ("0.46.1", "0.50.2")
    assert releases_with((12, 4), "linux")[0] == "0.43.1"  # type: ignore[index]
    assert releases_with((12, 4), "windows")[0] == "0.43.2"  # type: ignore[index]
    assert releases_with((14, 0), "linux") is None


def _one(
    install: Install, cuda: tuple[int, int], platform: str = "windows", override: str | None = None
) -> list[Finding]:
    return list(binary_findings(install, cuda, platform, override, "python"))


def test_an_exact_release_without_the_binary_for_torchs_cuda() -> None:
    install = Install("0.45.2", "C:\\site\\bitsandbytes", names(118, 124, 126), EXACT_SOURCE)
    (finding,) = _one(install, (12, 8))
    assert finding.code == Code.BITSANDBYTES_BINARY_MISSING and not finding.is_error
    assert finding.missing == "libbitsandbytes_cuda128.dll"
    assert finding.path == "C:\\site\\bitsandbytes\\libbitsandbytes_cuda128.dll"
    assert "0.45.2" in finding.message and "12.6" in finding.message
    assert (
        "0.45.3" in finding.hints[0].summary
        and '"bitsandbytes>=0.45.3"' in finding.hints[0].commands[0]
    )
    assert _one(install, (12, 6)) == []


def test_a_falling_back_release_takes_the_same_major() -> None:
    install = Install(
        "0.50.2", "/s/bitsandbytes", names(118, 128, 130, suffix="so"), FALLBACK_SOURCE, "/"
    )
    assert _one(install, (12, 9), "linux") == []
    (finding,) = _one(install, (14, 0), "linux")
    assert finding.missing == "libbitsandbytes_cuda140.so" and finding.hints[0].url
    exact = Install("0.49.2", "/s/bitsandbytes", install.names, EXACT_SOURCE, "/")
    assert [f.missing for f in _one(exact, (12, 9), "linux")] == ["libbitsandbytes_cuda129.so"]


def test_an_unreadable_policy_never_creates_a_finding_a_major_could_cover() -> None:
    install = Install("?", "/s/bitsandbytes", names(128, suffix="so"), None, "/")
    assert _one(install, (12, 9), "linux") == []
    assert _one(Install("?", "/s/b", (), None), (12, 9)) == []  # folder unlisted: nothing known


def test_a_release_without_a_windows_build() -> None:
    install = Install("0.41.1", "C:\\s\\bitsandbytes", names(118, 121, suffix="so"), EXACT_SOURCE)
    (finding,) = _one(install, (12, 1))
    assert "no Windows CUDA binary at all" in finding.message and "0.43.0" in finding.message
    assert "0.43.0" in finding.hints[0].summary


def test_the_override_names_one_file() -> None:
    install = Install("0.50.2", "/s/bitsandbytes", names(128, suffix="so"), FALLBACK_SOURCE, "/")
    (finding,) = _one(install, (12, 8), "linux", override="125")
    assert (
        finding.missing == "libbitsandbytes_cuda125.so"
        and "BNB_CUDA_VERSION=125" in finding.message
    )
    assert "unset BNB_CUDA_VERSION" in finding.hints[0].commands
    assert _one(install, (12, 4), "linux", override="128") == []


def _bitsandbytes(version: str, codes: tuple[int, ...], source: str) -> dict[str, bytes]:
    files = {
        "bitsandbytes/__init__.py": b"",
        "bitsandbytes/cextension.py": source.encode(),
        **{f"bitsandbytes/libbitsandbytes_cuda{c}.dll": build_pe(["KERNEL32.dll"]) for c in codes},
    }
    return companion("bitsandbytes", version, files, {})


def test_a_windows_scan_of_a_cuda_torch(tmp_path: Path, runtime_dir: Path) -> None:
    site = FakeTorch(version="2.7.0+cu128", cuda="12.8").write(tmp_path / "site")
    write_tree(site, _bitsandbytes("0.45.2", (121, 124, 126), EXACT_SOURCE))
    report = torchguard.scan([site], system32=[runtime_dir])
    found = [f for f in report.findings if f.code == Code.BITSANDBYTES_BINARY_MISSING]
    assert [(f.package, f.missing) for f in found] == [
        ("bitsandbytes", "libbitsandbytes_cuda128.dll")
    ]
    assert found[0].path is not None and found[0].path.endswith(
        "bitsandbytes\\libbitsandbytes_cuda128.dll"
    )


def test_a_cpu_torch_loads_no_cuda_binary(tmp_path: Path, runtime_dir: Path) -> None:
    site = FakeTorch().write(tmp_path / "site")
    write_tree(site, _bitsandbytes("0.45.2", (121,), EXACT_SOURCE))
    report = torchguard.scan([site], system32=[runtime_dir])
    assert not [f for f in report.findings if f.code == Code.BITSANDBYTES_BINARY_MISSING]


def test_the_linux_install_python_would_import(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for site, codes in ((first, (126,)), (second, (128,))):
        package = site / "bitsandbytes"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "cextension.py").write_text(EXACT_SOURCE)
        for code in codes:
            (package / f"libbitsandbytes_cuda{code}.so").write_bytes(b"\x7fELF")
    (first / "bitsandbytes-0.45.2.dist-info").mkdir()
    install = bitsandbytes_install([str(tmp_path / "none"), str(first), str(second)])
    assert install is not None and install.version == "0.45.2"
    assert [f.missing for f in _one(install, (12, 8), "linux")] == ["libbitsandbytes_cuda128.so"]
    assert bitsandbytes_install([str(tmp_path / "none")]) is None
