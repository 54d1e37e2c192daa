"""torch's neighbours beside a real CUDA torch, judged by glibc (issue 24, item 5, Linux).

One site-packages holds the genuine torch 2.9.1+cu128 and its NVIDIA wheels (the real-loader
tier's install, :func:`linux_realloader.torch_site`, shared with it in one pytest process),
and the genuine ctranslate2 4.8.5, onnxruntime-gpu 1.24.1 (its Python code, core and CUDA
provider, read out of the 252 MB wheel over range requests: :mod:`neighbour_members`) and
bitsandbytes 0.50.2 wheels. ``torchguard.diagnose()``, run live there in a process that has
not imported torch, predicts each neighbour's outcome with torch imported first and without
it; child processes then do what a program does, and each prediction must be what happened:

- ctranslate2: its own first cuBLAS load, triggered without a GPU by calling its exported
  ``cublasGetMathMode`` stub (it ``dlopen``s ``libcublas.so.12`` with its own RPATH, then
  logs "Loaded cuBLAS library version" or throws "Library libcublas.so.12 is not found or
  cannot be loaded");
- onnxruntime-gpu: its own load of its CUDA provider, at an ``InferenceSession`` asking for
  ``CUDAExecutionProvider`` ("Failed to load library ... with error: ..." when glibc refuses it;
  on this GPU-less machine a loaded provider then fails at ``cudaSetDevice`` instead);
- bitsandbytes: the binary its own ``get_cuda_bnb_library_path`` picks for the real
  ``torch.version.cuda`` (only the compute capability, which needs a GPU, is supplied).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from linux_realloader import LOCAL_WHEELS, REAL_GLIBC_MARKS, scratch_site, torch_site
from neighbour_members import cached_members, unpack_members
from realwheels import CACHE as WHEELS
from realwheels import download

pytestmark = list(REAL_GLIBC_MARKS)

TORCH = "2.9.1"
CT2 = "4.8.5"
ORT = "1.24.1"  # CUDA 12, cuDNN 9: the smallest provider of 1.19-1.26 but 1.19.2's
BNB = "0.50.2"
NUMPY = "2.2.6"  # onnxruntime's one dependency its import needs


def _ort_member(name: str) -> bool:
    """What ``import onnxruntime`` and its CUDA provider need (no tools, no TensorRT)."""
    if name.startswith(f"onnxruntime_gpu-{ORT}.dist-info/"):
        return True
    return (name == "onnxruntime/__init__.py" or name.startswith("onnxruntime/capi/")) and (
        "tensorrt" not in name
    )


def _wheel(folder: Path, project: str, version: str) -> Path:
    dist = project.replace("-", "_")
    found = sorted(folder.glob(f"{dist}-{version}-*manylinux*x86_64*.whl"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        download(f"{project}=={version}", folder, platform="manylinux_2_28_x86_64")
        found = sorted(folder.glob(f"{dist}-{version}-*manylinux*x86_64*.whl"))
    return found[0]


def _extract(wheel: Path, target: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)


def _numpy(target: Path) -> None:
    """numpy from the machine's wheel folders (as the real-loader tier's layouts), else PyPI."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps"]
    command += ["--disable-pip-version-check", "--target", str(target), f"numpy=={NUMPY}"]
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    local = ["--no-index", *(f"--find-links={folder}" for folder in LOCAL_WHEELS)]
    if subprocess.run([*command, *local], env=env, capture_output=True).returncode != 0:
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)


def ort_members() -> Path:
    """onnxruntime-gpu's members this module needs, cached (also ``tests/prefetch.py``'s)."""
    return cached_members("onnxruntime-gpu", ORT, _ort_member)


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three neighbours and numpy, installed once for the module."""
    where = tmp_path_factory.mktemp("neighbours")
    _extract(_wheel(WHEELS / "neighbours", "ctranslate2", CT2), where)
    _extract(_wheel(WHEELS / "bitsandbytes", "bitsandbytes", BNB), where)
    unpack_members(ort_members(), where)
    _numpy(where)
    return where


@pytest.fixture(scope="module")
def base_site() -> Path:
    return torch_site(TORCH)


def _site(base: Path, extra: Path, where: Path, drop: tuple[str, ...] = ()) -> Path:
    """A scratch site of torch's install with the neighbours beside it (``drop``: files of
    bitsandbytes' folder left out)."""
    site = scratch_site(base, where)
    for entry in os.listdir(extra):
        if entry == "bitsandbytes" and drop:
            (site / entry).mkdir()
            for name in os.listdir(extra / entry):
                if name not in drop:
                    os.symlink(extra / entry / name, site / entry / name)
        elif not (site / entry).exists():  # bin/: console scripts of both, none needed
            os.symlink(extra / entry, site / entry)
    return site


