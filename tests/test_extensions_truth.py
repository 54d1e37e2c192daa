"""Extensions as their own code loads them, and the torch their build metadata names.

- xformers catches the OSError of its ``_C`` load and imports with a logged warning: the
  features are lost, the import is not (believed only when the installed ``_cpp_lib.py`` holds
  the catching code);
- a package whose Python code loads a DLL of its own by full path before importing the
  ``.pyd`` that needs it does not fail for want of that DLL;
- a CUDA-linked extension beside a CPU torch gets the torch its metadata names
  (``cpp_lib.json``, a ``+cu12torch2.8`` tag, a ``Requires-Dist`` pin), never a reinstall of
  the CPU build.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import KERNEL, FakeTorch, companion, write_tree
from pe_builder import build_pe

import torchguard
from torchguard._report.report import Report

TORCH = ("c10.dll", "torch_cpu.dll")
CUDA_LINKED = (*TORCH, "c10_cuda.dll", "torch_cuda.dll", "cudart64_12.dll", *KERNEL)

# Written for these tests in the shape of xformers' own loader (not a copy of it): the load
# of _C raises an exception class of its own from the OSError, which the module body catches
# and logs.
CATCHING_LOADER = b"""
import logging
import torch
logger = logging.getLogger("xformers")
UNAVAILABLE_FEATURES_MSG = (
    "  Memory-efficient attention, SwiGLU, sparse and more won't be available."
)
class xFormersInvalidLibException(Exception):
    pass
def _register_extensions():
    try:
        torch.ops.load_library("_C")
    except OSError as exc:
        raise xFormersInvalidLibException() from exc
try:
    _register_extensions()
except xFormersInvalidLibException as e:
    logger.warning(f"WARNING[XFORMERS]: {e}")
"""
NOT_CATCHING_LOADER = b"import torch\ntorch.ops.load_library('_C')\n"


def scan(tmp_path: Path, torch: FakeTorch, *packages: dict[str, bytes]) -> Report:
    site = torch.write(tmp_path / "site")
    for files in packages:
        write_tree(site, files)
    return torchguard.scan([site])


def xformers(loader: bytes = CATCHING_LOADER, built_for: str = "2.10.0+cu128") -> dict[str, bytes]:
    cpp_lib = {"version": {"cuda": 1208, "hip": None, "torch": built_for, "python": "3.11.9"}}
    files = {
        "xformers/__init__.py": b"from . import _cpp_lib\n",
        "xformers/_cpp_lib.py": loader,
        "xformers/cpp_lib.json": json.dumps(cpp_lib).encode(),
        "xformers/_C.pyd": build_pe(list(CUDA_LINKED)),
    }
    return companion("xformers", "0.0.35", files, {})


def package(report: Report, name: str) -> dict[str, object]:
    (found,) = [p.to_dict() for p in report.packages if p.name == name]
    return found


def commands(report: Report) -> list[str]:
    return [c for f in report.findings for h in f.hints for c in h.commands]


def test_xformers_beside_a_cpu_torch_warns_and_names_the_features_lost(tmp_path: Path) -> None:
    report = scan(tmp_path, FakeTorch(version="2.10.0+cpu"), xformers())
    assert report.ok  # `import xformers` succeeds: no error
    outcome = package(report, "xformers")
    assert outcome["status"] == "warns"
    assert outcome["message"] == (
        "succeeds, with the logged warning \"xFormers can't load C++/CUDA extensions. xFormers "
        'was built for: PyTorch 2.10.0+cu128 (you have 2.10.0+cpu)": Memory-efficient '
        "attention, SwiGLU, sparse and more won't be available."
    )
    finding = report.findings[0]
    assert {(f.severity, f.package) for f in report.findings} == {("warning", "xformers")}
    assert finding.message.startswith(
        "`import xformers` loses its C++/CUDA operators (Memory-efficient attention, SwiGLU, "
        "sparse and more)"
    )
    assert "fails" not in finding.message
    assert sorted(set(commands(report))) == [
        "py -3.11 -m pip install --force-reinstall torch==2.10.0 "
        "--index-url https://download.pytorch.org/whl/cu128"
    ]
    assert "xformers/cpp_lib.json" in finding.hints[0].summary


def test_the_build_xformers_was_made_for_keeps_the_installed_torchvision_pinned(
    tmp_path: Path,
) -> None:
    """kohya_ss: torch 2.7.0+cpu and torchvision 0.22.0 beside xformers built for 2.7.0+cu126:
    the same release's CUDA build, with torchvision 0.22.0 in the same command."""
    vision = companion("torchvision", "0.22.0", {"torchvision/__init__.py": b""}, {})
    report = scan(tmp_path, FakeTorch(version="2.10.0+cpu"), xformers(), vision)
    assert sorted(set(commands(report))) == [
        "py -3.11 -m pip install --force-reinstall torch==2.10.0 torchvision==0.22.0 "
        "--index-url https://download.pytorch.org/whl/cu128"
    ]
    other = scan(tmp_path / "other", FakeTorch(version="2.9.0+cpu"), xformers(), vision)
    assert sorted(set(commands(other))) == [  # another release: 0.22.0 is not its torchvision
        "py -3.11 -m pip install --force-reinstall torch==2.10.0 "
        "--index-url https://download.pytorch.org/whl/cu128"
    ]


