"""torch's neighbours judged by the real Windows loader, under Wine (issue 24).

Stand-ins built in memory: onnxruntime's CUDA provider importing ``cublas64_12.dll`` (loaded as
onnxruntime loads it, ``LoadLibraryExW(path, LOAD_WITH_ALTERED_SEARCH_PATH)``), ctranslate2's
library keeping the name ``cublas64_12.dll`` that it loads with ``LoadLibraryA`` (the call
ctranslate2 makes, run here on the name read from the stand-in), an older provider importing
``cublas64_11.dll``, and ``cublas64_12.dll`` in a fake CUDA torch's ``torch\\lib``. One Windows
process runs every case: first without torch's copy loaded (order B), then with ``torch\\lib``
registered by ``os.add_dll_directory`` (still order B: neither call searches such folders),
then after loading torch's copy by full path as torch's preload does (order A). Before any of
it, ``torchguard.diagnose()`` runs live in that process and must say what the offline scan says. torchguard's prediction (an offline scan of the
same files, on the host) must match both orders. Wine judges a missing DLL (126) as Windows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROWS
from fakes import FakeTorch, companion, system32, write_tree
from pe_builder import build_pe
from wine import WineEnv, parse

from torchguard._binary.cache import user_cache
from torchguard._facts.vocab import Code
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows.system import offline_windows
from torchguard._report.report import Report

pytestmark = pytest.mark.e2e

KERNEL = {"KERNEL32.dll": ["GetLastError"]}
CUBLAS = "cublas64_12.dll"


def _dll(*imports: str) -> bytes:
    """A stand-in Wine loads: it takes one real kernel32 export and each import's default."""
    return build_pe([*imports, "KERNEL32.dll"], symbols=KERNEL)


def _site(root: Path, provider_imports: str, torch_version: str = "2.4.1+cu124") -> Path:
    """A fake CUDA torch small enough to load for real: every binary takes only
    ``GetLastError`` from kernel32 and its default symbol from the fakes (``torch_version``:
    its metadata's; without ``+cu12`` onnxruntime's ``preload_dlls()`` takes the wheels)."""
    graph = {
        "torch_python.dll": ("torch_cuda.dll",),
        "torch_cuda.dll": (CUBLAS,),
        CUBLAS: ("cublasLt64_12.dll",),
        "cublasLt64_12.dll": (),
    }
    extra = {f"torch/lib/{name}": _dll(*imports) for name, imports in graph.items()}
    extra["torch/_C.cp311-win_amd64.pyd"] = _dll("torch_python.dll")
    files = dict.fromkeys(graph, ())  # each written from ``extra``
    site = FakeTorch(version=torch_version, cuda="12.4", graph=files, extra=extra).write(root)
    provider = {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": _dll(
            provider_imports, "onnxruntime_providers_shared.dll"
        ),
        "onnxruntime/capi/onnxruntime_providers_shared.dll": _dll(),
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", "1.22.0", provider, {}))
    ct2 = {
        "ctranslate2/ctranslate2.dll": build_pe(
            ["KERNEL32.dll"], symbols=KERNEL, strings=[b"\0" + CUBLAS.encode() + b"\0"]
        ),
        "ctranslate2/__init__.py": b"",
    }
    write_tree(site, companion("ctranslate2", "4.8.5", ct2, {}))
    return site


#: What ``import torchguard`` needs in the Windows process, from the pristine site.
DEPENDENCIES = ("pefile.py", "ordlookup", "packaging", "platformdirs")


def _with_dependencies(env: WineEnv, site: Path) -> None:
    for name in DEPENDENCIES:
        source = env.site / name
        if source.is_dir():
            shutil.copytree(source, site / name, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, site / name)


def _offline(site: Path, tmp: Path) -> Report:
    """torchguard's prediction: an offline scan of ``site`` on the host (System32's list
    written under ``tmp``)."""
    system = offline_windows([str(site)], system32_dirs=[str(system32(tmp))])
    try:
        return analyze(system, cache=user_cache())
    finally:
        system.close()


def _predicted(site: Path, tmp: Path) -> dict[str, str]:
    report = _offline(site, tmp)
    assert report.import_torch is not None and report.import_torch.ok
    return {f.package or "": str(f.code) for f in report.findings if f.package in PACKAGES}


