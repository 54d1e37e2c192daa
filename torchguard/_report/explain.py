"""The finding-code reference: one markdown file read by ``torchguard explain`` and the README.

``finding_codes.md`` (beside this module) is the single source: an introduction, then one ``###
`code``` subsection per code (`` (warning)`` after the heading marks a warning). The README's
"Finding codes" section is the same text (a test keeps them equal), so adding a code is adding one
subsection to that file and pasting it into the README.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

_HEADING = re.compile(r"^### `(?P<code>[a-z0-9-]+)`(?: \((?P<severity>[a-z]+)\))?\s*$")


@dataclass(frozen=True)
class CodeReference:
    """One finding code as documented: its heading's severity and its markdown body."""

    code: str
    severity: str
    body: str

    @property
    def summary(self) -> str:
        """The first sentence of the body, without its parenthetical asides, on one line."""
        return first_sentence(self.body)

    def render(self) -> str:
        """The full reference as text for a terminal (the markdown reads well as it is)."""
        label = "" if self.severity == "error" else f" ({self.severity})"
        return f"{self.code}{label}\n\n{self.body}"


def reference_text() -> str:
    """The whole reference as stored (also the README's "Finding codes" section)."""
    path = resources.files("torchguard._report").joinpath("finding_codes.md")
    return path.read_text("utf-8")


@cache
def references() -> dict[str, CodeReference]:
    """Every documented code, in documentation order."""
    return parse(reference_text())


def parse(text: str) -> dict[str, CodeReference]:
    """The ``###`` subsections of a reference text, by code (the introduction is skipped)."""
    found: dict[str, CodeReference] = {}
    code: str | None = None
    severity = "error"
    lines: list[str] = []

    def close() -> None:
        if code is not None:
            found[code] = CodeReference(code, severity, "\n".join(lines).strip())

    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            close()
            code, severity, lines = match["code"], match["severity"] or "error", []
        elif line.startswith("#"):
            close()
            code, lines = None, []
        elif code is not None:
            lines.append(line)
    close()
    return found


def first_sentence(body: str) -> str:
    """Up to the first full stop outside parentheses and code spans, asides removed."""
    text = " ".join(body.split())
    out: list[str] = []
    depth = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char == "`":
            end = text.find("`", index + 1)
            end = len(text) - 1 if end < 0 else end
            if not depth:
                out.append(text[index : end + 1])
            index = end + 1
            continue
        index += 1
        if char in "()":
            depth = max(0, depth + (1 if char == "(" else -1))
            continue
        if depth:
            continue
        out.append(char)
        done = "".join(out[-4:])
        if char == "." and text[index : index + 1] in ("", " ") and done not in _ABBREVIATIONS:
            break
    return re.sub(r"\s+([.,:;])", r"\1", re.sub(r" {2,}", " ", "".join(out))).strip()


_ABBREVIATIONS = ("e.g.", "i.e.")


def render_index() -> str:
    """Every code with its one-line meaning, aligned, for ``torchguard explain``."""
    refs = references().values()
    width = max(len(ref.code) for ref in refs)
    return "\n".join(f"{ref.code:<{width}}  {ref.severity:<7}  {ref.summary}" for ref in refs)


def explain(code: str | None) -> int:
    """``torchguard explain [CODE]``: the index, or one code's reference; 2 for an unknown code."""
    import sys

    if code is None:
        print(render_index())
        return 0
    reference = references().get(code.strip().strip("`").lower())
    if reference is None:
        print(f"torchguard: error: unknown finding code {code!r}; the codes are:", file=sys.stderr)
        print(render_index(), file=sys.stderr)
        return 2
    print(reference.render())
    return 0
