"""``bitsandbytes-binary-missing`` on Linux: the install Python would import (found by the
pipeline) against torch's CUDA, worded by
:func:`~torchguard._rules.bitsandbytes.binary_findings` as on Windows."""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._report.findings import Finding
from torchguard._rules.bitsandbytes import binary_findings
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.registry import LINUX, rule


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    found = context.bitsandbytes
    if found is not None:
        yield from binary_findings(
            found.install, found.cuda, "linux", found.override, context.python_cmd
        )
