"""``torchguard doctor`` and ``torchguard scan``.

Exit 0 clean, 1 errors found, 2 bad usage, 3 a fault of torchguard's own (one line asking for
a bug report; ``TORCHGUARD_DEBUG=1`` adds the traceback), 130 interrupted (Ctrl-C).
``check --env``: 0 nothing would break, 1 something would. ``torchguard pip``: see
:mod:`.pip_front`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from torchguard._report.report import Report

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        hint = _usage_hint(self.prog, message)
        self.exit(EXIT_USAGE, f"torchguard: error: {message}\n" + (hint and hint + "\n"))


def _usage_hint(prog: str, message: str) -> str:
    """What to type instead, for the mistakes argparse cannot explain."""
    if "unrecognized arguments" in message:
        unknown = message.split(":", 1)[1].split()
        if any(
            word in ("-r", "--requirement", "-c", "--constraint", "-e")
            or word.startswith(("-r", "--requirement="))
            for word in unknown
        ):
            return (
                "torchguard: hint: pip options such as -r go after `--`, e.g. "
                "`torchguard check --python 3.11 -- -r requirements.txt`"
            )
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torchguard",
        description="Explain why `import torch` fails on Windows, before it does.",
    )
    from torchguard._version import __version__

    parser.add_argument(
        "--version", action="version", version=f"torchguard {__version__} (torch-import-guard)"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    doctor = commands.add_parser("doctor", help="diagnose this Python environment")
    doctor.add_argument(
        "--compile",
        action="store_true",
        help="also state what torch.compile needs here: triton (and whether it pairs with "
        "torch), a C compiler, Python.h (and python3XY.lib on Windows)",
    )
    _output_options(doctor)
    scan = commands.add_parser(
        "scan",
        help="diagnose a Windows install or wheels offline (from any OS), or a Linux one",
    )
    scan.add_argument(
        "targets", nargs="+", metavar="TARGET", help=".whl file or site-packages folder"
    )
    scan.add_argument(
        "--system32",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose DLLs count as being in System32 (repeatable)",
    )
    scan.add_argument(
        "--python-dir", metavar="DIR", help="a folder standing for python.exe's folder"
    )
    _gpu_options(scan)
    scan.add_argument(
        "--sysroot",
        default="/",
        metavar="DIR",
        help="Linux: the system root whose libraries and ld.so.cache count (default /)",
    )
    scan.add_argument(
        "--ld-library-path",
        default="",
        metavar="DIRS",
        help="Linux: LD_LIBRARY_PATH as the process would start with it (colon-separated)",
    )
    scan.add_argument(
        "--ld-preload",
        default="",
        metavar="LIBS",
        help="Linux: LD_PRELOAD as the process would start with it (spaces or colons)",
    )
    scan.add_argument(
        "--x86-64-level",
        type=int,
        choices=(1, 2, 3, 4),
        default=3,
        metavar="N",
        help="Linux: the CPU's x86-64 level (1-4), which picks ld.so's glibc-hwcaps "
        "subdirectories (default 3)",
    )
    _clean_windows_option(scan)
    _output_options(scan)
    hook = commands.add_parser(
        "hook", help="protect every `import torch` of this environment (a start-up .pth file)"
    )
    hook.add_argument("action", choices=("install", "uninstall", "status"))
    hook.add_argument("--user", action="store_true", help="use the user site-packages")
    check = commands.add_parser(
        "check", help="will `pip install REQUIREMENT...` work on Windows? (from any OS)"
    )
    check.add_argument("requirements", nargs="+", metavar="REQUIREMENT", help="as for pip")
    check.add_argument(
        "--python",
        metavar="X.Y",
        help="the Windows CPython version (default: this Python's; 3.13t: free-threaded); "
        "with --env: the interpreter (a PATH) whose environment pip would change",
    )
    check.add_argument(
        "--platform",
        metavar="TAG",
        help="the Windows platform: win_amd64 (default, x64) or win_arm64 (Windows on ARM64)",
    )
    check.add_argument(
        "--env",
        action="store_true",
        help="what would `pip install REQUIREMENT...` change in this environment (or --python "
        "PATH's), and would torch still work? (Linux and Windows)",
    )
    check.add_argument(
        "--index-url",
        action="append",
        default=[],
        metavar="URL",
        help="package index (repeatable: the first replaces pip's, the others are extra)",
    )
    _clean_windows_option(check)
    check.add_argument("--cache-dir", metavar="DIR", help="where wheels are downloaded and reused")
    check.add_argument(
        "--resolve-timeout",
        type=float,
        metavar="SECONDS",
        help="stop pip's resolution after this long and say what it was doing (default 900)",
    )
    check.add_argument(
        "--resolver",
        choices=("auto", "pip", "uv"),
        help="who resolves what pip install would install: auto (default, or "
        "TORCHGUARD_RESOLVER: uv where it is found, else pip), pip, or uv",
    )
    check.add_argument(
        "--no-verify",
        action="store_true",
        help="do not resolve and scan the fix a hint proposes (by default it is verified)",
    )
    _gpu_options(check)
    _output_options(check)
    guarded = commands.add_parser(
        "pip",
        help="pip install, run only when nothing that works today would break "
        "(torchguard pip install [--force] [--json] [--python PATH] ARGS...)",
    )
    guarded.add_argument("pip_arguments", nargs=argparse.REMAINDER, metavar="ARGS")
    cache = commands.add_parser("cache", help="the wheels `check` downloaded: size, or delete them")
    cache.add_argument("action", choices=("info", "clean"))
    cache.add_argument("--cache-dir", metavar="DIR", help="the wheel cache (default: check's)")
    explain = commands.add_parser("explain", help="what a finding code means and how to fix it")
    explain.add_argument("code", nargs="?", metavar="CODE", help="a finding code, e.g. missing-dll")
    return parser


def _gpu_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="NAME",
        help='the machine\'s GPU, e.g. "NVIDIA GeForce RTX 5090" (repeatable)',
    )
    parser.add_argument(
        "--cuda",
        metavar="X.Y",
        help="the newest CUDA version the machine's NVIDIA driver supports (nvidia-smi's "
        '"CUDA Version"), e.g. 12.4',
    )


def _clean_windows_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clean-windows",
        action="store_true",
        help="assume no Visual C++ redistributable (default: the current one is installed)",
    )


def _output_options(parser: argparse.ArgumentParser) -> None:
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print one JSON document")
    formats.add_argument(
        "--markdown", action="store_true", help="print a report to paste into a GitHub issue"
    )
    parser.add_argument(
        "--redact", action="store_true", help="replace your home folder and user name in paths"
    )


def _emit(
    report: Report,
    args: argparse.Namespace,
    notes: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
    folded: Sequence[tuple[str, Sequence[str]]] = (),
    failed_install: str | None = None,
) -> int:
    from torchguard._report.markdown import redact, redact_values, render_markdown

    if args.json:
        data: dict[str, Any] = {**report.to_dict(), **(extra or {})}
        # the values, not the escaped JSON text: "C:\\Users\\Jos\u00e9" hides names
        text = json.dumps(redact_values(data) if args.redact else data, indent=2)
    else:
        if args.markdown:
            text = render_markdown(
                report, notes=notes, folded=folded, failed_install=failed_install
            ).rstrip("\n")
        else:
            from torchguard._frontends.colour import wanted

            text = "\n".join([report.render_text(colour=wanted(sys.stdout)), *notes])
        text = redact(text) if args.redact else text
    status = EXIT_OK if report.ok else EXIT_ERRORS
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `torchguard scan ... | head`: the reader has seen enough
        _quiet_stdout()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    from torchguard._facts.internal import InternalError, internal_error

    try:
        return _main(argv)
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            sys.stderr.write("\r\x1b[K")  # the progress line
        print("torchguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output cut short by its reader (`| head`): not a fault
        _quiet_stdout()
        return EXIT_OK
    except InternalError as exc:
        return _internal(exc)
    except Exception as exc:  # a fault outside the guarded API (rendering, the hook files)
        return _internal(internal_error(exc, "the command line"), exc)


def _quiet_stdout() -> None:
    """Point stdout at the null device, so flushing it at exit cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (a captured stream)
        pass