def test_an_xformers_whose_code_does_not_catch_fails_as_modelled(tmp_path: Path) -> None:
    report = scan(tmp_path, FakeTorch(version="2.10.0+cpu"), xformers(NOT_CATCHING_LOADER))
    assert package(report, "xformers")["status"] == "fails"
    assert {f.severity for f in report.findings} == {"error"}


def test_xformers_built_for_this_torch_gets_no_build_hint(tmp_path: Path) -> None:
    """The metadata names this very torch: the failure is something else (here cudart)."""
    torch = FakeTorch(version="2.10.0+cu128", cuda="12.8")
    torch.graph["c10_cuda.dll"] = ("c10.dll", *KERNEL)
    torch.graph["torch_cuda.dll"] = ("c10.dll", "c10_cuda.dll", *KERNEL)
    report = scan(tmp_path, torch, xformers())
    assert package(report, "xformers")["status"] == "warns"
    assert not any("was built for" in h.summary for f in report.findings for h in f.hints)


def test_a_cuda_dll_beside_a_cpu_torch_never_reinstalls_the_cpu_build(tmp_path: Path) -> None:
    """No build metadata at all: the newest CUDA build of this torch release, not /whl/cpu."""
    files = {
        "myext/__init__.py": b"from ._C import *\n",
        "myext/_C.pyd": build_pe(list(CUDA_LINKED)),
    }
    ext = companion("myext", "1.0", files, {})
    report = scan(tmp_path, FakeTorch(version="2.4.1+cpu"), ext)
    assert package(report, "myext")["status"] == "fails"
    assert sorted(set(commands(report))) == [
        "py -3.11 -m pip install --force-reinstall torch==2.4.1 "
        "--index-url https://download.pytorch.org/whl/cu124"
    ]
    assert "is a CPU build" in report.findings[0].hints[0].summary


def test_a_local_version_tag_names_the_torch_series_and_cuda_major(tmp_path: Path) -> None:
    ext = companion(
        "flash-attn",
        "2.8.3+cu12torch2.8cxx11abiTRUE",
        {"flash_attn_2_cuda.pyd": build_pe(list(CUDA_LINKED)), "flash_attn/__init__.py": b""},
        {},
    )
    report = scan(tmp_path, FakeTorch(version="2.4.1+cpu"), ext)
    hint = report.findings[0].hints[0]
    assert "built for torch 2.8 with CUDA 12 (its version tag +cu12torch2.8cxx11abiTRUE)" in (
        hint.summary
    )
    assert hint.commands == (
        "py -3.11 -m pip install --force-reinstall torch==2.8.0 "
        "--index-url https://download.pytorch.org/whl/cu129",
    )


def test_a_requires_dist_pin_names_the_release(tmp_path: Path) -> None:
    files = companion("pinned", "1.0", {"pinned/_C.pyd": build_pe(list(CUDA_LINKED))}, {})
    files["pinned-1.0.dist-info/METADATA"] += (
        b"Requires-Dist: numpy\nRequires-Dist: torch==2.5.1\n"
        b"Requires-Dist: torch==2.0.0; extra == 'old'\n"
    )
    report = scan(tmp_path, FakeTorch(version="2.4.1+cpu"), files)
    hint = report.findings[0].hints[0]
    assert "(Requires-Dist: torch==2.5.1)" in hint.summary
    assert hint.commands == (
        "py -3.11 -m pip install --force-reinstall torch==2.5.1 "
        "--index-url https://download.pytorch.org/whl/cu124",
    )


