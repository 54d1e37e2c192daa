"""Package binaries that link torch (torchvision's ``_C.so``, extensions), loaded into the
process ``import torch`` left: a failure is its package's, judged as
:func:`~torchguard._rules.linux_missing.load_error_finding` judges torch's own."""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._report.findings import Finding
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_missing import load_error_finding
from torchguard._rules.registry import LINUX, rule


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    if not context.replay.ok:
        return
    for load in context.extension_loads:
        finding = load_error_finding(load.error, context.hints, context.objects, load.package)
        yield finding if context.claim is None else context.claim(finding, load.package, load.path)
