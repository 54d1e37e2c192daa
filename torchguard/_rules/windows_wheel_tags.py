"""``wheel-tag-mismatch`` on Windows: each installed distribution that lists a ``.pyd``/``.dll``
(and torch) against the interpreter, worded by
:func:`~torchguard._rules.wheel_tags.tag_findings` as on Linux."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from torchguard._facts.vocab import Machine
from torchguard._facts.wheel_tags import Interpreter, platform_tag, wheel_tags
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
    """Every distribution that lists a ``.pyd``/``.dll``, against the interpreter."""
    python = context.system.interpreter
    machine = _WINDOWS_MACHINES.get(python.machine, "amd64")
    interpreter = Interpreter(
        python.version, python.free_threaded, platform_tag("windows", machine)
    )
    binary = (
        (d.name, d.version, _wheel_text(context, d))
        for d in context.dists
        if d.name == "torch" or d.distribution.summary().lists_binaries
    )
    yield from tag_findings(binary, interpreter, context.hints.python_cmd)


def _wheel_text(context: CheckContext, dist: InstalledDist) -> str | None:
    """Its ``WHEEL`` text, remembered by its RECORD's digest (which holds WHEEL's hash), so a
    warm run reads no ``WHEEL`` at all. torch's RECORD is never summarised (it is large): its
    ``.dist-info`` folder's state stands in (one stat)."""
    cache, distribution = context.cache, dist.distribution
    if dist.name == "torch":
        folder = join(dist.site_dir, distribution.dist_info)
        state = context.system.tree.folder_state(folder)
        identity = f"{folder}|{state}" if state else None
    else:
        identity = distribution.summary().digest
    remembered = cache.get_derived("wheel-tags", identity) if cache else None
    if isinstance(remembered, str):
        return remembered
    text = distribution.read_text("WHEEL")
    if cache is not None:  # "" for no WHEEL: nothing to judge, and nothing to read again
        cache.put_derived("wheel-tags", identity, "\n".join(f"Tag: {t}" for t in wheel_tags(text)))
    return text