PACKAGES = ("onnxruntime-gpu", "ctranslate2")

#: The start of each script run in Wine below: ``k``, kernel32 with ``LoadLibraryExW`` declared.
KERNEL32 = """
import ctypes, json
from ctypes import wintypes
k = ctypes.WinDLL("kernel32", use_last_error=True)
k.LoadLibraryExW.restype = wintypes.HMODULE
k.LoadLibraryExW.argtypes = [wintypes.LPCWSTR, wintypes.HANDLE, wintypes.DWORD]
"""

SCRIPT = (
    KERNEL32
    + """k.LoadLibraryA.restype = wintypes.HMODULE
k.LoadLibraryA.argtypes = [ctypes.c_char_p]
def outcome(handle):
    return 0 if handle else ctypes.get_last_error()
def altered(path):
    return outcome(k.LoadLibraryExW(path, None, 0x8))
def by_name(name):
    return outcome(k.LoadLibraryA(name.encode()))
import torchguard  # live, before anything is loaded: what doctor and ensure() say here
report = torchguard.diagnose()
out = {{"live": {{f.package: str(f.code) for f in report.findings
                 if f.package in ("onnxruntime-gpu", "ctranslate2")}}}}
for order in ("alone", "registered", "after"):
    if order == "registered":  # what torch's import does first: its folder registered
        import os
        os.add_dll_directory({torch_lib!r})
    if order == "after":
        out["torch_copy"] = outcome(k.LoadLibraryExW({torch_copy!r}, None, 0x1100))
    out["provider_" + order] = altered({provider!r})
    out["old_" + order] = altered({old!r})
    out["ct2_" + order] = by_name({name!r})
print("TG-JSON " + json.dumps(out))
"""
)


def test_each_order_as_predicted(wine_env: WineEnv, tmp_path: Path) -> None:
    root = wine_env.scenarios / "neighbours"
    site = _site(root / "site-packages", CUBLAS)
    old = _site(root / "old" / "site-packages", "cublas64_11.dll")
    _with_dependencies(wine_env, site)
    predicted = _predicted(site, tmp_path / "s32")
    predicted_old = _predicted(old, tmp_path / "s32")
    capi = "onnxruntime/capi/onnxruntime_providers_cuda.dll"
    code = SCRIPT.format(
        torch_copy=wine_env.to_windows(site / "torch" / "lib" / CUBLAS),
        torch_lib=wine_env.to_windows(site / "torch" / "lib"),
        provider=wine_env.to_windows(site / capi),
        old=wine_env.to_windows(old / capi),
        name=CUBLAS,
    )
    real = parse(wine_env.run(code, site, timeout=300))
    rows = [
        (
            "onnxruntime-gpu provider importing cublas64_12.dll",
            predicted["onnxruntime-gpu"],
            Code.NEIGHBOUR_LOAD_ORDER,
            real["provider_alone"] == 126 and real["provider_after"] == 0,
            f"alone {real['provider_alone']}, after torch {real['provider_after']}",
        ),
        (
            "ctranslate2 LoadLibraryA(cublas64_12.dll)",
            predicted["ctranslate2"],
            Code.NEIGHBOUR_LOAD_ORDER,
            real["ct2_alone"] == 126 and real["ct2_after"] == 0,
            f"alone {real['ct2_alone']}, after torch {real['ct2_after']}",
        ),
        (
            "provider importing cublas64_11.dll beside a CUDA 12 torch",
            predicted_old["onnxruntime-gpu"],
            Code.MISSING_DLL,
            real["old_alone"] == 126 and real["old_after"] == 126,
            f"alone {real['old_alone']}, after torch {real['old_after']}",
        ),
    ]
    for scenario, said, expected, real_matches, seen in rows:
        ROWS.append(
            {
                "scenario": scenario,
                "verdict": said,
                "predicted": "torch first loads, alone 126"
                if expected == Code.NEIGHBOUR_LOAD_ORDER
                else "126 in both orders",
                "real": f"WinError: {seen}",
                "wine": "-",
                "agree": "yes" if said == expected and real_matches else "**NO**",
            }
        )
    assert real["torch_copy"] == 0, real
    assert real["live"] == predicted, real  # live analysis in the real process, as offline
    # a folder registered with os.add_dll_directory is not searched by either call
    assert (real["provider_registered"], real["ct2_registered"]) == (126, 126), real
    assert [(r[1], r[3]) for r in rows] == [(r[2], True) for r in rows], real


