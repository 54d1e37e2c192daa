"""A report made to be pasted into a GitHub issue (``--markdown``), optionally redacted.

It holds what a maintainer asks for first: torchguard's version, the Python, torch and its
siblings, the verdict, each finding with its chain and fix, and the DLL directories folded in a
``<details>`` block so the issue stays short.
"""

from __future__ import annotations

import getpass
import ntpath
import os
import platform
import re
from collections.abc import Sequence
from typing import Any

from torchguard._report.findings import Finding
from torchguard._report.report import Report


def render_markdown(
    report: Report,
    *,
    title: str = "torchguard report",
    notes: Sequence[str] = (),
    folded: Sequence[tuple[str, Sequence[str]]] = (),
    failed_install: str | None = None,
) -> str:
    """The report as GitHub-flavoured markdown; ``notes`` are assumptions worth stating,
    ``folded`` extra ``(summary, lines)`` lists shown collapsed (e.g. the wheels checked),
    ``failed_install`` why ``pip install`` itself fails (``check``: no wheel for the target),
    which is then the verdict rather than ``import torch``."""
    from torchguard._version import __version__

    rows = [("torchguard", __version__), ("analysis", _mode(report.mode))]
    rows.append(("ran on", f"{platform.platform()}, Python {platform.python_version()}"))
    if report.python:
        rows.append(
            ("Python", f"{report.python.get('version')} `{report.python.get('executable')}`")
        )
    if report.torch is not None:
        torch = report.torch
        details = ", ".join(
            part for part in (torch.variant, f"CUDA {torch.cuda}" if torch.cuda else None) if part
        )
        rows.append(
            ("torch", f"{torch.version}{f' ({details})' if details else ''} `{torch.location}`")
        )
    if report.distributions:
        rows.append(("with", ", ".join(f"{d.name} {d.version}" for d in report.distributions)))
    lines = [f"### {title}", "", "| | |", "|---|---|"]
    lines.extend(f"| {key} | {_cell(value)} |" for key, value in rows)
    lines += ["", f"**Verdict:** {_verdict(report, failed_install)}"]
    lines.extend(f"> {note}" for note in notes)
    for finding in report.findings:
        lines += ["", *_finding(finding)]
    if report.dll_directories:
        lines += [
            "",
            f"<details><summary>DLL directories ({len(report.dll_directories)})</summary>",
            "",
            "| folder | registered by | why |",
            "|---|---|---|",
        ]
        lines.extend(
            f"| `{d.path}` | {'torch' if d.by_torch else 'torchguard'} | {_cell(d.provenance)} |"
            for d in report.dll_directories
        )
        lines += ["", "</details>"]
    for summary, items in folded:
        lines += ["", f"<details><summary>{summary} ({len(items)})</summary>", ""]
        lines.extend(f"- `{item}`" for item in items)
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def _mode(mode: str) -> str:
    return {
        "live": "this Windows environment",
        "offline": "offline scan",
        "non-windows": "not Windows (no DLL checks)",
    }.get(mode, mode)


def _verdict(report: Report, failed_install: str | None = None) -> str:
    counts = f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)"
    outcome, plain = report.import_torch, report.import_torch_without_torchguard
    if failed_install is not None:
        return f"`pip install` fails: {_cell(failed_install)}; {counts}"
    if any(f.code == "no-matching-wheel" for f in report.errors):  # pip install itself fails
        return f"`pip install` fails: no wheel for the target (no-matching-wheel); {counts}"
    if report.blocking:
        if outcome is not None and not outcome.ok:
            return f"`import torch` {_cell(outcome.describe())}; {counts}"
        return f"`import torch` fails ({report.blockers[0].code}); {counts}"
    if plain is not None and not plain.ok and outcome is not None and outcome.ok:
        return f"`import torch` succeeds only after `torchguard.ensure()`; {counts}"
    if outcome is not None:
        return f"`import torch` succeeds; {counts}"
    if report.mode == "non-windows" and not report.findings:
        return "not Windows: no Windows DLLs to check here"  # nothing checked, nothing found
    return f"no problems found; {counts}" if report.findings else "no problems found"


def _finding(finding: Finding) -> list[str]:
    lines = [f"#### {finding.severity} `{finding.code}`", "", finding.message, ""]
    if len(finding.chain) > 1:
        lines.append("- chain: " + " → ".join(f"`{name}`" for name in finding.chain))
    if finding.path:
        lines.append(f"- file: `{finding.path}`")
    for hint in finding.hints:
        lines.append(f"- fix: {hint.summary}" + (f" ({hint.url})" if hint.url else ""))
        if hint.commands:
            lines += ["", "  ```", *(f"  {command}" for command in hint.commands), "  ```"]
    return lines if lines[-1] else lines[:-1]


def _cell(text: str) -> str:
    """Text safe inside a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


#: One character of a folder name that may hold spaces, but never the start of another path.
_SPACED = r"(?:(?!\s[\\/]|\s[a-zA-Z]:)[^\\/:`'\"|\r\n])"


def redact_values(value: Any, home: str | None = None, user: str | None = None) -> Any:
    """``value`` (JSON-ready data) with every string, keys included, :func:`redact`-ed.

    Redacting the data, not its JSON text, matters: JSON escapes backslashes and non-ASCII
    letters (``Jos\\u00e9``), which no pattern over the text matches.
    """
    if isinstance(value, str):
        return redact(value, home, user)
    if isinstance(value, dict):
        return {
            redact_values(k, home, user): redact_values(v, home, user) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_values(item, home, user) for item in value]
    return value


def redact(text: str, home: str | None = None, user: str | None = None) -> str:
    """``text`` with the home folder as ``~`` and the user name in paths as ``<user>``."""
    home = os.path.expanduser("~") if home is None else home
    if user is None:
        try:
            user = getpass.getuser()
        except Exception:  # no user name is known (some containers)
            user = ntpath.basename(home.rstrip("\\/")) or None
    if home and home not in ("/", "~"):
        variants = {home, home.replace("\\", "/"), home.replace("/", "\\")}
        for variant in sorted(variants, key=len, reverse=True):
            text = re.sub(re.escape(variant) + r"(?=[\\/`'\"\s|)\x1b]|$)", "~", text, flags=re.I)
    # a user folder's name may hold spaces: up to the next separator when one follows (and
    # no other path starts first), else up to the first space
    text = re.sub(
        rf"(?i)\b([a-z]:[\\/]+Users[\\/]+)(?:{_SPACED}+?(?=[\\/])|[^\\/`'\"\s|]+)",
        r"\1<user>",
        text,
    )
    text = re.sub(
        rf"(?<![\w.])(/home/|/Users/)(?:{_SPACED}+?(?=/)|[^/`'\"\s|]+)", r"\1<user>", text
    )
    if user and len(user) > 1:
        boundary = r"(?<=[\\/])" + re.escape(user) + r"(?=[\\/`'\"\s|\x1b]|$)"
        text = re.sub(boundary, "<user>", text, flags=re.I)
    return text
