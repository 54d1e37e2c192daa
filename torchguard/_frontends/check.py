"""``torchguard check REQUIREMENT...``: will ``pip install`` of these work on Windows?

pip's own resolver says what ``pip install`` would put into a Windows CPython X.Y (x64 or ARM64,
free-threaded or not: :mod:`.target`; dependencies included, Windows environment markers,
wheels only) without downloading it
(:mod:`.resolve`); only the wheels that can hold Windows binaries are downloaded, into a cache
reused next time (:mod:`.download`); the offline scan judges them together. The default machine
is a Windows 10/11 x64 with the current Visual C++ redistributable; ``clean_windows`` drops it.
``gpus`` and ``cuda`` describe the machine's NVIDIA GPU and driver. A release with no wheel
for the target is one ``no-matching-wheel`` error (:mod:`.no_wheel`): ``pip install`` fails.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from torchguard._frontends.cache_command import wheel_cache
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.index_probe import IndexProblem
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.pip_watch import RESOLVE_TIMEOUT, Status
from torchguard._frontends.progress import Progress, human_size
from torchguard._frontends.requirement_input import RequirementInput, Unchecked
from torchguard._frontends.resolve import Planned, resolve, running_python
from torchguard._frontends.target import PLATFORMS, Target, parse_target
from torchguard._frontends.uv_resolve import Resolver
from torchguard._report.report import Report

if TYPE_CHECKING:
    from torchguard._facts.cuda_builds import Release


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
    arguments: tuple[str, ...] = ()
    """What pip resolved: requirement files read in, unchecked requirements left out."""
    unchecked: tuple[Unchecked, ...] = ()
    index_problems: tuple[IndexProblem, ...] = ()
    gpu_answer: dict[str, object] | None = None
    """With ``--gpu``: the newest build for the GPU (:mod:`.gpu_answer`)."""
    platform: str = "win_amd64"
    """The Windows platform tag resolved for (``--platform``: ``win_amd64``, ``win_arm64``)."""
    no_wheel: str | None = None
    """pip finds no distribution of a release for this Python and platform: what it is (the
    report's one ``no-matching-wheel`` error says it with what exists instead)."""
    resolved_by: str = "pip"
    """Which resolver answered what pip would install: ``uv`` or ``pip`` (``--resolver``)."""

    @property
    def target(self) -> Target:
        return parse_target(self.python, self.platform) or Target(self.python)

    @property
    def wheel_names(self) -> list[str]:
        return [p.filename for p in self.planned]

    def to_dict(self) -> dict[str, object]:
        return {
            "requirements": list(self.requirements),
            "python": self.python,
            "platform": self.platform,
            "free_threaded": self.target.free_threaded,
            "vc_redist": not self.clean_windows,
            "gpus": list(self.gpus),
            "cuda": f"{self.cuda[0]}.{self.cuda[1]}" if self.cuda else None,
            "wheels": self.wheel_names,
            "scanned": [os.path.basename(w) for w in self.wheels],
            "downloaded_bytes": self.downloaded_bytes,
            "fix": self.fix,
            "unchecked": [u.to_dict() for u in self.unchecked],
            "index_problems": [p.to_dict() for p in self.index_problems],
            "gpu_answer": self.gpu_answer,
            "no_wheel": self.no_wheel,
            "resolved_by": self.resolved_by,
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
    resolve_timeout: float | None = None,
    platform: str | None = None,
    resolver: str | None = None,
) -> Check:
    """Resolve, download and scan ``requirements`` for Windows CPython ``python`` (``3.11``,
    or ``3.13t`` free-threaded) on ``platform`` (``win_amd64``, the default, or ``win_arm64``).

    ``resolver``: ``auto`` (the default, else ``TORCHGUARD_RESOLVER``: uv where it is found,
    else pip), ``pip`` or ``uv`` (:mod:`.uv_resolve`)."""
    from torchguard._frontends.uv_resolve import choose

    version = python or running_python()
    target = parse_target(version, platform)
    if target is None:
        if parse_target(version) is None:
            raise CheckError(
                f"--python {version}: expected a CPython version such as 3.11, or 3.13t for "
                "a free-threaded build (3.13 and later)"
            )
        raise CheckError(f"--platform {platform}: expected one of {', '.join(PLATFORMS)}")
    driver_cuda = parse_cuda_option(cuda)
    chosen = choose(resolver)
    bar = Progress(progress)
    timeout = RESOLVE_TIMEOUT if resolve_timeout is None else resolve_timeout
    if timeout <= 0:
        raise CheckError(f"--resolve-timeout {timeout:g}: expected seconds above 0")
    result = _run(
        requirements,
        target,
        index_urls,
        clean_windows,
        wheel_cache(cache),
        bar,
        tuple(gpus),
        driver_cuda,
        timeout,
        chosen,
        verify_kernels=verify_fix,
    )
    if verify_fix:
        from torchguard._frontends.verify import verify_fix as verify

        result.fix = verify(
            result.arguments,
            result.report,
            result.notes,
            lambda reqs, urls: (
                _run(
                    reqs,
                    target,
                    urls,
                    clean_windows,
                    wheel_cache(cache),
                    bar,
                    tuple(gpus),
                    driver_cuda,
                    timeout,
                    chosen,
                ).report
            ),
            index_urls,
        )
    return result


def _run(
    requirements: Sequence[str],
    target: Target,
    index_urls: Sequence[str],
    clean_windows: bool,
    cache: str,
    bar: Progress,
    gpus: tuple[str, ...],
    cuda: tuple[int, int] | None,
    timeout: float,
    resolver: Resolver,
    *,
    verify_kernels: bool = False,
) -> Check:
    from torchguard._binary.cache import user_cache
    from torchguard._binary.pe.machine import platform_machine
    from torchguard._frontends.download import fetch
    from torchguard._frontends.install_python import install_python
    from torchguard._frontends.pipeline import analyze
    from torchguard._frontends.requirement_input import read_requirements
    from torchguard._platforms.windows.assumptions import assumed_line, assumed_system32
    from torchguard._platforms.windows.system import TargetError, offline_windows

    version = target.build
    given = read_requirements(requirements)
    problems, index_urls, arguments = _reachable_indexes(given, index_urls, bar)
    if problems:
        arguments, local_builds = given.without_local_builds(arguments, problem_urls(problems))
        given.unchecked += local_builds
    unchecked = unchecked_lines(given.unchecked)
    if not any(not a.startswith("-") for a in arguments):
        raise CheckError(
            ["no requirement left to resolve", *unchecked] if unchecked else "no requirement given"
        )
    built: list[str] = []
    try:
        planned, reused = _resolve_from_sources(
            arguments,
            built,
            given,
            python=version,
            platform=target.platform,
            index_urls=index_urls,
            memo_dir=cache,
            status=bar.stream,
            timeout=timeout,
            watch=_watcher(bar),
            resolver=resolver,
        )
        if not any(p.name.lower() == "torch" for p in planned):
            names = ", ".join(p.filename for p in planned) or "nothing"
            raise CheckError(
                [
                    f"these requirements install no torch (pip resolved {names})",
                    *unchecked_lines(given.unchecked),
                ]
            )
        binary = [p for p in planned if not p.pure and not p.source]
        fetched = fetch(binary, cache, version, bar)
    except PipFailure as exc:
        unchecked = unchecked_lines(given.unchecked)
        if exc.no_wheel is not None:
            return _no_wheel_check(
                requirements, target, clean_windows, exc, given, problems, arguments, gpus, cuda
            )
        raise CheckError([*exc.lines, *unchecked, *problem_lines(problems)], exc.kind) from None
    unchecked = unchecked_lines(given.unchecked)
    bar.show(f"reading {len(fetched.paths)} wheel(s)...", force=True)
    assumed = assumed_system32(clean_windows)
    try:
        system = offline_windows(
            fetched.paths,
            assumed_system32=assumed,
            gpus=gpus,
            driver_cuda=cuda,
            machine=platform_machine(target.platform),
            free_threaded=target.free_threaded,
        )
        system.python_cmd = install_python(version, given.files)
        python_cmd = system.python_cmd
        try:
            report = analyze(system, cache=user_cache())
        finally:
            system.close()
    except TargetError as exc:
        raise CheckError(str(exc)) from None
    finally:
        bar.clear()
    pure = len(planned) - len(binary)
    machine = assumed_line(clean_windows, platform=target.platform)
    machine += gpu_assumption(gpus, cuda)
    transfer = (
        f"downloaded {human_size(fetched.downloaded_bytes)}"
        if fetched.downloaded_bytes
        else "nothing downloaded"
    )
    notes = [
        f"checked: pip install {' '.join(requirements)} for python.org CPython {version}, "
        f"{target.platform} ({len(planned)} wheel(s): {len(binary)} with binaries scanned, "
        f"{pure} pure-Python; {transfer}; {resolver.describe()}"
        + ("; the resolution from the last 10 minutes reused" if reused else "")
        + ")",
        machine,
        *resolver.notes,
        *built,
        *unchecked,
        *problem_lines(problems),
    ]
    from torchguard._frontends.gpu_answer import answer
    from torchguard._frontends.target_cuda import answer_for_target, for_target

    report = for_target(report, target)
    notes += _cpu_build_note(report, gpus, cuda, planned, target)
    python = tuple(int(p) for p in target.version.split(".")[:2])
    gpu = answer(gpus, cuda, (python[0], python[1]), [p.name for p in planned], python_cmd)
    gpu = answer_for_target(gpu, target)
    notes += gpu.lines if gpu else ()
    gpu_answer = gpu.to_dict() if gpu else None
    if verify_kernels and gpu is not None and gpu.pick is not None and gpu.command:
        from torchguard._frontends.remote_kernels import verify_kernels as read_kernels

        bar.show(f"reading the kernels of torch {gpu.pick.label}...", force=True)
        verdict = read_kernels(gpu.pick, gpu.capabilities, gpu.command, cache=cache)
        bar.clear()
        notes.append(verdict.line)
        if gpu_answer is not None:
            gpu_answer["kernels_verified"] = verdict.verified
            gpu_answer["kernels_verdict"] = verdict.line
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
        arguments=tuple(arguments),
        unchecked=tuple(given.unchecked),
        index_problems=tuple(problems),
        gpu_answer=gpu_answer,
        platform=target.platform,
        resolved_by=resolver.by,
    )


