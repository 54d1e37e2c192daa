"""`check --env` and `torchguard pip install` for a Windows environment, fast tier: a venv made
of tiny in-memory PE files in tmp_path, the probe saying ``win32``, pip's report faked at the
subprocess seam; the overlay and the judgement are the real ones (the offline Windows
pipeline ``scan`` uses)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import KERNEL, TORCH_241_GRAPH, FakeTorch, record, system32, write_tree, write_wheel
from pe_builder import DEFAULT_SYMBOL, build_pe

from torchguard._frontends import api, env_alternatives, env_resolve, env_target, pip_front
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.env_check import check_env
from torchguard._frontends.env_target import Installed, TargetEnv
from torchguard._frontends.env_windows import removed_paths
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.findings import ERROR, Finding
from torchguard._report.report import Report

WINDOWS = {
    "implementation_name": "cpython",
    "os_name": "nt",
    "platform_machine": "AMD64",
    "platform_system": "Windows",
    "python_full_version": "3.11.9",
    "python_version": "3.11",
    "sys_platform": "win32",
    "platform_python_implementation": "CPython",
}
PYPI = "https://files.pythonhosted.org/packages/aa/bb/"
#: What torchvision built for torch 2.4.1 takes from its c10.dll (2.5.0's no longer exports it).
OLD_SYMBOL = "?c10_cuda_check_implementation@cuda@c10@@YAXHPEBD0I_N@Z"


def dist(
    name: str, version: str, files: dict[str, bytes], requires: Sequence[str] = ()
) -> dict[str, bytes]:
    """A distribution's files with its dist-info (METADATA with ``requires``, RECORD)."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    out = dict(files)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    out[f"{info}/METADATA"] = ("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n").encode()
    out[f"{info}/INSTALLER"] = b"pip\n"
    out[f"{info}/RECORD"] = record(out, info)
    return out


def torchvision() -> dict[str, bytes]:
    pyd = build_pe(["c10.dll", *KERNEL], symbols={"c10.dll": [OLD_SYMBOL]})
    files = {"torchvision/__init__.py": b"", "torchvision/_C.pyd": pyd}
    return dist("torchvision", "0.19.1", files, ["numpy", "torch==2.4.1"])


def old_torch() -> FakeTorch:
    """torch 2.4.1+cpu whose c10.dll exports what the old torchvision takes, with one DLL the
    new torch no longer ships."""
    c10 = build_pe(TORCH_241_GRAPH["c10.dll"], exports=(DEFAULT_SYMBOL, OLD_SYMBOL))
    extra = {"torch/lib/c10.dll": c10, "torch/lib/old_only.dll": build_pe(KERNEL)}
    return FakeTorch(extra=extra)


class Venv:
    """A Windows venv in tmp_path (``pyvenv.cfg``, ``Lib\\site-packages``, ``Scripts``)."""

    def __init__(self, root: Path, *trees: dict[str, bytes]) -> None:
        self.root = root
        self.site = root / "Lib" / "site-packages"
        self.site.mkdir(parents=True)
        (root / "Scripts").mkdir()
        (root / "pyvenv.cfg").write_text(
            "home = C:\\Python311\ninclude-system-site-packages = false\n"
        )
        self.dists: dict[str, Installed] = {}
        for files in trees:
            self.add(files)

    def add(self, files: dict[str, bytes], scripts: dict[str, bytes] | None = None) -> None:
        write_tree(self.site, files)
        paths = [str(self.site / name) for name in files]
        for name, data in (scripts or {}).items():
            (self.root / "Scripts" / name).write_bytes(data)
            paths.append(str(self.root / "Scripts" / name))
        (metadata,) = [k for k in files if k.endswith(".dist-info/METADATA")]
        fields = [line.split(": ", 1) for line in files[metadata].decode().splitlines()[1:]]
        name = next(v for k, v in fields if k == "Name")
        version = next(v for k, v in fields if k == "Version")
        requires = tuple(v for k, v in fields if k == "Requires-Dist")
        installed = Installed(name, version, requires, tuple(os.path.normpath(p) for p in paths))
        self.dists[installed.key] = installed

    def target(self) -> TargetEnv:
        return TargetEnv(
            python=sys.executable,
            version=(3, 11),
            platform="win32",
            prefix=str(self.root),
            folders=(str(self.site),),
            pip="24.0",
            dists=dict(self.dists),
        )

    def snapshot(self) -> list[tuple[str, int]]:
        return sorted((str(p), p.stat().st_size) for p in self.root.rglob("*") if p.is_file())


