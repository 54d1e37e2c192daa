"""A fault of torchguard's own is an InternalError, never a finding about the user's files.

Each test plants a fault at one layer (inside pefile, the loader model, a rule, the facts
cache, locating torch) and checks what each entry point makes of it; the same run without
the fault is healthy, so every test can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pefile
import pytest
from fakes import FakeTorch, system32
from faults import PlantedFault, boom, fake_windows

import torchguard
from torchguard._binary import cache as _cache
from torchguard._facts import interpreter as _interpreter
from torchguard._facts.internal import BUG_REPORT
from torchguard._frontends import cli as _cli
from torchguard._frontends.pipeline import windows as _pipeline
from torchguard._platforms.windows import loader as _loader
from torchguard._rules import registry as _registry


def _inside_pefile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pefile.PE, "parse_data_directories", boom)


def _in_the_loader_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loader.LoaderModel, "resolve", boom)


def _in_a_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    planted = _registry.Rule("planted.boom", frozenset({_registry.WINDOWS}), boom)
    rules = _registry.rules
    monkeypatch.setattr(_registry, "rules", lambda platform: (*rules(platform), planted))


def _in_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache.FactsCache, "get", boom)


def _in_locate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pipeline, "locate_torch", boom)


LAYERS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "pefile": _inside_pefile,
    "loader": _in_the_loader_model,
    "rule": _in_a_rule,
    "cache": _in_the_cache,
    "locate": _in_locate,
}


@pytest.fixture
def healthy(tmp_path: Path) -> tuple[Path, Path]:
    return FakeTorch().write(tmp_path / "site"), system32(tmp_path / "s32")


def _assert_internal(info: pytest.ExceptionInfo[torchguard.InternalError], during: str) -> None:
    exc = info.value
    assert not isinstance(exc, (torchguard.TorchDllError, ImportError))
    assert isinstance(exc.__cause__, PlantedFault)
    text = str(exc)
    assert BUG_REPORT in text and torchguard.__version__ in text and during in text
    assert "PlantedFault: planted fault" in text and "\n" not in text


def test_the_healthy_install_is_healthy_without_a_fault(
    healthy: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, s32 = healthy
    assert torchguard.scan([site], system32=[s32]).ok
    fake_windows(monkeypatch, site, s32)
    assert torchguard.diagnose().ok
    assert torchguard.ensure().ok


@pytest.mark.parametrize("layer", LAYERS)
def test_scan_raises_internal_error(
    layer: str, healthy: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, s32 = healthy
    LAYERS[layer](monkeypatch)
    with pytest.raises(torchguard.InternalError) as info:
        torchguard.scan([site], system32=[s32])
    _assert_internal(info, "scan()")


@pytest.mark.parametrize("layer", LAYERS)
def test_ensure_and_diagnose_raise_internal_error(
    layer: str, healthy: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site, s32 = healthy
    fake_windows(monkeypatch, site, s32)
    LAYERS[layer](monkeypatch)
    with pytest.raises(torchguard.InternalError) as info:
        torchguard.diagnose()
    _assert_internal(info, "diagnose()")
    with pytest.raises(torchguard.InternalError) as info:
        torchguard.ensure()
    _assert_internal(info, "ensure()")


def test_a_fault_inside_pefile_reading_a_wheel_is_not_a_corrupt_dll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wheel members are read through zipfile, whose broad error list once caught pefile's."""
    wheel = FakeTorch().wheel(tmp_path)
    assert torchguard.scan([wheel], system32=[system32(tmp_path / "s32")]).ok
    for error in (KeyError, ValueError, RuntimeError):  # all in ZIP_ERRORS

        def fault(*args: object, error: type[Exception] = error, **kwargs: object) -> None:
            raise error("planted fault")

        monkeypatch.setattr(pefile.PE, "parse_data_directories", fault)
        with pytest.raises(torchguard.InternalError) as info:
            torchguard.scan([wheel], system32=[system32(tmp_path / "s32")])
        assert type(info.value.__cause__) is error


def test_ensure_off_windows_raises_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_interpreter, "torch_package_dir", boom)
    with pytest.raises(torchguard.InternalError) as info:
        torchguard.ensure()
    _assert_internal(info, "ensure()")


def test_a_real_diagnosis_is_still_a_torch_dll_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTorch()
    del fake.graph["libiomp5md.dll"]
    site = fake.write(tmp_path / "site")
    fake_windows(monkeypatch, site, system32(tmp_path / "s32"))
    with pytest.raises(torchguard.MissingDllError):
        torchguard.ensure()


def test_internal_error_is_exported_and_pickles() -> None:
    import pickle

    assert "InternalError" in torchguard.__all__
    exc = torchguard.InternalError("x")
    assert str(pickle.loads(pickle.dumps(exc))) == "x"
    assert not issubclass(torchguard.InternalError, ImportError)


@pytest.mark.parametrize("debug", ["", "1"])
def test_cli_exits_3_and_asks_for_a_bug_report(
    debug: str,
    healthy: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site, s32 = healthy
    monkeypatch.setenv("TORCHGUARD_DEBUG", debug)
    assert _cli.main(["scan", str(site), "--system32", str(s32)]) == _cli.EXIT_OK
    site = FakeTorch().write(site.parent / "other-site")  # the cache knows the first one
    _inside_pefile(monkeypatch)
    assert _cli.main(["scan", str(site), "--system32", str(s32)]) == 3
    captured = capsys.readouterr()
    assert BUG_REPORT in captured.err
    assert ("Traceback" in captured.err) == bool(debug)
    assert ("PlantedFault" in captured.err) and "corrupt-dll" not in captured.out


def test_cli_doctor_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TORCHGUARD_DEBUG", raising=False)
    monkeypatch.setattr(_interpreter, "torch_package_dir", boom)
    assert _cli.main(["doctor"]) == 3
    err = capsys.readouterr().err
    assert BUG_REPORT in err and "Traceback" not in err and len(err.splitlines()) == 2


def test_cli_fault_outside_the_api_exits_3(
    healthy: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site, s32 = healthy
    monkeypatch.setattr(torchguard.Report, "render_text", boom)
    assert _cli.main(["scan", str(site), "--system32", str(s32)]) == 3
    assert BUG_REPORT in capsys.readouterr().err
