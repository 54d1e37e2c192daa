"""The one vocabulary: enums that read, compare and serialise as the documented strings."""

from __future__ import annotations

import json
import pickle

import pe_builder
import pytest

from torchguard import _boot, _hook
from torchguard._facts.vocab import Code, FailureKind, Machine, Mode, Severity, Step
from torchguard._platforms.windows import loader as _loader
from torchguard._report.findings import Finding


@pytest.mark.parametrize("member", [Code.MISSING_DLL, Severity.WARNING, Step.DLL_LOAD_DIR])
def test_text_enums_are_their_strings(member: Code | Severity | Step) -> None:
    value = member.value
    assert member == value and hash(member) == hash(value)
    assert str(member) == f"{member}" == f"{member:>0}" == value
    assert json.dumps({member: member}) == json.dumps({value: value})


def test_a_finding_round_trips_as_plain_strings() -> None:
    finding = Finding(Code.MISSING_SYMBOL, Severity.ERROR, "m", symbols=("?f@@YAXXZ",))
    data = finding.to_dict()
    assert type(data["code"]) is str and type(data["severity"]) is str
    assert pickle.loads(pickle.dumps(finding)) == finding


def test_the_loader_speaks_the_vocabulary() -> None:
    kinds = {_loader.MISSING, _loader.CORRUPT, _loader.ARCH, _loader.SYMBOL, _loader.INIT}
    assert kinds == set(FailureKind)
    assert set(_loader.WINERROR) == set(FailureKind)
    assert _loader.DLL_LOAD_DIR is Step.DLL_LOAD_DIR


def test_machines_match_the_pe_format() -> None:
    assert (Machine.X64, Machine.X86, Machine.ARM64) == (
        pe_builder.AMD64,
        pe_builder.I386,
        pe_builder.ARM64,
    )


def test_hook_modes_are_one_set() -> None:
    """The start-up watcher cannot import enum (it runs in every process): its one literal
    must stay the enum's value."""
    import inspect

    assert set(_hook.MODES) == {str(m) for m in Mode}
    assert f'== "{Mode.OFF}"' in inspect.getsource(_boot.activate)


def test_report_words_are_the_documented_strings() -> None:
    from torchguard._facts.vocab import Analysis, PackageStatus
    from torchguard._report.report import ModuleRecord, PackageOutcome, Report

    assert [s.value for s in PackageStatus] == ["ok", "warns", "fails", "blocked"]
    assert [a.value for a in Analysis] == ["live", "offline", "non-windows"]
    assert [s.value for s in Severity] == ["error", "warning"]  # no severity nobody produces
    report = Report(
        mode=Analysis.LIVE,
        modules=(ModuleRecord("c10.dll", "C:\\t\\c10.dll", Step.DLL_LOAD_DIR),),
        packages=(PackageOutcome("tv", "1", "tv", PackageStatus.WARNS, "m"),),
    )
    data = json.loads(json.dumps(report.to_dict()))
    assert data["mode"] == "live" and data["modules"][0]["via"] == "dll_load_dir"
    assert data["packages"][0]["status"] == "warns"
    assert pickle.loads(pickle.dumps(report)) == report
