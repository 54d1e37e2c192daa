"""OMP: Error #15 judged by the real loader and the vendors' own runtimes, under Wine.

torch 2.4.1 (which starts ``torch\\lib\\libiomp5md.dll`` during ``import torch``) beside the
real ``mkl`` 2021.4.0 and ``intel-openmp`` 2021.4.0 wheels installed as pip does (their DLLs in
``<prefix>\\Library\\bin``). MKL's threading layer loads ``Library\\bin\\libiomp5md.dll`` by full
path: a second runtime when torch's started first. Each scenario runs torchguard's prediction
and the real program in fresh Windows processes; an abort is exit code 3 with Intel's
``OMP: Error #15`` on stderr.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROWS
from realwheels import wheel
from wine import WineEnv, _install_wheel, parse

pytestmark = pytest.mark.e2e

MKL = (("mkl", "2021.4.0"), ("intel-openmp", "2021.4.0"))
OTHER = "otheromp"

#: Registers Library\bin as a conda Python (and numpy built with MKL) would, so MKL finds its
#: own layers in every order, with torchguard or without.
SETUP = """
import os, ctypes, json
BIN = {bin!r}
OTHER = {other!r}
os.add_dll_directory(BIN)
def mkl_call():
    mkl = ctypes.CDLL(os.path.join(BIN, "mkl_rt.1.dll"))
    n = 128
    a = (ctypes.c_double * (n * n))(*([1.0] * (n * n)))
    c = (ctypes.c_double * (n * n))()
    mkl.cblas_dgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_double, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_void_p, ctypes.c_int]
    mkl.cblas_dgemm(101, 111, 111, n, n, n, 1.0, a, n, a, n, 0.0, c, n)
    return c[0] == n
def torch_ops():
    import torch
    a = torch.ones(256, 256)
    return bool((a @ a).sum().item() == 256 ** 3)
def other_call():
    other = ctypes.CDLL(OTHER)
    return other.omp_get_max_threads() > 0
def verdict(r):
    found = [f for f in r.findings if f.code == "openmp-conflict"]
    return {{"openmp": [[str(f.severity), f.package, (f.path or "").lower()] for f in found],
            "preloads": [[p.path.lower(), p.done] for p in r.preloads],
            "torch_ok": bool(r.import_torch and r.import_torch.ok)}}
"""

PREDICT = """
import torchguard
print("TG-JSON " + json.dumps(verdict(torchguard.diagnose())))
"""

TORCH_THEN_MKL = """
ok = torch_ops() and mkl_call()
print("TG-JSON " + json.dumps({"ok": ok}))
"""

MKL_THEN_TORCH = """
import torchguard
first = mkl_call()
seen = verdict(torchguard.diagnose())
ok = first and torch_ops() and mkl_call()
print("TG-JSON " + json.dumps({"ok": ok, "verdict": seen}))
"""

GUARDED = """
import torchguard
report = torchguard.ensure()
ok = torch_ops() and mkl_call()
print("TG-JSON " + json.dumps({"ok": ok, "verdict": verdict(report)}))
"""

TORCH_THEN_OTHER = """
ok = torch_ops() and other_call()
print("TG-JSON " + json.dumps({"ok": ok}))
"""

OTHER_THEN_TORCH = """
import torchguard
first = other_call()
try:
    torchguard.ensure()
    raised = None
except torchguard.TorchDllError as exc:
    raised = exc.code
