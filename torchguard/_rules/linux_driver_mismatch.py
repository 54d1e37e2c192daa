"""``cuda-driver-mismatch``: the ``libcuda`` ld.so finds belongs to another driver than the
loaded kernel module (CUDA error 803, or 804 for forward compatibility on a consumer GPU)."""

from __future__ import annotations

from torchguard._facts.vocab import Code
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.links import DRIVERS_URL
from torchguard._rules.linux_driver_facts import LinuxDriverFacts

COMPAT_URL = "https://docs.nvidia.com/deploy/cuda-compatibility/"
#: GPUs NVIDIA's forward compatibility does not support (it is for data-centre GPUs).
_CONSUMER = ("geforce", "titan")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def driver_mismatch(name: str, facts: LinuxDriverFacts) -> Finding | None:
    """``libcuda`` (user space) of another driver version than the kernel module: CUDA's
    initialisation refuses the pair (error 803), or (a forward-compatibility ``libcuda``
    newer than the module, on a GPU that feature does not support) error 804."""
    module, found, path = facts.module, facts.libcuda_version, facts.libcuda
    if module is None or found is None or not path or facts.host:
        return None
    lib, kernel = _numbers(found), _numbers(module)
    if lib == kernel:
        return None
    via = {"default": "the default folders", "loaded": "already loaded"}.get(
        facts.libcuda_via, facts.libcuda_via
    )
    where = f"{path} (found through {via})" if via else path
    folder = path.rsplit("/", 1)[0]
    if facts.libcuda_compat and lib > kernel:
        consumer = [g for g in facts.gpus if any(c in g.lower() for c in _CONSUMER)]
        if not consumer:
            return None  # forward compatibility, as NVIDIA intends it on data-centre GPUs
        effect = (
            f"{name}'s CUDA initialisation fails with \"CUDA error 804: forward compatibility "
            f'was attempted on non supported HW" on the {consumer[0]}'
        )
        why = "NVIDIA's forward-compatibility libcuda runs only on data-centre GPUs"
    else:
        effect = (
            f"{name}'s CUDA initialisation fails with \"CUDA error 803: system has unsupported "
            'display driver / cuda driver combination"'
        )
        why = (
            "a forward-compatibility libcuda older than the driver it runs on"
            if facts.libcuda_compat
            else (
                "the driver was upgraded and the old kernel module is still loaded (nvidia-smi: "
                '"Driver/library version mismatch")'
                if lib > kernel
                else "a driver library left from another driver version"
            )
        )
    return Finding(
        code=Code.CUDA_DRIVER_MISMATCH,
        severity=WARNING,
        message=(
            f"libcuda.so.1, which cudart loads at the first CUDA call, is {where}, driver "
            f"{found}, but the NVIDIA kernel module is {module}: {why}. torch imports, then "
            f"{effect} and torch.cuda.is_available() is False"
        ),
        missing="libcuda.so.1",
        path=path,
        hints=_mismatch_hints(facts, folder, lib > kernel),
        rank=70,
    )


def _mismatch_hints(facts: LinuxDriverFacts, folder: str, newer: bool) -> tuple[RepairHint, ...]:
    """Drop the folder that puts the foreign libcuda first, else reboot (an upgrade), else
    remove the stray copy."""
    if facts.libcuda_via == "LD_LIBRARY_PATH":
        return (
            RepairHint(
                f"Drop {folder} from LD_LIBRARY_PATH before Python starts, so that the "
                "driver's own libcuda (the kernel module's version) loads",
                ("unset LD_LIBRARY_PATH",),
                COMPAT_URL,
            ),
        )
    if facts.libcuda_compat:
        return (
            RepairHint(
                f"Take {folder} out of the loader's configuration (the /etc/ld.so.conf.d entry "
                "that lists it; or remove the cuda-compat package), then rebuild the cache",
                (f"grep -rl {folder} /etc/ld.so.conf.d", "sudo ldconfig"),
                COMPAT_URL,
            ),
        )
    if newer:
        return (
            RepairHint(
                "Reboot, so that the kernel module of the installed driver loads (or unload "
                "and reload the NVIDIA modules with nothing using the GPU)",
                (
                    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia",
                    "sudo modprobe nvidia",
                ),
                DRIVERS_URL,
            ),
        )
    return (
        RepairHint(
            f"Remove the stray {facts.libcuda} or reinstall the driver's user-space libraries "
            f"at the kernel module's version {facts.module}, then rebuild the cache",
            ("sudo ldconfig",),
            DRIVERS_URL,
        ),
    )
