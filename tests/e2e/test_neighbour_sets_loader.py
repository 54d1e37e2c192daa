"""check's verdicts on issue 24's four requirement sets, judged by the real Windows loader
under Wine (``tests/neighbour_sets/``; the verdicts are the real-wheel tier's,
``test_neighbour_sets.py``).

The wheels check resolved for each set (from its cache) are installed as pip does into a copy
of the tier's torch 2.9.1 site (the CPU build every set resolves to, from PyPI): ctranslate2
4.8.5, onnxruntime-gpu 1.15.1 (with the numpy 1.26.4 its set resolves), bitsandbytes 0.45.2
and triton-windows 3.5.1.post24. Each neighbour's native load is then done as its package does
it, in both import orders, each order in its own Windows process (a DLL once loaded stays, so
one process cannot judge both): ctranslate2's ``ctranslate2.dll`` then its by-name
``LoadLibraryA("cublas64_12.dll")``; onnxruntime's CUDA provider with
``LOAD_WITH_ALTERED_SEARCH_PATH``; triton's ``libtriton`` import; bitsandbytes' own choice of
binary (``import bitsandbytes`` imports torch itself, so it has one order only). A finding
check names for a package must match a load of that package that fails (in both orders for
``missing-dll``, in one for ``neighbour-load-order``); a package without a finding must load in
both. Only loads or WinError 126 are judged: Wine binds a missing import to a stub, so it cannot
judge WinError 127.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROWS
from neighbour_sets import SETS, Verdict, check
from realwheels import CACHE, wheel
from wine import WineEnv, _install_wheel, parse, pinned_wheels, provision_site

pytestmark = pytest.mark.e2e

TORCH = "2.9.1"
DEPENDENCIES = (
    "typing_extensions", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec",
    "pefile", "packaging", "platformdirs",
)  # fmt: skip
#: The neighbour each set is about, by its distribution's wheel name, and the set whose
#: resolution supplies it (numpy: the onnxruntime-gpu set's 1.26.4, which both
#: onnxruntime 1.15.1 and bitsandbytes 0.45.2 import).
NEIGHBOURS = {
    "faster-whisper": ("ctranslate2", "pyyaml"),
    "onnxruntime-gpu": ("onnxruntime_gpu", "numpy"),
    "kohya-bitsandbytes": ("bitsandbytes",),
    "comfyui-triton": ("triton_windows",),
}
PACKAGE = {
    "faster-whisper": "ctranslate2",
    "onnxruntime-gpu": "onnxruntime-gpu",
    "kohya-bitsandbytes": "bitsandbytes",
    "comfyui-triton": "triton-windows",
}

SCRIPT = r"""
import ctypes, json, ntpath, os
from ctypes import wintypes
k = ctypes.WinDLL("kernel32", use_last_error=True)
k.LoadLibraryExW.restype = wintypes.HMODULE
k.LoadLibraryExW.argtypes = [wintypes.LPCWSTR, wintypes.HANDLE, wintypes.DWORD]
k.LoadLibraryA.restype = wintypes.HMODULE
k.LoadLibraryA.argtypes = [ctypes.c_char_p]
def outcome(handle):
    return 0 if handle else ctypes.get_last_error()
def raised(e):
    return getattr(e, "winerror", None) or type(e).__name__ + ": " + str(e)[:200]
site = {site!r}
out = {{}}
def neighbours():
    try:
        import onnxruntime
        out["ort_import"] = 0
    except Exception as e:
        out["ort_import"] = raised(e)
    capi = ntpath.join(site, "onnxruntime", "capi")
    out["ort_provider"] = outcome(  # as onnxruntime loads its CUDA provider
        k.LoadLibraryExW(ntpath.join(capi, "onnxruntime_providers_cuda.dll"), None, 0x8))
    try:
        import ctranslate2  # its __init__ loads every DLL in its folder by full path
        out["ct2_import"] = 0
    except Exception as e:
        out["ct2_import"] = raised(e)
    out["ct2_cublas"] = outcome(k.LoadLibraryA(b"cublas64_12.dll"))  # its first CUDA call
    try:
        from triton._C import libtriton
        out["triton"] = 0
    except Exception as e:
        out["triton"] = raised(e)
