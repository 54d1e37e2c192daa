"""Libraries loaded later by name, after ``import torch``: where each would land.

cuDNN 9's ``libcudnn.so.9`` keeps its sub-libraries as bare stems (``libcudnn_graph.so``) and
``dlopen``s ``<stem>.<its major>`` at the first cuDNN call (after ``<stem>.<major.minor.patch>``
and ``.<major.minor>``, which the wheels do not ship, and before the bare stem, which the model
tries last as cuDNN does: "Unable to load any of {libcudnn_graph.so.9.10.2,
libcudnn_graph.so.9.10, libcudnn_graph.so.9, libcudnn_graph.so}"); ``libcudnn_graph.so.9``
does the same for the engine libraries (both measured on the real 9.10 files). glibc searches such a
``dlopen`` with the *calling* library's RPATH/RUNPATH, ``LD_LIBRARY_PATH``, the cache and the
default directories, so a foreign copy can win where ``import torch`` showed nothing wrong.
The stems come from the binaries (``stems``); only the soname families below are dispatchers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torchguard._model.ldso import LateLoad, Ldso, SharedObject

#: Soname families whose members ``dlopen`` siblings of the same family by bare stem.
DISPATCHER_FAMILIES = ("libcudnn",)

Stems = Callable[[str, str], "tuple[str, ...]"]
"""(path, family prefix) -> the bare ``<prefix>*.so`` stems the file holds."""


def _family(soname: str) -> str | None:
    prefix = soname.split(".", 1)[0].split("_", 1)[0]
    return prefix if prefix in DISPATCHER_FAMILIES else None


def _major(soname: str) -> str | None:
    _, sep, tail = soname.partition(".so.")
    major = tail.split(".", 1)[0]
    return major if sep and major.isdigit() else None


def late_loads(ldso: Ldso, objects: Sequence[SharedObject], stems: Stems) -> list[LateLoad]:
    """Every late load the loaded dispatchers (and the sub-libraries they would load) make."""
    queue = [o for o in objects if o.facts.soname and _family(o.facts.soname)]
    seen = {o.facts.soname for o in queue}
    found: list[LateLoad] = []
    for obj in queue:
        soname = obj.facts.soname or ""
        family, major = _family(soname), _major(soname)
        if family is None or major is None:
            continue
        for stem in stems(obj.path, family):
            name = f"{stem}.{major}"
            if name in seen:
                continue
            seen.add(name)
            load = ldso.late_load(name, obj)
            if load.path is None:  # its last resort is the bare stem (measured)
                bare = ldso.late_load(stem, obj)
                load = bare if bare.path is not None else load
            found.append(load)
            if load.path is not None and load.facts is not None:
                queue.append(SharedObject(load.path, load.facts, {name}, obj, load.via))
    return found
