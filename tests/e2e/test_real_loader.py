"""The real Windows loader is the judge: torchguard's verdicts against real ``import torch``.

Each scenario breaks a copy of a real torch 2.4.1 install on purpose, then runs, in fresh
Windows processes under Wine: ``torchguard.diagnose()`` (the prediction) and a plain
``import torch`` (the truth). They must agree on the outcome, the WinError and the DLL torch
names, and torchguard's missing leaf must be the module Wine's loader reports as failing.
Only codes and DLL names are compared, never message wording.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import ntpath
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROWS
from realwheels import wheel
from wine import WineEnv, failed_module, parse

pytestmark = pytest.mark.e2e

VERDICT = """
import json, torchguard
r = torchguard.diagnose()
e = r.errors[0] if r.errors else None
o = lambda x: x.to_dict() if x else None
print("TG-JSON " + json.dumps({
    "ok": r.ok, "code": e.code if e else None,
    "missing": (e.missing or "").lower() if e else None,
    "codes": [f.code for f in r.findings],
    "plain": o(r.import_torch_without_torchguard), "guarded": o(r.import_torch),
}))
"""

REAL = """
import json, ntpath, re
try:
    import torch
    out = {"ok": True, "winerror": None, "dll": None}
except OSError as exc:
    m = re.search(r'Error loading "([^"]+)"', str(exc))
    out = {"ok": False, "winerror": exc.winerror, "dll": ntpath.basename(m.group(1)).lower() if m else None}
except ImportError as exc:
    m = re.search(r"while importing (\\w+)", str(exc))
    out = {"ok": False, "winerror": None, "dll": m.group(1) if m else None}
print("TG-JSON " + json.dumps(out))
"""

ENSURED = """
import json, torchguard
try:
    torchguard.ensure()
    import torch
    out = {"ok": bool((torch.ones(2) * 2).sum() == 4)}
except Exception as exc:
    out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:800],
           "diagnosis": isinstance(exc, torchguard.TorchDllError),
           "code": getattr(exc, "code", None), "missing": (getattr(exc, "missing", None) or "").lower()}
print("TG-JSON " + json.dumps(out))
"""

HOOKED = """
import json
try:
    import torch
    out = {"ok": True}
except ImportError as exc:
    out = {"ok": False, "type": type(exc).__name__, "code": getattr(exc, "code", None),
           "missing": (getattr(exc, "missing", None) or "").lower()}