PRELOAD = (
    KERNEL32
    + """import os
def altered(path):
    return 0 if k.LoadLibraryExW(path, None, 0x8) else ctypes.get_last_error()
out = {{"before": altered({provider!r})}}
for path in {preload!r}:  # what onnxruntime.preload_dlls() does with the files it finds
    if os.path.isfile(path):
        ctypes.CDLL(path)
out["preloaded"] = altered({provider!r})
print("TG-JSON " + json.dumps(out))
"""
)


def test_preload_dlls_as_predicted(wine_env: WineEnv, tmp_path: Path) -> None:
    """The NVIDIA wheel's cuBLAS installed (not on PATH), no torch loaded: the provider fails
    until its copies are loaded by full path in ``preload_dlls()``'s order, then loads."""
    from torchguard._facts.onnxruntime_preload import preload_list

    site = _site(wine_env.scenarios / "neighbours-preload" / "site-packages", CUBLAS, "2.4.1")
    nvidia = site / "nvidia" / "cublas" / "bin"
    write_tree(nvidia, {CUBLAS: _dll("cublasLt64_12.dll"), "cublasLt64_12.dll": _dll()})
    report = _offline(site, tmp_path / "s32")
    (finding,) = [f for f in report.findings if f.package == "onnxruntime-gpu"]
    said = any(
        "the NVIDIA wheels' copies installed here by full path, and the provider then loads"
        in h.summary
        for h in finding.hints
    )
    paths = [  # preload_dlls(directory=""): the NVIDIA wheels' files, in 1.22's order
        wine_env.to_windows(site.joinpath(*folder, name))
        for folder, name in preload_list("1.22.0", 12)
    ]
    capi = site / "onnxruntime" / "capi" / "onnxruntime_providers_cuda.dll"
    code = PRELOAD.format(provider=wine_env.to_windows(capi), preload=paths)
    real = parse(wine_env.run(code, site, timeout=300))
    agree = said and real == {"before": 126, "preloaded": 0}
    ROWS.append(
        {
            "scenario": "onnxruntime-gpu 1.22 provider, NVIDIA cuBLAS wheel installed, no torch",
            "verdict": f"{finding.code}, preload_dlls() hint replayed"
            if said
            else str(finding.code),
            "predicted": "126, then loads after preload_dlls()",
            "real": f"WinError: before {real['before']}, after the preload {real['preloaded']}",
            "wine": "-",
            "agree": "yes" if agree else "**NO**",
        }
    )
    assert finding.code == Code.NEIGHBOUR_LOAD_ORDER and said, finding
    assert real == {"before": 126, "preloaded": 0}, real


BINDING = (
    KERNEL32
    + """k.GetModuleHandleW.restype = wintypes.HMODULE
k.GetModuleHandleW.argtypes = [wintypes.LPCWSTR]
k.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
def path_of(name):
    buffer = ctypes.create_unicode_buffer(1024)
    handle = k.GetModuleHandleW(name)
    return buffer.value if handle and k.GetModuleFileNameW(handle, buffer, 1024) else None
out = {{}}
for path in {preload!r}:  # preload_dlls(directory=""): the wheel files found, in its order
    ctypes.CDLL(path)
for path in {torch_loads!r}:  # torch's own preload loop, by full path, in its glob order
    handle = k.LoadLibraryExW(path, None, 0x1100)
    out[path.rsplit("\\\\", 1)[1]] = 0 if handle else ctypes.get_last_error()
out["graph"] = path_of("cudnn_graph64_9.dll")
out["torch_graph_loaded"] = bool(k.GetModuleHandleW({torch_graph!r}))
out["ops"] = path_of("cudnn_ops64_9.dll")
print("TG-JSON " + json.dumps(out))
"""
)