def entry(name: str, version: str, url: str, requested: bool = False) -> dict[str, Any]:
    return {
        "download_info": {"url": url, "archive_info": {"hashes": {"sha256": "ab12"}}},
        "requested": requested,
        "metadata": {"metadata_version": "2.1", "name": name, "version": version},
    }


def report(*items: dict[str, Any]) -> str:
    return json.dumps({"version": "1", "install": list(items), "environment": WINDOWS})


class FakePip:
    """pip's dry run: the same report for every resolution (one per test)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []

    def __call__(
        self, command: Sequence[str], *, timeout: float, status: Any = None
    ) -> subprocess.CompletedProcess[str]:
        assert command[1:7] == ["-B", "-m", "pip", "install", "--dry-run", "--report"]
        self.calls.append(list(command))
        return subprocess.CompletedProcess(command, 0, self.answer, "")


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No network, and a facts cache of this test's own."""
    monkeypatch.setattr(env_alternatives, "_unreachable", lambda url: "no network in this test")
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(tmp_path / "facts"))


def use(monkeypatch: pytest.MonkeyPatch, venv: Venv, answer: str) -> FakePip:
    target = venv.target()
    monkeypatch.setattr(env_target, "probe", lambda python: target)
    pip = FakePip(answer)
    monkeypatch.setattr(env_resolve, "run_watched", pip)
    return pip


def torch_wheel(folder: Path, torch: FakeTorch) -> str:
    folder.mkdir(exist_ok=True)
    return torch.wheel(folder).as_uri()


def test_a_torch_whose_dlls_miss_a_dependency_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files())
    before = venv.snapshot()
    graph = dict(TORCH_241_GRAPH)
    graph["torch_cpu.dll"] = (*graph["torch_cpu.dll"], "mkl_core.2.dll")
    url = torch_wheel(tmp_path / "wheels", FakeTorch(version="2.5.0+cpu", graph=graph))
    use(monkeypatch, venv, report(entry("torch", "2.5.0+cpu", url, True)))
    result = check_env(["torch==2.5.0+cpu"], cache=str(tmp_path / "cache"), alternatives=False)
    assert not result.safe
    (broken,) = result.breaks
    assert broken.code == "missing-dll"
    assert "mkl_core.2.dll" in broken.message and "import torch would fail" in broken.message
    assert any("System32 assumed" in note for note in result.notes)
    assert [c.line for c in result.changes] == ["torch 2.4.1+cpu -> 2.5.0+cpu (upgrade)"]
    assert result.report is not None and result.report.blockers
    assert venv.snapshot() == before  # judged without touching the environment


def test_a_pure_python_package_is_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files())
    url = PYPI + "six-1.17.0-py2.py3-none-any.whl"
    pip = use(monkeypatch, venv, report(entry("six", "1.17.0", url, True)))
    result = check_env(["six"], cache=str(tmp_path / "cache"))
    assert result.safe and result.breaks == []
    assert [c.line for c in result.changes] == ["six 1.17.0 (new)"]
    assert len(pip.calls) == 1


def test_a_harmless_binary_package_is_judged_and_safe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files())
    wheel = tmp_path / "tinyext-1.0-cp311-cp311-win_amd64.whl"
    write_wheel(wheel, dist("tinyext", "1.0", {"tinyext/_ext.pyd": build_pe(KERNEL)}))
    six = PYPI + "six-1.17.0-py2.py3-none-any.whl"
    answer = report(entry("tinyext", "1.0", wheel.as_uri(), True), entry("six", "1.17.0", six))
    use(monkeypatch, venv, answer)
    result = check_env(["tinyext"], cache=str(tmp_path / "cache"))
    assert result.safe, result.breaks
    assert result.report is not None and result.report.ok  # the overlay was scanned


def test_torch_upgraded_under_torchvision_names_the_sibling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files(), torchvision())
    url = torch_wheel(tmp_path / "wheels", FakeTorch(version="2.5.0+cpu"))
    use(monkeypatch, venv, report(entry("torch", "2.5.0+cpu", url, True)))
    result = check_env(["torch==2.5.0+cpu"], cache=str(tmp_path / "cache"), alternatives=False)
    codes = [b.code for b in result.breaks]
    assert codes[0] == "left-behind" and "missing-symbol" in codes
    assert result.breaks[0].message.startswith("torchvision 0.19.1 requires torch==2.4.1")
    (symbol,) = [b for b in result.breaks if b.code == "missing-symbol"]
    assert "import torchvision would fail" in symbol.message
    assert "c10.dll" in symbol.message
    # the environment as it is works: nothing found there is said as the install's
    assert all(f.package == "torchvision" for f in result.findings if f.severity == ERROR)