print("TG-JSON " + json.dumps(out))
"""


@dataclass
class Case:
    site: Path
    extra_paths: tuple[Path, ...] = ()


Sabotage = Callable[[WineEnv, Path], "contextlib.AbstractContextManager[tuple[Path, ...]]"]


@contextlib.contextmanager
def healthy(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
    yield ()


def removed(name: str) -> Sabotage:
    @contextlib.contextmanager
    def sabotage(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
        env.remove(site / "torch" / "lib" / name)
        yield ()

    return sabotage


def truncated(name: str) -> Sabotage:
    @contextlib.contextmanager
    def sabotage(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
        env.truncate(site / "torch" / "lib" / name, 4096)
        yield ()

    return sabotage


def from_release(name: str, version: str) -> Sabotage:
    """torch\\lib\\NAME replaced by the same file of another torch release (a stale leftover)."""

    @contextlib.contextmanager
    def sabotage(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
        with zipfile.ZipFile(wheel("torch", version)) as archive:
            data = archive.read(f"torch/lib/{name}")
        target = site / "torch" / "lib" / name
        env.remove(target)  # a hard link to the pristine tree: never write through it
        target.write_bytes(data)
        yield ()

    return sabotage


@contextlib.contextmanager
def no_vc_runtime(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
    with env.hide_system_dll("msvcp140.dll"):
        yield ()


@contextlib.contextmanager
def openmp_in_pip_target(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
    """libiomp5md.dll moved into an intel-openmp installed with ``pip install --target T``.

    That is the layout pip really makes (checked with pip 24.2 on Windows): the DLLs in
    ``T\\Library\\bin``, the dist-info in ``T``, RECORD saying ``../../Library/bin/...``.
    torch 2.4.1 does not register ``T\\Library\\bin``.
    """
    target = site.parent / "target"
    moved = env.move(site / "torch" / "lib" / "libiomp5md.dll", target / "Library" / "bin")
    info = target / "intel_openmp-2021.4.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    data = moved.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: intel-openmp\nVersion: 2021.4.0\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(
        f"../../Library/bin/libiomp5md.dll,sha256={digest},{len(data)}\n"
        "intel_openmp-2021.4.0.dist-info/METADATA,,\n"
        "intel_openmp-2021.4.0.dist-info/INSTALLER,,\n"
        "intel_openmp-2021.4.0.dist-info/RECORD,,\n"
    )
    yield (target,)


def cuda_dlls(without: str | None = None) -> Sabotage:
    """Genuine NVIDIA CUDA 12.4 DLLs (cudart, cuSPARSE 12.3.1, nvJitLink) added to torch\\lib.

    Only NVIDIA's own files (no built stand-ins, which import functions no real DLL exports):
    torch preloads every torch\\lib\\*.dll, so the real loader judges cusparse64_12.dll's
    import of nvJitLink_120_0.dll. Nothing here initialises CUDA or loads a driver DLL.
    """

    @contextlib.contextmanager
    def sabotage(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
        from gpuwheels import VARIANTS, nvidia_dlls

        lib = site / "torch" / "lib"
        for project, version in VARIANTS["cu124"].wheels:
            for name, path in nvidia_dlls(project, version).items():
                if name != without:
                    try:
                        os.link(path, lib / name)
                    except OSError:
                        shutil.copyfile(path, lib / name)
        yield ()

    return sabotage


SCENARIOS: dict[str, Sabotage] = {
    "healthy": healthy,
    "libiomp5md.dll removed": removed("libiomp5md.dll"),
    "uv.dll removed": removed("uv.dll"),
    "c10.dll removed": removed("c10.dll"),
    "no VC++ runtime (msvcp140.dll)": no_vc_runtime,
    "fbgemm.dll truncated": truncated("fbgemm.dll"),
    "libiomp5md.dll truncated": truncated("libiomp5md.dll"),
    "libiomp5md.dll in a pip --target intel-openmp": openmp_in_pip_target,
    "healthy, under a [bracketed] path": healthy,
    "uv.dll removed, under a [bracketed] path": removed("uv.dll"),
    "c10.dll from torch 2.15.0": from_release("c10.dll", "2.15.0"),
    "NVIDIA CUDA 12.4 DLLs added (cudart, cuSPARSE, nvJitLink)": cuda_dlls(),
    "NVIDIA CUDA 12.4 DLLs added, nvJitLink_120_0.dll missing": cuda_dlls("nvJitLink_120_0.dll"),
}


@contextlib.contextmanager
def foreign_openmp(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
    """A copy of libiomp5md.dll in another folder, loaded (and initialised) before torch."""
    other = site.parent / "other-openmp"
    other.mkdir(exist_ok=True)
    (other / "libiomp5md.dll").write_bytes((site / "torch" / "lib" / "libiomp5md.dll").read_bytes())
    yield ()


def load_foreign_openmp(env: WineEnv, site: Path) -> str:
    """Code run first in each process: what numpy/MKL or ctranslate2 would have done."""
    path = env.to_windows(site.parent / "other-openmp" / "libiomp5md.dll")
    return f"import ctypes\nctypes.CDLL({path!r}).omp_get_max_threads()\n"


SCENARIOS["another libiomp5md.dll loaded first"] = foreign_openmp


#: Code that runs before the prediction and the real import, in the same process. With
#: another libiomp5md.dll already loaded the real loader binds torch's imports to it by name
#: (its own copy, preloaded by full path, stays unused): no "OMP: Error #15", import works.
PRELUDES: dict[str, Callable[[WineEnv, Path], str]] = {
    "another libiomp5md.dll loaded first": load_foreign_openmp,
}

#: Scenarios in which the real `import torch` is expected to work (the rest must break it).
IMPORT_WORKS = {
    "healthy",
    "NVIDIA CUDA 12.4 DLLs added (cudart, cuSPARSE, nvJitLink)",
    "healthy, under a [bracketed] path",
    "another libiomp5md.dll loaded first",
}


def moved_out(folder: str) -> Sabotage:
    """torch\\lib\\libiomp5md.dll moved into ``folder`` beside the scenario's site-packages."""

    @contextlib.contextmanager
    def sabotage(env: WineEnv, site: Path) -> Iterator[tuple[Path, ...]]:
        env.move(site / "torch" / "lib" / "libiomp5md.dll", site.parent / folder)
        yield ()

    return sabotage


def on_path(env: WineEnv, site: Path) -> str:
    """The folder goes first on PATH (as an installer or a user's shell would put it)."""
    folder = env.to_windows(site.parent / "on-path")
    return f"import os\nos.environ['PATH'] = {folder!r} + ';' + os.environ['PATH']\n"


