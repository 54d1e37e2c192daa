"""package-mismatch: torchvision or torchaudio built for another torch.

Their binaries import torch's DLLs symbol by symbol, so each release pins one torch
(``Requires-Dist: torch ==2.4.0``) and one build variant (``+cpu``, ``+cu121``). A mismatched
pair imports torch fine, then ``import torchvision`` fails with "operator torchvision::nms does
not exist" or WinError 127 (failure-catalog.md, row 20), or imports and its operators fail when
called or crash (:mod:`torchguard._rules.mismatch_text`). A warning: ``import torch`` works.

This is the metadata-level explanation. Next to it stands the binary-level proof: the
package's binaries are replayed against this torch symbol by symbol
(``_platforms.windows.ecosystem``), so the message says what that replay found. A pair pip calls
mismatched may still bind (torchvision 0.19.0, pinned to torch 2.4.0, loads into torch 2.4.1): then
the warning says so, and that binding does not make its operators work.
"""

from __future__ import annotations

import email.parser
from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._platforms.windows.dists import InstalledDist
from torchguard._platforms.windows.ecosystem import CORE
from torchguard._platforms.windows.locate import split_local
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.mismatch_text import bound, unknown
from torchguard._rules.registry import WINDOWS, rule

#: Each paired package and how its import fails when its binaries do not bind.
PAIRED = {
    "torchvision": '"operator torchvision::nms does not exist" or WinError 127',
    "torchaudio": "WinError 127 or 126 loading libtorchaudio.pyd",
}


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    torch_version = context.torch.version
    for dist in context.dists:
        if dist.name not in PAIRED:
            continue
        problem = _mismatch(dist, torch_version)
        if problem is None:
            continue
        yield Finding(
            code=Code.PACKAGE_MISMATCH,
            severity=WARNING,
            message=(
                f"{dist.name} {dist.version} {problem}, but torch {torch_version} is "
                f"installed: {_consequence(context, dist.name)}"
            ),
            missing=f"{dist.name}=={dist.version}",
            hints=(
                RepairHint(
                    f"reinstall torch and {dist.name} together, from one index, so pip picks "
                    "a matching pair",
                    (
                        context.hints.pip(
                            "install",
                            "--force-reinstall",
                            f"torch=={context.torch.base_version}",
                            dist.name,
                        ),
                    ),
                ),
            ),
            rank=80,
        )


def _consequence(context: CheckContext, name: str) -> str:
    """What the binary-level replay of the package found, or what may happen."""
    simulation = next((p for p in context.packages if p.plan.name == name), None)
    if simulation is None or simulation.blocked or not simulation.results:
        return unknown(name, PAIRED[name])
    if all(result.ok for result in simulation.results if result.step.role == CORE):
        return bound(name)
    return f"`import {name}` fails ({PAIRED[name]}; see the findings about it)"


def _mismatch(dist: InstalledDist, torch_version: str) -> str | None:
    """Why ``dist`` does not fit this torch, or None."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    text = dist.distribution.read_text("METADATA") or ""
    metadata = email.parser.Parser().parsestr(text, headersonly=True)
    try:
        installed = Version(torch_version)
    except InvalidVersion:
        return None
    for line in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "torch" or requirement.marker is not None:
            continue
        if requirement.specifier and not requirement.specifier.contains(
            installed, prereleases=True
        ):
            return f"requires torch{requirement.specifier}"
    ours, theirs = split_local(torch_version)[1], split_local(dist.version)[1]
    if ours and theirs and ours.lower() != theirs.lower():
        return f"is a +{theirs} build while torch is +{ours}"
    return None
