"""``bitsandbytes-binary-missing`` on Windows: each installed bitsandbytes' folder (read through
the tree) against torch's CUDA, worded by
:func:`~torchguard._rules.bitsandbytes.binary_findings` as on Linux."""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.bitsandbytes import Install, cuda_tuple
from torchguard._report.findings import Finding
from torchguard._rules.bitsandbytes import OVERRIDE, binary_findings
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    from torchguard._platforms.windows.tree import join

    cuda = cuda_tuple(context.torch.cuda)
    tree = context.system.tree
    for dist in context.dists:
        if dist.name.lower() != "bitsandbytes" or cuda is None:
            continue
        folder = join(dist.site_dir, "bitsandbytes")
        names = tuple(name for name, _ in tree.listdir(folder).values())
        source = tree.read_text(join(folder, "cextension.py"))
        install = Install(dist.version, folder, names, source)
        environ = context.system.interpreter.environ
        yield from binary_findings(
            install, cuda, "windows", environ.get(OVERRIDE), context.hints.python_cmd
        )
