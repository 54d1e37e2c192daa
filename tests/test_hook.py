"""The environment-wide hook, in subprocesses with a stand-in torch distribution."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The real ensure() on a fake Windows: ``_api`` takes its Windows path and live_windows()
#: describes a fake install (with or without the VC++ runtime in System32), optionally with a
#: fault planted inside pefile. Everything from the analysis to the raise is the real code.
FAKE_WINDOWS = """
import sys, types
sys.path.insert(0, {tests!r})
from fakes import FakeTorch, system32
from pathlib import Path
import torchguard, torchguard._frontends.api as api, torchguard._platforms.windows.live as live
from torchguard._platforms.windows.system import offline_windows
root = Path({tmp!r})
site = FakeTorch().write(root / 'fake-site')
s32 = [str(system32(root / 's32'))] if {runtime!r} else []
api.sys = types.SimpleNamespace(platform='win32', modules=sys.modules)
live.live_windows = lambda: offline_windows([str(site)], system32_dirs=s32)
if {fault!r}:
    import pefile
    def boom(*args, **kwargs):
        raise TypeError('planted fault')
    pefile.PE.parse_data_directories = boom
"""


def stand_in_torch(root: Path) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("print('stand-in torch imported')\n")
    info = root / "torch-2.4.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1\n")
    return root


def hooked_site(tmp_path: Path) -> Path:
    from torchguard._hook import write_hook_files

    site_dir = tmp_path / "hooked-site"
    write_hook_files(site_dir)
    return site_dir


def run(
    code: str, tmp_path: Path, *, with_torch: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Python with torchguard (and a stand-in torch) importable, the hook's .pth processed."""
    torch_root = tmp_path / ("torch-root" if with_torch else "no-torch")
    if with_torch and not torch_root.exists():
        stand_in_torch(torch_root)
    prelude = f"import site; site.addsitedir({str(hooked_site(tmp_path))!r})\n"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHGUARD")}
    full_env["TORCHGUARD_CACHE_DIR"] = str(tmp_path / "facts-cache")
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(torch_root)])
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def fake_windows(tmp_path: Path, *, runtime: bool = True, fault: bool = False) -> str:
    return FAKE_WINDOWS.format(
        tests=str(ROOT / "tests"), tmp=str(tmp_path), runtime=runtime, fault=fault
    )


def breaker(tmp_path: Path) -> str:
    """A fake Windows install without the VC++ runtime: the real ensure() raises."""
    return fake_windows(tmp_path, runtime=False)


def test_strict_makes_import_torch_raise_the_diagnosis(tmp_path: Path) -> None:
    code = breaker(tmp_path) + (
        "try:\n    import torch\n"
        "except torchguard.MissingDllError as exc:\n    print('raised', exc.code, exc.missing)\n"
    )
    result = run(code, tmp_path)
    assert result.stdout.split() == ["raised", "missing-dll", "MSVCP140.dll"], result.stderr
    assert "stand-in torch imported" not in result.stdout


def test_warn_prints_the_diagnosis_and_imports(tmp_path: Path) -> None:
    result = run(breaker(tmp_path) + "import torch\n", tmp_path, TORCHGUARD="warn")
    assert "stand-in torch imported" in result.stdout
    assert "MSVCP140.dll is missing" in result.stderr
    assert "TORCHGUARD=warn" in result.stderr


def test_off_does_nothing(tmp_path: Path) -> None:
    result = run(
        breaker(tmp_path)
        + "import sys\nprint(any(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path))\nimport torch\n",
        tmp_path,
        TORCHGUARD="off",
    )
    assert result.stdout.split()[0] == "False"
    assert "stand-in torch imported" in result.stdout and result.stderr == ""


