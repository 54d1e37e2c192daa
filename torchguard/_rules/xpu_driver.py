"""xpu-driver-missing: an XPU build of torch on a machine without Intel's GPU driver.

torch's XPU builds run on Intel GPUs through the SYCL runtime (``sycl8.dll``, from the
``intel-sycl-rt`` wheel) and its Level Zero adapter (``ur_adapter_level_zero.dll``, from
``intel-cmplr-lib-ur``), which loads the Level Zero loader ``ze_loader.dll`` by name at run time
(no static import: the tests read the real 2025.3.1 wheels). That loader is installed into
System32 by Intel's graphics driver (oneapi-src/level-zero#142; old drivers lack it, intel/
LibXPUInfo#16). Without it torch imports and ``torch.xpu.is_available()`` is False.
"""

from __future__ import annotations

from collections.abc import Iterator

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

INTEL_DRIVER_URL = "https://www.intel.com/content/www/us/en/download/785597/intel-arc-iris-xe-graphics-windows.html"
LOADER = "ze_loader.dll"


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    variant = (context.torch.variant or "").lower()
    if not variant.startswith("xpu"):
        return
    if context.system.tree.lookup(context.system.system32, LOADER) is not None:
        return
    version = context.torch.base_version
    pin = f"=={version}" if version[:1].isdigit() else ""
    yield Finding(
        code=Code.XPU_DRIVER_MISSING,
        severity=WARNING,
        message=(
            f"torch {context.torch.version} is an XPU (Intel GPU) build but the Intel graphics "
            f"driver's Level Zero loader is missing (no {LOADER} in System32): torch imports, "
            "torch.xpu.is_available() is False"
        ),
        missing=LOADER,
        hints=(
            RepairHint(
                "install or update the Intel Arc & Iris Xe graphics driver (drivers older than "
                f"about 2024 do not install {LOADER})",
                (),
                INTEL_DRIVER_URL,
            ),
            RepairHint(
                "or, without an Intel GPU, install the CPU build",
                (
                    f"{context.hints.python_cmd} -m pip install --force-reinstall torch{pin} "
                    "--index-url https://download.pytorch.org/whl/cpu",
                ),
            ),
        ),
        rank=70,
    )
