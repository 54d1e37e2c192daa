"""`torchguard check` end to end: pip's reasons kept, the GPU question, the JSON error document,
usage hints, the cache command, Ctrl-C, progress. Real commands against local ``file://``
indexes of fake wheels (no network); the ``realwheel`` ones use PyPI and the shared cache."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeTorch, companion, write_wheel
from test_check import run

from torchguard._frontends import pip_python
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress


def publish(root: Path, project: str, name: str, files: dict[str, bytes] | None) -> None:
    """Add a file to a PEP 503 ``file://`` index (``files`` None: an sdist stand-in)."""
    folder = root / project
    folder.mkdir(parents=True, exist_ok=True)
    if files is None:
        (folder / name).write_bytes(b"not really a tarball")
    else:
        write_wheel(folder / name, files)
    links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(folder.iterdir()))
    (folder / "index.html").write_text(links)


def torch_files(version: str, requires: str = "", **fake: object) -> dict[str, bytes]:
    files = FakeTorch(version=version, **fake).files()  # type: ignore[arg-type]
    if requires:
        files[f"torch-{version}.dist-info/METADATA"] += requires.encode()
    return files


def vision(version: str, torch_pin: str) -> dict[str, bytes]:
    files = companion("torchvision", version, {"torchvision/__init__.py": b""}, {})
    files[f"torchvision-{version}.dist-info/METADATA"] += f"Requires-Dist: {torch_pin}\n".encode()
    files[f"torchvision-{version}.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nTag: py3-none-any\n"
    return files


@pytest.fixture
def index(tmp_path: Path) -> Path:
    root = tmp_path / "simple"
    for version in ("2.4.0", "2.4.1"):
        publish(root, "torch", f"torch-{version}-cp311-cp311-win_amd64.whl", torch_files(version))
    publish(
        root, "torchvision", "torchvision-0.19.0-py3-none-any.whl", vision("0.19.0", "torch==2.4.0")
    )
    publish(root, "torch-scatter", "torch_scatter-2.1.2.tar.gz", None)
    return root


def check(
    index: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run(
        *args,
        "--python",
        "3.11",
        "--index-url",
        index.as_uri(),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--no-verify",
        env=env,
    )


def test_conflict_keeps_pips_lines(index: Path, tmp_path: Path) -> None:
    result = check(index, tmp_path, "torch==2.4.1", "torchvision==0.19.0")
    assert result.returncode == 2 and result.stdout == ""
    assert "Cannot install torch==2.4.1 and torchvision==0.19.0" in result.stderr
    assert "the conflict is caused by:" in result.stderr
    assert "torchvision 0.19.0 depends on torch==2.4.0" in result.stderr


def test_no_wheel_for_this_python_is_named(index: Path, tmp_path: Path) -> None:
    result = run(
        "torch==2.4.0",
        "--python",
        "3.13",
        "--index-url",
        index.as_uri(),
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-verify",
    )
    # pip install itself fails: an answer (exit 1, one error), not a check that failed (2)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "error[no-matching-wheel]: torch 2.4.0 publishes no wheel for CPython 3.13 on win_amd64 "
        "(its Windows wheels: cp311 win_amd64)" in result.stdout
    ), result.stdout


def test_sdist_only_is_not_does_not_exist(index: Path, tmp_path: Path) -> None:
    result = check(index, tmp_path, "torch==2.4.1", "torch-scatter")
    assert result.returncode == 2
    assert "torch-scatter publishes only source distributions (torch_scatter-2.1.2.tar.gz)" in (
        result.stderr
    ), result.stderr


def test_constraint_file_keeps_network_and_missing_version_apart(
    index: Path, tmp_path: Path
) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<3\n")
    env = {"PIP_CONSTRAINT": str(constraints), "PIP_RETRIES": "0"}
    missing = check(index, tmp_path, "torch==9.9", env=env)
    assert missing.returncode == 2
    first = missing.stderr.splitlines()[0]
    assert first == "torchguard: error: no release matches torch==9.9", missing.stderr
    assert "has no torch ==9.9 (newest: 2.4.1)" in missing.stderr
    assert f"PIP_CONSTRAINT={constraints}" in missing.stderr
    unreachable = run(
        "torch",
        "--python",
        "3.11",
        "--index-url",
        "https://127.0.0.1:9/simple",
        "--cache-dir",
        str(tmp_path / "c2"),
        env=env,
    )
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith(
        "torchguard: error: cannot reach the package index https://127.0.0.1:9/simple"
    ), unreachable.stderr
    assert "conflicting" not in unreachable.stderr


def test_json_error_document_on_exit_2(index: Path, tmp_path: Path) -> None:
    result = check(index, tmp_path, "torch==9.9", "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False and document["error"]["kind"] == "resolution"
    assert "torch==9.9" in document["error"]["lines"][0]


def test_requirements_file_without_double_dash_gets_a_hint(tmp_path: Path) -> None:
    result = run("-r", str(tmp_path / "requirements.txt"))
    assert result.returncode == 2
    assert "pip options such as -r go after `--`" in result.stderr
    assert "torchguard check --python 3.11 -- -r requirements.txt" in result.stderr


def test_cpu_build_gets_the_cuda_index_and_a_named_gpu_a_warning(
    index: Path, tmp_path: Path
) -> None:
    plain = check(index, tmp_path, "torch==2.4.1")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0].startswith(
        "pip install torch==2.4.1 on Windows x64, CPython 3.11: import torch succeeds"
    )  # the verdict first, no assumed C:\Python before it
    assert "C:\\Python" not in plain.stdout
    assert (
        "for an NVIDIA GPU install the CUDA 12.4 build, NVIDIA driver 551.61 or newer: "
        "pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/cu124"
    ) in plain.stdout
    gpu = check(index, tmp_path, "torch==2.4.1", "--gpu", "RTX 4090", "--json")
    data = json.loads(gpu.stdout)
    finding = next(f for f in data["findings"] if f["code"] == "cpu-build-on-gpu")
    assert "https://download.pytorch.org/whl/cu124" in finding["hints"][0]["commands"][0]
    assert data["check"]["gpus"] == ["RTX 4090"]
    blackwell = check(index, tmp_path, "torch==2.4.1", "--gpu", "NVIDIA GeForce RTX 5090")
    assert "no CUDA build of torch 2.4.1 runs on NVIDIA GeForce RTX 5090 (sm_120)" in (
        blackwell.stdout
    )
    assert "torch==2.7.1 --index-url https://download.pytorch.org/whl/cu128" in blackwell.stdout


def test_the_direct_question_names_the_newest_build_for_the_gpu(
    index: Path, tmp_path: Path
) -> None:
    """``check torch torchvision --gpu NAME --cuda X.Y``: the newest build whose kernels cover
    the GPU and whose CUDA the driver runs, as one command with torchvision pinned to match."""
    pascal = check(
        index,
        tmp_path,
        "torch==2.4.0",
        "torchvision",
        "--gpu",
        "NVIDIA GeForce GTX 1080",
        "--json",
    )
    answer = json.loads(pascal.stdout)["check"]["gpu_answer"]
    assert (answer["torch"], answer["cuda"]) == ("2.14.1", "12.6")  # not cu128: no sm_61 there
    assert answer["siblings"] == {"torchvision": "0.29.2"}  # only what was asked, matching
    assert answer["command"].endswith(
        "torch==2.14.1 torchvision==0.29.2 --index-url https://download.pytorch.org/whl/cu126"
    )
    blackwell = check(
        index, tmp_path, "torch==2.4.1", "--gpu", "NVIDIA GeForce RTX 5090", "--cuda", "12.8"
    )
    lines = blackwell.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("answer: "))
    assert "is 2.11.0, built for CUDA 12.8" in lines[said]
    assert "too new for the driver: " in lines[said]
    assert (
        lines[said + 1]
        .strip()
        .endswith("torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128")
    )
    old_driver = check(
        index,
        tmp_path,
        "torch==2.4.1",
        "--gpu",
        "NVIDIA GeForce RTX 5090",
        "--cuda",
        "12.4",
        "--json",
    )
    nothing = json.loads(old_driver.stdout)["check"]["gpu_answer"]
    assert nothing["torch"] is None and nothing["command"] is None