def test_preloaded_cudnn_binds_torchs_sub_libraries_as_predicted(
    wine_env: WineEnv, tmp_path: Path
) -> None:
    """The other order of onnxruntime issue 24266, bound by the real loader: the NVIDIA wheel's
    ``cudnn_graph64_9.dll`` loaded first by full path, torch's ``torch\\lib\\cudnn_adv64_9.dll``
    loaded by full path binds its ``cudnn_graph64_9.dll`` import to that module, and torch's own
    copy is never loaded; its ``cudnn_ops64_9.dll`` import, which nothing preloaded, binds to
    torch's copy. Wine binds a missing symbol to a stub, so it cannot say WinError 127: the
    stand-ins export the same names, and two cuDNN versions (the version resources) make
    torchguard's verdict the mixed-minors warning, which names the binding judged here."""
    from torchguard._facts.onnxruntime_preload import preload_list

    root = wine_env.scenarios / "neighbours-cudnn" / "site-packages"
    lib = {
        "cudnn64_9.dll": build_pe(["KERNEL32.dll"], symbols=KERNEL, file_version=(9, 1, 0, 70)),
        "cudnn_adv64_9.dll": _dll("cudnn_graph64_9.dll", "cudnn_ops64_9.dll"),
        "cudnn_graph64_9.dll": _dll(),
        "cudnn_ops64_9.dll": _dll("cudnn_graph64_9.dll"),
    }
    lib["torch_python.dll"] = _dll()
    extra = {f"torch/lib/{name}": data for name, data in lib.items()}
    extra["torch/_C.cp311-win_amd64.pyd"] = _dll("torch_python.dll")
    graph = dict.fromkeys(lib, ())  # each written from ``extra``
    site = FakeTorch(version="2.4.1", cuda="12.4", graph=graph, extra=extra).write(root)
    wheel = {
        "cudnn64_9.dll": build_pe(["KERNEL32.dll"], symbols=KERNEL, file_version=(9, 10, 2, 21)),
        "cudnn_graph64_9.dll": _dll(),
    }
    write_tree(site / "nvidia" / "cudnn" / "bin", wheel)
    provider = {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": _dll(
            "cudnn64_9.dll", "cublas64_12.dll", "onnxruntime_providers_shared.dll"
        ),
        "onnxruntime/capi/onnxruntime_providers_shared.dll": _dll(),
        "onnxruntime/__init__.py": b"",
    }
    write_tree(site, companion("onnxruntime-gpu", "1.22.0", provider, {}))
    report = _offline(site, tmp_path / "s32")
    said = [f for f in report.findings if "before `import torch`" in f.message]
    mixed = len(said) == 1 and "two cuDNN minors are mixed" in said[0].message
    preload = [
        wine_env.to_windows(site.joinpath(*folder, name))
        for folder, name in preload_list("1.22.0", 12)
        if site.joinpath(*folder, name).is_file()
    ]
    torch_lib = site / "torch" / "lib"
    loads = [wine_env.to_windows(torch_lib / n) for n in ("cudnn_adv64_9.dll",)]
    code = BINDING.format(
        preload=preload,
        torch_loads=loads,
        torch_graph=wine_env.to_windows(torch_lib / "cudnn_graph64_9.dll"),
    )
    real = parse(wine_env.run(code, site, timeout=300))
    wheel_graph = wine_env.to_windows(site / "nvidia" / "cudnn" / "bin" / "cudnn_graph64_9.dll")
    torch_ops = wine_env.to_windows(torch_lib / "cudnn_ops64_9.dll")
    bound = (
        real["cudnn_adv64_9.dll"] == 0
        and str(real["graph"]).lower() == wheel_graph.lower()
        and not real["torch_graph_loaded"]
        and str(real["ops"]).lower() == torch_ops.lower()
    )
    ROWS.append(
        {
            "scenario": "NVIDIA wheel's cudnn_graph64_9.dll preloaded, then torch\\lib's "
            "cudnn_adv64_9.dll by full path",
            "verdict": "neighbour-load-order (minors mixed)" if mixed else str(said),
            "predicted": "adv binds graph to the wheel's copy, ops to torch's",
            "real": f"graph bound: {real['graph']}; torch's graph loaded: "
            f"{real['torch_graph_loaded']}; ops: {real['ops']}",
            "wine": "-",
            "agree": "yes" if mixed and bound else "**NO**",
        }
    )
    assert mixed, said
    assert bound, real