def _no_wheel_check(
    requirements: Sequence[str],
    target: Target,
    clean_windows: bool,
    failure: PipFailure,
    given: RequirementInput,
    problems: Sequence[IndexProblem],
    arguments: Sequence[str],
    gpus: tuple[str, ...],
    cuda: tuple[int, int] | None,
) -> Check:
    """pip finds no distribution of a release for this Python and platform: ``pip install``
    itself fails, so the answer is one error (``no-matching-wheel``, exit 1), never a DLL
    error, with the nearest release and the nearest Python or platform that have one."""
    from torchguard._facts.vocab import Code, Severity
    from torchguard._frontends.install_python import install_python
    from torchguard._platforms.windows.assumptions import assumed_line
    from torchguard._report.findings import Finding, RepairHint

    missing = failure.no_wheel
    assert missing is not None
    python_cmd = install_python(target.build, given.files)
    hints = tuple(RepairHint(summary, commands) for summary, commands in missing.hints(python_cmd))
    finding = Finding(
        code=Code.NO_MATCHING_WHEEL,
        severity=Severity.ERROR,
        message=missing.message,
        hints=hints,
        package=None if missing.project.lower() == "torch" else missing.project,
        rank=0,
    )
    notes = [
        f"checked: pip install {' '.join(requirements)} for python.org CPython {target.build}, "
        f"{target.platform}: pip found no distribution of {missing.project} for it (nothing "
        "downloaded, nothing scanned)",
        assumed_line(clean_windows, platform=target.platform) + gpu_assumption(gpus, cuda),
        *unchecked_lines(given.unchecked),
        *problem_lines(problems),
    ]
    return Check(
        tuple(requirements),
        target.build,
        clean_windows,
        (),
        (),
        Report(findings=(finding,)),
        notes,
        gpus,
        cuda,
        arguments=tuple(arguments),
        unchecked=tuple(given.unchecked),
        index_problems=tuple(problems),
        platform=target.platform,
        no_wheel=missing.verdict,
    )


