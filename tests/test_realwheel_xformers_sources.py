"""Real-wheel tier: which extension modules ``import xformers`` loads, read from its real code.

``check xformers==0.0.29.post3`` once said ``import xformers`` fails with "DLL load failed
while importing _C_flashattention" (issue 21, finding 8). xformers' ``__init__.py`` never
imports that module: only ``xformers.ops.fmha.flash`` does, inside ``try ... except
ImportError``. The Windows wheel is 168 MB; its Python sources are the same in the 44 MB
manylinux wheel, so these tests put those real sources into a Windows site beside small
in-memory ``.pyd`` files that cannot load (they import a CUDA runtime nobody ships).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, write_tree
from pe_builder import build_pe
from realwheels import CACHE, download

import torchguard

pytestmark = pytest.mark.realwheel

VERSION = "0.0.29.post3"
BROKEN = ["c10.dll", "torch_cpu.dll", "cudart64_12.dll", *KERNEL]


def _sources() -> dict[str, bytes]:
    folder = CACHE / "manylinux"
    found = sorted(folder.glob(f"xformers-{VERSION}-*.whl")) if folder.is_dir() else []
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        download(f"xformers=={VERSION}", folder, platform="manylinux_2_28_x86_64")
        found = sorted(folder.glob(f"xformers-{VERSION}-*.whl"))
    with zipfile.ZipFile(found[0]) as archive:
        return {
            name: archive.read(name)
            for name in archive.namelist()
            if name.startswith("xformers/") and name.endswith((".py", ".json"))
        }


@pytest.fixture(scope="module")
def sources() -> dict[str, bytes]:
    return _sources()


def _scan(tmp_path: Path, files: dict[str, bytes]) -> torchguard.Report:
    site = FakeTorch(version="2.6.0+cpu").write(tmp_path / "site")
    write_tree(site, companion("xformers", VERSION, files, {}))
    return torchguard.scan([site])


def test_import_xformers_does_not_load_flash_attention(
    tmp_path: Path, sources: dict[str, bytes]
) -> None:
    files = {**sources, "xformers/_C_flashattention.pyd": build_pe(BROKEN)}
    report = _scan(tmp_path, files)
    assert report.ok and report.errors == (), report.render_text()
    (outcome,) = [p for p in report.packages if p.name == "xformers"]
    assert outcome.status == "warns"
    (finding,) = report.findings
    assert finding.severity == "warning" and finding.missing == "cudart64_12.dll"
    assert finding.message.startswith(
        "`import xformers` loses xformers._C_flashattention, which xformers.ops.fmha.flash "
        "imports inside try/except ImportError"
    )


def test_a_module_its_init_imports_would_fail_the_import(
    tmp_path: Path, sources: dict[str, bytes]
) -> None:
    """The same real tree, with a broken ``checkpoint`` extension in place of the source module
    ``__init__.py`` imports unconditionally: a proof, so an error."""
    files = {k: v for k, v in sources.items() if k != "xformers/checkpoint.py"}
    files["xformers/checkpoint.pyd"] = build_pe(BROKEN)
    report = _scan(tmp_path, files)
    (outcome,) = [p for p in report.packages if p.name == "xformers"]
    assert outcome.status == "fails"
    assert [(f.severity, f.missing) for f in report.errors] == [("error", "cudart64_12.dll")]