def test_the_overlay_hides_what_pip_removes_and_places_new_files_as_pip_would(
    tmp_path: Path,
) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files())
    tool = dist("tool", "1.0", {"tool/__init__.py": b""})
    venv.add(tool, scripts={"tool-old.exe": b"MZ"})
    cache = venv.site / "tool" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"")
    new_tool = dist(
        "tool", "2.0", {"tool/__init__.py": b"", "tool-2.0.data/scripts/tool.exe": b"MZ"}
    )
    tool_wheel = tmp_path / "tool-2.0-py3-none-win_amd64.whl"
    write_wheel(tool_wheel, new_tool)
    torch_whl = FakeTorch(version="2.5.0+cpu").wheel(tmp_path)
    replaced = [venv.dists["torch"], venv.dists["tool"]]
    hidden = removed_paths(replaced, [str(venv.site)])
    assert os.path.normcase(str(cache)) in hidden  # left empty: pip removes it
    system = offline_windows([str(venv.site), str(tool_wheel), str(torch_whl)], hidden=hidden)
    try:
        site = system.interpreter.site_dirs[0]
        tree = system.tree
        lib = tree.listdir(site + "\\torch\\lib")
        assert "old_only.dll" not in lib and "torch_cpu.dll" in lib
        assert "torch-2.4.1+cpu.dist-info" not in [d.lower() for d in tree.subdirs(site)]
        assert "torch-2.5.0+cpu.dist-info" in [d.lower() for d in tree.subdirs(site)]
        assert "__pycache__" not in [d.lower() for d in tree.subdirs(site + "\\tool")]
        scripts = system.interpreter.prefix + "\\Scripts"
        assert tree.is_file(scripts + "\\tool.exe") and not tree.is_file(scripts + "\\tool-old.exe")
        assert tree.folder_state(site) is None  # never cached as the folder on the disk
    finally:
        system.close()
    assert (venv.root / "Scripts" / "tool-old.exe").exists()
    assert (venv.site / "torch" / "lib" / "old_only.dll").exists()


def test_what_the_live_machine_shows_today_is_not_the_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = dict(TORCH_241_GRAPH)
    graph["torch_cpu.dll"] = (*graph["torch_cpu.dll"], "mkl_core.2.dll")
    venv = Venv(tmp_path / "venv", old_torch().files())
    url = torch_wheel(tmp_path / "wheels", FakeTorch(version="2.5.0+cpu", graph=graph))
    use(monkeypatch, venv, report(entry("torch", "2.5.0+cpu", url, True)))
    live = Finding(
        "missing-dll", ERROR, "mkl_core.2.dll is missing today", missing="mkl_core.2.dll"
    )
    monkeypatch.setattr(api, "_live_report", lambda: Report(findings=(live,)))
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sys, "prefix", str(venv.root))
    result = check_env(["torch==2.5.0+cpu"], cache=str(tmp_path / "cache"), alternatives=False)
    assert result.breaks == []