def _resolve_from_sources(
    arguments: list[str], built: list[str], given: RequirementInput, **options: Any
) -> tuple[list[Planned], bool]:
    """pip's resolution, where a release published only as an sdist whose source compiles
    nothing is resolved from that sdist (pip builds its metadata, as it would when installing;
    ``built`` gets a line). One whose source compiles is named as not checked, with what in
    it does (``given.unchecked``): a requirement of the user's is left out, a dependency is
    resolved from its source so that what it depends on is still checked."""
    from tarfile import TarError
    from zipfile import BadZipFile

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from torchguard._frontends.sdist_source import download_sdist, native_reasons

    def project(argument: str) -> str | None:
        try:
            return canonicalize_name(Requirement(argument).name)
        except InvalidRequirement:
            return None

    import time

    from torchguard._frontends import source_memo

    memo = source_memo.memo_path(
        options.get("memo_dir"),
        arguments,
        str(options.get("python")),
        options.get("index_urls", ()),
    )
    built_before, unchecked_before = len(built), len(given.unchecked)
    learnt = source_memo.recall(memo)
    if learnt is not None:  # what the last check of this input found out, without pip's runs
        arguments = learnt.arguments
        built += learnt.built
        given.unchecked += learnt.unchecked
    original = list(arguments)

    def learnt_now(planned: tuple[list[Planned], bool]) -> tuple[list[Planned], bool]:
        if arguments != original:
            source_memo.remember(
                memo,
                source_memo.Learnt(
                    arguments, built[built_before:], given.unchecked[unchecked_before:]
                ),
            )
        return planned

    budget = float(options["timeout"])  # all of pip's runs together: one bound, not one each
    started = time.monotonic()
    for _ in range(10):
        left = budget - (time.monotonic() - started)
        if left <= 0:
            raise PipFailure(
                [
                    f"pip did not finish resolving within {budget:.0f} s and was stopped (each "
                    "source-only release it met cost one more resolution)",
                    "give it longer: --resolve-timeout SECONDS",
                ],
                "timeout",
            )
        try:
            return learnt_now(resolve(arguments, **{**options, "timeout": left}))
        except PipFailure as exc:
            if exc.sdist is None:
                raise
            name, sdist = exc.sdist
            release = f"{name} {sdist.version}"
            try:
                reasons = native_reasons(download_sdist(sdist.url), sdist.filename)
            except (OSError, ValueError, EOFError, TarError, BadZipFile) as error:
                exc.lines.append(
                    f"its source ({sdist.filename}) could not be read ({error}): torchguard "
                    "cannot tell whether it compiles native code"
                )
                raise exc from None
            wanted = canonicalize_name(name)
            direct = [a for a in arguments if not a.startswith("-") and project(a) == wanted]
            arguments = [a for a in arguments if a.startswith("-") or project(a) != wanted]
            if reasons:
                compiles = (
                    f"publishes only {sdist.filename}, which compiles native code on the "
                    f"machine that installs it ({'; '.join(reasons)}): there is no Windows "
                    "binary to check (its authors may publish wheels on their own index: pass "
                    "it with --index-url)"
                )
                if direct:
                    why = f"{compiles}; it and what it depends on are not checked"
                    given.unchecked += [
                        Unchecked(a, given.places.get(a, "the command line"), why) for a in direct
                    ]
                    if not any(not a.startswith("-") for a in arguments):
                        raise exc from None
                    continue
                given.unchecked.append(
                    Unchecked(
                        release,
                        "a dependency",
                        f"{compiles}; what it depends on is resolved from its source and checked",
                    )
                )
                arguments.append(f"{name} @ {sdist.url}")
                continue
            arguments.append(f"{name} @ {sdist.url}")
            built.append(
                f"built from source: {release} publishes only {sdist.filename}, with no C, C++ "
                "or CUDA source, no ext_modules and no compiling build backend: pip builds a "
                "pure-Python wheel from it on any machine; resolved from that source"
            )
    raise PipFailure(["more than 10 source-only releases: resolve them into wheels first"])


