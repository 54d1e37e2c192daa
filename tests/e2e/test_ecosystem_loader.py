"""The real loader judges torchguard's per-package verdicts: torchvision 0.19.1 over torch 2.4.1.

Each scenario damages a copy of the real install, then runs in fresh Windows processes under
Wine: ``torchguard.diagnose()`` (the prediction for ``import torchvision``) and a plain
``import torch; import torchvision`` (the truth: does it raise, and does torchvision warn that
its image extension failed). Wine's ``warn+module`` output names the module that failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROWS
from wine import WineEnv, failed_module, parse

pytestmark = pytest.mark.e2e

VERDICT = """
import json, torchguard
r = torchguard.diagnose()
p = {x.name: x.to_dict() for x in r.packages}.get("torchvision")
f = [x.to_dict() for x in r.findings if x.package == "torchvision"]
print("TG-JSON " + json.dumps({"package": p, "findings": f, "torch_ok": r.import_torch.ok}))
"""

REAL = """
import json, warnings
out = {"ok": True, "error": None, "warnings": []}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    try:
        import torchvision
        out["nms"] = torchvision.ops.nms(torch.zeros(1, 4), torch.ones(1), 0.5).tolist()
    except Exception as exc:
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
out["warnings"] = [str(w.message)[:300] for w in caught if "image" in str(w.message).lower()]
print("TG-JSON " + json.dumps(out), flush=True)
import os
os._exit(0)  # after a failed torchvision import the interpreter's exit can hang under Wine
"""


def remove(*names: str) -> Callable[[WineEnv, Path], None]:
    def sabotage(env: WineEnv, site: Path) -> None:
        for name in names:
            env.remove(site / "torchvision" / name)

    return sabotage


#: scenario -> (sabotage, predicted status, the DLL the finding names missing or None)
SCENARIOS: dict[str, tuple[Callable[[WineEnv, Path], None], str, str | None]] = {
    "torchvision healthy": (lambda env, site: None, "ok", None),
    "torchvision jpeg8.dll removed": (remove("jpeg8.dll"), "warns", "jpeg8.dll"),
    "torchvision zlib.dll removed": (remove("zlib.dll"), "warns", "zlib.dll"),
    "torchvision _C.pyd removed": (remove("_C.pyd"), "fails", "_c.pyd"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_torchvision_verdict_matches_the_real_import(wine_env: WineEnv, name: str) -> None:
    sabotage, status, missing = SCENARIOS[name]
    site = wine_env.make_scenario_site("eco-" + "".join(c if c.isalnum() else "-" for c in name))
    sabotage(wine_env, site)
    verdict = parse(wine_env.run(VERDICT, site))
    real_run = wine_env.run(REAL, site, env={"WINEDEBUG": "warn+module"})
    real = parse(real_run)
    package = verdict["package"]
    assert isinstance(package, dict), verdict
    findings = verdict["findings"]
    assert isinstance(findings, list)
    blamed = findings[0]["missing"] if findings else None
    wine_module = failed_module(real_run.stderr)
    if real["ok"] and not real["warnings"]:
        truth = "ok"
    elif real["ok"]:
        truth = "warns"
    else:
        truth = "fails"
    ROWS.append(
        {
            "scenario": name,
            "verdict": f"{package['status']}: {blamed or '-'}",
            "predicted": f"import torchvision {package['message']}",
            "real": str(real["error"] or (real["warnings"] or ["ok"])[0])[:160],
            "wine": wine_module or "-",
            "agree": "yes" if truth == package["status"] else "**NO**",
        }
    )
    assert verdict["torch_ok"] is True
    assert package["status"] == status == truth, (package, real)
    assert blamed == missing
    if status == "warns":
        (warning,) = real["warnings"]
        assert warning.startswith("Failed to load image Python extension: 'Could not find module")
        assert "image.pyd' (or one of its dependencies)" in warning
        assert "Could not find module '...\\image.pyd' (or one of its dependencies)" in str(
            package["message"]
        )
        assert wine_module == missing
    if status == "fails":
        assert "operator torchvision::nms does not exist" in str(real["error"])