def test_report_file_is_written(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    result = run(
        breaker(tmp_path) + "import torch\n",
        tmp_path,
        TORCHGUARD="warn",
        TORCHGUARD_REPORT=str(target),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(target.read_text())
    assert data["schema"] == 1 and data["findings"][0]["missing"] == "msvcp140.dll"


def test_report_file_on_a_healthy_run(tmp_path: Path) -> None:
    target = tmp_path / "ok.json"
    result = run("import torch\n", tmp_path, TORCHGUARD_REPORT=str(target))
    assert "stand-in torch imported" in result.stdout, result.stderr
    data = json.loads(target.read_text())
    assert data["ok"] is True and data["torch"]["version"] == "2.4.1"


def test_unwritable_report_path_is_one_warning(tmp_path: Path) -> None:
    result = run(
        "import torch\n",
        tmp_path,
        TORCHGUARD_REPORT=str(tmp_path / "no" / "such" / "dir" / "r.json"),
    )
    assert "stand-in torch imported" in result.stdout
    assert result.stderr.count("\n") == 1 and "cannot write TORCHGUARD_REPORT" in result.stderr


@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_internal_fault_fails_open(tmp_path: Path, mode: str) -> None:
    """A fault inside pefile, met by the real ensure(): one line, and torch imports."""
    code = fake_windows(tmp_path, fault=True) + "import torch\nprint('after import')\n"
    result = run(code, tmp_path, TORCHGUARD=mode)
    assert result.returncode == 0, result.stderr
    assert "stand-in torch imported" in result.stdout and "after import" in result.stdout
    assert result.stderr.count("\n") == 1, result.stderr
    line = result.stderr
    assert line.startswith("torchguard: internal error ignored, import torch continues:")
    assert "InternalError" in line and "planted fault" in line
    assert "please report this as a torchguard bug" in line and "corrupt" not in line


def test_the_same_fake_windows_without_the_fault_is_silent(tmp_path: Path) -> None:
    code = fake_windows(tmp_path) + "import torch\nprint(torchguard.ensure().ok)\n"
    result = run(code, tmp_path)
    assert result.stdout.split() == ["stand-in", "torch", "imported", "True"], result.stderr
    assert result.stderr == ""


def test_missing_torch_keeps_pythons_own_error(tmp_path: Path) -> None:
    """No torch: nothing is imported, so the guard (which acts at import) never runs; Python
    raises its own ModuleNotFoundError, exactly as without torchguard."""
    target = tmp_path / "report.json"
    code = (
        "try:\n    import torch\n"
        "except ModuleNotFoundError as exc:\n    print(type(exc).__name__, exc.name)\n"
        "import sys\nprint('torchguard._frontends.api' in sys.modules)\n"
    )
    result = run(code, tmp_path, with_torch=False, TORCHGUARD_REPORT=str(target))
    assert result.stdout.split() == ["ModuleNotFoundError", "torch", "False"], result.stderr
    assert result.stderr == "" and not target.exists()


def test_hook_never_imports_heavy_modules_without_torch(tmp_path: Path) -> None:
    code = (
        "import sys\nprint(sorted(m for m in ('torchguard', 'pefile', 'packaging', 'platformdirs') if m in sys.modules),"
        " any(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path))\n"
    )
    result = run(code, tmp_path)
    assert result.stdout.strip() == "[] True", result.stderr


def test_install_hook_api_is_idempotent_and_uninstalls(tmp_path: Path) -> None:
    code = (
        "import sys, torchguard\n"
        "count = lambda: sum(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path)\n"
        "a = torchguard.install_hook(); b = torchguard.install_hook()\n"
        "print(a.watcher is b.watcher, count())\n"
        "with a:\n    pass\n"
        "print(a.installed, count())\n"
    )
    result = run(code, tmp_path, TORCHGUARD="off")
    assert result.stdout.split() == ["True", "1", "False", "0"], result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="venv layout below is POSIX")
def test_cli_install_and_uninstall_leave_nothing_behind(tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    site_packages = Path(purelib)
    (site_packages / "torchguard-src.pth").write_text(f"{ROOT}\n")
    before = sorted(p.name for p in site_packages.iterdir())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", "torchguard", "hook", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    assert cli("install").returncode == 0
    assert {"torchguard-hook.pth", "torchguard-hook.start"} <= {
        p.name for p in site_packages.iterdir()
    }
    status = cli("status")
    assert "watcher active in this process: yes" in status.stdout, status.stdout + status.stderr
    assert cli("uninstall").returncode == 0
    assert sorted(p.name for p in site_packages.iterdir()) == before
    assert "not installed" in cli("uninstall").stdout


def test_cli_install_refusal_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchguard import _hook
    from torchguard._frontends.cli import main

    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setattr(_hook, "site_dir", lambda user: blocker / "site-packages")
    assert main(["hook", "install"]) == 2
    err = capsys.readouterr().err
    assert "cannot change" in err and "--user" in err
    assert blocker.read_text() == "x"


COUNT = "count = lambda: sum(type(f).__name__ == 'TorchImportWatcher' for f in sys.meta_path)\n"


def test_install_hook_never_stacks_a_second_watcher_beside_the_pth_one(tmp_path: Path) -> None:
    code = (
        "import sys\n" + COUNT + "print(count())\n"
        "import torchguard, torchguard._boot as boot\n"
        "a = torchguard.install_hook(); b = torchguard.install_hook()\n"
        "boot.activate()  # the .start entry point, had it run too\n"
        "print(count(), a.watcher is b.watcher, type(a.watcher) is boot.TorchImportWatcher)\n"
        "a.uninstall()\nprint(count(), a.installed)\n"
        "c = torchguard.install_hook()\nprint(count(), c.installed)\n"
    )
    result = run(code, tmp_path)
    # 1 from the .pth line; install_hook() adopts it (a class of its own, from the same
    # source); after uninstalling, install_hook() adds exactly one.
    assert result.stdout.split() == ["1", "1", "True", "False", "0", "False", "1", "True"], (
        result.stderr
    )


def test_pth_watcher_is_boot_s_source_and_survives_a_removed_torchguard(tmp_path: Path) -> None:
    """torchguard uninstalled, its .pth left behind: import torch works, silently."""
    torch_root = stand_in_torch(tmp_path / "torch-root")
    prelude = f"import site; site.addsitedir({str(hooked_site(tmp_path))!r})\n"
    code = prelude + "import sys\n" + COUNT + "print(count())\nimport torch\nprint(count())\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHGUARD")}
    env["PYTHONPATH"] = str(torch_root)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.stdout.split() == ["1", "stand-in", "torch", "imported", "0"], result.stderr
    assert result.stderr == ""