print("TG-JSON " + json.dumps({"raised": raised}), flush=True)
ok = torch_ops()
print("TG-JSON " + json.dumps({"ok": ok}))
"""

ABORT = "OMP: Error #15"


class Setup:
    def __init__(self, env: WineEnv, site: Path, prefix: Path, other: Path) -> None:
        self.env, self.site, self.prefix, self.other = env, site, prefix, other
        self.bin = env.to_windows(prefix / "Library" / "bin")

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        setup = SETUP.format(bin=self.bin, other=self.env.to_windows(self.other))
        return self.env.run(setup + code, self.site, timeout=600)


@pytest.fixture(scope="module")
def setup(wine_env: WineEnv) -> Iterator[Setup]:
    """torch 2.4.1 + mkl + intel-openmp as pip installs them, and a package with its own
    differently named KMP runtime (intel-openmp's, renamed, as delvewheel renames)."""
    site = wine_env.make_scenario_site("openmp")
    prefix = site.parent / "prefix"
    for project, version in MKL:
        _install_wheel(wheel(project, version), site, prefix, wine_env.to_windows(prefix))
    other_dir = site / OTHER
    other_dir.mkdir()
    runtime = other_dir / "libomp-5f3a2b1c.dll"
    shutil.copyfile(prefix / "Library" / "bin" / "libiomp5md.dll", runtime)
    _other_user(site, runtime)
    yield Setup(wine_env, site, prefix, runtime)


def _other_user(site: Path, runtime: Path) -> None:
    """A dist whose binary imports the renamed runtime by name (what starts it when used)."""
    import base64
    import hashlib

    from pe_builder import build_pe

    user = site / OTHER / "_core.cp311-win_amd64.pyd"
    user.write_bytes(
        build_pe(
            [runtime.name, "KERNEL32.dll"],
            symbols={runtime.name: ["omp_get_max_threads"], "KERNEL32.dll": ["GetLastError"]},
        )
    )
    info = site / f"{OTHER}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {OTHER}\nVersion: 1.0\n")
    rows = []
    for path in (runtime, user):
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{OTHER}/{path.name},sha256={digest},{len(data)}")
    rows += [f"{OTHER}-1.0.dist-info/METADATA,,", f"{OTHER}-1.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def _row(scenario: str, verdict: str, predicted: str, real: str, agree: bool) -> None:
    ROWS.append(
        {
            "scenario": scenario,
            "verdict": verdict,
            "predicted": predicted,
            "real": real,
            "wine": "-",
            "agree": "yes" if agree else "**NO**",
        }
    )


def _real(rc: int, stderr: str) -> str:
    return "aborts: OMP: Error #15 (exit 3)" if ABORT in stderr else f"exit {rc}"


def _aborted(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode == 3 and ABORT in result.stderr


def test_torch_then_mkl_aborts_and_is_predicted(setup: Setup) -> None:
    verdict = parse(setup.run(PREDICT))
    sibling = (setup.bin + "\\libiomp5md.dll").lower()
    predicted = [f for f in verdict["openmp"] if f[1] == "mkl"] == [["warning", "mkl", sibling]]
    real = setup.run(TORCH_THEN_MKL)
    _row(
        "torch 2.4.1, then MKL 2021.4 (pip mkl + intel-openmp)",
        "openmp-conflict warning (mkl): torch first aborts",
        "aborts at MKL's first call",
        _real(real.returncode, real.stderr),
        predicted and _aborted(real),
    )
    assert predicted, verdict
    assert _aborted(real), real.stderr[-2000:]
    assert verdict["preloads"] == [[sibling, False]]


def _works_as_said(
    setup: Setup, code: str, row: tuple[str, str, str], said: Callable[[Any], bool]
) -> None:
    """Run ``code``, which prints torchguard's ``verdict`` and whether torch and MKL both
    worked (``ok``); torchguard must have ``said`` so, and the program must run."""
    result = setup.run(code)
    printed: dict[str, Any] = parse(result)
    right = said(printed["verdict"])
    works = result.returncode == 0 and printed["ok"] is True
    _row(*row, _real(result.returncode, result.stderr), right and works)
    assert right, printed
    assert works, result.stderr[-2000:]


def test_mkl_first_works_and_torchguard_says_so(setup: Setup) -> None:
    _works_as_said(
        setup,
        MKL_THEN_TORCH,
        (
            "MKL 2021.4 first, then torch 2.4.1",
            "no openmp-conflict (live: torch binds to MKL's started runtime)",
            "works",
        ),
        lambda verdict: (
            [f for f in verdict["openmp"] if f[1] == "mkl"] == [] and verdict["preloads"] == []
        ),
    )


def test_ensure_preloads_and_the_aborting_order_runs(setup: Setup) -> None:
    sibling = (setup.bin + "\\libiomp5md.dll").lower()
    _works_as_said(
        setup,
        GUARDED,
        (
            "ensure(), then torch 2.4.1, then MKL 2021.4",
            "preloads Library\\bin\\libiomp5md.dll",
            "works (one runtime)",
        ),
        lambda verdict: verdict["preloads"] == [[sibling, True]],
    )


def test_two_differently_named_runtimes_abort_and_are_predicted(setup: Setup) -> None:
    verdict = parse(setup.run(PREDICT))
    other = setup.env.to_windows(setup.other).lower()
    predicted = ["error", OTHER, other] in verdict["openmp"] and verdict["torch_ok"] is True
    real = setup.run(TORCH_THEN_OTHER)
    _row(
        f"torch 2.4.1, then {OTHER}'s renamed runtime",
        f"openmp-conflict error ({OTHER}); import torch itself ok",
        "aborts when both run",
        _real(real.returncode, real.stderr),
        predicted and _aborted(real),
    )
    assert predicted, verdict
    assert _aborted(real), real.stderr[-2000:]


def test_runtime_already_started_makes_ensure_raise(setup: Setup) -> None:
    result = setup.run(OTHER_THEN_TORCH)
    raised = parse(result)["raised"]
    _row(
        f"{OTHER}'s runtime started, then ensure(); import torch",
        f"ensure() raises {raised}",
        "import torch aborts",
        _real(result.returncode, result.stderr),
        raised == "openmp-conflict" and _aborted(result),
    )
    assert raised == "openmp-conflict"
    assert _aborted(result), result.stderr[-2000:]
