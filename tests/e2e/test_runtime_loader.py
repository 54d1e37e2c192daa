"""The real loader judges the VC++ runtime verdicts: torch 2.9.1 (a 14.4x toolset) under Wine.

python.org's CPython 3.11.9 ships ``vcruntime140.dll`` 14.38 beside python.exe, and python.exe
loads it at start-up. A second pristine site-packages holds the real torch 2.9.1 wheel. With
Wine's defaults, ``msvcp140.dll`` is Wine's own; with ``WINEDLLOVERRIDES`` forcing Microsoft's
runtime DLLs native (``msvcp140,vcruntime140,vcruntime140_1=n,b``) and Microsoft's own
``msvcp140.dll`` of a Redistributable placed in System32, c10.dll's initialiser runs on
Microsoft's code and fails on a pre-14.40 ``msvcp140.dll`` the way Windows does (Wine reports
WinError 998 where Windows reports 1114). torchguard's prediction, in the same Windows
process, must match.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROWS
from realwheels import vc_runtime_dir, wheel
from test_real_loader import ENSURED, REAL, VERDICT, outcome_text
from wine import WineEnv, failed_module, parse, pinned_wheels, provision_site

pytestmark = pytest.mark.e2e

TORCH = "2.9.1"
#: torch's requirements (the pinned pure-Python wheels of the Wine tier; sympy >= 1.13.3).
DEPENDENCIES = (
    "typing_extensions", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
    "pefile", "packaging", "platformdirs",
)  # fmt: skip
NATIVE = "mscoree,mshtml=;msvcp140,vcruntime140,vcruntime140_1=n,b"
#: What Wine says when a DLL's initialiser fails (ERROR_NOACCESS); Windows says 1114.
WINE_INIT_FAILED = 998


@pytest.fixture(scope="module")
def torch_site(wine_env: WineEnv) -> Path:
    wheels = [wheel("torch", TORCH), wheel("sympy", "1.14.0"), *pinned_wheels(*DEPENDENCIES)]
    return provision_site(wine_env, f"torch{TORCH}", wheels)


@pytest.fixture(scope="module")
def redist(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("redist")
    return lambda version: vc_runtime_dir(root / version, version) / "msvcp140.dll"


#: scenario -> (msvc-runtime version whose msvcp140.dll replaces System32's, or None for
#: Wine's own; WINEDLLOVERRIDES; does the real import work?)
SCENARIOS: dict[str, tuple[str | None, str | None, bool]] = {
    "torch 2.9.1 on python.org's own vcruntime140 14.38 (Wine's msvcp140)": (None, None, True),
    "torch 2.9.1, Microsoft's msvcp140 14.44 forced native": ("14.44.35112", NATIVE, True),
    "torch 2.9.1, Microsoft's msvcp140 14.34 forced native": ("14.34.31931", NATIVE, False),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_runtime_verdict_matches_the_real_loader(
    wine_env: WineEnv, torch_site: Path, redist: Callable[[str], Path], name: str
) -> None:
    runtime, overrides, works = SCENARIOS[name]
    site = wine_env.make_scenario_site(f"runtime-{runtime or 'wine'}", torch_site)
    env = {"WINEDLLOVERRIDES": overrides} if overrides else {}
    placed: contextlib.AbstractContextManager[None] = (
        wine_env.replace_system_dll("msvcp140.dll", redist(runtime))
        if runtime
        else contextlib.nullcontext()
    )
    with placed:
        verdict = parse(wine_env.run(VERDICT, site, env=env))
        real_run = wine_env.run(REAL, site, env={**env, "WINEDEBUG": "warn+module"})
        real = parse(real_run)
        ensured = parse(wine_env.run(ENSURED, site, env=env))
    plain = verdict["plain"]
    assert isinstance(plain, dict)
    ROWS.append(
        {
            "scenario": name,
            "verdict": "ok" if verdict["ok"] else f"{verdict['code']}: {verdict['missing']}",
            "predicted": outcome_text(plain),
            "real": outcome_text(real),
            "wine": (None if real["ok"] else failed_module(real_run.stderr)) or "-",
            "agree": "yes" if works == verdict["ok"] == plain["ok"] == real["ok"] else "**NO**",
        }
    )
    assert real["ok"] is works, f"the real import under Wine gave {real}: {real_run.stderr[-2000:]}"
    if works:
        assert verdict["ok"], f"a false alarm on a working import: {verdict['codes']}"
        assert plain["ok"] and ensured["ok"], (plain, ensured)
        return
    assert (real["winerror"], real["dll"]) == (WINE_INIT_FAILED, "c10.dll")
    assert (verdict["code"], verdict["missing"]) == ("runtime-too-old", "msvcp140.dll")
    assert ensured.get("code") == "runtime-too-old" and ensured.get("missing") == "msvcp140.dll"
    # Windows says 1114 (ERROR_DLL_INIT_FAILED) where Wine says 998, naming the same DLL.
    assert (plain["ok"], plain["winerror"], plain["dll"]) == (False, 1114, "c10.dll"), plain