def _run(
    site: Path, code: str, extra: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update({"PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore", **(extra or {})})
    # one torchguard cache in pytest's base temporary folder (the session's): its facts are
    # keyed by file identity, and every scratch site links the same install
    env.update({"TORCHGUARD_CACHE_DIR": str(site.parent.parent / "tg-cache")})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(site.parent),
    )


_DIAGNOSE = """
import json, sys, torchguard
assert "torch" not in sys.modules
report = torchguard.diagnose().to_dict()
print(json.dumps({"import_torch": report["import_torch"], "findings": report["findings"]}))
"""


def _diagnose(site: Path, extra: Mapping[str, str] | None = None) -> list[dict[str, object]]:
    """``diagnose()``'s findings, live in ``site``, in a process without torch."""
    done = _run(site, _DIAGNOSE, extra)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["import_torch"]["ok"], report
    findings: list[dict[str, object]] = report["findings"]
    return findings


def _orders(findings: list[dict[str, object]], package: str) -> tuple[bool, bool]:
    """(works with torch imported first, works without torch), as the findings predict."""
    codes = [f["code"] for f in findings if f["package"] == package]
    if not codes:
        return True, True
    if codes == ["neighbour-load-order"]:
        return True, False
    assert codes == ["missing-dll"], codes
    return False, False


CT2_CALL = """
import ctypes, glob, os, ctranslate2
library = glob.glob(os.path.join(os.path.dirname(ctranslate2.__file__) + ".libs", "libctranslate2*"))
mode = ctypes.c_int(-1)
print("status", ctypes.CDLL(library[0]).cublasGetMathMode(None, ctypes.byref(mode)), flush=True)
print("cublas", [line.split()[-1] for line in open("/proc/self/maps") if "libcublas.so" in line][:1])
"""
ORDERS = {
    "torch first": "import torch\n",
    "neighbour first, torch before its first CUDA call": "{import}\nimport torch\n",
    "no torch": "",
}


def _predicted(site: Path, package: str) -> tuple[list[dict[str, object]], dict[str, bool]]:
    """``package``'s findings from ``diagnose()`` in ``site``, and whether they predict it
    works in each of :data:`ORDERS`."""
    findings = _diagnose(site)
    after, alone = _orders(findings, package)
    mine = [f for f in findings if f["package"] == package]
    return mine, {order: alone if order == "no torch" else after for order in ORDERS}


def _ct2_real(site: Path, order: str) -> tuple[bool, str]:
    """(ctranslate2's first cuBLAS load worked, what it said) in ``order``."""
    done = _run(site, ORDERS[order].format(**{"import": "import ctranslate2"}) + CT2_CALL)
    said = done.stdout + done.stderr
    worked = done.returncode == 0 and "Loaded cuBLAS library version" in said
    assert worked or "is not found or cannot be loaded" in said, said  # no third outcome
    return worked, said


def test_ctranslate2_first_cuda_load_in_each_order(
    base_site: Path, neighbours: Path, tmp_path: Path
) -> None:
    site = _site(base_site, neighbours, tmp_path)
    mine, works = _predicted(site, "ctranslate2")
    for order, predicted in works.items():
        worked, said = _ct2_real(site, order)
        print(f"\nctranslate2 {CT2}, {order}: {'loads' if worked else 'fails'}")
        assert worked == predicted, (said, mine)
        if mine and worked and order == "torch first":  # the copy torch loaded, as named
            folder = re.search(r"\(from ([^)]+)\)", str(mine[0]["message"]))
            found = re.search(r"cublas \['([^']+)'\]", said)
            assert folder is not None and found is not None, (mine, said)
            named = os.path.join(folder[1], str(mine[0]["missing"]))
            assert os.path.realpath(named) == os.path.realpath(found[1])
        if not worked:
            assert f"Library {mine[0]['missing']} is not found or cannot be loaded" in said