def own_dll_package(init: bytes, core_imports: tuple[str, ...] = KERNEL) -> dict[str, bytes]:
    """``mylib\\_ext.pyd`` needs ``mylib\\lib\\mylib_core.dll``, which is not beside it."""
    files = {
        "mylib/__init__.py": init,
        "mylib/_ext.pyd": build_pe(["mylib_core.dll", *TORCH, *KERNEL]),
        "mylib/lib/mylib_core.dll": build_pe(list(core_imports)),
    }
    return companion("mylib", "1.0", files, {})


LOADS_ITS_DLL_FIRST = (
    b"import os\nimport torch\n"
    b'torch.ops.load_library(os.path.join(os.path.dirname(__file__), "lib", "mylib_core.dll"))\n'
    b"from . import _ext\n"
)


def test_a_package_that_loads_its_own_dll_first_imports(tmp_path: Path) -> None:
    report = scan(tmp_path, FakeTorch(), own_dll_package(LOADS_ITS_DLL_FIRST))
    assert report.findings == ()
    assert package(report, "mylib")["status"] == "ok"


def test_without_that_load_the_pyd_alone_cannot_find_it(tmp_path: Path) -> None:
    report = scan(tmp_path, FakeTorch(), own_dll_package(b"from . import _ext\n"))
    assert package(report, "mylib")["status"] == "fails"
    assert [(f.missing, f.severity) for f in report.findings] == [("mylib_core.dll", "error")]


def test_the_preloaded_dll_is_itself_judged(tmp_path: Path) -> None:
    files = own_dll_package(LOADS_ITS_DLL_FIRST, ("absent.dll", *KERNEL))
    report = scan(tmp_path, FakeTorch(), files)
    assert package(report, "mylib")["status"] == "fails"
    assert [(f.missing, f.chain) for f in report.errors] == [
        ("absent.dll", ("mylib_core.dll", "absent.dll"))
    ]


def test_a_package_that_registers_its_dll_folder_imports(tmp_path: Path) -> None:
    init = (
        b"import os\n"
        b'os.add_dll_directory(os.path.join(os.path.dirname(__file__), "lib"))\n'
        b"from . import _ext\n"
    )
    report = scan(tmp_path, FakeTorch(), own_dll_package(init))
    assert report.findings == ()
    assert package(report, "mylib")["status"] == "ok"


def test_code_that_loads_dlls_in_a_way_not_tied_to_it_is_a_warning_not_an_error(
    tmp_path: Path,
) -> None:
    """It may load mylib_core.dll (a glob, a computed name): no proof either way."""
    init = (
        b"import glob, os, torch\n"
        b"for dll in glob.glob(os.path.join(os.path.dirname(__file__), '*', '*.dll')):\n"
        b"    torch.ops.load_library(dll)\n"
        b"from . import _ext\n"
    )
    report = scan(tmp_path, FakeTorch(), own_dll_package(init))
    assert report.ok
    outcome = package(report, "mylib")
    assert outcome["status"] == "warns"
    assert str(outcome["message"]).startswith("may fail: _ext.pyd needs mylib_core.dll")
    assert [(f.missing, f.severity) for f in report.findings] == [("mylib_core.dll", "warning")]


def test_a_warm_scan_reads_no_source_or_metadata_of_a_failing_extension_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What xformers' own files say is kept under its RECORD's identity; a reinstall (a new
    RECORD) reads them again."""
    from torchguard._platforms.windows.tree import WinTree

    read: list[str] = []
    real = WinTree.read_text

    def counting(self: WinTree, path: str) -> str | None:
        read.append(path.replace("\\", "/").rsplit("/site-packages/", 1)[-1])
        return real(self, path)

    monkeypatch.setattr(WinTree, "read_text", counting)
    watched = {"xformers/_cpp_lib.py", "xformers/cpp_lib.json"}
    cold = scan(tmp_path, FakeTorch(version="2.10.0+cpu"), xformers())
    assert watched <= set(read)
    read.clear()
    warm = torchguard.scan([tmp_path / "site"])
    assert warm.packages == cold.packages and warm.findings == cold.findings
    assert watched.isdisjoint(read)
    record = tmp_path / "site" / "xformers-0.0.35.dist-info" / "RECORD"
    record.write_bytes(record.read_bytes() + b"\n")  # what a reinstall does to it
    read.clear()
    torchguard.scan([tmp_path / "site"])
    assert "xformers/_cpp_lib.py" in read


# xformers 0.0.29's layout in short (not its code): __init__ imports _cpp_lib, whose load of _C
# is caught; only ops/fmha/flash.py imports _C_flashattention, inside try/except ImportError.
FLASH = b"""
try:
    try:
        from ... import _C_flashattention
    except ImportError:
        import flash_attn
