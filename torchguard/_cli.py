"""``torchguard doctor`` and ``torchguard scan``: exit 0 clean, 1 errors found, 2 bad usage."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from torchguard._report import Report

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2


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
    doctor.add_argument("--json", action="store_true", help="print one JSON document")
    scan = commands.add_parser(
        "scan", help="diagnose a Windows install or wheels offline, from any OS"
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
    scan.add_argument("--json", action="store_true", help="print one JSON document")
    hook = commands.add_parser(
        "hook", help="protect every `import torch` of this environment (a start-up .pth file)"
    )
    hook.add_argument("action", choices=("install", "uninstall", "status"))
    hook.add_argument("--user", action="store_true", help="use the user site-packages")
    return parser


def _emit(report: Report, as_json: bool) -> int:
    print(report.to_json() if as_json else report.render_text())
    return EXIT_OK if report.ok else EXIT_ERRORS


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "hook":
        return _hook(args.action, args.user)
    if args.command == "doctor":
        from torchguard._api import diagnose

        return _emit(diagnose(), args.json)
    from torchguard._api import scan

    try:
        report = scan(
            args.targets, system32=args.system32, python_dir=args.python_dir, gpus=args.gpu
        )
    except ValueError as exc:
        print(f"torchguard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _emit(report, args.json)


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
