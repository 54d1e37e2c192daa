"""Real-wheel tier: `pip install mkl` judged for a Windows venv holding the real torch 2.4.1.

The venv is the real torch 2.4.1 cp311 win_amd64 wheel's loader-relevant files
(``gpuwheels.torch_tree``, unpacked once per test process, hard-linked); pip's report is what
``pip install mkl`` resolves to on Windows (mkl 2021.4.0 with ``intel-openmp==2021.*`` and
``tbb==2021.*``), each pointing at the real cached wheel, read in place. The overlay and the offline Windows
judgement are the real ones (issue 25: a requirement set that adds a conflicting OpenMP
runtime).

What the wheels say: mkl's ``mkl_intel_thread.1.dll`` loads intel-openmp's
``Library\\bin\\libiomp5md.dll`` by full path, another file than torch's ``torch\\lib`` copy:
``import torch`` then MKL's first threaded call aborts with OMP: Error #15 (Wine-judged,
``tests/e2e/test_openmp_loader.py``). torch's imports all bind to MKL's copy, so ``ensure()``
loads it first and the abort never happens: a warning the install brings, said but not
refused (``import torch`` itself works; an error must be a proof).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpuwheels import _place, torch_tree
from realwheels import wheel
from test_env_windows import FakePip, Venv, entry, report

from torchguard._frontends import env_alternatives, env_resolve, env_target, pip_front
from torchguard._frontends.env_check import check_env
from torchguard._frontends.env_target import Installed
from torchguard._frontends.env_text import render_env
from torchguard._report.colour import Paint

pytestmark = pytest.mark.realwheel

#: What `pip install mkl` resolves to for Windows x64 (mkl requires intel-openmp==2021.*
#: and tbb==2021.*; 2021.13.1 is tbb's last 2021 release).
MKL_SET = (
    ("mkl", "2021.4.0", True),
    ("intel-openmp", "2021.4.0", False),
    ("tbb", "2021.13.1", False),
)


def torch_venv(root: Path) -> Venv:
    """A Windows venv whose site-packages holds the real torch 2.4.1 (hard links)."""
    venv = Venv(root)
    base = torch_tree("2.4.1")
    files: list[str] = []
    for path in base.rglob("*"):
        if path.is_file() and path.name != ".complete":
            target = venv.site / path.relative_to(base)
            _place(path, target)
            files.append(str(target))
    (metadata,) = venv.site.glob("torch-2.4.1.dist-info/METADATA")
    requires = tuple(
        line.split(": ", 1)[1]
        for line in metadata.read_text(encoding="utf-8").splitlines()
        if line.startswith("Requires-Dist: ")
    )
    venv.dists["torch"] = Installed("torch", "2.4.1", requires, tuple(files))
    return venv


def mkl_report() -> str:
    return report(
        *(
            entry(name, version, wheel(name, version).as_uri(), asked)
            for name, version, asked in MKL_SET
        )
    )


@pytest.fixture
def mkl_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Venv:
    """The venv, the probe saying win32 and pip's dry run answering ``pip install mkl``."""
    venv = torch_venv(tmp_path / "venv")
    target = venv.target()
    monkeypatch.setattr(env_target, "probe", lambda python: target)
    monkeypatch.setattr(env_resolve, "run_watched", FakePip(mkl_report()))
    monkeypatch.setattr(env_alternatives, "_unreachable", lambda url: "no network in this test")
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(tmp_path / "facts"))
    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    monkeypatch.delenv("TORCHGUARD_OPENMP", raising=False)
    return venv


def test_pip_install_mkl_beside_torch_241_warns_and_is_not_refused(
    mkl_case: Venv, tmp_path: Path
) -> None:
    before = mkl_case.snapshot()
    result = check_env(["mkl"], cache=str(tmp_path / "cache"))
    assert [c.line for c in result.changes] == [
        "mkl 2021.4.0 (new)",
        "intel-openmp 2021.4.0 (new)",
        "tbb 2021.13.1 (new)",
    ]
    # import torch itself works after the install: nothing proves a failure, nothing refused
    assert result.report is not None and result.report.ok
    assert result.safe and result.breaks == [] and result.alternatives == []
    (warning,) = result.warnings
    assert warning.code == "openmp-conflict"
    sibling = "C:\\venv\\Library\\bin\\libiomp5md.dll"
    assert f"{sibling} (intel-openmp==2021.4.0) by full path" in warning.message
    assert "torch\\lib\\libiomp5md.dll (torch==2.4.1)" in warning.message
    assert "mkl_intel_thread.1.dll" in warning.message and "OMP: Error #15" in warning.message
    assert f"torchguard.ensure() prevents this by loading {sibling} before torch" in (
        warning.message
    )
    assert "torchguard hook install" in warning.message
    assert "MKL_THREADING_LAYER=SEQUENTIAL" in warning.message
    assert "KMP_DUPLICATE_LIB_OK" not in warning.message  # never recommended
    (preload,) = result.report.preloads
    assert preload.path == sibling and preload.error is None
    text = render_env(result, Paint(False), "torchguard pip install")
    assert "nothing that works today would break\nwarning (said, not refused):\n" in text
    assert "  - [openmp-conflict] MKL and torch would start two OpenMP runtimes: " in text
    document = result.to_dict()
    assert document["safe"] is True and document["breaks"] == []
    assert [w["code"] for w in document["warnings"]] == ["openmp-conflict"]
    assert mkl_case.snapshot() == before  # judged without touching the environment


def test_pip_front_installs_it_and_says_the_warning(
    mkl_case: Venv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(pip_front.subprocess, "run", run)
    code = pip_front.pip_main(["install", "mkl", "--json"])
    assert code == pip_front.EXIT_INSTALLED
    assert ran == [[sys.executable, "-m", "pip", "install", "mkl"]]
    document = json.loads(capsys.readouterr().out)
    assert document["ran_pip"] is True and document["check"]["safe"] is True
    assert [w["code"] for w in document["check"]["warnings"]] == ["openmp-conflict"]
