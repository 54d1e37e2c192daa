"""A package's own older msvcp140.dll loaded before torch, judged by the real loader under Wine.

The real PyQt5-Qt5 5.15.2 wheel ships Microsoft's ``msvcp140.dll`` 14.26 in ``PyQt5\\Qt5\\bin``
beside ``Qt5Core.dll``, which imports it by name. A tiny package, ``qtfirst``, does what
``import PyQt5.QtCore`` does: it registers ``Qt5\\bin`` and loads ``Qt5Core.dll`` by full path,
so the loader binds Qt5\\bin's copy. torch 2.9.1 (built with the 14.4x toolset) is imported
after it, with Microsoft's current ``msvcp140.dll`` 14.44 in System32 and Microsoft's runtime
DLLs forced native (Wine's own would hide the difference). Wine says WinError 998 where Windows
says 1114 when c10.dll's initialiser fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROWS
from realwheels import vc_runtime_dir, wheel
from test_runtime_loader import DEPENDENCIES, NATIVE, TORCH, WINE_INIT_FAILED
from wine import WineEnv, _install_wheel, failed_module, parse, pinned_wheels, provision_site

pytestmark = pytest.mark.e2e

#: What a scenario process printed (its TG-JSON line).
Result = dict[str, Any]

QT = ("PyQt5-Qt5", "5.15.2")
CURRENT = "14.44.35112"

#: ``import PyQt5.QtCore`` in short: Qt5\bin registered, then Qt5Core.dll loaded by full path.
QTFIRST = '''"""Loads PyQt5-Qt5's Qt5Core.dll as PyQt5.QtCore does (tests only)."""
import ctypes, os
BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "PyQt5", "Qt5", "bin")
_dirs = os.add_dll_directory(BIN)
core = ctypes.WinDLL(os.path.join(BIN, "Qt5Core.dll"))
'''

#: Which msvcp140.dll the process holds, with torchguard's live view and the real outcome.
COMMON = r"""
import ctypes, json, ntpath, re
from ctypes import wintypes
def msvcp140():
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.GetModuleHandleW.restype = wintypes.HMODULE
    k32.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    handle = k32.GetModuleHandleW("msvcp140.dll")
    if not handle:
        return None
    buf = ctypes.create_unicode_buffer(1024)
    k32.GetModuleFileNameW(handle, buf, 1024)
    return buf.value.lower()
def import_torch():
    try:
        import torch
        return {"ok": bool((torch.ones(2) * 2).sum() == 4), "winerror": None, "dll": None}
    except OSError as exc:
        m = re.search(r'Error loading "([^"]+)"', str(exc))
        return {"ok": False, "winerror": exc.winerror,
                "dll": ntpath.basename(m.group(1)).lower() if m else None}
def stale(report):
    return [[str(f.severity), f.code, f.package, (f.path or "").lower(), f.message]
            for f in report.findings if f.code == "runtime-too-old"]
"""

PREDICT = """
import torchguard
before = torchguard.diagnose()
seen = {"before": {"ok": before.ok, "stale": stale(before),
                   "preloads": [p.path.lower() for p in before.preloads]}}
import qtfirst
after = torchguard.diagnose()
plain = after.import_torch_without_torchguard
seen["after"] = {"ok": after.ok, "stale": stale(after), "msvcp140": msvcp140(),
                 "plain": plain.to_dict() if plain else None}
print("TG-JSON " + json.dumps(seen))
"""

QT_FIRST = """
import qtfirst
held = msvcp140()
print("TG-JSON " + json.dumps({**import_torch(), "msvcp140": held}))
"""

TORCH_FIRST = """
out = import_torch()
import qtfirst
print("TG-JSON " + json.dumps({**out, "msvcp140": msvcp140()}))
"""

ENSURED = """
import torchguard
report = torchguard.ensure()
preloads = [[p.path.lower(), p.done, p.error] for p in report.preloads]
import qtfirst
held = msvcp140()
print("TG-JSON " + json.dumps({**import_torch(), "msvcp140": held, "preloads": preloads}))
"""

#: scenario -> (program, extra environment, does the real import work?)
SCENARIOS: dict[str, tuple[str, dict[str, str], bool]] = {
    "PyQt5-Qt5 (msvcp140 14.26) imported first, then torch 2.9.1": (QT_FIRST, {}, False),
    "torch 2.9.1 imported first, then PyQt5-Qt5": (TORCH_FIRST, {}, True),
    "ensure(), then PyQt5-Qt5, then torch 2.9.1": (ENSURED, {}, True),
    "ensure() with TORCHGUARD_VCRUNTIME=keep, then PyQt5-Qt5, then torch 2.9.1": (
        ENSURED,
        {"TORCHGUARD_VCRUNTIME": "keep"},
        False,
    ),
}


class Stage:
    def __init__(self, env: WineEnv, site: Path, system_copy: Path) -> None:
        self.env, self.site, self.system_copy = env, site, system_copy

    def run(self, code: str, extra: dict[str, str] | None = None) -> tuple[Result, str]:
        env = {"WINEDLLOVERRIDES": NATIVE, "WINEDEBUG": "warn+module", **(extra or {})}
        with self.env.replace_system_dll("msvcp140.dll", self.system_copy):
            result = self.env.run(COMMON + code, self.site, env=env, timeout=600)
        return parse(result), result.stderr


@pytest.fixture(scope="module")
def stage(wine_env: WineEnv, tmp_path_factory: pytest.TempPathFactory) -> Stage:
    """torch 2.9.1's pristine site (shared with the runtime scenarios) plus the real PyQt5-Qt5
    wheel, installed as pip does, and ``qtfirst``."""
    wheels = [wheel("torch", TORCH), wheel("sympy", "1.14.0"), *pinned_wheels(*DEPENDENCIES)]
    torch_site = provision_site(wine_env, f"torch{TORCH}", wheels)
    site = wine_env.make_scenario_site("stale-runtime", torch_site)
    _install_wheel(wheel(*QT), site, site.parent, wine_env.to_windows(site.parent))
    (site / "qtfirst").mkdir()
    (site / "qtfirst" / "__init__.py").write_text(QTFIRST, encoding="utf-8")
    runtime = vc_runtime_dir(tmp_path_factory.mktemp("redist") / CURRENT, CURRENT)
    return Stage(wine_env, site, runtime / "msvcp140.dll")


@pytest.fixture(scope="module")
def prediction(stage: Stage) -> Result:
    seen, _ = stage.run(PREDICT)
    return seen


#: Wine's ``WINEDEBUG=warn+module`` line for a DLL whose initialiser failed (DllMain said no).
INIT_FAILED = re.compile(r':warn:module:process_attach Initialization of L"([^"]+)" failed')


def wine_failure(stderr: str) -> str | None:
    """The module Wine says failed: a missing or unmappable one, else one that failed to
    initialise (which :func:`wine.failed_module` does not report)."""
    culprit = failed_module(stderr)
    if culprit is not None:
        return culprit
    match = INIT_FAILED.search(stderr)
    return f"{match.group(1).lower()} (initialisation failed)" if match else None


def qt_copy(path: object) -> bool:
    return str(path).lower().endswith("\\pyqt5\\qt5\\bin\\msvcp140.dll")


def system_copy(path: object) -> bool:
    return str(path).lower().endswith("\\system32\\msvcp140.dll")


def outcome(result: Result) -> str:
    if result["ok"]:
        return "ok"
    return f"WinError {result['winerror']} naming {result['dll']}"


def qt_warning(diagnosis: Result) -> list[str] | None:
    """The runtime-too-old finding about a distribution's own copy, if torchguard gave one."""
    found = [f for f in diagnosis["stale"] if f[2] is not None]
    return found[0] if len(found) == 1 else None


def verdict_text(prediction: Result) -> str:
    warning = qt_warning(prediction["before"])
    if warning is None:
        return "no warning"
    version = re.search(r"msvcp140\.dll (\S+) \(", warning[4])
    return (
        f"{warning[0]} {warning[1]}: {warning[2]}'s Qt5\\bin\\msvcp140.dll "
        f"{version.group(1) if version else '?'}"
    )


def predicted(code: str, prediction: Result, real: Result) -> tuple[str, bool]:
    """torchguard's prediction for that order: the offline warning before any import, the live
    diagnosis once PyQt5-Qt5 is loaded, and what ensure() reports it preloaded."""
    warning = qt_warning(prediction["before"])
    if warning is None:
        return "ok (no warning)", True
    plain = prediction["after"]["plain"]
    assert isinstance(plain, dict)
    if code == QT_FIRST:
        return f"warning; once loaded: {outcome(plain)}", bool(plain["ok"])
    if code == TORCH_FIRST:
        return "ok (the warning: torch imported first works)", "first works" in warning[4]
    preloads = real["preloads"]
    assert isinstance(preloads, list)
    if any(done and system_copy(path) for path, done, _ in preloads):
        return "ensure() preloads System32's msvcp140.dll: ok", True
    return f"ensure() preloads nothing: {outcome(plain)}", bool(plain["ok"])


def test_the_offline_warning_names_the_package_the_copy_and_the_order(
    prediction: Result,
) -> None:
    before, after = prediction["before"], prediction["after"]
    assert before["ok"], before  # a warning: the order decides, nothing is blocked
    warning = qt_warning(before)
    assert warning is not None, before
    severity, code, package, path, message = warning
    assert (severity, code, package) == ("warning", "runtime-too-old", "pyqt5-qt5")
    assert qt_copy(path) and "14.26" in message and "imported before torch" in message
    assert "torch imported first works" in message and "(Qt5Core.dll imports it)" in message
    preloads = before["preloads"]
    assert isinstance(preloads, list) and len(preloads) == 1 and system_copy(preloads[0])
    # Once qtfirst has loaded Qt5\bin's copy, the live diagnosis proves the failure.
    assert qt_copy(after["msvcp140"]), after
    plain = after["plain"]
    assert isinstance(plain, dict)
    assert (plain["ok"], plain["winerror"], plain["dll"]) == (False, 1114, "c10.dll"), plain
    assert not after["ok"] and any(s[0] == "error" for s in after["stale"])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_load_order_matches_the_real_loader(stage: Stage, prediction: Result, name: str) -> None:
    code, extra, works = SCENARIOS[name]
    real, stderr = stage.run(code, extra)
    said, predicted_ok = predicted(code, prediction, real)
    ROWS.append(
        {
            "scenario": f"{name} (Microsoft's msvcp140 {CURRENT} in System32, forced native)",
            "verdict": verdict_text(prediction),
            "predicted": said,
            "real": outcome(real),
            "wine": (None if real["ok"] else wine_failure(stderr)) or "-",
            "agree": "yes" if predicted_ok is works is real["ok"] else "**NO**",
        }
    )
    assert real["ok"] is works, f"the real run gave {real}: {stderr[-2000:]}"
    assert predicted_ok is works, said
    if not works:
        assert (real["winerror"], real["dll"]) == (WINE_INIT_FAILED, "c10.dll"), real
        assert wine_failure(stderr) == "c10.dll (initialisation failed)", stderr[-2000:]
        assert qt_copy(real["msvcp140"]), real
    elif name.startswith("ensure"):
        ((path, done, error),) = real["preloads"]
        assert system_copy(path) and done and error is None, real["preloads"]
        assert system_copy(real["msvcp140"]), real  # PyQt5-Qt5 bound System32's copy too
    if "keep" in name:
        assert real["preloads"] == [], real["preloads"]
