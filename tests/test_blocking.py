"""``Report.blocking``: the one answer to "does this stop ``import torch``?".

``ensure()``, the hook (through ``ensure()``), the pytest plugin, the markdown verdict and the
error text all ask it. An error blocks only when it is about torch itself and the replay
predicts that ``import torch`` fails: an error the prediction contradicts never blocks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakes import CONSTEXPR_MUTEX, FakeTorch, system32

import torchguard
from torchguard._facts.vocab import Code
from torchguard._frontends import api as _api
from torchguard._frontends.pytest_plugin import verdict
from torchguard._report.errors import MissingDllError, TorchDllError
from torchguard._report.findings import ERROR, WARNING, Finding
from torchguard._report.markdown import render_markdown
from torchguard._report.report import ImportOutcome, Report, TorchSummary

TORCH = TorchSummary("2.4.1+cpu", "C:\\site\\torch")
MISSING = Finding(Code.MISSING_DLL, ERROR, "libx.dll is missing", "c10.dll", "libx.dll")
SIBLING = Finding(
    Code.MISSING_DLL, ERROR, "`import torchvision` fails", "_C.pyd", "z.dll", package="torchvision"
)
WARN = Finding(Code.PATH_FALLBACK, WARNING, "found only on PATH", "fbgemm.dll", "y.dll")


def report(*findings: Finding, ok: bool | None) -> Report:
    outcome = (
        None if ok is None else ImportOutcome(ok, None if ok else 126, None if ok else "c10.dll")
    )
    return Report(findings=findings, torch=TORCH, import_torch=outcome, mode="live")


def test_an_error_about_torch_with_a_failing_prediction_blocks() -> None:
    broken = report(MISSING, WARN, ok=False)
    assert broken.blocking and broken.blockers == (MISSING,)


def test_a_siblings_error_never_blocks() -> None:
    sibling = report(SIBLING, ok=True)
    assert not sibling.ok and not sibling.blocking
    assert (sibling.to_dict()["ok"], sibling.to_dict()["blocking"]) == (False, False)


def test_an_error_the_prediction_contradicts_never_blocks() -> None:
    assert not report(MISSING, ok=True).blocking


def test_without_a_prediction_the_errors_about_torch_block() -> None:
    not_found = Finding(Code.TORCH_NOT_FOUND, ERROR, "torch is not installed")
    assert Report(findings=(not_found,)).blocking


def _ensure(monkeypatch: pytest.MonkeyPatch, prepared: Report) -> Report:
    monkeypatch.setattr(_api, "_live_report", lambda: prepared)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr("torchguard._platforms.windows.register.register", lambda paths: None)
    return _api.ensure()


def test_ensure_raises_exactly_when_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingDllError) as caught:
        _ensure(monkeypatch, report(MISSING, ok=False))
    assert caught.value.finding is MISSING


@pytest.mark.parametrize("findings", [(MISSING,), (SIBLING,)])
def test_ensure_returns_what_does_not_block(
    monkeypatch: pytest.MonkeyPatch, findings: tuple[Finding, ...]
) -> None:
    prepared = report(*findings, ok=True)
    assert _ensure(monkeypatch, prepared) is prepared


def test_markdown_and_the_plugin_say_torch_imports_beside_a_siblings_error() -> None:
    sibling = report(SIBLING, ok=True)
    assert "**Verdict:** `import torch` succeeds; 1 error(s), 0 warning(s)" in render_markdown(
        sibling
    )
    line = verdict(sibling)
    assert "BROKEN" not in line and "import torch 2.4.1+cpu succeeds, 1 error(s)" in line


def test_the_error_text_says_import_torch_fails_only_for_a_blocker() -> None:
    blocked = report(MISSING, SIBLING, ok=False)
    text = str(MissingDllError(MISSING, blocked))
    assert text.startswith("torchguard: import torch will fail.")
    assert "more error(s)" not in text  # the sibling's error is not one of torch's
    other = str(TorchDllError(SIBLING, report(SIBLING, ok=True)))
    assert not other.startswith("torchguard: import torch will fail.")


Case = tuple[str, FakeTorch, tuple[str, ...], tuple[int, int, int, int], bool]


def _one_story_cases() -> list[Case]:
    """(id, torch, System32's runtime DLLs, their version, does ``import torch`` fail?)"""
    without_omp = FakeTorch()
    del without_omp.graph["libiomp5md.dll"]
    corrupt = FakeTorch()
    corrupt.extra["torch/lib/uv.dll"] = b"MZ not really"
    new = (14, 44, 35211, 0)
    old = (14, 34, 31938, 0)
    runtime = ("msvcp140.dll", "vcruntime140_1.dll")
    return [
        ("healthy", FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX), runtime, new, False),
        ("no redistributable", FakeTorch(), ("vcruntime140_1.dll",), new, True),
        ("a torch dll missing", without_omp, runtime, new, True),
        ("a damaged dll", corrupt, runtime, new, True),
        (
            "msvcp140 before the mutex change",
            FakeTorch(linker=(14, 42), mutex=CONSTEXPR_MUTEX),
            runtime,
            old,
            True,
        ),
        (
            "an older minor, no proof",
            FakeTorch(linker=(14, 29)),
            runtime,
            (14, 16, 27012, 0),
            False,
        ),
    ]


@pytest.mark.parametrize(
    ("torch", "names", "version", "blocks"),
    [case[1:] for case in _one_story_cases()],
    ids=[case[0] for case in _one_story_cases()],
)
def test_the_errors_and_the_prediction_tell_one_story(
    tmp_path: Path,
    torch: FakeTorch,
    names: tuple[str, ...],
    version: tuple[int, int, int, int],
    blocks: bool,
) -> None:
    # clean_windows: System32's runtime DLLs are exactly ``names`` (no assumed Redistributable)
    scanned = torchguard.scan(
        [torch.write(tmp_path / "site")],
        system32=[system32(tmp_path / "s32", names, version)],
        clean_windows=True,
    )
    assert scanned.import_torch is not None
    torch_errors = [f for f in scanned.errors if f.package is None]
    assert bool(torch_errors) == (not scanned.import_torch.ok) == scanned.blocking == blocks
