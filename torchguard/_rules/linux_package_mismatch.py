"""``package-mismatch`` on Linux: torch's neighbours (torchvision, torchaudio, extensions) whose
metadata names another torch. A warning: ``import torch`` works."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.linux_hints import LinuxHints
from torchguard._rules.mismatch_text import unknown
from torchguard._rules.registry import LINUX, rule

_BUILD_TORCH = re.compile(r"torch(\d+)\.(\d+)")

#: How ``import`` fails when a package's binaries do not bind (torchvision swallows its
#: ``_C.so`` load error, then fails on a registration; measured with 0.28.0 in torch 2.14.1).
_UNBOUND = {
    "torchvision": (
        'undefined symbol: _ZN3c10..., which torchvision reports as "operator '
        'torchvision::nms does not exist"'
    ),
}


def package_mismatch(
    pins: Sequence[tuple[str, str, str | None]], torch_version: str, hints: LinuxHints
) -> Iterator[Finding]:
    """``package-mismatch`` warnings from metadata: (name, version, torch requirement).

    A warning: ``import torch`` works. The binary replay stands next to it; a pair that binds
    can still crash when its operators register (torchvision 0.23.0 in torch 2.9.1 binds every
    symbol, then ``import torchvision`` segfaults: measured) or import with operators that fail
    when called (measured under Wine), which no loader model sees."""
    base, _, local = torch_version.partition("+")
    release = tuple(base.split(".")[:2])
    for name, version, requires in pins:
        problem = None
        if requires and requires.startswith("=="):
            pinned = requires[2:]
            pinned_base, _, pinned_local = pinned.partition("+")
            if pinned_base != base or (pinned_local and local and pinned_local != local):
                problem = f"pins torch=={pinned}"
        tag = _BUILD_TORCH.search(version.partition("+")[2])
        if tag and (tag.group(1), tag.group(2)) != release:
            problem = f"is a build for torch {tag.group(1)}.{tag.group(2)} ({version})"
        variant = version.partition("+")[2]
        paired = name in ("torchvision", "torchaudio")
        if problem is None and paired and variant.startswith("cu") and local != variant:
            problem = f"is the {variant} build"
        if problem is None:
            continue
        yield Finding(
            code=Code.PACKAGE_MISMATCH,
            severity=WARNING,
            message=(
                f"{name} {version} {problem}, but torch {torch_version} is installed: "
                + unknown(name, _UNBOUND.get(name, "undefined symbol: _ZN3c10..."))
            ),
            missing=f"{name}=={version}",
            hints=(
                RepairHint(
                    f"Install the {name} release built for torch {base}"
                    + (" (its wheel tag names torch and cxx11abi)" if tag else ""),
                    (
                        hints.pip(
                            "install",
                            "--force-reinstall",
                            "--no-deps",
                            f"<{name} for torch {base}>",
                        ),
                    ),
                ),
            ),
            package=name.replace("-", "_"),
            rank=70,
        )


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    yield from package_mismatch(context.pins, context.torch_version, context.hints)
