"""``torchguard pip install ARGS``: pip, run only when nothing that works today would break.

The install is checked first (:func:`.env_check.check_env`: the environment's own pip, a dry
run); pip then runs with the same arguments, by the same interpreter, only when the check
finds no break, or with ``--force``. A refusal never runs pip, so it never changes the
environment. torchguard's own options may stand anywhere: ``--force``, ``--json`` (one JSON
document on stdout; pip's output goes to stderr) and ``--python PATH`` (as pip's own
``--python``: the environment to install into; default: this interpreter's).

Exit status: 0 pip ran and succeeded; 1 refused (something would break; nothing changed);
2 not checked (bad usage, or pip cannot resolve the requirements; nothing changed); 3 a fault
of torchguard's own (nothing changed: run pip directly, or ``--force``); 4 pip ran and failed
(its exit status is in the JSON); 130 interrupted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

EXIT_INSTALLED, EXIT_REFUSED, EXIT_UNCHECKED, EXIT_INTERNAL, EXIT_PIP_FAILED = 0, 1, 2, 3, 4

USAGE = "usage: torchguard pip install [--force] [--json] [--python PATH] PIP-ARGS..."


def split_options(argv: Sequence[str]) -> tuple[bool, bool, str | None, list[str]]:
    """(force, json, python, pip's own arguments) from ``torchguard pip``'s argv."""
    force = as_json = False
    python: str | None = None
    rest: list[str] = []
    words = list(argv)
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--force":
            force = True
        elif word == "--json":
            as_json = True
        elif word == "--python" and index + 1 < len(words):
            python = words[index + 1]
            index += 1
        elif word.startswith("--python="):
            python = word.split("=", 1)[1]
        else:
            rest.append(word)
        index += 1
    return force, as_json, python, rest


def pip_main(argv: Sequence[str]) -> int:
    from torchguard._frontends.check_error import CheckError
    from torchguard._frontends.env_check import check_env

    force, as_json, python, rest = split_options(argv)
    if not rest or rest[0] != "install":
        return _unchecked(
            as_json,
            [
                "only `pip install` is guarded; run other pip commands with pip itself",
                USAGE,
            ],
            "usage",
        )
    arguments = rest[1:]
    target = python or sys.executable
    try:
        result = check_env(
            arguments,
            python=target,
            progress=sys.stderr if sys.stderr.isatty() else None,
        )
    except CheckError as exc:
        return _unchecked(as_json, exc.lines, exc.kind)
    except Exception as exc:  # torchguard's own fault: said in one line, never a traceback
        from torchguard._facts.internal import internal_error

        print(f"torchguard: internal error: {internal_error(exc, 'pip install')}", file=sys.stderr)
        if not force:
            print(
                "torchguard: not checked, nothing was installed (--force installs without "
                "the check)",
                file=sys.stderr,
            )
            return EXIT_INTERNAL
        print("torchguard: --force: installing without the check", file=sys.stderr)
        return _run_pip(target, arguments, as_json, {"check": None, "forced": True})
    document: dict[str, object] = {
        "check": result.to_dict(),
        "forced": force,
        "ran_pip": False,
        "pip_exit": None,
    }
    if not as_json:
        from torchguard._frontends.colour import wanted
        from torchguard._frontends.env_text import render_env
        from torchguard._report.colour import Paint

        print(render_env(result, Paint(wanted(sys.stdout)), "torchguard pip install"))
        sys.stdout.flush()
    if not result.safe and not force:
        if as_json:
            print(json.dumps(document, indent=2))
        else:
            print("refused: nothing was installed (--force installs anyway)", file=sys.stderr)
        return EXIT_REFUSED
    if not result.safe:
        print("torchguard: --force: installing anyway", file=sys.stderr)
    return _run_pip(target, arguments, as_json, document)


def _run_pip(
    target: str, arguments: Sequence[str], as_json: bool, document: dict[str, object]
) -> int:
    """The same interpreter's pip, the same arguments; with ``--json`` its output on stderr."""
    command = [target, "-m", "pip", "install", *arguments]
    sys.stderr.flush()
    done = subprocess.run(command, stdout=sys.stderr if as_json else None)
    document.update(ran_pip=True, pip_exit=done.returncode)
    if as_json:
        print(json.dumps(document, indent=2))
    return EXIT_INSTALLED if done.returncode == 0 else EXIT_PIP_FAILED


def _unchecked(as_json: bool, lines: Sequence[str], kind: str) -> int:
    for number, line in enumerate(lines):
        print(("torchguard: error: " if number == 0 else "  ") + line, file=sys.stderr)
    if as_json:
        document = {"schema": 1, "ok": False, "error": {"kind": kind, "lines": list(lines)}}
        print(json.dumps(document, indent=2))
    return EXIT_UNCHECKED