def in_working_directory(env: WineEnv, site: Path) -> str:
    """The program runs from the folder holding the DLL (a portable app's own folder)."""
    return f"import os\nos.chdir({env.to_windows(site.parent / 'cwd')!r})\n"


# torch's preload fails (LOAD_LIBRARY_SEARCH_DEFAULT_DIRS searches neither PATH nor the
# current directory), then its retry with LoadLibraryW, whose standard search order has both,
# finds libiomp5md.dll: `import torch` works, and torchguard may warn but never report an error.
SCENARIOS["libiomp5md.dll only on PATH"] = moved_out("on-path")
PRELUDES["libiomp5md.dll only on PATH"] = on_path
SCENARIOS["libiomp5md.dll only in the working directory"] = moved_out("cwd")
PRELUDES["libiomp5md.dll only in the working directory"] = in_working_directory
IMPORT_WORKS |= {"libiomp5md.dll only on PATH", "libiomp5md.dll only in the working directory"}

#: Scenarios whose folder name matters: glob reads "[...]" in torch's path as a pattern, so
#: torch preloads nothing and the failure surfaces at ``from torch._C import *`` instead.
FOLDERS = {
    "healthy, under a [bracketed] path": "healthy [bracketed]",
    "uv.dll removed, under a [bracketed] path": "uv removed [bracketed]",
}


#: Where Wine's loader is known to differ from Windows' own, and the WinError is not compared.
#: Wine turns any failure to load an import into STATUS_DLL_NOT_FOUND (126) for the importer;
#: Windows keeps the dependency's STATUS_INVALID_IMAGE_FORMAT (0xc000007b, WinError 193), the
#: "unable to start correctly (0xc000007b)" of a wrong or damaged DLL beside an application.
#: The DLL torch names and the module the loader blames are still compared.
WINE_DIVERGENCES = {
    "libiomp5md.dll truncated": "Wine reports 126 for a damaged dependency; Windows reports 193",
    "c10.dll from torch 2.15.0": (
        "Wine binds missing imports to stubs and fails later; Windows fails the load with "
        "WinError 127, as the binaries' own tables say"
    ),
}


def outcome_text(outcome: dict[str, object] | None) -> str:
    if not outcome:
        return "?"
    if outcome.get("ok"):
        return "ok"
    if outcome.get("winerror") is None:
        return f"ImportError while importing {stem(outcome.get('dll'))}"
    return f"WinError {outcome.get('winerror')} naming {outcome.get('dll')}"


def stem(dll: object) -> str:
    """``fbgemm`` for ``fbgemm.dll``, ``_c`` for ``_C.cp311-win_amd64.pyd`` and for ``_C``."""
    return str(dll).split(".", 1)[0].lower()


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_verdict_matches_the_real_loader(wine_env: WineEnv, name: str) -> None:
    site = wine_env.make_scenario_site(FOLDERS.get(name, slug(name)))
    with SCENARIOS[name](wine_env, site) as extra:
        prelude = PRELUDES.get(name, lambda env, site: "")(wine_env, site)
        verdict = parse(wine_env.run(prelude + VERDICT, site, extra_paths=extra))
        real_run = wine_env.run(
            prelude + REAL, site, extra_paths=extra, env={"WINEDEBUG": "warn+module"}
        )
        real = parse(real_run)
        ensured = parse(wine_env.run(prelude + ENSURED, site, extra_paths=extra))
    plain = verdict["plain"]
    assert isinstance(plain, dict)
    wine_module = None if real["ok"] else failed_module(real_run.stderr)
    divergence = WINE_DIVERGENCES.get(name)
    # "DLL load failed while importing _C" (an ImportError) carries no WinError and names the
    # module, not the file: compare stems, and the WinError only where the real error has one.
    same_outcome = plain["ok"] == real["ok"] and (
        real["ok"]
        or (
            stem(plain["dll"]) == stem(real["dll"])
            and (
                divergence is not None
                or real["winerror"] is None
                or plain["winerror"] == real["winerror"]
            )
        )
    )
    # When the real import fails, torchguard must blame what the loader blamed: an error's
    # missing leaf, or (import repaired by ensure()) the leaf of its needs-dll-directory warning.
    same_leaf = (
        wine_module is None
        or verdict["missing"] == wine_module
        or (
            verdict["ok"] and "needs-dll-directory" in verdict["codes"]  # type: ignore[operator]
        )
    )
    # The guarded outcome, in every scenario: `ensure(); import torch` works where torchguard
    # says ok, and otherwise ensure() itself raises the diagnosis torchguard predicted.
    guarded = verdict["guarded"]
    assert isinstance(guarded, dict)
    repaired = (
        ensured["ok"]
        if guarded["ok"]
        else (
            ensured.get("diagnosis") is True
            and ensured.get("code") == verdict["code"]
            and ensured.get("missing") == verdict["missing"]
        )
    )
    verdict_text = "ok" if verdict["ok"] else f"{verdict['code']}: {verdict['missing']}"
    if verdict["ok"] and verdict["codes"]:
        verdict_text += f" ({', '.join(map(str, verdict['codes']))})"
    if verdict["ok"] and not real["ok"]:
        verdict_text += "; `ensure(); import torch` " + ("works" if ensured["ok"] else "FAILS")
    agree = same_outcome and same_leaf and repaired
    ROWS.append(
        {
            "scenario": name,
            "verdict": verdict_text,
            "predicted": outcome_text(plain),
            "real": outcome_text(real),
            "wine": wine_module or "-",
            "agree": ("yes" if agree else "**NO**") + (f" ({divergence})" if divergence else ""),
        }
    )
    assert same_outcome, f"torchguard predicted {plain}, the real import gave {real}"
    assert same_leaf, f"torchguard blamed {verdict['missing']}, Wine's loader {wine_module}"
    assert repaired, f"the guarded outcome differs from the verdict: {ensured}"
    if name in IMPORT_WORKS:
        assert real["ok"], "the real import was expected to work"
        assert verdict["ok"], f"a false alarm on a working import: {verdict['codes']}"
    else:
        assert not real["ok"], "the sabotage did not break the real import"
        assert not verdict["ok"] or verdict["codes"], "torchguard saw nothing"


