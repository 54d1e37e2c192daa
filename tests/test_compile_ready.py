"""compile-not-ready: triton-windows builds its launcher with this Python's ``Python.h``,
``libs\\python3XY.lib`` and a C compiler; an embeddable Python has neither folder."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest
from fakes import FakeTorch, companion, system32, write_tree
from realwheels import CACHE, download

from torchguard._binary.cache import user_cache
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import Finding


def triton(tcc: bool) -> dict[str, bytes]:
    files = {"triton/__init__.py": b"", "triton/runtime/build.py": b""}
    if tcc:
        files["triton/runtime/tcc/tcc.exe"] = b"MZ"
    return companion("triton-windows", "3.8.0.post29", files, {})


def run(
    tmp_path: Path,
    *,
    full_python: bool,
    tcc: bool,
    tools: Path | None = None,
    live: bool = True,
    with_triton: bool = True,
) -> list[Finding]:
    site = FakeTorch().write(tmp_path / "site")
    if with_triton:
        write_tree(site, triton(tcc))
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