except ImportError:
    pass
"""


def xformers_029(init: bytes = b"from . import _cpp_lib\n") -> dict[str, bytes]:
    files = {
        "xformers/__init__.py": init,
        "xformers/_cpp_lib.py": CATCHING_LOADER,
        "xformers/ops/__init__.py": b"from .fmha import flash\n",
        "xformers/ops/fmha/__init__.py": b"from . import flash\n",
        "xformers/ops/fmha/flash.py": FLASH,
        "xformers/_C.pyd": build_pe([*TORCH, *KERNEL]),
        "xformers/_C_flashattention.pyd": build_pe([*TORCH, "cudart64_12.dll", *KERNEL]),
    }
    return companion("xformers", "0.0.29.post3", files, {})


def test_an_extension_only_a_guarded_import_loads_is_a_lost_feature(tmp_path: Path) -> None:
    """`import xformers` never imports _C_flashattention: it works, and the finding is a
    warning naming the module that imports it and how (issue 21, finding 8)."""
    report = scan(tmp_path, FakeTorch(version="2.6.0+cpu"), xformers_029())
    assert report.ok and report.errors == ()
    outcome = package(report, "xformers")
    assert outcome["status"] == "warns", outcome
    assert "DLL load failed while importing _C_flashattention" in str(outcome["message"])
    assert "xformers.ops.fmha.flash imports xformers._C_flashattention inside try/except" in str(
        outcome["message"]
    )
    (finding,) = report.findings
    assert (finding.severity, finding.package, finding.missing) == (
        "warning",
        "xformers",
        "cudart64_12.dll",
    )
    assert finding.message.startswith(
        "`import xformers` loses xformers._C_flashattention, which xformers.ops.fmha.flash "
        "imports inside try/except ImportError"
    )


def test_the_same_extension_imported_by_the_package_itself_is_an_error(tmp_path: Path) -> None:
    init = b"from . import _cpp_lib\nfrom . import _C_flashattention\n"
    report = scan(tmp_path, FakeTorch(version="2.6.0+cpu"), xformers_029(init))
    assert package(report, "xformers")["status"] == "fails"
    assert [(f.severity, f.missing) for f in report.errors] == [("error", "cudart64_12.dll")]


def test_an_extension_nothing_imports_is_a_lost_feature(tmp_path: Path) -> None:
    ext = companion(
        "myext",
        "1.0",
        {"myext/__init__.py": b"import torch\n", "myext/_C.pyd": build_pe(list(CUDA_LINKED))},
        {},
    )
    report = scan(tmp_path, FakeTorch(version="2.4.1+cpu"), ext)
    assert report.ok
    assert "nothing `import myext` runs imports it" in report.findings[0].message


def test_a_package_without_readable_sources_is_doubt_not_proof(tmp_path: Path) -> None:
    ext = companion("myext", "1.0", {"myext/_C.pyd": build_pe(list(CUDA_LINKED))}, {})
    report = scan(tmp_path, FakeTorch(version="2.4.1+cpu"), ext)
    assert report.ok and package(report, "myext")["status"] == "warns"
    assert "its package's code could not be read" in report.findings[0].message


def test_a_warm_scan_keeps_the_place_of_a_guarded_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._platforms.windows import extensions

    cold = scan(tmp_path, FakeTorch(version="2.6.0+cpu"), xformers_029())
    monkeypatch.setattr(extensions, "reach", lambda *a: pytest.fail("sources read again"))
    warm = torchguard.scan([tmp_path / "site"])
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