def scan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", "scan", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_scan_gpu_on_a_cpu_wheel_and_cuda_driver(tmp_path: Path) -> None:
    wheel = FakeTorch(version="2.4.1+cpu").wheel(tmp_path)
    result = scan_cli(str(wheel), "--gpu", "RTX 4090", "--cuda", "12.1", "--json")
    data = json.loads(result.stdout)
    finding = next(f for f in data["findings"] if f["code"] == "cpu-build-on-gpu")
    # a driver for CUDA 12.1 cannot run the cu124 build: the newest it runs is cu121
    assert "https://download.pytorch.org/whl/cu121" in finding["hints"][0]["commands"][0]
    bad = scan_cli(str(wheel), "--cuda", "twelve")
    assert bad.returncode == 2 and "expected a CUDA version" in bad.stderr


def test_gpu_arch_from_a_cuda_wheel_offline(tmp_path: Path) -> None:
    """An RTX 50-series card and a cu124 wheel: no kernels for sm_120, from the wheel alone."""
    from pe_builder import build_pe

    kernels = build_pe(["KERNEL32.dll"])  # torch_cuda.dll: compressed in the wheel, not read
    wheel = FakeTorch(
        version="2.5.1+cu124", cuda="12.4", extra={"torch/lib/torch_cuda.dll": kernels}
    ).wheel(tmp_path)
    result = scan_cli(str(wheel), "--gpu", "NVIDIA GeForce RTX 5080", "--json")
    data = json.loads(result.stdout)
    finding = next(f for f in data["findings"] if f["code"] == "gpu-arch-unsupported")
    assert "no kernels for sm_120" in finding["message"]
    assert "cu128" in finding["hints"][0]["commands"][0]
    # a named GPU means a driver: no "no NVIDIA driver is installed" warning
    assert "cuda-driver-missing" not in [f["code"] for f in data["findings"]]