def test_on_windows_this_machines_system32_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DLL the new torch needs is in the real System32: nothing breaks (off Windows it is
    assumed missing, as `scan` assumes: the first test)."""
    graph = dict(TORCH_241_GRAPH)
    graph["torch_cpu.dll"] = (*graph["torch_cpu.dll"], "mkl_core.2.dll")
    venv = Venv(tmp_path / "venv", old_torch().files())
    url = torch_wheel(tmp_path / "wheels", FakeTorch(version="2.5.0+cpu", graph=graph))
    use(monkeypatch, venv, report(entry("torch", "2.5.0+cpu", url, True)))
    system32(tmp_path / "Windows" / "System32", ["mkl_core.2.dll"])
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("SYSTEMROOT", str(tmp_path / "Windows"))
    result = check_env(["torch==2.5.0+cpu"], cache=str(tmp_path / "cache"), alternatives=False)
    assert result.safe, result.breaks
    assert any(str(tmp_path / "Windows" / "System32") in note for note in result.notes)


def test_folders_unreadable_from_here_are_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Venv(tmp_path / "venv").target()
    target.folders = ("C:\\venv\\Lib\\site-packages",)
    monkeypatch.setattr(env_target, "probe", lambda python: target)
    with pytest.raises(CheckError, match="cannot be read from here"):
        check_env(["six"])
    target.platform = "darwin"
    with pytest.raises(CheckError, match="Linux and Windows environments"):
        check_env(["six"])


class Ran:
    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        return subprocess.CompletedProcess(command, 0)


def test_pip_install_runs_for_a_windows_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = Venv(tmp_path / "venv", old_torch().files(), torchvision())
    url = torch_wheel(tmp_path / "wheels", FakeTorch(version="2.5.0+cpu"))
    use(monkeypatch, venv, report(entry("torch", "2.5.0+cpu", url, True)))
    ran = Ran()
    monkeypatch.setattr(pip_front.subprocess, "run", ran)
    code = pip_front.pip_main(["install", "torch==2.5.0+cpu", "--json"])
    assert code == pip_front.EXIT_REFUSED and ran.commands == []
    document = json.loads(capsys.readouterr().out)
    assert document["check"]["breaks"][0]["code"] == "left-behind"
    six = PYPI + "six-1.17.0-py2.py3-none-any.whl"
    use(monkeypatch, venv, report(entry("six", "1.17.0", six, True)))
    assert pip_front.pip_main(["install", "six"]) == pip_front.EXIT_INSTALLED
    assert ran.commands == [[sys.executable, "-m", "pip", "install", "six"]]


def test_an_openmp_conflict_ensure_prevents_is_said_not_refused() -> None:
    """MKL's sibling runtime beside torch's: a warning ensure() preloads away is the install's
    warning, not a break; without the preload (torch misses a name in that copy) it breaks."""
    from torchguard._frontends.env_check import new_findings
    from torchguard._report.findings import WARNING
    from torchguard._report.report import PreloadRecord

    sibling = "C:\\venv\\Library\\bin\\libiomp5md.dll"
    conflict = Finding(
        "openmp-conflict", WARNING, "MKL and torch would start two", path=sibling, package="mkl"
    )
    preload = PreloadRecord(sibling, "MKL starts this runtime by full path", "TORCHGUARD_OPENMP")
    later = Report(findings=(conflict,), preloads=(preload,))
    breaks, warnings = new_findings(Report(), later)
    assert breaks == [] and [w.code for w in warnings] == ["openmp-conflict"]
    assert f"torchguard.ensure() prevents this by loading {sibling}" in warnings[0].message
    breaks, warnings = new_findings(Report(), Report(findings=(conflict,)))
    assert [b.message for b in breaks] == ["warning: MKL and torch would start two"]
    assert warnings == []
    failed = dataclasses.replace(preload, error="access denied")
    breaks, _ = new_findings(Report(), Report(findings=(conflict,), preloads=(failed,)))
    assert [b.code for b in breaks] == ["openmp-conflict"]
    assert new_findings(later, later) == ([], [])  # there today: not the install's


def test_only_the_removed_modules_bytecode_is_hidden(tmp_path: Path) -> None:
    """pip removes the .pyc of each module it uninstalls; a module another distribution owns
    keeps its bytecode, and so its __pycache__ folder (each folder is listed once)."""
    venv = Venv(tmp_path / "venv", old_torch().files())
    tool = dist("tool", "1.0", {"tool/__init__.py": b"", "tool/util.py": b""})
    venv.add(tool)
    cache = venv.site / "tool" / "__pycache__"
    cache.mkdir()
    for name in ("__init__", "util", "extra"):  # extra.py: another distribution's module
        (cache / f"{name}.cpython-311.pyc").write_bytes(b"")
    (cache / "util.cpython-311.opt-1.pyc").write_bytes(b"")
    hidden = removed_paths([venv.dists["tool"]], [str(venv.site)])
    for gone in ("__init__.cpython-311.pyc", "util.cpython-311.pyc", "util.cpython-311.opt-1.pyc"):
        assert os.path.normcase(str(cache / gone)) in hidden
    assert os.path.normcase(str(cache / "extra.cpython-311.pyc")) not in hidden
    assert os.path.normcase(str(cache)) not in hidden


def test_a_windows_command_is_quoted_for_windows_shells() -> None:
    """cmd.exe keeps POSIX single quotes: ``--find-links 'C:\\wheels'`` names no folder."""
    from torchguard._frontends.env_changes import Alternative

    arguments = ("--find-links", "C:\\wheels", "-c", "C:\\Users\\A B\\torch-2.4.1.txt", "six")
    windows = Alternative(arguments, True, "", windows=True)
    assert windows.command() == (
        'pip install --find-links C:\\wheels -c "C:\\Users\\A B\\torch-2.4.1.txt" six'
    )
    posix = Alternative(arguments, True, "")
    assert posix.command() == (
        "pip install --find-links 'C:\\wheels' -c 'C:\\Users\\A B\\torch-2.4.1.txt' six"
    )