def test_boot_activate_honours_off_and_installs_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchguard import _boot

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setenv("TORCHGUARD", "off")
    _boot.activate()
    assert _boot.installed_watcher() is None
    monkeypatch.setenv("TORCHGUARD", "strict")
    _boot.activate()
    _boot.activate()
    assert sum(type(f).__name__ == "TorchImportWatcher" for f in sys.meta_path) == 1


def _venv_python(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh venv (no pip) that imports this checkout's torchguard, and a private HOME."""
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "USERPROFILE": str(home)}
    env.pop("PYTHONNOUSERSITE", None)
    return python, env


def test_cli_refuses_a_user_hook_that_a_venv_never_runs(tmp_path: Path) -> None:
    """Inside a venv the user site-packages is never read: ``hook install --user`` printed
    success and wrote a hook that never ran (issue 13.9)."""
    python, env = _venv_python(tmp_path)
    result = subprocess.run(
        [str(python), "-m", "torchguard", "hook", "install", "--user"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "user site-packages" in result.stderr and "without --user" in result.stderr
    assert not [p for p in (tmp_path / "home").rglob("torchguard-hook*")]


def test_cli_refuses_a_hook_that_a_python_without_site_never_runs(tmp_path: Path) -> None:
    """An embedded Python whose ``._pth`` lacks ``import site`` (here: ``-S``) runs no ``.pth``."""
    python, env = _venv_python(tmp_path)
    result = subprocess.run(
        [str(python), "-S", "-m", "torchguard", "hook", "install"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "import site" in result.stderr
    assert not [p for p in (tmp_path / "env").rglob("torchguard-hook*")]


def test_run_guard_fails_open_when_torchguard_itself_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run_guard`` imported ``_api`` before its fail-open ``try``: a broken install made
    ``import torch`` raise torchguard's ImportError (issue 13.9)."""
    import torchguard._frontends
    from torchguard import _hook

    monkeypatch.setattr(_hook, "_ran", False)
    monkeypatch.delattr(torchguard._frontends, "api", raising=False)
    monkeypatch.setitem(sys.modules, "torchguard._frontends.api", None)  # importing it raises
    monkeypatch.delenv("TORCHGUARD", raising=False)
    _hook.run_guard()  # returns: import torch continues
    assert "internal error ignored, import torch continues" in capsys.readouterr().err


def test_hook_status_warns_where_a_user_hook_never_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import site

    from torchguard import _hook
    from torchguard._frontends.cli import main

    monkeypatch.setattr(site, "ENABLE_USER_SITE", False)
    monkeypatch.setattr(_hook, "site_dir", lambda user: tmp_path)
    assert main(["hook", "status", "--user"]) == 0
    assert "warning:" in capsys.readouterr().out
    assert main(["hook", "install", "--user"]) == 2
    assert "without --user" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["missing", "raises"])
def test_a_missing_or_damaged_start_up_module_fails_open(tmp_path: Path, damage: str) -> None:
    """The ``.pth`` line imports the byte-compiled start-up module; without it (deleted, or
    raising) Python starts silently and ``import torch`` works, unguarded."""
    import importlib.util

    from torchguard._hook import boot_module

    module = boot_module(hooked_site(tmp_path))
    assert Path(importlib.util.cache_from_source(str(module))).is_file()  # compiled at install
    Path(importlib.util.cache_from_source(str(module))).unlink()
    if damage == "missing":
        module.unlink()
    else:
        module.write_text("raise RuntimeError('damaged')\n")
    torch_root = stand_in_torch(tmp_path / "torch-root")
    code = (
        f"import site; site.addsitedir({str(module.parent)!r})\n"
        + COUNT
        + ("import sys\nprint(count())\nimport torch\n")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHGUARD")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(torch_root)])
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.stdout.split() == ["0", "stand-in", "torch", "imported"], result.stderr
    assert result.stderr == ""


def start_with(site_dir: Path) -> subprocess.CompletedProcess[str]:
    """A bare interpreter (torchguard not importable) processing ``site_dir``: how many
    watchers it has and where its start-up module came from."""
    code = (
        f"import site, sys; site.addsitedir({str(site_dir)!r})\n"
        + COUNT
        + "m = sys.modules.get('_torchguard_hook')\n"
        + "print(count(), 'torchguard' in sys.modules, m and m.__file__.rsplit('.', 1)[1])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHGUARD", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_the_pth_line_runs_the_bytecode_by_its_path(tmp_path: Path) -> None:
    """No search of sys.path: the bytecode is run from where install wrote it, and the
    torchguard package is not imported."""
    result = start_with(hooked_site(tmp_path))
    assert result.stdout.split() == ["1", "False", "pyc"], result.stderr
    assert result.stderr == ""


def test_the_pth_line_carries_its_loader_compiled(tmp_path: Path) -> None:
    """The loader is a marshalled code object: starting compiles only the line itself."""
    from torchguard._hook import hook_files

    line = hook_files(hooked_site(tmp_path))[0].read_text()
    assert line.count("\n") == 1 and "marshal').loads(b'" in line
    assert "try:" not in line.split(" else ")[0]  # no loader source compiled on this Python


def test_another_python_runs_the_import_instead(tmp_path: Path) -> None:
    """A Python whose bytecode differs from the installing one's (its magic number) never
    loads the marshalled loader: it imports the start-up module, silently."""
    from importlib.util import MAGIC_NUMBER

    from torchguard._hook import hook_files

    site_dir = hooked_site(tmp_path)
    pth = hook_files(site_dir)[0]
    line = pth.read_text()
    assert line.count(f"=={MAGIC_NUMBER!r}") == 1
    pth.write_text(line.replace(f"=={MAGIC_NUMBER!r}", "==b'\\x00\\x00\\r\\n'"))
    result = start_with(site_dir)
    assert result.stderr == ""
    assert result.stdout.split() == ["1", "False", "py"], result.stdout


@pytest.mark.parametrize("damage", ["another python", "garbage", "moved"])
def test_bytecode_that_cannot_be_run_falls_back_to_the_import(tmp_path: Path, damage: str) -> None:
    """Bytecode of another Python (its magic number), damaged, or a folder moved since
    install (the path in the line is gone): the module is imported instead, silently."""
    import importlib.util
    import shutil

    from torchguard._hook import boot_module

    site_dir = hooked_site(tmp_path)
    compiled = Path(importlib.util.cache_from_source(str(boot_module(site_dir))))
    if damage == "another python":
        data = compiled.read_bytes()
        compiled.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    elif damage == "garbage":
        compiled.write_bytes(compiled.read_bytes()[:16] + b"\x00garbage")
    else:
        site_dir = Path(shutil.move(str(site_dir), str(tmp_path / "moved-site")))
    result = start_with(site_dir)
    assert result.stderr == ""
    if damage == "garbage":  # the import meets the same bytecode: Python starts, unguarded
        assert result.stdout.split() == ["0", "False", "None"], result.stdout
    else:
        assert result.stdout.split() == ["1", "False", "py"], result.stdout
