"""What ``package-mismatch`` says happens to a torchvision or torchaudio built for another
torch: one text for Windows and Linux, from what the real loaders did.

Binding is not the end of it. Under Wine (a real Windows CPython 3.11), torchvision 0.19.1
(built for torch 2.4.1) beside torch 2.5.1 binds every symbol and ``import torchvision``
works, but ``torchvision.ops.nms`` raises NotImplementedError ("Could not run
'torchvision::nms' with arguments from the 'CPU' backend": that torch finds no CPU kernel
for it), and one run ended in a page fault. On Linux with PyPI's wheels the import itself
goes: torchvision 0.23.0 (built for 2.8) binds into torch 2.9.1, then ``import
torchvision`` segfaults while its operators register; 0.28.0 (built for 2.13.0) does not bind
into 2.14.1 (``undefined symbol: _ZN3c10...``), torchvision swallows that load error and its
import fails with "operator torchvision::nms does not exist" (a torchvision whose import goes
on without its ``_C``, as 0.23.0's does, raises "Couldn't load custom C++ ops" from each
operator instead).
"""

from __future__ import annotations

#: How a package's compiled operators fail when called, where measured.
CALLS = {
    "torchvision": (
        "`torchvision.ops.nms` raises NotImplementedError (\"Could not run 'torchvision::nms' "
        "with arguments from the 'CPU' backend\") or \"Couldn't load custom C++ ops\""
    ),
}


def operators_fail(name: str) -> str:
    """What calling ``name``'s compiled operators does once its binaries loaded into another
    torch than the one they were built for."""
    how = CALLS.get(name)
    return (
        "its compiled operators, registered for another torch, fail when called"
        + (f" ({how})" if how else "")
        + " or crash the process"
    )


def bound(name: str) -> str:
    """The consequence when every symbol of ``name``'s binaries binds to this torch."""
    return (
        f"its binaries still bind to this torch (checked symbol by symbol), so `import {name}` "
        f"may work, but {operators_fail(name)}"
    )


def unknown(name: str, import_error: str) -> str:
    """The consequence when nothing says whether ``name``'s binaries bind: ``import_error``
    is how its import fails when they do not."""
    return (
        f"`import {name}` may fail ({import_error}), crash while its operators register, or "
        f"work while {operators_fail(name)}"
    )
