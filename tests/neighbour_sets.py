"""The four requirement sets of issue 24's done-when (``tests/neighbour_sets/*.txt``: a
faster-whisper set, an onnxruntime-gpu set, a kohya_ss-like set with bitsandbytes, a ComfyUI
set with triton-windows), each modelled on a real project's pins (cited in its first line), and
``torchguard check``'s verdict on one, run as a user runs it.

The verdict is what the real-wheel tier records (``test_neighbour_sets.py``) and what the Wine
tier compares with the real loader (``e2e/test_neighbour_sets_loader.py``). check answers for
Windows only (``--platform`` takes ``win_amd64`` or ``win_arm64``); PyPI's Windows torch is the
CPU build, so no set here has a torch that loads CUDA DLLs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).parent / "neighbour_sets"
SETS = ("faster-whisper", "onnxruntime-gpu", "kohya-bitsandbytes", "comfyui-triton")
#: The native wheels each set resolves to that weigh (about 250 MB beside torch 2.9.1's 111 MB):
#: ``tests/prefetch.py`` fetches them ahead; the real-wheel test checks each is resolved.
PINNED = {
    "faster-whisper": (("ctranslate2", "4.8.5"),),
    "onnxruntime-gpu": (("onnxruntime-gpu", "1.15.1"), ("numpy", "1.26.4")),
    "kohya-bitsandbytes": (("bitsandbytes", "0.45.2"), ("torchvision", "0.24.1")),
    "comfyui-triton": (("triton-windows", "3.5.1.post24"),),
}


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    findings: tuple[tuple[str, str, str, str], ...]
    """(code, severity, package, missing) of each finding."""
    wheels: tuple[str, ...]
    """The wheel files pip would install, as check downloaded them into the cache."""
    commands: tuple[str, ...]
    """Every command the findings' hints propose."""
    torch: str
    """torch's version as check read it from the wheel (``2.9.1+cpu``)."""
    output: str


def requirements(name: str) -> Path:
    return FOLDER / f"{name}.txt"


def check(name: str, cache: Path, python: str = "3.11") -> Verdict:
    """``torchguard check --python 3.11 -- -r <set>`` in a child process, against PyPI, with the
    machine's pip configuration lifted (it caps torch's version) and wheels kept in ``cache``."""
    result = _run(name, cache, python, "--json")
    output = result.stdout + result.stderr
    if result.returncode not in (0, 1):
        raise AssertionError(
            f"check on {name} did not answer (exit {result.returncode}):\n{output}"
        )
    data = json.loads(result.stdout)
    findings = tuple(
        (f["code"], f["severity"], f.get("package") or "", f.get("missing") or "")
        for f in data["findings"]
    )
    wheels = tuple(data["check"]["wheels"])
    commands = tuple(c for f in data["findings"] for h in f["hints"] for c in h["commands"])
    return Verdict(result.returncode, findings, wheels, commands, data["torch"]["version"], output)


def text(name: str, cache: Path, python: str = "3.11") -> str:
    """``check``'s text answer on a set (its ``note:`` lines are not in the JSON document)."""
    result = _run(name, cache, python)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.stdout


def _run(name: str, cache: Path, python: str, *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    argv = [sys.executable, "-m", "torchguard", "check", "--python", python]
    argv += ["--cache-dir", str(cache), "--no-verify", *options, "--resolve-timeout", "600"]
    argv += ["--", "-r", str(requirements(name))]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