def _internal(exc: BaseException, cause: BaseException | None = None) -> int:
    print(f"torchguard: internal error: {exc}", file=sys.stderr)
    if os.environ.get("TORCHGUARD_DEBUG", "").strip() not in ("", "0"):
        import traceback

        shown = cause or exc
        traceback.print_exception(type(shown), shown, shown.__traceback__, file=sys.stderr)
    else:
        print("torchguard: set TORCHGUARD_DEBUG=1 for the traceback", file=sys.stderr)
    return EXIT_INTERNAL


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["pip"]:  # pip's own options follow: argparse must not read them
        from torchguard._frontends.pip_front import pip_main

        return pip_main(words[1:])
    args = build_parser().parse_args(words)
    if args.command == "hook":
        return _hook(args.action, args.user)
    if args.command == "explain":
        from torchguard._report.explain import explain

        return explain(args.code)
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "check":
        if args.env and args.platform is not None:
            return _usage_error(
                args, ["--platform is for a Windows target; --env checks this environment"]
            )
        return _check_env(args) if args.env else _check(args)
    if args.command == "cache":
        from torchguard._frontends.cache_command import cache_command

        return cache_command(args.action, args.cache_dir)
    return _scan(args)


def _scan(args: argparse.Namespace) -> int:
    from torchguard._frontends.api import scan
    from torchguard._platforms.windows.assumptions import assumed_line

    try:
        report = scan(
            args.targets,
            system32=args.system32,
            python_dir=args.python_dir,
            gpus=args.gpu,
            sysroot=args.sysroot,
            ld_library_path=[d for d in args.ld_library_path.split(":") if d],
            cuda=args.cuda,
            clean_windows=args.clean_windows,
            ld_preload=args.ld_preload.replace(":", " ").split(),
            x86_64_level=args.x86_64_level,
        )
    except ValueError as exc:
        return _usage_error(args, [str(exc)])
    if report.python.get("platform") == "linux":  # ld.so on --sysroot: no Windows assumed
        return _emit(report, args)
    from torchguard._frontends.check import gpu_assumption, parse_cuda_option

    note = assumed_line(args.clean_windows, args.system32, args.python_dir)
    if report.python.get("environment"):  # what the scan inferred from the folders around
        note += f"; {report.python['environment']}"
    note += gpu_assumption(args.gpu, parse_cuda_option(args.cuda))
    extra = {"scan": {"vc_redist": not args.clean_windows}}
    return _emit(report, args, [note], extra)


