"""``torchguard doctor`` and ``torchguard scan``.

Exit 0 clean, 1 errors found, 2 bad usage, 3 a fault of torchguard's own (one line asking for
a bug report; ``TORCHGUARD_DEBUG=1`` adds the traceback).
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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"torchguard: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torchguard",
        description="Explain why `import torch` fails on Windows, before it does.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    doctor = commands.add_parser("doctor", help="diagnose this Python environment")
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
    scan.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="NAME",
        help='a display adapter of the machine, e.g. "NVIDIA GeForce RTX 5090" (repeatable)',
    )
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
    _output_options(scan)
    hook = commands.add_parser(
        "hook", help="protect every `import torch` of this environment (a start-up .pth file)"
    )
    hook.add_argument("action", choices=("install", "uninstall", "status"))
    hook.add_argument("--user", action="store_true", help="use the user site-packages")
    check = commands.add_parser(
        "check", help="will `pip install REQUIREMENT...` work on Windows x64? (from any OS)"
    )
    check.add_argument("requirements", nargs="+", metavar="REQUIREMENT", help="as for pip")
    check.add_argument(
        "--python", metavar="X.Y", help="the Windows CPython version (default: this Python's)"
    )
    check.add_argument(
        "--index-url",
        action="append",
        default=[],
        metavar="URL",
        help="package index (repeatable: the first replaces pip's, the others are extra)",
    )
    check.add_argument(
        "--clean-windows",
        action="store_true",
        help="assume no Visual C++ redistributable (default: the current one is installed)",
    )
    check.add_argument("--cache-dir", metavar="DIR", help="where wheels are downloaded and reused")
    _output_options(check)
    explain = commands.add_parser("explain", help="what a finding code means and how to fix it")
    explain.add_argument("code", nargs="?", metavar="CODE", help="a finding code, e.g. missing-dll")
    return parser


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
) -> int:
    from torchguard._report.markdown import redact, render_markdown

    if args.json:
        text = json.dumps({**report.to_dict(), **(extra or {})}, indent=2)
    elif args.markdown:
        text = render_markdown(report, notes=notes, folded=folded).rstrip("\n")
    else:
        from torchguard._report.colour import wanted

        text = "\n".join([report.render_text(colour=wanted(sys.stdout)), *notes])
    print(redact(text) if args.redact else text)
    return EXIT_OK if report.ok else EXIT_ERRORS


def main(argv: Sequence[str] | None = None) -> int:
    from torchguard._internal import InternalError, internal_error

    try:
        return _main(argv)
    except InternalError as exc:
        return _internal(exc)
    except Exception as exc:  # a fault outside the guarded API (rendering, the hook files)
        return _internal(internal_error(exc, "the command line"), exc)


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
    args = build_parser().parse_args(argv)
    if args.command == "hook":
        return _hook(args.action, args.user)
    if args.command == "explain":
        from torchguard._report.explain import explain

        return explain(args.code)
    if args.command == "doctor":
        from torchguard._api import diagnose

        return _emit(diagnose(), args)
    if args.command == "check":
        return _check(args)
    from torchguard._api import scan

    try:
        report = scan(
            args.targets,
            system32=args.system32,
            python_dir=args.python_dir,
            gpus=args.gpu,
            sysroot=args.sysroot,
            ld_library_path=[d for d in args.ld_library_path.split(":") if d],
        )
    except ValueError as exc:
        print(f"torchguard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _emit(report, args)


def _check(args: argparse.Namespace) -> int:
    from torchguard._frontends.check import CheckError, check

    try:
        result = check(
            args.requirements,
            python=args.python,
            index_urls=args.index_url,
            clean_windows=args.clean_windows,
            cache=args.cache_dir,
            progress=sys.stderr if sys.stderr.isatty() else None,
        )
    except CheckError as exc:
        print(f"torchguard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    folded = [("wheels pip would install", result.wheel_names)]
    return _emit(result.report, args, result.notes, {"check": result.to_dict()}, folded)


def _hook(action: str, user: bool) -> int:
    from torchguard import _hook as hook

    directory = hook.site_dir(user)
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
