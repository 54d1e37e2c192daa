"""The real-loader tier for libraries loaded later by name: cuDNN's sub-libraries.

torch 2.9.1+cu128 with nvidia-cudnn-cu12 9.10.2 (see ``linux_realloader``). ``import torch``
works in every scenario; the real cuDNN then makes its late loads on a GPU-less machine:
``torch.backends.cudnn.version()`` makes ``libcudnn.so.9`` load ``libcudnn_graph.so.9`` and
look up ``cudnnGetVersion``/``cudnnGetProperty``, and the dispatcher's
``cudnnCreateTensorDescriptor`` (called with ctypes; no GPU needed) loads
``libcudnn_ops.so.9``. Shadowing copies of the graph library are built with gcc from the
names the real files hold, and each prediction is compared with what the real process prints.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from elf_members import cached_member
from linux_realloader import REAL_GLIBC_MARKS, predicted, real_run, scratch_site, torch_site

from torchguard._binary.elf import read_elf_file
from torchguard._binary.elf.strings import read_dlopen_facts

pytestmark = list(REAL_GLIBC_MARKS)

TORCH = "2.9.1"
GRAPH = "libcudnn_graph.so.9"

# After import torch: the version query (graph), then a descriptor (ops); each step prints
# a marker, and /proc/self/maps says where the graph library landed.
_FIRST_USES = """
import ctypes, glob, os, torch
try:
    print("VERSION", torch.backends.cudnn.version(), flush=True)
    lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia",
                                             "cudnn", "lib", "libcudnn.so.9"))[0])
    handle = ctypes.c_void_p()
    print("OPS", lib.cudnnCreateTensorDescriptor(ctypes.byref(handle)), flush=True)
finally:
    maps = [l.split()[-1] for l in open("/proc/self/maps") if "libcudnn_graph.so" in l]
    print("GRAPH", maps[0] if maps else "-", flush=True)
"""


@pytest.fixture(scope="module")
def base_site() -> Path:
    return torch_site(TORCH)


@pytest.fixture(scope="module")
def tg_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tg-cache")


def _exports(path: Path) -> set[str]:
    image = read_elf_file(path, symbols=True)
    assert image.symbols is not None
    return {s.name.decode() for s in image.symbols.defined if not s.hidden}


def _graph_stub(folder: Path, site: Path, *, version: tuple[int, int, int], omit: str = "") -> Path:
    """A libcudnn_graph.so.9 built with gcc: the API names the real dispatcher looks up in
    the real graph library (read from both files), as functions returning success, with the
    cuDNN version ``version`` (``cudnnGetVersion``, ``cudnnGetProperty`` and the version word
    the real sub-libraries export), without ``omit``, and none of what libcudnn_ops imports."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the shadowing copies")
    cudnn = site / "nvidia" / "cudnn" / "lib"
    lookups = read_dlopen_facts(cudnn / "libcudnn.so.9", "libcudnn").lookups
    names = sorted(set(lookups) & _exports(cudnn / GRAPH) - {omit})
    major, minor, patch = version
    body = [
        "#include <stddef.h>",
        f"const unsigned cudnn_graph_version = {(major << 16) | (minor << 8) | patch};",
    ]
    for name in names:
        if name == "cudnnGetVersion":
            body.append(
                f"size_t cudnnGetVersion(void) {{ return {major * 10000 + minor * 100 + patch}; }}"
            )
        elif name == "cudnnGetProperty":
            body.append(
                "int cudnnGetProperty(int t, int *v) "
                f"{{ *v = t == 0 ? {major} : t == 1 ? {minor} : {patch}; return 0; }}"
            )
        else:
            body.append(f"int {name}(void) {{ return 0; }}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.c").write_text("\n".join(body) + "\n")
    (folder / "graph.map").write_text(f"{GRAPH} {{ global: cudnn*; local: *; }};\n")
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-o",
            str(folder / GRAPH),
            str(folder / "graph.c"),
            f"-Wl,-soname,{GRAPH}",
            f"-Wl,--version-script={folder / 'graph.map'}",
        ],
        check=True,
        timeout=120,
    )
    return folder / GRAPH


