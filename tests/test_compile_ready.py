"""compile-not-ready: triton-windows builds its launcher with this Python's ``Python.h``,
``libs\\python3XY.lib`` and a C compiler; an embeddable Python has neither folder."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeTorch, companion, system32, write_tree
from realwheels import CACHE, download

from torchguard._binary.cache import user_cache
from torchguard._facts.triton_pairs import paired_triton_windows, pairs_on_windows
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import Finding
from torchguard._rules.compile_facts import CompileInputs, Triton, pairing
from torchguard._rules.compile_ready import pairing_finding


def triton(tcc: bool, version: str = "3.1.0.post17") -> dict[str, bytes]:
    """triton-windows; 3.1 pairs with the fake torch 2.4.1."""
    files = {"triton/__init__.py": b"", "triton/runtime/build.py": b""}
    if tcc:
        files["triton/runtime/tcc/tcc.exe"] = b"MZ"
    return companion("triton-windows", version, files, {})


def run(
    tmp_path: Path,
    *,
    full_python: bool,
    tcc: bool,
    tools: Path | None = None,
    live: bool = True,
    with_triton: bool = True,
    torch: str = "2.4.1+cpu",
    triton_version: str = "3.1.0.post17",
) -> list[Finding]:
    site = FakeTorch(version=torch).write(tmp_path / "site")
    if with_triton:
        write_tree(site, triton(tcc, triton_version))
    python = tmp_path / "python"
    python.mkdir()
    (python / "python.exe").write_bytes(b"MZ")
    if full_python:
        write_tree(python, {"Include/Python.h": b"", "libs/python311.lib": b""})
    system = offline_windows(
        [str(site)], system32_dirs=[str(system32(tmp_path / "s32"))], python_dir=str(python)
    )
    system.live = live
    if tools is not None:  # a folder on PATH, as the Windows path the process sees
        system.tree.mount_host_dir("C:\\BuildTools\\bin", str(tools))
        path = ("C:\\BuildTools\\bin",)
        system.interpreter = dataclasses.replace(system.interpreter, path_dirs=path)
    try:
        report = analyze(system, cache=user_cache())
    finally:
        system.close()
    return [f for f in report.findings if f.code == Code.COMPILE_NOT_READY]


def test_an_embeddable_python_lacks_the_header_and_the_library(tmp_path: Path) -> None:
    (finding,) = run(tmp_path, full_python=False, tcc=True)
    assert not finding.is_error and finding.package == "triton-windows"
    assert "'Python.h'" in finding.message and "python311.lib" in finding.message
    assert "compiler" not in finding.message
    assert "include\\ and libs\\" in finding.hints[0].summary and len(finding.hints) == 1


def test_no_compiler_without_tinycc(tmp_path: Path) -> None:
    (finding,) = run(tmp_path, full_python=True, tcc=False)
    assert "C compiler" in finding.message and "Python.h" not in finding.message
    assert "pip install --upgrade triton-windows" in finding.hints[0].commands[0]


def test_cl_on_path_is_a_compiler(tmp_path: Path) -> None:
    tools = tmp_path / "msvc"
    tools.mkdir()
    (tools / "cl.exe").write_bytes(b"MZ")
    assert run(tmp_path, full_python=True, tcc=False, tools=tools) == []


@pytest.mark.parametrize(
    "kwargs", [{"live": False}, {"with_triton": False}, {"full_python": True, "tcc": True}]
)
def test_nothing_to_say(tmp_path: Path, kwargs: dict[str, bool]) -> None:
    options = {"full_python": False, "tcc": True, **kwargs}
    assert run(tmp_path, **options) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("torch", "paired"),
    [
        ("2.4.1+cpu", (3, 1)),
        ("2.5.0", (3, 1)),
        ("2.9.1+cu128", (3, 5)),
        ("2.10.0", (3, 6)),
        ("2.13.0+cu130", (3, 7)),
        ("2.3.1", None),  # older than triton-windows supports
        ("2.14.0", None),  # newer than the table knows: no verdict
        ("2.99.0", None),
        ("not a version", None),
    ],
)
def test_the_pairing_table(torch: str, paired: tuple[int, int] | None) -> None:
    assert paired_triton_windows(torch) == paired


def test_pairs_on_windows_is_a_verdict_only_when_known() -> None:
    assert pairs_on_windows("2.9.1+cu128", "3.5.1.post21") is True
    assert pairs_on_windows("2.9.1+cu128", "3.4.0.post20") is False
    assert pairs_on_windows("2.9.1+cu128", "3.6.0") is False
    assert pairs_on_windows("2.14.0", "3.7.0") is None
    assert pairs_on_windows("2.9.1", "weird") is None


def full(tmp_path: Path, **kwargs: Any) -> list[Finding]:
    """Every file the launcher needs is there: only a pairing can be said."""
    return run(tmp_path, full_python=True, tcc=True, **kwargs)


@pytest.mark.parametrize("live", [True, False])
@pytest.mark.parametrize("installed", ["3.4.0.post20", "3.6.0.post22"])
def test_a_triton_windows_of_another_minor_than_torchs(
    tmp_path: Path, live: bool, installed: str
) -> None:
    (finding,) = full(tmp_path, torch="2.9.1+cpu", triton_version=installed, live=live)
    assert not finding.is_error and finding.package == "triton-windows"
    assert f"triton-windows {installed} does not pair with torch 2.9.1+cpu" in finding.message
    assert "triton-windows 3.5" in finding.message and "torch.compile" in finding.message
    assert "`import torch` is unaffected" in finding.message
    (hint,) = finding.hints
    assert hint.commands == ('py -3.11 -m pip install -U "triton-windows<3.6"',)  # context's python


@pytest.mark.parametrize(
    ("torch", "installed"),
    [
        ("2.9.1+cpu", "3.5.1.post21"),  # paired
        ("2.11.0+cpu", "3.6.0.post22"),  # two torch minors share one triton minor
        ("2.14.0+cpu", "3.3.0"),  # a torch the table does not know: unknown, not a verdict
    ],
)
def test_no_pairing_warning(tmp_path: Path, torch: str, installed: str) -> None:
    assert full(tmp_path, torch=torch, triton_version=installed) == []


def test_the_pairing_finding_uses_the_contexts_python_command() -> None:
    paired = pairing(
        CompileInputs(
            windows=True,
            python_version=(3, 12),
            include_dir="C:\\py\\Include",
            torch_version="2.8.0+cu128",
            triton=Triton("triton-windows", "3.2.0.post19", "C:\\py\\Lib\\site-packages"),
        )
    )
    assert paired is not None and not paired.pairs and paired.wanted == "3.4"
    finding = pairing_finding(paired, "C:\\ComfyUI\\python_embeded\\python.exe")
    assert finding.hints[0].commands == (
        'C:\\ComfyUI\\python_embeded\\python.exe -m pip install -U "triton-windows<3.5"',
    )


@pytest.mark.realwheel
def test_the_real_triton_windows_picks_its_bundled_tinycc() -> None:
    """What the rule assumes, read from triton-windows 3.8.0.post29's own build.py."""
    folder = CACHE / "neighbours"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = "triton_windows-3.8.0.post29-cp311-cp311-win_amd64.whl"
    if not list(folder.glob(pattern)):
        download("triton-windows==3.8.0.post29", folder)
    with zipfile.ZipFile(next(folder.glob(pattern))) as archive:
        build = archive.read("triton/runtime/build.py").decode()
        utils = archive.read("triton/windows_utils.py").decode()
        names = set(archive.namelist())
    assert "triton/runtime/tcc/tcc.exe" in names
    assert '"triton", "runtime", "tcc", "tcc.exe"' in build and 'os.environ.get("CC")' in build
    assert 'shutil.which("cl")' in build and '["include"]' in build
    assert '/ "libs"' in utils and 'version += "t"' in utils