if {torch_first!r}:
    import torch
    out["torch"] = torch.__version__
    neighbours()
else:
    neighbours()
    import torch
    out["torch"] = torch.__version__
import bitsandbytes.cextension as c  # imports torch itself: one order only
out["bnb"] = ntpath.basename(c.lib._lib._name) if c.lib is not None else None
print("TG-JSON " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def verdicts() -> dict[str, Verdict]:
    return {name: check(name, CACHE) for name in SETS}


@pytest.fixture(scope="module")
def site(wine_env: WineEnv, verdicts: dict[str, Verdict]) -> Path:
    wheels = [wheel("torch", TORCH), wheel("sympy", "1.14.0"), *pinned_wheels(*DEPENDENCIES)]
    torch_site = provision_site(wine_env, f"torch{TORCH}", wheels)
    scenario = wine_env.make_scenario_site("neighbour-sets", torch_site)
    prefix = wine_env.to_windows(scenario.parent)
    for name, dists in NEIGHBOURS.items():
        for dist in dists:
            (found,) = [w for w in verdicts[name].wheels if w.startswith(f"{dist}-")]
            _install_wheel(CACHE / found, scenario, scenario.parent, prefix)
    return scenario


def _judge(
    package: str, findings: tuple[tuple[str, str, str, str], ...], failing: list[bool]
) -> bool:
    """check's findings for ``package`` against whether its load failed in each order."""
    codes = {code for code, _, pkg, _ in findings if pkg == package}
    if not codes:
        return not any(failing)
    if codes == {"missing-dll"}:
        return all(failing)
    if codes == {"neighbour-load-order"}:
        return any(failing) and not all(failing)
    return False


def test_each_verdict_matches_the_real_loader(
    wine_env: WineEnv, site: Path, verdicts: dict[str, Verdict]
) -> None:
    windows = wine_env.to_windows(site)
    real = {
        order: parse(
            wine_env.run(SCRIPT.format(site=windows, torch_first=order == "torch first"), site)
        )
        for order in ("neighbour first", "torch first")
    }
    first, after = real["neighbour first"], real["torch first"]
    loads = {
        "faster-whisper": ("ct2_cublas", "ct2_import"),
        "onnxruntime-gpu": ("ort_provider", "ort_import"),
        "comfyui-triton": ("triton",),
    }
    rows = []
    for name in SETS:
        verdict = verdicts[name]
        package = PACKAGE[name]
        said = [f"{code} {missing}".strip() for code, _, pkg, missing in verdict.findings]
        if name == "kohya-bitsandbytes":
            failing = [
                first["bnb"] != "libbitsandbytes_cpu.dll",
                after["bnb"] != "libbitsandbytes_cpu.dll",
            ]
            seen = f"bitsandbytes loads {after['bnb']} (torch 2.9.1+cpu: no CUDA binary asked for)"
        else:
            keys = loads[name]
            failing = [first[keys[0]] != 0, after[keys[0]] != 0]
            seen = "; ".join(
                f"{key}: neighbour first {first[key]}, torch first {after[key]}" for key in keys
            )
        agree = _judge(package, verdict.findings, failing)
        rows.append((name, agree))
        ROWS.append(
            {
                "scenario": f"set {name} (check --python 3.11)",
                "verdict": f"exit {verdict.exit_code}, " + (", ".join(said) or "no finding"),
                "predicted": "fails in both orders" if said else "loads in both orders",
                "real": seen,
                "wine": "-",
                "agree": "yes" if agree else "**NO**",
            }
        )
    assert first["torch"] == after["torch"] == "2.9.1+cpu", real
    # the packages import in both orders: only their CUDA loads are in question
    imports = [(first[key], after[key]) for key in ("ct2_import", "ort_import")]
    assert imports == [(0, 0), (0, 0)], real
    assert rows == [(name, True) for name in SETS], real