def _run(site: Path, extra: dict[str, str], cache: Path) -> tuple[dict[str, str], str, int]:
    done = real_run(site, extra, cache, _FIRST_USES)
    marks = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return marks, done.stdout + done.stderr, done.returncode


def _late(report: dict[str, object], name: str) -> list[dict[str, object]]:
    outcome = report["import_torch"]
    assert isinstance(outcome, dict) and outcome["ok"]
    findings = report["findings"]
    assert isinstance(findings, list)
    assert not [f for f in findings if f["severity"] == "error"]  # late loads never block
    return [f for f in findings if f["missing"] == name]


def test_the_fully_versioned_name_beside_cudnn_beats_the_major_on_ld_library_path(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """cuDNN tries libcudnn_graph.so.9.10.2 through the whole search before .so.9: a
    tarball-style link beside libcudnn.so.9 wins over a copy of .so.9 on LD_LIBRARY_PATH."""
    site = scratch_site(base_site, tmp_path)
    cudnn = site / "nvidia" / "cudnn" / "lib"
    (cudnn / "libcudnn_graph.so.9.10.2").symlink_to((cudnn / GRAPH).resolve())
    copies = tmp_path / "cuda" / "lib64"
    copies.mkdir(parents=True)
    shutil.copyfile(cudnn / GRAPH, copies / GRAPH)
    extra = {"LD_LIBRARY_PATH": str(copies)}
    marks, _, status = _run(site, extra, tg_cache)
    print(f"\nreal: graph={marks.get('GRAPH')} rc={status}")
    assert Path(marks["GRAPH"]).samefile(cudnn / GRAPH), marks
    assert _late(predicted(site, extra, tg_cache), GRAPH) == []


def test_a_shadowing_graph_without_cudnnGetVersion_aborts_the_version_query(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(base_site, tmp_path)
    stub = _graph_stub(tmp_path / "old", site, version=(9, 10, 2), omit="cudnnGetVersion")
    extra = {"LD_LIBRARY_PATH": str(stub.parent)}
    marks, output, status = _run(site, extra, tg_cache)
    print(f"\nreal: rc={status} {marks}")
    assert status != 0 and "VERSION" not in marks
    assert "Could not load symbol cudnnGetVersion" in output
    (finding,) = _late(predicted(site, extra, tg_cache), GRAPH)
    assert finding["code"] == "missing-symbol" and finding["severity"] == "warning"
    assert finding["symbols"] == ["cudnnGetVersion"]
    assert "Could not load symbol cudnnGetVersion" in str(finding["message"])


def test_a_shadowing_graph_that_answers_cudnn_but_not_its_sub_libraries(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """Every name the dispatcher looks up is there, so the version query works; the real
    libcudnn_ops.so.9 then cannot bind to it, and cuDNN aborts at the descriptor call."""
    site = scratch_site(base_site, tmp_path)
    stub = _graph_stub(tmp_path / "stub", site, version=(9, 10, 2))
    extra = {"LD_LIBRARY_PATH": str(stub.parent)}
    marks, output, status = _run(site, extra, tg_cache)
    print(f"\nreal: rc={status} {marks}")
    assert marks.get("VERSION") == "91002" and "OPS" not in marks and status != 0
    unable = next(line for line in output.splitlines() if line.startswith("Unable to load"))
    findings = _late(predicted(site, extra, tg_cache), "libcudnn_ops.so.9")
    (ops,) = findings
    assert ops["code"] == "missing-symbol" and ops["severity"] == "warning"
    assert Path(str(ops["path"])).samefile(stub)
    assert unable in str(ops["message"]), (unable, ops["message"])


def test_an_older_cudnn_graph_first_is_torchs_version_incompatibility(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(base_site, tmp_path)
    stub = _graph_stub(tmp_path / "cuda-9.1", site, version=(9, 1, 0))
    extra = {"LD_LIBRARY_PATH": str(stub.parent)}
    marks, output, status = _run(site, extra, tg_cache)
    print(f"\nreal: rc={status} {marks}")
    error = next(line for line in output.splitlines() if line.startswith("RuntimeError"))
    assert "cuDNN version incompatibility" in error and status != 0
    (finding,) = _late(predicted(site, extra, tg_cache), GRAPH)
    assert finding["code"] == "library-shadowed" and finding["severity"] == "warning"
    assert "but found runtime version (9, 1, 0)" in error
    assert "but found runtime version (9, 1, 0)" in str(finding["message"])


OLD_CUDNN = "9.1.0.70"
_AFTER_VERSION_ERROR = """
import ctypes, glob, os, torch
try:
    torch.backends.cudnn.version()
except RuntimeError:
    pass
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia",
                                         "cudnn", "lib", "libcudnn.so.9"))[0])
handle = ctypes.c_void_p()
print("OPS", lib.cudnnCreateTensorDescriptor(ctypes.byref(handle)), flush=True)
"""


def test_a_real_older_cudnn_graph_first_on_ld_library_path(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """The real libcudnn_graph.so.9 of cuDNN 9.1.0 (the one member kept of its wheel) first on
    LD_LIBRARY_PATH: torch raises its version error, then libcudnn_ops.so.9 (9.10) cannot
    bind to it and cuDNN aborts at the descriptor call."""
    site = scratch_site(base_site, tmp_path)
    old = cached_member(
        "nvidia-cudnn-cu12", OLD_CUDNN, f"nvidia/cudnn/lib/{GRAPH}", "manylinux2014_x86_64"
    )
    folder = tmp_path / "cudnn-9.1" / "lib"
    folder.mkdir(parents=True)
    shutil.copyfile(old, folder / GRAPH)
    extra = {"LD_LIBRARY_PATH": str(folder)}
    marks, output, status = _run(site, extra, tg_cache)
    print(f"\nreal: rc={status} {marks}")
    error = next(line for line in output.splitlines() if line.startswith("RuntimeError"))
    assert "but found runtime version (9, 1, 0)" in error and "OPS" not in marks
    report = predicted(site, extra, tg_cache)
    (graph,) = _late(report, GRAPH)
    assert graph["code"] == "library-shadowed" and "found runtime version (9, 1, 0)" in str(
        graph["message"]
    )
    assert graph["symbols"]  # API names 9.10's dispatcher looks up that 9.1 lacks
    # the descriptor call, made after torch's error, loads ops: it cannot bind to 9.1's graph
    done = real_run(site, extra, tg_cache, _AFTER_VERSION_ERROR)
    unable = next(line for line in (done.stdout + done.stderr).splitlines() if "Unable" in line)
    (ops,) = _late(report, "libcudnn_ops.so.9")
    assert ops["code"] == "missing-symbol" and unable in str(ops["message"])


def test_the_version_words_of_the_real_cudnn(base_site: Path) -> None:
    """The real sub-libraries export cuDNN's version as a word (9.10.2 for this wheel); the
    dispatcher names four sub-libraries and looks up 225 API names."""
    cudnn = base_site / "nvidia" / "cudnn" / "lib"
    graph = read_dlopen_facts(cudnn / GRAPH, "libcudnn")
    assert graph.version == "9.10.2"
    assert graph.stems == (
        "libcudnn_engines_precompiled.so",
        "libcudnn_engines_runtime_compiled.so",
        "libcudnn_heuristic.so",
    )
    dispatcher = read_dlopen_facts(cudnn / "libcudnn.so.9", "libcudnn")
    assert dispatcher.version is None and "cudnnGetVersion" in dispatcher.lookups
    assert dispatcher.stems == (
        "libcudnn_adv.so",
        "libcudnn_cnn.so",
        "libcudnn_graph.so",
        "libcudnn_ops.so",
    )


# After import torch: where libcuda.so.1 landed (cuBLASLt loads it while torch imports), then
# what CUDA says of it (no GPU here: "no driver" either way; the copy that landed is judged).
_CUDA_INIT = """
import torch
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l]
print("LIBCUDA", maps[0] if maps else "-", flush=True)
print("AVAILABLE", torch.cuda.is_available(), flush=True)
try:
    torch.cuda.init()
except RuntimeError as error:
    print("INIT", str(error).splitlines()[0], flush=True)
"""


def _libcuda(folder: Path, source: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the libcuda.so.1 stand-ins")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cuda.c").write_text(source)
    target = folder / "libcuda.so.1"
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-o",
            str(target),
            str(folder / "cuda.c"),
            "-Wl,-soname,libcuda.so.1",
        ],
        check=True,
        timeout=120,
    )
    return target


NO_ENTRY_POINTS = "int cuInit(unsigned flags) { return 0; }\n"
STUB_LIBRARY = """
int cuInit(unsigned f) { return 34; }
int cuDriverGetVersion(int *v) { *v = 12080; return 0; }
int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f) { return 34; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, void *r) { return 34; }
int cuGetExportTable(const void **t, const void *id) { return 34; }
"""


def _cuda(site: Path, extra: dict[str, str], cache: Path) -> dict[str, str]:
    done = real_run(site, extra, cache, _CUDA_INIT)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def test_a_libcuda_without_entry_points_first_on_ld_library_path_is_no_driver(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    site = scratch_site(base_site, tmp_path)
    stub = _libcuda(tmp_path / "stubs", NO_ENTRY_POINTS)
    extra = {"LD_LIBRARY_PATH": str(stub.parent)}
    marks = _cuda(site, extra, tg_cache)
    print(f"\nreal: {marks}")
    assert Path(marks["LIBCUDA"]).samefile(stub) and marks["AVAILABLE"] == "False"
    assert marks["INIT"].startswith("Found no NVIDIA driver on your system")
    (finding,) = _late(predicted(site, extra, tg_cache), "libcuda.so.1")
    assert finding["code"] == "cuda-driver-missing" and finding["severity"] == "warning"
    assert Path(str(finding["path"])).samefile(stub)
    assert marks["INIT"].split(".")[0] in str(finding["message"])


def test_cublaslt_loads_libcuda_while_torch_imports_before_cudarts_search(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """A driver-shaped copy beside cudart (on torch's RPATH, cudart's search) and one without
    entry points on LD_LIBRARY_PATH: cuBLASLt's initialisation loads the second during the
    import, so CUDA says "no driver", not the first copy's "stub library" (Error 34)."""
    site = scratch_site(base_site, tmp_path)
    beside = _libcuda(tmp_path / "stub-library", STUB_LIBRARY)
    (site / "nvidia" / "cuda_runtime" / "lib" / "libcuda.so.1").symlink_to(beside)
    alone = _cuda(site, {}, tg_cache)  # cuBLASLt finds nothing; cudart's search finds it
    print(f"\nreal, beside cudart only: {alone}")
    assert alone["LIBCUDA"] == "-" and "Error 34: CUDA driver is a stub library" in alone["INIT"]
    stub = _libcuda(tmp_path / "stubs", NO_ENTRY_POINTS)
    extra = {"LD_LIBRARY_PATH": str(stub.parent)}
    marks = _cuda(site, extra, tg_cache)
    print(f"real, and one on LD_LIBRARY_PATH: {marks}")
    assert Path(marks["LIBCUDA"]).samefile(stub)
    assert marks["INIT"].startswith("Found no NVIDIA driver on your system")
    (finding,) = _late(predicted(site, extra, tg_cache), "libcuda.so.1")
    assert str(finding["dll"]).lower() == "libcublaslt.so.12" and Path(
        str(finding["path"])
    ).samefile(stub)
    assert _late(predicted(site, {}, tg_cache), "libcuda.so.1") == []


# After import torch: a real NVRTC compile (no GPU needed), through the nvrtc torch mapped.
_NVRTC_COMPILE = """
import ctypes, torch
nvrtc = ctypes.CDLL("libnvrtc.so.12")
nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
program = ctypes.c_void_p()
source = b'extern "C" __global__ void k(float *x) { x[0] = sinf(x[0]); }'
nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, b"k.cu", 0, None, None)
options = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_80")
status = nvrtc.nvrtcCompileProgram(program, 1, options)
print("COMPILE", nvrtc.nvrtcGetErrorString(status).decode(), flush=True)
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(program, log)
print("LOG", " ".join(log.value.decode().split()), flush=True)
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libnvrtc-builtins" in l]
print("BUILTINS", maps[0] if maps else "-", flush=True)
"""

BUILTINS = "libnvrtc-builtins.so.12.8"


def _compile(site: Path, extra: dict[str, str], cache: Path) -> dict[str, str]:
    done = real_run(site, extra, cache, _NVRTC_COMPILE)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def test_missing_nvrtc_builtins_fail_the_first_compile_as_predicted(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """torch 2.9.1's preload stops silently at the missing builtins; nvrtc's own dlopen at
    the first compile then finds nothing ($ORIGIN, LD_LIBRARY_PATH, cache, defaults)."""
    site = scratch_site(base_site, tmp_path)
    (site / "nvidia" / "cuda_nvrtc" / "lib" / BUILTINS).unlink()
    marks = _compile(site, {}, tg_cache)
    print(f"\nreal: {marks}")
    assert marks["COMPILE"] == "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"
    (finding,) = _late(predicted(site, {}, tg_cache), BUILTINS)
    assert finding["code"] == "missing-dll" and finding["severity"] == "warning"
    said = marks["LOG"].split(" Make sure")[0]  # "nvrtc: error: failed to open ...so.12.8."
    assert said in str(finding["message"]), (said, finding["message"])


def test_a_builtins_copy_on_ld_library_path_is_defused_by_torchs_preload(
    base_site: Path, tg_cache: Path, tmp_path: Path
) -> None:
    """torch 2.9.1 preloads the wheel's builtins by path, so nvrtc reuses them by soname and
    a copy first on LD_LIBRARY_PATH never loads: no finding."""
    site = scratch_site(base_site, tmp_path)
    copies = tmp_path / "cuda-12.8" / "lib64"
    copies.mkdir(parents=True)
    shutil.copyfile(site / "nvidia" / "cuda_nvrtc" / "lib" / BUILTINS, copies / BUILTINS)
    extra = {"LD_LIBRARY_PATH": str(copies)}
    marks = _compile(site, extra, tg_cache)
    print(f"\nreal: {marks}")
    assert marks["COMPILE"] == "NVRTC_SUCCESS"
    assert Path(marks["BUILTINS"]).samefile(site / "nvidia" / "cuda_nvrtc" / "lib" / BUILTINS)
    assert _late(predicted(site, extra, tg_cache), BUILTINS) == []


def test_torchs_lazy_nvrtc_name_is_in_the_real_binary(base_site: Path) -> None:
    """LazyNVRTC's ``"libnvrtc.so." + major`` prefix, and nvrtc's builtins name, are what the
    real files hold (the model reads the builtins name from nvrtc; torch's from its CUDA)."""
    import mmap

    with open(base_site / "torch" / "lib" / "libtorch_cuda.so", "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            assert mapped.find(b"\0libnvrtc.so.\0") >= 0
        finally:
            mapped.close()
    nvrtc = base_site / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12"
    assert read_dlopen_facts(nvrtc, "libnvrtc").names == (BUILTINS,)
