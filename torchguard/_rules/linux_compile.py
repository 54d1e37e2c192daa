"""``compile-not-ready`` on Linux: a triton other than the one torch's METADATA pins.

torch's Linux wheels pin triton exactly (torch 2.9.1: ``Requires-Dist: triton==3.5.1;
platform_system == "Linux" and platform_machine == "x86_64"``, read from the manylinux wheel);
another triton breaks ``torch.compile`` (inductor imports names triton moved or dropped:
"cannot import name 'AttrsDescriptor' from 'triton.compiler.compiler'"), never ``import
torch``. So a warning. ``package-mismatch`` reads the other direction (what torchvision and
the rest pin of torch) and does not see this.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.compile_facts import TRITON_LINUX, CompileInputs, Triton, pairing
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.registry import LINUX, rule

RANK = 150


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    installed = {name: version for name, version, _ in context.pins if name in TRITON_LINUX}
    for name in TRITON_LINUX:
        pin = context.hints.pinned(name)
        if pin is None or name not in installed:
            continue
        paired = pairing(
            CompileInputs(
                windows=False,
                python_version=context.python or (3, 0),
                include_dir="",
                torch_version=context.torch_version,
                triton=Triton(name, installed[name], ""),
                triton_pin=pin,
            )
        )
        if paired is None or paired.pairs:
            continue
        yield Finding(
            code=Code.COMPILE_NOT_READY,
            severity=WARNING,
            message=(
                f"{name} {installed[name]} is installed, but torch {context.torch_version} "
                f"pins {paired.spec} (its METADATA): torch.compile (inductor's triton kernels) "
                "may fail, e.g. \"cannot import name 'AttrsDescriptor' from "
                "'triton.compiler.compiler'\". `import torch` is unaffected"
            ),
            package=name.replace("-", "_"),
            hints=(
                RepairHint(
                    f"install the {name} torch {context.torch_version} was built with",
                    (context.hints.pip("install", paired.spec),),
                ),
            ),
            rank=RANK,
        )
