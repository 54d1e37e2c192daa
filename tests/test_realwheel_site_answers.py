"""The site answers on real wheels: torch 2.4.1's Windows tree with torchvision, Intel's
OpenMP runtime and packages that use OpenMP (scikit-learn, ctranslate2) or ship many binaries
(numpy, av, pillow). A warm scan answered by the folder's one entry says what a cold scan
says, and asks no distribution's own entry.

Real-wheel tier (``-m realwheel``): the wheels come from the cache tier's folder (downloaded
once); unpacking them takes a few seconds."""

from __future__ import annotations

import collections
import os
import time
import zipfile
from pathlib import Path

import pytest
from gpuwheels import torch_tree
from realwheels import wheel

import torchguard
from torchguard._binary.cache import FactsCache
from torchguard._report.report import Report

pytestmark = pytest.mark.realwheel

WHEELS = (
    ("torchvision", "0.19.1"),
    ("intel-openmp", "2021.4.0"),
    ("scikit-learn", "1.5.2"),
    ("ctranslate2", "4.8.5"),
    ("numpy", "1.26.4"),
    ("av", "18.1.0"),
    ("pillow", "13.0.0"),
)


def facts(report: Report) -> tuple[object, ...]:
    return (
        [f.to_dict() for f in report.findings],
        [p.to_dict() for p in report.packages],
        report.import_torch,
    )


def test_real_wheels_answered_whole_say_what_a_cold_scan_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    for project, version in WHEELS:
        with zipfile.ZipFile(wheel(project, version)) as archive:
            archive.extractall(site)
    # Unpacked this second: a state younger than RACY is never kept, and the scans below take
    # about a second when torch's tree was unpacked by an earlier test of this process (CI
    # failed so). Dated back, as an install a minute ago would be.
    then = time.time() - 60
    for path in [site, *site.rglob("*")]:
        os.utime(path, (then, then))
    targets = [torch_tree("2.4.1"), site]
    monkeypatch.setenv("TORCHGUARD_CACHE", "off")
    cold = torchguard.scan(targets)
    monkeypatch.delenv("TORCHGUARD_CACHE")
    for _ in range(3):  # cold, then every answer from the cache, then the folder's entry kept
        assert facts(torchguard.scan(targets)) == facts(cold)
    looked: collections.Counter[str] = collections.Counter()
    real = FactsCache.found

    def found(self: FactsCache, kind: str, key: str | None) -> object:
        looked[kind] += 1
        return real(self, kind, key)

    monkeypatch.setattr(FactsCache, "found", found)
    warm = torchguard.scan(targets)
    assert facts(warm) == facts(cold)
    assert [p.name for p in cold.packages] == ["torchvision"]
    assert looked["site-answers"] == 1
    assert not {"dist-records", "openmp-dist-v2", "torch-linked"} & set(looked), looked