def _watcher(bar: Progress) -> Status:
    """pip's progress: on a terminal the status line each second; otherwise one line on
    stderr each minute, so a log shows a long resolution working, never a silent half hour."""
    import sys

    said = [0.0]

    def show(elapsed: float, collected: int, step: str) -> None:
        text = f"resolving with pip: {elapsed:.0f} s, {collected} collected, now: {step}"
        if elapsed < said[0]:
            said[0] = 0.0  # pip runs again (a source-only release met): a minute from its start
        if bar.stream is not None:
            bar.show(text, force=True)
        elif elapsed - said[0] >= 60:
            said[0] = elapsed
            sys.stderr.write(f"torchguard: {text}\n")
            sys.stderr.flush()

    return show


def unchecked_lines(unchecked: Sequence[Unchecked]) -> list[str]:
    return [f"not checked: {u.requirement} ({u.where}): {u.why}" for u in unchecked]


def problem_lines(problems: Sequence[IndexProblem]) -> list[str]:
    return [p.line for p in problems]


def problem_urls(problems: Sequence[IndexProblem]) -> list[str]:
    return list(dict.fromkeys(p.url for p in problems))


def _reachable_indexes(
    given: RequirementInput, index_urls: Sequence[str], bar: Progress
) -> tuple[list[IndexProblem], list[str], list[str]]:
    """Every index asked before pip runs; an extra one that fails is said at once and left
    out (pip would wait minutes on it, then answer without it in silence); a main index that
    fails ends the check. Returns the problems, the indexes and the arguments kept."""
    from torchguard._frontends.index_probe import probe_all, what_it_changes
    from torchguard._frontends.pip_reasons import PYPI

    named = given.index_urls()
    main = next((url for option, url in named if option != "--extra-index-url"), None)
    if index_urls:
        main = index_urls[0]
    asked: list[tuple[str, bool]] = [(url, url != main) for url in index_urls]
    asked += [(url, url != main) for _, url in named]
    environment = os.environ.get("PIP_INDEX_URL", "").strip()
    extra_environment = os.environ.get("PIP_EXTRA_INDEX_URL", "").split()
    if main is None and environment:
        asked.append((environment, False))
    asked += [(url, True) for url in extra_environment]
    if not asked:
        return [], list(index_urls), list(given.arguments)
    bar.show(f"asking {len(set(asked))} package index(es)...", force=True)
    found = probe_all(asked)
    bar.clear()
    every = [url for url, _ in asked] + ([] if main or environment else [PYPI])
    problems: list[IndexProblem] = []
    for problem in found:
        if not problem.extra:
            raise CheckError(
                [f"cannot reach the package index {problem.url}: {problem.reason}"], "network"
            )
        others = [u for u in dict.fromkeys(every) if u not in {p.url for p in found}]
        problems.append(_with_line(problem, what_it_changes(problem, others)))
    if problems:  # at once, before pip's minutes: the answer's question has changed
        import sys

        sys.stderr.write("".join(f"torchguard: {p.line}\n" for p in problems))
        sys.stderr.flush()
    failed = {p.url for p in problems}
    return (
        problems,
        [u for u in index_urls if u not in failed],
        given.without_indexes(sorted(failed)),
    )


