"""The collector is held off during an analysis and back on after it, and a cold read turns
it back on at once (pefile's reference cycles are collected as a cold scan goes)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeTorch
from pe_builder import build_pe

import torchguard
from torchguard._binary import collector
from torchguard._binary.elf import read_elf_bytes
from torchguard._binary.pe.image import read_pe


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    """Every test starts with the collector on, and leaves it on."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_holds_the_collector_off_and_restores_it() -> None:
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # nested: still off, and on only when the outer one ends
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_restores_it_after_an_exception() -> None:
    with pytest.raises(KeyError), collector.paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled() -> None:
    gc.disable()
    with collector.paused():
        collector.resume()  # a cold read: not ours to switch on
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_reading_a_pe_turns_it_back_on() -> None:
    with collector.paused():
        read_pe(build_pe(["kernel32.dll"]))
        assert gc.isenabled()
    assert gc.isenabled()


def test_reading_an_elf_turns_it_back_on(tmp_path: Path) -> None:
    from linux_elf import write_so

    write_so(tmp_path, "libx.so", soname="libx.so", needed=["libc.so.6"])
    with collector.paused():
        read_elf_bytes((tmp_path / "libx.so").read_bytes())
        assert gc.isenabled()


def test_resume_outside_an_analysis_changes_nothing() -> None:
    gc.disable()
    collector.resume()
    assert not gc.isenabled()


def test_an_analysis_pauses_it_while_warm_and_a_cold_one_collects(
    tmp_path: Path, fake_torch: FakeTorch, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the pipeline does: off for a warm run (no binary read), back on for a cold one."""
    seen: list[bool] = []
    from torchguard._frontends.pipeline import windows

    real = windows.CheckContext

    def context(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())  # the rules start after the replay read what it needed
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(windows, "CheckContext", context)
    site = fake_torch.write(tmp_path / "site")
    cold = torchguard.scan([site], system32=[runtime_dir])
    warm = torchguard.scan([site], system32=[runtime_dir])
    assert seen == [True, False]  # the cold run read DLLs; the warm one read none
    assert gc.isenabled()
    assert warm.findings == cold.findings
