"""Front doors together: the same programs with and without the hook (issue 21, 1 and 2).

Each program runs in a subprocess with a bounded wait, once with the hook's ``.pth`` processed
and once without; a healthy program must print the same and exit the same either way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch
from test_hook import ROOT, fake_windows, hooked_site, stand_in_torch

WAIT = 60  # seconds: a hang fails the test instead of the suite


#: Like the real live_windows(), the fake one looks torch up with find_spec first (no torch
#: found: an empty site-packages, so torch-not-found), which is what woke the watcher.
LOOKS_UP = """
from torchguard._facts.interpreter import torch_package_dir
(root / 'empty-site').mkdir(exist_ok=True)
live.live_windows = lambda: offline_windows(
    [str(site) if torch_package_dir() else str(root / 'empty-site')], system32_dirs=s32)
"""


def program(
    code: str, tmp_path: Path, *, hook: bool, with_torch: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh Python with torchguard and a stand-in torch importable."""
    torch_root = tmp_path / "torch-root"
    if with_torch and not torch_root.exists():
        stand_in_torch(torch_root)
    prelude = f"import site; site.addsitedir({str(hooked_site(tmp_path))!r})\n" if hook else ""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHGUARD")}
    full_env.pop("PYTEST_ADDOPTS", None)
    full_env["TORCHGUARD_CACHE_DIR"] = str(tmp_path / "facts-cache")
    full_env.update(env)
    paths = [str(ROOT)] + ([str(torch_root)] if with_torch else [])
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + code],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=WAIT,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung for {WAIT} s (hook={hook}): {exc.stdout!r} {exc.stderr!r}")


def _untimed(text: str) -> str:
    """pytest's own "in 0.16s" is the one line that may differ between two runs."""
    return re.sub(r" in [0-9.]+s ", " in Ts ", text)


def both(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run with and without the hook; they must agree. Returns the hooked run."""
    plain = program(code, tmp_path, hook=False, **env)
    hooked = program(code, tmp_path, hook=True, **env)
    same = (hooked.returncode, _untimed(hooked.stdout)) == (
        plain.returncode,
        _untimed(plain.stdout),
    )
    assert same, hooked.stderr + plain.stderr
    return hooked


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="judges the live Linux torch")
def test_hook_and_ensure_together_never_hang(tmp_path: Path) -> None:
    """The README's first example with the hook installed: ensure() took its lock, its own
    find_spec("torch") woke the watcher, which called ensure() again and waited forever."""
    code = (
        "import torchguard\nr = torchguard.ensure()\nprint('ensured', r.torch.version)\n"
        "import torch\nprint('done')\n"
    )
    result = both(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ensured", "2.4.1", "stand-in", "torch", "imported", "done"]


PROBE = (
    "import importlib.util, sys\n"
    "s = importlib.util.find_spec('torch')\n"
    "print(s.name, s.origin, list(s.submodule_search_locations), type(s.loader).__name__,"
    " s.loader.is_package('torch'), s.parent, s.has_location)\n"
    "print(sorted(m for m in sys.modules if m.startswith(('torchguard', 'torch'))))\n"
)


@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_asking_whether_torch_exists_runs_no_guard(tmp_path: Path, mode: str) -> None:
    """transformers' probe on a broken install: the same spec as without torchguard, nothing on
    stderr, torchguard not even imported; the guard still runs at ``import torch``."""
    code = fake_windows(tmp_path, runtime=False) + PROBE
    result = both(code, tmp_path, TORCHGUARD=mode)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "torchguard._frontends.api" in result.stdout  # the fake imports it; it must not run
    assert "SourceFileLoader True torch True" in result.stdout
    imported = program(
        code + "try:\n    import torch\nexcept torchguard.MissingDllError as e:\n"
        "    print('raised', e.missing)\n",
        tmp_path,
        hook=True,
        TORCHGUARD=mode,
    )
    if mode == "strict":
        assert imported.stdout.split()[-2:] == ["raised", "MSVCP140.dll"], imported.stderr
    else:
        assert "stand-in torch imported" in imported.stdout
        assert "MSVCP140.dll is missing" in imported.stderr


def test_a_probe_without_torchguard_imported_leaves_it_unimported(tmp_path: Path) -> None:
    result = both(PROBE, tmp_path)
    assert result.stdout.splitlines()[-1] == "[]" and result.stderr == ""


def test_a_spec_from_a_probe_still_guards_when_executed(tmp_path: Path) -> None:
    """Loading torch from the probe's own spec is an import: the guard runs there."""
    code = fake_windows(tmp_path, runtime=False) + (
        "import importlib.util\ns = importlib.util.find_spec('torch')\n"
        "m = importlib.util.module_from_spec(s)\n"
    )
    result = program(code, tmp_path, hook=True)
    assert "MissingDllError" in result.stderr and "MSVCP140.dll" in result.stderr


def test_diagnose_and_doctor_under_the_hook_see_the_real_diagnosis(tmp_path: Path) -> None:
    """With the hook, diagnose() registered folders (the nested ensure) and doctor reported
    torch-not-found (the nested strict ensure raised out of find_spec)."""
    code = (
        fake_windows(tmp_path, runtime=False)
        + LOOKS_UP
        + (
            "import torchguard._platforms.windows.register as reg\n"
            "reg.register = lambda dirs: print('REGISTERED', list(dirs))\n"
            "r = torchguard.diagnose()\nprint('diagnose', [str(f.code) for f in r.blockers][:1])\n"
            "from torchguard._frontends.cli import main\nprint('doctor exit', main(['doctor']))\n"
        )
    )
    result = both(code, tmp_path)
    assert "REGISTERED" not in result.stdout
    assert "diagnose ['missing-dll']" in result.stdout, result.stderr
    assert "MSVCP140.dll is missing" in result.stdout and "torch-not-found" not in result.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="judges the live Linux torch")
