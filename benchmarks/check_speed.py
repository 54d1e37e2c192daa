"""`torchguard check` on a ComfyUI-like requirements file, against pip's own dry run.

    python benchmarks/check_speed.py [--python 3.12] [--requirements FILE] [--no-pip-check]

Measured in one run, each with empty caches where it says cold (its own pip HTTP cache and
torchguard wheel cache in a temporary folder; nothing of the user's is read or written):

- pip alone: `pip install --dry-run --report` for Windows x64 CPython (torchguard's marker
  environment, without range requests: ``TORCHGUARD_FAST_DEPS=off``), cold then warm: the
  baseline every ratio is printed against;
- `torchguard check -r FILE`, cold (resolution, downloads, scan);
- `torchguard check -r FILE six`, warm: the same file plus one pure-Python package, so no
  stored resolution is reused; pip's HTTP cache and the wheel cache are the cold run's.

Each ``check`` runs twice where uv is installed (``--resolver pip`` and ``--resolver uv``, each
with wheel, facts and uv caches of its own), and uv's own ``uv pip compile`` of the same question
(:func:`torchguard._frontends.uv_resolve.uv_command`), cold then warm, is timed beside pip's.
``--no-pip-check`` leaves out the ``--resolver pip`` checks (minutes).

Which pip runs is printed: a pip whose dry run downloads nothing after resolving (25.3 and
later) reads each wheel's metadata with HTTP range requests where the index serves no
separate metadata file (:func:`torchguard._frontends.pip_windows.lazy_metadata`); an older
one downloads every wheel. Targets (issue 22.4): check under 30 s cold and 10 s warm (with uv
where it is installed). Exits 1 when one is missed. Needs the network (PyPI); downloads a few
hundred MB cold (twice with uv: each resolver's check has a wheel cache of its own).
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
from torchguard._frontends.uv_resolve import find_uv, parse_settings, uv_command  # noqa: E402

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


def uv_alone(uv: str, requirements: Path, python: str, environ: dict[str, str]) -> float:
    """`uv pip compile` of the question check puts to uv (pip's configuration included)."""
    from torchguard._frontends.requirement_input import read_requirements

    pip = pip_interpreter()
    listed = subprocess.run(
        [pip.python, "-m", "pip", "config", "list"], env=environ, capture_output=True, text=True
    ).stdout
    with tempfile.TemporaryDirectory() as folder:
        arguments = read_requirements(["-r", str(requirements)]).arguments
        command = uv_command(
            uv, arguments, python, "win_amd64", [], parse_settings(listed), f"{folder}/r.in"
        )
        return timed(command, environ)


def check(
    extra: list[str], requirements: Path, python: str, environ: dict[str, str], resolver: str
) -> float:
    command = [sys.executable, "-m", "torchguard", "check", "--python", python, "--no-verify"]
    command += ["--resolver", resolver, "--cache-dir", environ["TORCHGUARD_WHEELS"]]
    command += ["--", "-r", str(requirements)]
    return timed([*command, *extra], environ)


def check_environ(base: dict[str, str], tmp: str, resolver: str) -> dict[str, str]:
    """Caches of its own for one resolver's checks (pip's, uv's, facts, wheels), under ``tmp``."""
    return {
        **base,
        "PIP_CACHE_DIR": str(Path(tmp, f"pip-check-{resolver}")),
        "UV_CACHE_DIR": str(Path(tmp, f"uv-check-{resolver}")),
        "TORCHGUARD_CACHE_DIR": str(Path(tmp, f"facts-{resolver}")),
        "TORCHGUARD_WHEELS": str(Path(tmp, f"wheels-{resolver}")),
    }


def with_uv(requirements: Path = REQUIREMENTS, python: str = "3.12") -> dict[str, float] | None:
    """``check --resolver uv`` cold then warm (the same file plus one pure-Python package),
    and uv's own resolution of the same question cold then warm, the baseline (seconds),
    each with empty caches of its own; None where uv is not installed. Needs PyPI."""
    uv = find_uv()
    if uv is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        base = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": str(ROOT)}
        alone = {**base, "UV_CACHE_DIR": str(Path(tmp, "uv-alone"))}
        mine = check_environ(base, tmp, "uv")
        uv_cold = uv_alone(uv, requirements, python, alone)
        cold = check([], requirements, python, mine, "uv")
        uv_warm = uv_alone(uv, requirements, python, alone)
        warm = check(["six"], requirements, python, mine, "uv")
    return {"uv-cold": uv_cold, "uv-warm": uv_warm, "cold": cold, "warm": warm}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default="3.12")
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    parser.add_argument("--no-pip-check", action="store_true", help="time check with uv only")
    args = parser.parse_args()
    pip = pip_interpreter()
    version = subprocess.run(
        [pip.python, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    uv = find_uv()
    uv_version = (
        subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.strip()
        if uv
        else "no uv"
    )
    resolvers = ([] if args.no_pip_check else ["pip"]) + (["uv"] if uv else [])
    cold: dict[str, float] = {}
    warm: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": str(ROOT)}
        alone = {**base, "PIP_CACHE_DIR": str(Path(tmp, "pip-alone"))}
        alone["UV_CACHE_DIR"] = str(Path(tmp, "uv-alone"))
        mine = {resolver: check_environ(base, tmp, resolver) for resolver in resolvers}
        lines = sum(1 for line in args.requirements.read_text().splitlines() if line.strip())
        print(
            f"{args.requirements.name}: {lines} lines, CPython {args.python}, pip {version}, "
            f"{uv_version}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        pip_cold = pip_alone(args.requirements, args.python, alone)
        uv_cold = uv_alone(uv, args.requirements, args.python, alone) if uv else None
        for resolver in resolvers:
            cold[resolver] = check([], args.requirements, args.python, mine[resolver], resolver)
        pip_warm = pip_alone(args.requirements, args.python, alone)
        uv_warm = uv_alone(uv, args.requirements, args.python, alone) if uv else None
        for resolver in resolvers:
            warm[resolver] = check(
                ["six"], args.requirements, args.python, mine[resolver], resolver
            )
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"pip --dry-run alone,       cold: {pip_cold:6.1f} s   warm: {pip_warm:6.1f} s")
    if uv_cold is not None and uv_warm is not None:
        print(
            f"uv pip compile alone,      cold: {uv_cold:6.1f} s   warm: {uv_warm:6.1f} s "
            f"({uv_cold / pip_cold:.2f}x / {uv_warm / pip_warm:.2f}x pip)"
        )
    for resolver in resolvers:
        print(
            f"check --resolver {resolver:<3},    cold: {cold[resolver]:6.1f} s "
            f"({cold[resolver] / pip_cold:.2f}x pip cold"
            + (f", {cold[resolver] / uv_cold:.2f}x uv cold" if uv_cold else "")
            + ")"
        )
        print(
            f"check --resolver {resolver:<3},    warm: {warm[resolver]:6.1f} s "
            f"({warm[resolver] / pip_warm:.2f}x pip warm"
            + (f", {warm[resolver] / uv_warm:.2f}x uv warm" if uv_warm else "")
            + "; the same file plus one pure-Python package)"
        )
    best = resolvers[-1]
    ok = cold[best] < COLD_TARGET and warm[best] < WARM_TARGET
    print(
        f"target (check --resolver {best}): cold < {COLD_TARGET:.0f} s and warm < "
        f"{WARM_TARGET:.0f} s: " + ("met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
