"""``wheel-tag-mismatch`` on Windows: each installed distribution that lists a ``.pyd``/``.dll``
(and torch) against the interpreter, worded by
:func:`~torchguard._rules.wheel_tags.tag_findings` as on Linux."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from torchguard._facts.vocab import Machine
from torchguard._facts.wheel_tags import Interpreter, misfit, platform_tag, wheel_tags
from torchguard._platforms.windows.site_answers import TAGS
from torchguard._platforms.windows.tree import join
from torchguard._report.findings import Finding
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule
from torchguard._rules.wheel_tags import tag_findings

if TYPE_CHECKING:
    from torchguard._platforms.windows.dists import InstalledDist

_WINDOWS_MACHINES: dict[int, str] = {
    Machine.X64: "amd64",
    Machine.ARM64: "arm64",
    Machine.X86: "x86",
}


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    """Every distribution that lists a ``.pyd``/``.dll``, against the interpreter. A site
    folder whose answers are kept whole is judged once per ``WHEEL`` text, not per
    distribution."""
    python = context.system.interpreter
    machine = _WINDOWS_MACHINES.get(python.machine, "amd64")
    interpreter = Interpreter(
        python.version, python.free_threaded, platform_tag("windows", machine)
    )
    answers = context.site_answers
    misfits: dict[str, dict[str, str]] = {}  # per answered folder: .dist-info -> its text
    learning: dict[str, dict[str, list[str]] | None] = {}
    binary: list[tuple[str, str, str | None]] = []
    for dist in context.dists:
        site = dist.site_dir
        if dist.name != "torch" and answers is not None:
            if site not in misfits and site not in learning:
                known = answers.known(site)
                if known is not None:
                    misfits[site] = _misfits(known.tags, interpreter)
                else:
                    learning[site] = {}
            if site in misfits:
                text = misfits[site].get(dist.distribution.dist_info)
                if text is not None:
                    binary.append((dist.name, dist.version, text))
                continue
        if dist.name != "torch" and not dist.distribution.summary().lists_binaries:
            continue
        text, kept = _wheel_text(context, dist)
        binary.append((dist.name, dist.version, text))
        learned = learning.get(site)
        if dist.name == "torch" or learned is None:
            continue
        if kept is None:
            learning[site] = None
        else:
            learned.setdefault(kept, []).append(dist.distribution.dist_info)
    if answers is not None:
        for site, learned in learning.items():
            answers.learn(site, TAGS, learned)
    yield from tag_findings(binary, interpreter, context.hints.python_cmd)


def _misfits(tags: dict[str, list[str]], interpreter: Interpreter) -> dict[str, str]:
    """The distributions (``.dist-info`` names) whose ``WHEEL`` text does not fit."""
    return {
        name: text
        for text, names in tags.items()
        if misfit(wheel_tags(text), interpreter) is not None
        for name in names
    }


def _wheel_text(context: CheckContext, dist: InstalledDist) -> tuple[str | None, str | None]:
    """Its ``WHEEL`` text, and that text as kept (None when it cannot be: no identity).

    Remembered by its RECORD's digest (which holds WHEEL's hash), so a warm run reads no
    ``WHEEL`` at all. torch's RECORD is never summarised (it is large): its ``.dist-info``
    folder's state stands in (one stat)."""
    cache, distribution = context.cache, dist.distribution
    if dist.name == "torch":
        folder = join(dist.site_dir, distribution.dist_info)
        state = context.system.tree.folder_state(folder)
        identity = f"{folder}|{state}" if state else None
    else:
        identity = distribution.summary().digest
    remembered = cache.get_derived("wheel-tags", identity) if cache else None
    if isinstance(remembered, str):
        return remembered, remembered
    text = distribution.read_text("WHEEL")
    kept = "\n".join(f"Tag: {t}" for t in wheel_tags(text))
    if cache is not None:  # "" for no WHEEL: nothing to judge, and nothing to read again
        cache.put_derived("wheel-tags", identity, kept)
    return text, kept if identity else None
