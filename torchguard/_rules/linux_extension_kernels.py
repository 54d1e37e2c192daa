"""``gpu-arch-unsupported`` on Linux for packages with kernels of their own (xformers,
flash-attn, torchvision ...): the union of a package's ``.nv_fatbin`` sections against each
named GPU. The wording is Windows' too (:mod:`torchguard._rules.kernels`)."""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._report.findings import Finding
from torchguard._rules.kernels import extension_finding, extension_losses, nvidia_gpus
from torchguard._rules.linux_context import LinuxContext
from torchguard._rules.registry import LINUX, rule


@rule(LINUX)
def check(context: LinuxContext) -> Iterator[Finding]:
    gpus = nvidia_gpus(context.gpus)
    for package, union in context.extension_archs.items():
        loses = extension_losses(package) or ""
        for name, capability in gpus.items():
            if not union.runs_on(capability):
                yield extension_finding(
                    package,
                    package,
                    loses,
                    name,
                    capability,
                    union,
                    platform="linux",
                    torch_version=context.torch_version,
                    torch_cuda=context.cuda,
                    python_cmd=context.python_cmd,
                )