def _with_line(problem: IndexProblem, line: str) -> IndexProblem:
    import dataclasses

    return dataclasses.replace(problem, line=line)


def _cpu_build_note(
    report: Report,
    gpus: Sequence[str],
    cuda: tuple[int, int] | None,
    planned: Sequence[Planned] = (),
    target: Target | None = None,
) -> list[str]:
    """For a CPU build: the CUDA build of this release (with the torchvision/torchaudio pip
    resolved, which come from the same index) and its exact index URL; none on a ``target``
    no CUDA build exists for, marked not verified where the table does not cover it."""
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
    from torchguard._frontends.target_cuda import no_cuda_build, unverified
    from torchguard._rules.neighbour_cuda import neighbour_need, prefer_neighbour

    base = torch.version.partition("+")[0]
    none = no_cuda_build(target) if target else None
    if none is not None:
        return [f"note: torch {base} here is the CPU build; {none}"]
    unchecked = unverified(target) if target else None
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
    floor = minimum_driver(cuda) or (0, 0) if cuda else None

    def pick(variants: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
        if not variants:
            return None
        return newest_runnable(variants, floor) if floor is not None else variants[-1]

    best = pick(release.variants) or release.variants[0]
    best, serves = prefer_neighbour(
        _with_kernels(release, gpus), best, neighbour_need(report.findings), pick
    )
    need = minimum_driver(best)
    driver = f", NVIDIA driver {need[0]}.{need[1]:02d} or newer" if need else ""
    siblings = "".join(
        f" {p.name.lower()}=={p.version}"
        for p in planned
        if p.name.lower() in ("torchvision", "torchaudio")
    )
    return [
        f"note: torch {base} here is the CPU build (PyPI's Windows wheels are); for an NVIDIA "
        f"GPU install the CUDA {best[0]}.{best[1]} build{serves}{driver}"
        + (f" ({unchecked})" if unchecked else "")
        + f": pip install torch=={base}"
        f"{siblings} "
        f"--index-url {index_url(best)}"
        + caveat
        + ("" if gpus else " (name your GPU with --gpu to check it)")
    ]


def _with_kernels(release: Release, gpus: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """The release's CUDA variants that carry kernels for every GPU named whose model is
    known: a neighbour's CUDA major never picks a build the GPU cannot run."""
    from torchguard._facts.gpus import compute_capability
    from torchguard._facts.torch_archs import carries_kernels

    known = [c for name in gpus if (c := compute_capability(name)) is not None]
    version = release.releases[-1]
    return tuple(v for v in release.variants if all(carries_kernels(version, v, c) for c in known))


__all__ = ["Check", "CheckError", "check", "parse_cuda_option", "wheel_cache"]
