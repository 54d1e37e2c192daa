"""``check``'s pip runner asks a recent pip to read wheels' metadata with range requests."""

from __future__ import annotations

import functools
import sys
import types

import pytest

from torchguard._frontends.pip_windows import lazy_metadata

DRY_RUN = ["install", "--dry-run", "--report", "r.json", "torch"]


def fake_pip(monkeypatch: pytest.MonkeyPatch, *, set_dist: bool, features: list[str]) -> None:
    """pip's two internals the runner looks at, as a pip with or without them has them."""
    monkeypatch.delenv("TORCHGUARD_FAST_DEPS", raising=False)

    class InstallRequirement:
        def get_dist(self) -> None: ...

    if set_dist:
        InstallRequirement.set_dist = lambda self, dist: None  # type: ignore[attr-defined]
    cmdoptions = types.ModuleType("pip._internal.cli.cmdoptions")
    cmdoptions.use_new_feature = functools.partial(dict, choices=features)  # type: ignore[attr-defined]
    req_install = types.ModuleType("pip._internal.req.req_install")
    req_install.InstallRequirement = InstallRequirement  # type: ignore[attr-defined]
    for name, module in {
        "pip": types.ModuleType("pip"),
        "pip._internal": types.ModuleType("pip._internal"),
        "pip._internal.cli": types.ModuleType("pip._internal.cli"),
        "pip._internal.req": types.ModuleType("pip._internal.req"),
        "pip._internal.cli.cmdoptions": cmdoptions,
        "pip._internal.req.req_install": req_install,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys.modules["pip._internal.cli"], "cmdoptions", cmdoptions, raising=False)
    monkeypatch.setattr(sys.modules["pip._internal.req"], "req_install", req_install, raising=False)


def test_a_pip_whose_dry_run_downloads_nothing_more_reads_metadata_lazily(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_pip(monkeypatch, set_dist=True, features=["fast-deps", "truststore"])
    assert lazy_metadata(DRY_RUN) == ["install", "--use-feature=fast-deps", *DRY_RUN[1:]]


@pytest.mark.parametrize(
    ("set_dist", "features"),
    [(False, ["fast-deps"]), (True, ["truststore"])],
    ids=["downloads whole wheels after resolving", "fast-deps removed"],
)
def test_another_pip_runs_as_asked(
    monkeypatch: pytest.MonkeyPatch, set_dist: bool, features: list[str]
) -> None:
    fake_pip(monkeypatch, set_dist=set_dist, features=features)
    assert lazy_metadata(DRY_RUN) == DRY_RUN


def test_only_a_dry_run_and_never_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pip(monkeypatch, set_dist=True, features=["fast-deps"])
    download = ["download", "--dry-run", "torch"]
    assert lazy_metadata(download) == download
    install = ["install", "torch"]
    assert lazy_metadata(install) == install
    given = ["install", "--use-feature", "fast-deps", "--dry-run", "torch"]
    assert lazy_metadata(given) == given


def test_it_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pip(monkeypatch, set_dist=True, features=["fast-deps"])
    monkeypatch.setenv("TORCHGUARD_FAST_DEPS", "off")
    assert lazy_metadata(DRY_RUN) == DRY_RUN


def test_a_pip_of_another_layout_runs_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pip._internal.cli.cmdoptions", None)
    assert lazy_metadata(DRY_RUN) == DRY_RUN