def _doctor(args: argparse.Namespace) -> int:
    from torchguard._frontends.api import diagnose

    report = diagnose()
    notes: list[str] = []
    if report.mode == "non-windows":
        report, notes = _doctor_elsewhere(report)
    extra: dict[str, Any] = {}
    if args.compile:  # facts after the usual output; the exit code stays the report's
        from torchguard._frontends.compile_doctor import compile_section

        lines, extra["compile"] = compile_section()
        notes += lines
    return _emit(report, args, notes, extra)


def _doctor_elsewhere(report: Report) -> tuple[Report, list[str]]:
    """Off Windows there is no DLL to load: say what torchguard does from here, not an error
    about this machine's torch (which `doctor` on Linux is not asked about)."""
    import dataclasses
    import platform

    from torchguard._facts.vocab import Code

    here = {"Darwin": "macOS"}.get(platform.system(), platform.system() or sys.platform)
    kept = tuple(f for f in report.findings if f.code != Code.TORCH_NOT_FOUND)
    notes = [
        f"this is {here}: `doctor` judges the Windows environment it runs in; from here,",
        "  torchguard check torch==2.4.1 --python 3.11   # will `pip install` of these work "
        "on Windows?",
        "  torchguard scan PATH...                       # a Windows site-packages folder or "
        ".whl files",
    ]
    return dataclasses.replace(report, findings=kept), notes


def _usage_error(args: argparse.Namespace, lines: Sequence[str], kind: str = "usage") -> int:
    """Exit 2 with the reason on stderr, and with ``--json`` a JSON error document on stdout."""
    for number, line in enumerate(lines):
        prefix = "torchguard: error: " if number == 0 else "  "
        print(prefix + line, file=sys.stderr)
    if getattr(args, "json", False):
        document = {"schema": 1, "ok": False, "error": {"kind": kind, "lines": list(lines)}}
        print(json.dumps(document, indent=2))
    return EXIT_USAGE


