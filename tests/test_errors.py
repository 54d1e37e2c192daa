from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from fakes import FakeTorch

import torchguard
from torchguard._report.errors import error_for
from torchguard._report.findings import ERROR, Finding, RepairHint
from torchguard._report.report import Report


def _error(tmp_path: Path, fake_torch: FakeTorch) -> torchguard.TorchDllError:
    del fake_torch.graph["libiomp5md.dll"]
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], clean_windows=True)
    return error_for(report.errors[0], report)


def test_error_is_an_import_error_with_structured_fields(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    exc = _error(tmp_path, fake_torch)
    assert isinstance(exc, ImportError) and isinstance(exc, torchguard.MissingDllError)
    assert exc.code == "missing-dll"
    assert (exc.dll, exc.missing, exc.chain) == (
        "c10.dll",
        "MSVCP140.dll",
        ("c10.dll", "MSVCP140.dll"),
    )
    assert exc.hints and isinstance(exc.hints[0], RepairHint)
    assert exc.report.errors[0] is exc.finding


def test_str_is_the_whole_diagnosis(tmp_path: Path, fake_torch: FakeTorch) -> None:
    text = str(_error(tmp_path, fake_torch))
    assert "MSVCP140.dll is missing" in text
    assert "winget install" in text
    assert "libiomp5md.dll" in text  # the second error is listed too
    assert 'own message: import torch fails: [WinError 126] Error loading "...\\c10.dll"' in text


def test_pickle_round_trip(tmp_path: Path, fake_torch: FakeTorch) -> None:
    exc = _error(tmp_path, fake_torch)
    clone = pickle.loads(pickle.dumps(exc))
    assert type(clone) is type(exc)
    assert clone.to_dict() == exc.to_dict()
    assert str(clone) == str(exc)


def test_to_dict_is_json(tmp_path: Path, fake_torch: FakeTorch) -> None:
    data = _error(tmp_path, fake_torch).to_dict()
    assert json.loads(json.dumps(data))["missing"] == "msvcp140.dll"
    assert data["report"]["schema"] == 1


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("missing-dll", torchguard.MissingDllError),
        ("corrupt-dll", torchguard.CorruptDllError),
        ("arch-mismatch", torchguard.ArchitectureMismatchError),
        ("torch-not-found", torchguard.TorchNotFoundError),
        ("some-future-code", torchguard.TorchDllError),
    ],
)
def test_error_class_per_code(code: str, cls: type[torchguard.TorchDllError]) -> None:
    finding = Finding(code=code, severity=ERROR, message="m")
    exc = error_for(finding, Report(findings=(finding,)))
    assert type(exc) is cls


def test_a_fix_shared_by_several_errors_is_printed_once(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    fake_torch.graph["torch_python.dll"] = (
        "MSVCP140_ATOMIC_WAIT.dll",
        *fake_torch.graph["torch_python.dll"],
    )
    report = torchguard.scan([fake_torch.write(tmp_path / "site")], clean_windows=True)
    assert [f.missing for f in report.errors] == ["MSVCP140.dll", "MSVCP140_ATOMIC_WAIT.dll"]
    for text in (str(error_for(report.errors[0], report)), report.render_text()):
        assert text.count("winget install") == 2  # once as a command, once in "the same as above"
        assert (
            "fix: the same as above (winget install --id Microsoft.VCRedist.2015+.x64 --exact)"
            in text
        )