def test_hook_turns_import_torch_into_the_diagnosis(wine_env: WineEnv) -> None:
    """With the hook's .pth in site-packages, a plain `import torch` names the missing uv.dll."""
    from torchguard._hook import write_hook_files

    site = wine_env.make_scenario_site("hook-uv-removed")
    wine_env.remove(site / "torch" / "lib" / "uv.dll")
    write_hook_files(site)
    hooked = parse(wine_env.run(HOOKED, site))
    ROWS.append(
        {
            "scenario": "hook installed, uv.dll removed",
            "verdict": f"{hooked.get('type')} {hooked.get('code')}: {hooked.get('missing')}",
            "predicted": "TorchDllError naming uv.dll",
            "real": "ok" if hooked["ok"] else f"{hooked.get('type')} raised",
            "wine": "-",
            "agree": "yes" if hooked.get("missing") == "uv.dll" else "**NO**",
        }
    )
    assert hooked == {
        "ok": False,
        "type": "MissingDllError",
        "code": "missing-dll",
        "missing": "uv.dll",
    }


DOCTOR = """
import runpy, sys
sys.argv = ["torchguard", "doctor", "--json"]
try:
    runpy.run_module("torchguard", run_name="__main__")
except SystemExit as exc:
    print("EXIT", exc.code)
"""


def test_doctor_json_on_windows(wine_env: WineEnv) -> None:
    """`python -m torchguard doctor --json` in a real Windows Python: one JSON document, exit 1."""
    site = wine_env.make_scenario_site("doctor-c10-removed")
    wine_env.remove(site / "torch" / "lib" / "c10.dll")
    result = wine_env.run(DOCTOR, site)
    document, _, exit_line = result.stdout.rpartition("EXIT ")
    assert exit_line.strip() == "1", result.stderr[-2000:]
    data = json.loads(document)
    assert data["mode"] == "live" and data["ok"] is False
    assert data["torch"]["version"] == "2.4.1+cpu"
    first = data["findings"][0]
    assert (first["code"], first["missing"], first["dll"]) == ("missing-dll", "c10.dll", "shm.dll")
    assert data["import_torch"] == {"ok": False, "winerror": 126, "dll": "shm.dll", "abort": None}
    assert data["python"]["app_dir"].lower().endswith("python311")
    assert any(d["path"].lower().endswith("torch\\lib") for d in data["dll_directories"])


