"""``torchguard check REQUIREMENT...``: will ``pip install`` of these work on Windows?

pip's own resolver says what ``pip install`` would put into a Windows x64 CPython X.Y
(dependencies included, Windows environment markers, wheels only) without downloading it
(:mod:`.resolve`); only the wheels that can hold Windows binaries are downloaded, into a cache
reused next time (:mod:`.download`); the offline scan judges them together. The default machine
is a Windows 10/11 x64 with the current Visual C++ redistributable; ``clean_windows`` drops it.
``gpus`` and ``cuda`` describe the machine's NVIDIA GPU and driver.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from torchguard._frontends.cache_command import wheel_cache
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress, human_size
from torchguard._frontends.resolve import Planned, resolve, running_python, valid_python
from torchguard._report.report import Report


@dataclass
class Check:
    """What was checked, under which assumptions, and the verdict."""

    requirements: tuple[str, ...]
    python: str
    clean_windows: bool
    planned: tuple[Planned, ...]
    wheels: tuple[str, ...]
    """Local paths of the wheels scanned (the ones that can hold Windows binaries)."""
    report: Report
    notes: list[str] = field(default_factory=list)
    gpus: tuple[str, ...] = ()
    cuda: tuple[int, int] | None = None
    downloaded_bytes: int = 0
    resolution_reused: bool = False
    fix: dict[str, object] | None = None

    @property
    def wheel_names(self) -> list[str]:
        return [p.filename for p in self.planned]

    def to_dict(self) -> dict[str, object]:
        return {
            "requirements": list(self.requirements),
            "python": self.python,
            "platform": "win_amd64",
            "vc_redist": not self.clean_windows,
            "gpus": list(self.gpus),
            "cuda": f"{self.cuda[0]}.{self.cuda[1]}" if self.cuda else None,
            "wheels": self.wheel_names,
            "scanned": [os.path.basename(w) for w in self.wheels],
            "downloaded_bytes": self.downloaded_bytes,
            "fix": self.fix,
        }


def gpu_assumption(gpus: Sequence[str], cuda: tuple[int, int] | None) -> str:
    """The GPU and driver part of the ``assumed:`` line (empty when none was named)."""
    if not gpus and cuda is None:
        return ""
    shown = ", ".join(gpus) or "an NVIDIA GPU"
    return f"; {shown}" + (f" with a driver for CUDA {cuda[0]}.{cuda[1]}" if cuda else "")


def parse_cuda_option(text: str | None) -> tuple[int, int] | None:
    """``--cuda 12.4`` -> (12, 4); CheckError for anything else."""
    if text is None:
        return None
    parts = text.strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise CheckError(f"--cuda {text}: expected a CUDA version such as 12.4")
    return (int(parts[0]), int(parts[1]))


def check(
    requirements: Sequence[str],
    *,
    python: str | None = None,
    index_urls: Sequence[str] = (),
    clean_windows: bool = False,
    cache: str | None = None,
    progress: IO[str] | None = None,
    gpus: Sequence[str] = (),
    cuda: str | None = None,
    verify_fix: bool = True,
) -> Check:
    """Resolve, download and scan ``requirements`` for Windows x64 CPython ``python``."""
    version = python or running_python()
    if not valid_python(version):
        raise CheckError(f"--python {version}: expected a CPython version such as 3.11")
    driver_cuda = parse_cuda_option(cuda)
    bar = Progress(progress)
    result = _run(
        requirements,
        version,
        index_urls,
        clean_windows,
        wheel_cache(cache),
        bar,
        tuple(gpus),
        driver_cuda,
    )
    if verify_fix:
        from torchguard._frontends.verify import verify_fix as verify

        result.fix = verify(
            result.requirements,
            result.report,
            result.notes,
            lambda reqs, urls: (
                _run(
                    reqs,
                    version,
                    urls,
                    clean_windows,
                    wheel_cache(cache),
                    bar,
                    tuple(gpus),
                    driver_cuda,
                ).report
            ),
            index_urls,
        )
    return result


def _run(
    requirements: Sequence[str],
    version: str,
    index_urls: Sequence[str],
    clean_windows: bool,
    cache: str,
    bar: Progress,
    gpus: tuple[str, ...],
    cuda: tuple[int, int] | None,
) -> Check:
    from torchguard._frontends.download import fetch
    from torchguard._model.cache import user_cache
    from torchguard._pipeline import analyze
    from torchguard._windows.assumptions import assumed_line, assumed_system32
    from torchguard._windows.system import TargetError, offline_windows

    try:
        planned, reused = resolve(
            requirements,
            python=version,
            index_urls=index_urls,
            memo_dir=cache,
            status=bar.stream,
        )
        if not any(p.name.lower() == "torch" for p in planned):
            names = ", ".join(p.filename for p in planned) or "nothing"
            raise CheckError(f"these requirements install no torch (pip resolved {names})")
        binary = [p for p in planned if not p.pure]
        fetched = fetch(binary, cache, version, bar)
    except PipFailure as exc:
        raise CheckError(exc.lines, exc.kind) from None
    bar.show(f"reading {len(fetched.paths)} wheel(s)...", force=True)
    assumed = assumed_system32(clean_windows)
    try:
        system = offline_windows(
            fetched.paths, assumed_system32=assumed, gpus=gpus, driver_cuda=cuda
        )
        try:
            report = analyze(system, cache=user_cache())
        finally:
            system.close()
    except TargetError as exc:
        raise CheckError(str(exc)) from None
    finally:
        bar.clear()
    pure = len(planned) - len(binary)
    machine = assumed_line(clean_windows)
    machine += gpu_assumption(gpus, cuda)
    transfer = (
        f"downloaded {human_size(fetched.downloaded_bytes)}"
        if fetched.downloaded_bytes
        else "nothing downloaded"
    )
    notes = [
        f"checked: pip install {' '.join(requirements)} for python.org CPython {version}, "
        f"win_amd64 ({len(planned)} wheel(s): {len(binary)} with binaries scanned, "
        f"{pure} pure-Python; {transfer}"
        + ("; pip's resolution from the last 10 minutes reused" if reused else "")
        + ")",
        machine,
    ]
    notes += _cpu_build_note(report, gpus, cuda, planned)
    return Check(
        tuple(requirements),
        version,
        clean_windows,
        tuple(planned),
        tuple(fetched.paths),
        report,
        notes,
        gpus,
        cuda,
        fetched.downloaded_bytes,
        reused,
    )


def _cpu_build_note(
    report: Report,
    gpus: Sequence[str],
    cuda: tuple[int, int] | None,
    planned: Sequence[Planned] = (),
) -> list[str]:
    """For a CPU build: the CUDA build of this release (with the torchvision/torchaudio pip
    resolved, which come from the same index) and its exact index URL."""
    from torchguard._facts.cuda_builds import (
        RELEASES,
        index_url,
        minimum_driver,
        newest_runnable,
        release_of,
    )

    torch = report.torch
    if torch is None or torch.cuda is not None or torch.variant not in (None, "cpu"):
        return []
    if any(f.code == "cpu-build-on-gpu" for f in report.findings):
        return []  # the warning already names the build to install
    if not report.ok:
        return []  # the fix comes first: no CUDA variant of a release that fails to import
    base = torch.version.partition("+")[0]
    release = release_of(base)
    caveat = ""
    if release is None:
        newest = RELEASES[-1]
        parts = base.split(".")
        series = tuple(int(p) for p in parts[:2] if p.isdigit())
        if len(series) != 2 or series <= newest.series:
            return [
                f"note: torch {base} is the CPU build; torchguard's table of CUDA builds does "
                "not cover this release (see https://pytorch.org/get-started/previous-versions/)"
            ]
        release = newest
        caveat = (
            f" (torchguard's table ends at {newest.series[0]}.{newest.series[1]}: the CUDA "
            "version shown is that release's)"
        )
    best = (
        newest_runnable(release.variants, minimum_driver(cuda) or (0, 0))
        if cuda
        else (release.variants[-1])
    )
    if best is None:
        best = release.variants[0]
    need = minimum_driver(best)
    driver = f", NVIDIA driver {need[0]}.{need[1]:02d} or newer" if need else ""
    siblings = "".join(
        f" {p.name.lower()}=={p.version}"
        for p in planned
        if p.name.lower() in ("torchvision", "torchaudio")
    )
    return [
        f"note: torch {base} here is the CPU build (PyPI's Windows wheels are); for an NVIDIA "
        f"GPU install the CUDA {best[0]}.{best[1]} build{driver}: pip install torch=={base}"
        f"{siblings} "
        f"--index-url {index_url(best)}"
        + caveat
        + ("" if gpus else " (name your GPU with --gpu to check it)")
    ]


__all__ = ["Check", "CheckError", "check", "parse_cuda_option", "wheel_cache"]