def test_pytest_plugin_with_the_hook_installed_runs_the_session(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    import torch\n")
    code = (
        "import sys, pytest\n"
        f"sys.exit(int(pytest.main(['-p', 'no:cacheprovider', '--torchguard', {str(suite)!r}])))\n"
    )
    result = both(code.replace("sys.exit(", "print('exit', "), tmp_path)
    lines = [line for line in result.stdout.splitlines() if line.startswith("torchguard ")]
    assert len(lines) == 1 and "torch 2.4.1 found" in lines[0], result.stdout
    assert "1 passed" in result.stdout and result.stdout.split()[-2:] == ["exit", "0"]


def _eight_threads(call: object) -> list[object]:
    """Call ``call`` from 8 threads released together; each one's result or exception."""
    import threading

    start = threading.Barrier(8)
    outcomes: list[object] = [None] * 8

    def worker(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = call()  # type: ignore[operator]
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "ensure() hung"
    return outcomes


def _slow_analysis(monkeypatch: pytest.MonkeyPatch, outcome: object) -> list[int]:
    """Replace the analysis by a slow one giving ``outcome``; the list counts its runs."""
    import time

    from torchguard._frontends import api as _api

    runs: list[int] = []

    def prepare() -> object:
        runs.append(1)
        time.sleep(0.3)  # long enough for the other 7 threads to arrive
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(_api, "_prepare", prepare)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return runs


def test_eight_threads_get_one_analysis_and_the_same_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torchguard
    from torchguard._report.report import Report

    report = Report(findings=())
    runs = _slow_analysis(monkeypatch, report)
    assert [o is report for o in _eight_threads(torchguard.ensure)] == [True] * 8
    assert len(runs) == 1


def test_eight_threads_get_one_analysis_and_the_same_error(
    monkeypatch: pytest.MonkeyPatch, fake_torch: FakeTorch, tmp_path: Path
) -> None:
    """A failing analysis was run again by every thread that had waited for it."""
    import torchguard
    from torchguard._report.errors import error_for

    site = fake_torch.write(tmp_path / "site")
    report = torchguard.scan([site], clean_windows=True)  # no VC++ runtime: a real error
    error = error_for(report.blockers[0], report)
    assert isinstance(error, torchguard.MissingDllError)
    runs = _slow_analysis(monkeypatch, error)
    assert [o is error for o in _eight_threads(torchguard.ensure)] == [True] * 8
    assert len(runs) == 1


def test_ensure_called_from_inside_its_own_analysis_never_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import torchguard
    from torchguard._frontends import api as _api
    from torchguard._report.report import Report

    inner: list[Report] = []

    def prepare() -> Report:
        inner.append(torchguard.ensure())  # an import hook calling back, say
        return Report(findings=())

    monkeypatch.setattr(_api, "_prepare", prepare)
    thread = threading.Thread(target=torchguard.ensure, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "ensure() waited for itself"
    assert [f.code for f in inner[0].findings] == ["ensure-reentered"]
    assert not inner[0].blocking and torchguard.ensure().ok


SESSION = (
    "import pytest\n"
    "print('exit', int(pytest.main(['-p', 'no:cacheprovider', {args}, {suite!r}])))\n"
)


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_one.py").write_text("def test_one():\n    pass\n")
    return suite


@pytest.mark.parametrize(
    "args", ["'--torchguard'", "'--torchguard-scan=' + str(site)"], ids=["ensure", "scan"]
)
def test_pytest_plugin_fails_open_on_a_torchguard_bug(tmp_path: Path, args: str) -> None:
    """A fault planted inside pefile, met by the real analysis: one header line naming the
    internal error, then the session runs (it ended with INTERNALERROR, exit 3)."""
    code = fake_windows(tmp_path, fault=True) + SESSION.format(
        args=args, suite=str(_suite(tmp_path))
    )
    result = program(code, tmp_path, hook=False)
    assert result.stdout.split()[-2:] == ["exit", "0"], result.stdout + result.stderr
    assert "1 passed" in result.stdout and "INTERNALERROR" not in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("torchguard ")]
    assert len(lines) == 1, result.stdout
    assert "internal error ignored, the session continues" in lines[0]
    assert "planted fault" in lines[0] and "please report this as a torchguard bug" in lines[0]


def test_pytest_plugin_fails_open_on_a_bug_of_its_own(tmp_path: Path) -> None:
    """A fault in the plugin's own code (its header line) is reported, never INTERNALERROR."""
    code = (
        "import torchguard._frontends.pytest_plugin as plugin\n"
        "def boom(report):\n    raise KeyError('planted fault')\n"
        "plugin.verdict = boom\n"
    ) + SESSION.format(args="'--torchguard'", suite=str(_suite(tmp_path)))
    result = program(code, tmp_path, hook=True)
    assert result.stdout.split()[-2:] == ["exit", "0"], result.stdout + result.stderr
    assert "1 passed" in result.stdout and "INTERNALERROR" not in result.stdout
    assert "internal error ignored, the session continues: KeyError" in result.stdout


def test_the_watcher_fails_open_when_torchguard_cannot_be_imported(tmp_path: Path) -> None:
    """A damaged torchguard (here its ``_hook`` module cannot be imported): one line, and
    ``import torch`` behaves as without the hook."""
    code = "import sys\nsys.modules['torchguard._hook'] = None\nimport torch\nprint('after')\n"
    result = both(code, tmp_path)
    assert result.stdout.split() == ["stand-in", "torch", "imported", "after"]
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("torchguard: internal error ignored, import torch continues")