def _check(args: argparse.Namespace) -> int:
    from torchguard._frontends.check import CheckError, check

    try:
        result = check(
            args.requirements,
            python=args.python,
            platform=args.platform,
            index_urls=args.index_url,
            clean_windows=args.clean_windows,
            cache=args.cache_dir,
            progress=sys.stderr if sys.stderr.isatty() else None,
            gpus=args.gpu,
            cuda=args.cuda,
            verify_fix=not args.no_verify,
            resolve_timeout=args.resolve_timeout,
            resolver=args.resolver,
        )
    except CheckError as exc:
        return _usage_error(args, exc.lines, exc.kind)
    folded = [("wheels pip would install", result.wheel_names)]
    if not (args.json or args.markdown):
        from torchguard._frontends.check_text import render_check
        from torchguard._frontends.colour import wanted
        from torchguard._report.colour import Paint
        from torchguard._report.markdown import redact

        text = render_check(result, Paint(wanted(sys.stdout)))
        try:
            print(redact(text) if args.redact else text)
            sys.stdout.flush()
        except BrokenPipeError:  # `torchguard check ... | head`
            _quiet_stdout()
        return EXIT_OK if result.report.ok else EXIT_ERRORS
    extra = {"check": result.to_dict()}
    return _emit(result.report, args, result.notes, extra, folded, result.no_wheel)


def _check_env(args: argparse.Namespace) -> int:
    from torchguard._frontends.check import CheckError
    from torchguard._frontends.env_check import check_env

    arguments = list(args.requirements)
    for number, url in enumerate(args.index_url):
        arguments += ["--index-url" if number == 0 else "--extra-index-url", url]
    try:
        result = check_env(
            arguments,
            python=args.python,
            cache=args.cache_dir,
            progress=sys.stderr if sys.stderr.isatty() else None,
            resolve_timeout=args.resolve_timeout,
            alternatives=not args.no_verify,
        )
    except CheckError as exc:
        return _usage_error(args, exc.lines, exc.kind)
    if args.json:
        text = json.dumps({"check": result.to_dict()}, indent=2)
    else:
        from torchguard._frontends.colour import wanted
        from torchguard._frontends.env_text import render_env
        from torchguard._report.colour import Paint

        text = render_env(result, Paint(wanted(sys.stdout)))
    if args.redact:
        from torchguard._report.markdown import redact

        text = redact(text)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    return EXIT_OK if result.safe else EXIT_ERRORS


def _hook(action: str, user: bool) -> int:
    from torchguard import _hook as hook

    directory = hook.site_dir(user)
    never = hook.why_hook_never_runs(user)
    if action == "install" and never is not None:
        print(f"torchguard: error: not installed: {never}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if action == "install":
            written = hook.write_hook_files(directory)
            print(f"installed: {written[0]} (and {written[1].name} for Python 3.15+)")
            print("every `import torch` in this environment now runs torchguard.ensure() first;")
            print("TORCHGUARD=warn only warns, TORCHGUARD=off disables it")
        elif action == "uninstall":
            removed = hook.remove_hook_files(directory)
            print("removed: " + ", ".join(map(str, removed)) if removed else "not installed here")
        else:
            present = [str(p) for p in hook.hook_files(directory) if p.exists()]
            print(f"start-up files: {', '.join(present) if present else 'none'} in {directory}")
            active = hook.installed_watcher() is not None
            print(f"watcher active in this process: {'yes' if active else 'no'}")
            print(f"mode: {hook.mode()}")
            if never is not None:
                print(f"warning: {never}")
    except OSError as exc:
        print(
            f"torchguard: error: cannot change {directory}: {exc.strerror or exc}"
            + ("" if user else "; try --user, or a shell with the rights to write there"),
            file=sys.stderr,
        )
        return EXIT_USAGE
    return EXIT_OK


def entry_point() -> None:
    sys.exit(main())
