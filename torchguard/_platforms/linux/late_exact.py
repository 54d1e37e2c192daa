"""Libraries loaded later by the exact names their callers hold: nvrtc's builtins, cuDNN 8's
sub-libraries, and torch's own lazy ``libnvrtc.so.N``."""

from __future__ import annotations

from collections.abc import Sequence

from torchguard._platforms.linux.late_loads import Late, LateFacts
from torchguard._platforms.linux.ldso import Ldso, SharedObject

#: Families whose members ``dlopen`` the exact names they hold in ``.rodata`` (names they
#: NEED are not late loads): nvrtc loads ``libnvrtc-builtins.so.12.8`` at the first compile
#: (measured, no GPU needed: missing, the compile fails with "nvrtc: error: failed to open
#: libnvrtc-builtins.so.12.8."); cuDNN 8's ``libcudnn.so.8`` loads ``libcudnn_ops_infer.so.8``,
#: ``_ops_train``, ``_cnn_infer``/``_train`` and ``_adv_infer``/``_train`` (read from the real
#: 8.9.2 dispatcher, whose first call of any kind loads ops_infer: "Could not load library
#: libcudnn_ops_infer.so.8. Error: ...", then an abort).
EXACT_FAMILIES = ("libnvrtc", "libcudnn")

#: torch's lazy NVRTC (ATen's ``LazyNVRTC``): ``libtorch_cuda.so`` ``dlopen``s
#: ``"libnvrtc.so." + <CUDA major>`` (``11.2`` for CUDA 11.3+; the prefix is in the real
#: binary's ``.rodata``) at the first kernel torch compiles at run time.
TORCH_NVRTC_CALLER = "libtorch_cuda.so"
NVRTC_COMPILE = "the first NVRTC compile"
TORCH_COMPILE = "the first kernel torch compiles at run time (jiterator ops, NVRTC)"


def torch_nvrtc_name(cuda: str | None) -> str | None:
    """The ``libnvrtc`` name torch's lazy loader asks for, by torch's CUDA version."""
    parts = (cuda or "").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    major, minor = int(parts[0]), int(parts[1])
    if major < 11 or (major == 11 and minor < 3):
        return f"libnvrtc.so.{major}.{minor}"
    return "libnvrtc.so.11.2" if major == 11 else f"libnvrtc.so.{major}"


def _exact_family(soname: str) -> str | None:
    prefix = soname.split(".", 1)[0]
    return prefix if prefix in EXACT_FAMILIES else None


def _failure(family: str, name: str) -> tuple[str, str]:
    """(when the load happens, what the caller prints when it finds nothing)."""
    if family == "libnvrtc":
        said = f'nvrtc says "nvrtc: error: failed to open {name}." '
        return NVRTC_COMPILE, said + "(NVRTC_ERROR_BUILTIN_OPERATION_FAILURE)"
    error = f"{name}: cannot open shared object file: No such file or directory"
    return "the first cuDNN call", f'cuDNN says "Could not load library {name}. Error: {error}"'


def exact_loads(
    ldso: Ldso, objects: Sequence[SharedObject], facts: LateFacts, cuda: str | None
) -> list[Late]:
    """torch's lazy ``libnvrtc.so.N``, then the exact names nvrtc (its builtins) and cuDNN 8's
    dispatcher (its six sub-libraries) load."""
    found: list[Late] = []
    queue = [o for o in objects if _exact_family(o.soname)]
    caller = next((o for o in objects if o.soname == TORCH_NVRTC_CALLER), None)
    name = torch_nvrtc_name(cuda)
    if caller is not None and name is not None:
        load = ldso.late_load(name, caller)
        failure = f"torch's loader says {name}: cannot open shared object file"
        found.append(Late(load, name, (name,), when=TORCH_COMPILE, failure=failure))
        if load.via != "loaded" and load.path is not None and load.facts is not None:
            queue.append(SharedObject(load.path, load.facts, {name}, caller, load.via))
    seen: set[str] = {o.soname for o in queue}
    for obj in queue:
        family = _exact_family(obj.soname)
        if family is None:
            continue
        for wanted in facts.dlopen_facts(obj.path, family).names:
            if wanted in seen or wanted in obj.facts.needed:
                continue
            seen.add(wanted)
            load = ldso.late_load(wanted, obj)
            when, failure = _failure(family, wanted)
            found.append(Late(load, wanted, (wanted,), when=when, failure=failure))
            if load.via != "loaded" and load.path is not None and load.facts is not None:
                queue.append(SharedObject(load.path, load.facts, {wanted}, obj, load.via))
    return found
