"""`torchguard check` on a ComfyUI-like requirements file, against pip's own dry run.

    python benchmarks/check_speed.py [--python 3.12] [--requirements FILE]

Measured in one run, each with empty caches where it says cold (its own pip HTTP cache and
torchguard wheel cache in a temporary folder; nothing of the user's is read or written):

- pip alone: `pip install --dry-run --report` for Windows x64 CPython (torchguard's marker
  environment, without range requests: ``TORCHGUARD_FAST_DEPS=off``), cold then warm: the
  baseline every ratio is printed against;
- `torchguard check -r FILE`, cold (resolution, downloads, scan);
- `torchguard check -r FILE six`, warm: the same file plus one pure-Python package, so no
  stored resolution is reused; pip's HTTP cache and the wheel cache are the cold run's.

Which pip runs is printed: a pip whose dry run downloads nothing after resolving (25.3 and
later) reads each wheel's metadata with HTTP range requests where the index serves no
separate metadata file (:func:`torchguard._frontends.pip_windows.lazy_metadata`); an older
one downloads every wheel. Targets (issue 22.4): check under 30 s cold and 10 s warm.
Exits 1 when one is missed. Needs the network (PyPI); downloads a few hundred MB cold.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchguard._frontends.pip_python import pip_interpreter  # noqa: E402
from torchguard._frontends.resolve import pip_arguments  # noqa: E402

REQUIREMENTS = ROOT / "benchmarks" / "requirements" / "comfyui-like.txt"
COLD_TARGET, WARM_TARGET = 30.0, 10.0


def timed(command: list[str], environ: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=environ, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # check: 1 is a verdict with errors, still an answer
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}")
    return seconds


def pip_alone(requirements: Path, python: str, environ: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory() as target:
        arguments = pip_arguments(["-r", str(requirements)], python, [], target)
        command = pip_interpreter().command(python, arguments)
        return timed(command, {**environ, "TORCHGUARD_FAST_DEPS": "off"})


def check(extra: list[str], requirements: Path, python: str, environ: dict[str, str]) -> float:
    command = [sys.executable, "-m", "torchguard", "check", "--python", python, "--no-verify"]
    command += ["--cache-dir", environ["TORCHGUARD_WHEELS"], "--", "-r", str(requirements)]
    return timed([*command, *extra], environ)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    args = parser.parse_args()
    pip = pip_interpreter()
    version = subprocess.run(
        [pip.python, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    with tempfile.TemporaryDirectory() as tmp:
        base = {
            **os.environ,
            "PIP_CONFIG_FILE": os.devnull,
            "PYTHONPATH": str(ROOT),
            "TORCHGUARD_CACHE_DIR": str(Path(tmp, "facts")),
        }
        alone = {**base, "PIP_CACHE_DIR": str(Path(tmp, "pip-alone"))}
        mine = {
            **base,
            "PIP_CACHE_DIR": str(Path(tmp, "pip-check")),
            "TORCHGUARD_WHEELS": str(Path(tmp, "wheels")),
        }
        lines = sum(1 for line in args.requirements.read_text().splitlines() if line.strip())
        print(f"{args.requirements.name}: {lines} lines, CPython {args.python}, pip {version}")
        pip_cold = pip_alone(args.requirements, args.python, alone)
        check_cold = check([], args.requirements, args.python, mine)
        pip_warm = pip_alone(args.requirements, args.python, alone)
        check_warm = check(["six"], args.requirements, args.python, mine)
    print(f"pip --dry-run alone, cold: {pip_cold:6.1f} s   warm: {pip_warm:6.1f} s")
    print(f"torchguard check,    cold: {check_cold:6.1f} s ({check_cold / pip_cold:.2f}x pip cold)")
    print(
        f"torchguard check,    warm: {check_warm:6.1f} s ({check_warm / pip_warm:.2f}x pip warm; "
        "the same file plus one pure-Python package)"
    )
    ok = check_cold < COLD_TARGET and check_warm < WARM_TARGET
    print(
        f"target: cold < {COLD_TARGET:.0f} s and warm < {WARM_TARGET:.0f} s: "
        + ("met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