def test_cache_info_and_clean(index: Path, tmp_path: Path) -> None:
    assert check(index, tmp_path, "torch==2.4.1").returncode == 0
    cache = tmp_path / "cache"
    info = run_cache("info", cache)
    assert "1 wheel(s)" in info.stdout and "torch-2.4.1-cp311-cp311-win_amd64.whl" in info.stdout
    assert [p.name for p in (cache / ".verified").iterdir()] == [
        "torch-2.4.1-cp311-cp311-win_amd64.whl.json"
    ]
    # a wheel of the user's own in check's folder, and an interrupted download of check's
    (cache / "precious-1.0-py3-none-any.whl").write_bytes(b"x")
    (cache / "notes.whl.part").write_bytes(b"x")
    partial = cache / ".torchguard-4242-torch-2.4.1-cp311-cp311-win_amd64.whl.part"
    partial.write_bytes(b"x")
    assert (
        "1 other wheel(s) there were not downloaded by check: kept"
        in run_cache("info", cache).stdout
    )
    clean = run_cache("clean", cache)
    assert clean.returncode == 0 and "deleted 1 wheel(s)" in clean.stdout
    assert [p.name for p in cache.glob("*.whl")] == ["precious-1.0-py3-none-any.whl"]
    assert not partial.exists() and (cache / "notes.whl.part").exists()
    assert not (cache / ".verified").exists()
    # check wrote into a folder of the user's own wheels: clean deletes only what it wrote
    assert check(index, tmp_path, "torch==2.4.1").returncode == 0
    assert "1 wheel(s)" in run_cache("info", cache).stdout
    assert run_cache("clean", cache).returncode == 0
    assert [p.name for p in cache.glob("*.whl")] == ["precious-1.0-py3-none-any.whl"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious-1.0-py3-none-any.whl").write_bytes(b"x")
    refused = run_cache("clean", mine)
    assert refused.returncode == 2 and (mine / "precious-1.0-py3-none-any.whl").exists()


def run_cache(action: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", "cache", action, "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    import socket

    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torchguard",
                "check",
                "torch",
                "--python",
                "3.11",
                "--index-url",
                f"http://127.0.0.1:{port}/simple",
                "--cache-dir",
                str(tmp_path / "c"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DEFAULT_TIMEOUT": "120"},
            # a test run started in the background (`pytest &`) has SIGINT ignored, which the
            # child would inherit: Ctrl-C as a terminal sends it, to a process that hears it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # waiting on the index (its probe, before pip runs) once it has connected, not after a
        # fixed sleep that a loaded machine can outlast before torchguard gets there
        silent.settimeout(120)
        waiting, _ = silent.accept()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        waiting.close()
    finally:
        silent.close()
    assert proc.returncode == 130, stderr
    assert stderr == "torchguard: interrupted\n" and stdout == ""


def test_progress_line_fits_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    bar = Progress(out)
    bar.transfer(
        "downloading 1/3 torch-2.4.1-cp311-cp311-win_amd64.whl",
        5_000_000,
        126_000_000,
        time.monotonic() - 1,
    )
    line = out.getvalue().split("\r\x1b[K")[-1]
    assert len(line) <= 39 and "MB/s" in line and "ETA" in line and "126.0 MB" in line


def test_pip_from_another_python_when_this_one_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pip_python, "find_spec", lambda name: None)
    monkeypatch.setattr(pip_python, "candidates", lambda: ["/nonexistent/python", sys.executable])
    chosen = pip_python.pip_interpreter()
    assert chosen.python == sys.executable and chosen.runner.endswith("pip_windows.py")
    monkeypatch.setattr(pip_python, "candidates", lambda: ["/nonexistent/python"])
    with pytest.raises(PipFailure) as failure:
        pip_python.pip_interpreter()
    assert "uv pip install pip" in str(failure.value)


@pytest.mark.realwheel
def test_verified_fix_for_torch_240() -> None:
    from realwheels import CACHE, wheel

    wheel("torch", "2.4.0")
    result = run("torch==2.4.0", "--python", "3.11", "--cache-dir", str(CACHE))
    assert result.returncode == 1, result.stderr
    assert "fix (verified): " in result.stdout and "import torch succeeds" in result.stdout
    assert result.stdout.splitlines()[0].endswith('[WinError 126] Error loading "...\\fbgemm.dll"')


def test_check_in_an_environment_without_pip(index: Path, tmp_path: Path) -> None:
    """As in a venv made by uv: no pip inside, so the pip of another Python resolves."""
    import importlib.util
    import venv

    import packaging
    import pefile
    import platformdirs

    env = tmp_path / "nopip"
    venv.create(env, with_pip=False)
    python = env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    deps = tmp_path / "deps"
    deps.mkdir()
    for module in (pefile, packaging, platformdirs):
        source = Path(module.__file__ or "")
        target = source if source.name != "__init__.py" else source.parent
        (deps / target.name).symlink_to(target)
    for extra in ("ordlookup", "importlib_metadata", "zipp"):  # the last two: Python 3.9
        spec = importlib.util.find_spec(extra)
        if spec and spec.origin:
            origin = Path(spec.origin)
            target = origin.parent if origin.name == "__init__.py" else origin
            (deps / target.name).symlink_to(target)
    root = Path(__file__).resolve().parent.parent
    probe = subprocess.run([str(python), "-c", "import pip"], capture_output=True)
    assert probe.returncode != 0  # really without pip
    result = subprocess.run(
        [
            str(python),
            "-m",
            "torchguard",
            "check",
            "torch==2.4.1",
            "--python",
            "3.11",
            "--index-url",
            index.as_uri(),
            "--cache-dir",
            str(tmp_path / "c"),
            "--no-verify",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": f"{root}{os.pathsep}{deps}",
            "PIP_CONFIG_FILE": os.devnull,
        },
    )
    assert result.returncode == 0, result.stderr
    assert "import torch succeeds" in result.stdout.splitlines()[0]


def test_cpu_note_names_siblings_and_releases_past_the_table(index: Path, tmp_path: Path) -> None:
    pair = check(index, tmp_path, "torch==2.4.0", "torchvision==0.19.0")
    assert (
        "pip install torch==2.4.0 torchvision==0.19.0 "
        "--index-url https://download.pytorch.org/whl/cu124"
    ) in pair.stdout, pair.stdout + pair.stderr
    publish(index, "torch", "torch-2.16.0-cp311-cp311-win_amd64.whl", torch_files("2.16.0"))
    newest = check(index, tmp_path, "torch==2.16.0")
    assert "pip install torch==2.16.0 --index-url https://download.pytorch.org/whl/cu132" in (
        newest.stdout
    ), newest.stdout + newest.stderr
    assert "torchguard's table ends at 2.15" in newest.stdout