ORT_SESSION = """
import onnxruntime
def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    value = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(value)) + value
tensor = field(1, field(1, 1) + field(2, field(1, field(1, 1))))  # float[1]
typed = lambda name: field(1, name) + field(2, tensor)
node = field(1, "x") + field(2, "y") + field(4, "Identity")
graph = field(1, node) + field(2, "g") + field(11, typed("x")) + field(12, typed("y"))
model = field(1, 8) + field(7, graph) + field(8, field(2, 13))  # IR 8, opset 13
{preload}
session = onnxruntime.InferenceSession(model, providers=["CUDAExecutionProvider"])
print("providers", session.get_providers())
"""
_REFUSED = re.compile(
    r"Failed to load library \S*libonnxruntime_providers_cuda\.so with error: (.*)"
)


def _ort_real(site: Path, order: str, preload: bool = False) -> tuple[bool, str]:
    """(onnxruntime's own load of its CUDA provider worked, glibc's error or what followed)."""
    code = ORDERS[order].format(**{"import": "import onnxruntime"})
    code += ORT_SESSION.replace("{preload}", "onnxruntime.preload_dlls()" if preload else "")
    done = _run(site, code)
    said = done.stdout + done.stderr
    assert "providers" in done.stdout, said  # falls back to the CPU, never crashes
    refused = _REFUSED.search(said)
    if refused is not None:
        return False, refused[1].strip()
    # loaded: on a GPU-less machine its first CUDA call fails instead (CUDA error 35)
    assert "CUDAExecutionProvider" in done.stdout or "CUDA failure" in said, said
    return True, said


def test_onnxruntime_provider_in_each_order(
    base_site: Path, neighbours: Path, tmp_path: Path
) -> None:
    site = _site(base_site, neighbours, tmp_path)
    mine, works = _predicted(site, "onnxruntime-gpu")
    for order, predicted in works.items():
        worked, said = _ort_real(site, order)
        print(f"\nonnxruntime-gpu {ORT}, {order}: {'loads' if worked else said}")
        assert worked == predicted, (said, mine)
        if not worked:  # glibc's own error text is the one predicted
            assert said in str(mine[0]["message"]), (said, mine)
    commands = [c for f in mine for h in f["hints"] for c in h["commands"]]  # type: ignore[attr-defined]
    if any("preload_dlls" in c for c in commands):  # the hint works without torch
        worked, said = _ort_real(site, "no torch", preload=True)
        print(
            f"onnxruntime-gpu {ORT}, no torch, preload_dlls() first: {'loads' if worked else said}"
        )
        assert worked, said


BNB_CHOICE = """
import importlib.util, sys, types
import torch
# bitsandbytes' __init__ (20 s of torch ops registered) is skipped: its own choice is in
# cextension, which reads the real torch
found = importlib.util.find_spec("bitsandbytes")
package = types.ModuleType("bitsandbytes")
package.__path__ = list(found.submodule_search_locations)
sys.modules["bitsandbytes"] = package
from bitsandbytes import cextension, cuda_specs
specs = cuda_specs.CUDASpecs(
    highest_compute_capability=(8, 6),  # the one fact that needs a GPU
    cuda_version_string=cuda_specs.get_cuda_version_string(),
    cuda_version_tuple=cuda_specs.get_cuda_version_tuple(),
)
path = cextension.get_cuda_bnb_library_path(specs)
print(torch.version.cuda, path.name, path.exists())
"""

BNB_CASES = {
    "as installed": ((), {}),
    "its CUDA 12.8 binary removed": (("libbitsandbytes_cuda128.so",), {}),
    "BNB_CUDA_VERSION=125": ((), {"BNB_CUDA_VERSION": "125"}),
}


@pytest.mark.parametrize("case", list(BNB_CASES))
def test_bitsandbytes_binary_beside_real_cuda_torch(
    case: str, base_site: Path, neighbours: Path, tmp_path: Path
) -> None:
    drop, env = BNB_CASES[case]
    site = _site(base_site, neighbours, tmp_path, drop)
    findings = [f for f in _diagnose(site, env) if f["package"] == "bitsandbytes"]
    done = _run(site, BNB_CHOICE, env)
    assert done.returncode == 0, done.stderr
    cuda, name, exists = done.stdout.split()[-3:]
    print(f"\nbitsandbytes {BNB}, {case}: torch's CUDA {cuda}, picks {name} ({exists})")
    assert cuda == "12.8"
    if exists == "True":
        assert findings == [], findings
    else:
        assert [(f["code"], f["missing"]) for f in findings] == [
            ("bitsandbytes-binary-missing", name)
        ]
