"""``wheel-tag-mismatch`` on Linux: each distribution's ``WHEEL`` tags in the site folders (read
by the pipeline, live only) against the interpreter, worded by
:func:`~torchguard._rules.wheel_tags.tag_findings` as on Windows."""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._report.findings import Finding
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.registry import LINUX, rule
from torchguard._rules.wheel_tags import tag_findings


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    tags = context.wheel_tags
    if tags is not None:
        yield from tag_findings(tags.rows, tags.interpreter, context.python_cmd)