_PYTHON_DIR = "python311"
LIVE = """
import json, ntpath, os, platform, sys
import torchguard
from torchguard._platforms.windows import live as _live
from torchguard._platforms.windows import register as _register
from torchguard._binary.pe.machine import file_machine
from torchguard._facts.interpreter import torch_package_dir
image = _live.process_image()
loaded = _live.loaded_modules()
report = torchguard.ensure()
system = _live.live_windows()
system.close()
print("TG-JSON " + json.dumps({
    "image": image, "image_machine": file_machine(image), "python_machine": _live.python_machine(),
    "host": platform.machine(), "interpreter_machine": system.interpreter.machine,
    "report_machine": report.python.get("machine"),
    "python_dll": loaded.get("python311.dll"), "kernel32": loaded.get("kernel32.dll"),
    "known": sorted(_live.known_dlls()), "system32": _live.system_directory(),
    "app_dir": _live.process_image_dir(), "registered": _register.registered(),
    "torch_dir": torch_package_dir(),
}))
"""


def test_live_facts_come_from_the_running_windows_process(wine_env: WineEnv) -> None:
    """_live for real: the interpreter's CPU from its own image, loaded modules, directories."""
    site = wine_env.make_scenario_site("live-facts")
    data = parse(wine_env.run(LIVE, site))
    image = str(data["image"]).lower()
    assert image.endswith("python.exe") and _PYTHON_DIR in image
    assert data["image_machine"] == data["python_machine"] == 0x8664  # x64 embeddable CPython
    assert data["interpreter_machine"] == 0x8664 and data["report_machine"] == "x64"
    assert str(data["python_dll"]).lower().startswith(str(data["app_dir"]).lower())
    assert str(data["kernel32"]).lower().startswith(str(data["system32"]).lower())
    assert "ntdll.dll" in data["known"]  # type: ignore[operator]
    torch_lib = ntpath.join(str(data["torch_dir"]), "lib")
    registered = [ntpath.normcase(p) for p in data["registered"]]  # type: ignore[attr-defined]
    assert ntpath.normcase(torch_lib) not in registered  # torch registers its own folder


PLANTED_HOOK = """
import json, pefile
def boom(*args, **kwargs):
    raise TypeError("planted fault")
pefile.PE.parse_data_directories = boom
import torch
print("TG-JSON " + json.dumps({"ok": bool((torch.ones(2) * 2).sum() == 4)}))
"""


def test_hook_fails_open_on_a_planted_fault_in_real_windows(wine_env: WineEnv) -> None:
    """A fault inside pefile, met by the real ensure() in a real Windows process."""
    from torchguard._hook import write_hook_files

    site = wine_env.make_scenario_site("hook-planted-fault")
    write_hook_files(site)
    result = wine_env.run(PLANTED_HOOK, site, env={"TORCHGUARD_CACHE": "off"})  # read every DLL
    assert parse(result) == {"ok": True}
    lines = [line for line in result.stderr.splitlines() if line.startswith("torchguard:")]
    assert len(lines) == 1, result.stderr[-2000:]
    assert "internal error ignored" in lines[0] and "planted fault" in lines[0]


LIVE_GPU_FACTS = """
from torchguard._platforms.windows.live import commit_status, display_adapters
limit, available = commit_status()
print("COMMIT", limit, available)
print("ADAPTERS", len(display_adapters()))
"""


def test_commit_status_and_display_adapters_read_live(wine_env: WineEnv) -> None:
    """GlobalMemoryStatusEx and the display-class registry key, read by a real Windows Python."""
    site = wine_env.make_scenario_site("live-gpu-facts")
    result = wine_env.run(LIVE_GPU_FACTS, site)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert "COMMIT" in lines, result.stderr[-2000:]
    limit, available = (int(x) for x in lines["COMMIT"].split())
    assert limit >= available > 0
    assert int(lines["ADAPTERS"]) >= 0


WARM_LIVE = """
import json, time, torchguard
from torchguard._platforms.windows import binaries as _binaries
torchguard.diagnose()  # cold: reads every binary, symbol tables included, fills the cache
reads = []
real = _binaries._read
def counting(tree, path):
    reads.append(path)
    return real(tree, path)
_binaries._read = counting
start = time.perf_counter()
report = torchguard.diagnose()
print("TG-JSON " + json.dumps({"ok": report.ok, "reads": reads,
                               "seconds": time.perf_counter() - start}))
"""


def test_a_warm_live_analysis_reads_no_dll(wine_env: WineEnv, tmp_path: Path) -> None:
    """Live, every binding is judged against the real System32 files (kernel32 forwarding into
    ntdll included); a second analysis takes every fact and verdict from the cache."""
    site = wine_env.make_scenario_site("warm-live")
    cache = tmp_path / "cache"
    cache.mkdir()
    data = parse(
        wine_env.run(WARM_LIVE, site, env={"TORCHGUARD_CACHE_DIR": wine_env.to_windows(cache)})
    )
    assert data["ok"] is True
    assert data["reads"] == []
