"""The other order of onnxruntime's ``preload_dlls()`` on Windows (onnxruntime issue 24266):
the NVIDIA wheels' CUDA and cuDNN loaded first, then ``import torch``.

torch loads its own ``torch\\lib`` copies by full path, but their imports by base name
(``cudnn_graph64_9.dll``, ``cudnn_ops64_9.dll``) bind to the modules of those names already in
the process: the wheel's, another cuDNN 9 minor. Replayed at symbol level
(:func:`torchguard._platforms.windows.neighbours.torch_after_wheels`):

- a name torch's copy imports that the bound copy does not export: ``import torch`` fails with
  WinError 127 in that order, a proof of that order (a warning all the same: whether the program
  calls ``preload_dlls()`` before ``import torch`` is its own, unknown here);
- only the version resources differ, every import found: a warning that two minors are mixed.
"""

from __future__ import annotations

import ntpath

from torchguard._facts.vocab import Code, FailureKind
from torchguard._platforms.windows.loader import Failure, Resolution
from torchguard._platforms.windows.neighbours import NeighbourReplay, WheelsFirst
from torchguard._platforms.windows.tree import same_path
from torchguard._report.findings import WARNING, Finding, RepairHint
from torchguard._rules.hints import HintContext

RANK = 140
_SHOWN = 1


def preload_order_findings(replay: NeighbourReplay, hints: HintContext) -> list[Finding]:
    first = replay.torch_after_wheels
    if first is None:
        return []
    neighbour = replay.neighbour
    label = f"{neighbour.kind.package} {neighbour.version}"
    calls = (
        "onnxruntime.preload_dlls() (here it takes the NVIDIA wheels, torch's version does not "
        'say a matching CUDA build) or preload_dlls(directory="")'
        if first.default_too
        else 'onnxruntime.preload_dlls(directory="")'
    )
    versions = _versions(first)
    failure = _bound_gap(first)
    bound = _mixed(first) if failure is None else None
    if failure is not None and failure.gap is not None:
        importer = failure.importer or failure.chain[0]
        root = _root(first, failure)
        gap = failure.gap
        shown = ", ".join(gap.missing[:_SHOWN])
        message = (
            f"{label}: {calls} before `import torch` loads the NVIDIA wheels' copies first; "
            f"torch's own {ntpath.basename(importer)} then binds {failure.leaf} by name to the "
            f"copy already loaded ({failure.path}), which does not export {gap.count} of the "
            f"names it imports ({shown}{', ...' if gap.count > _SHOWN else ''}): `import "
            f'torch` fails in that order: [WinError {gap.winerror}] Error loading "...\\'
            f'{ntpath.basename(root)}" or one of its dependencies{versions}'
        )
    elif versions and bound is not None:
        message = (
            f"{label}: {calls} before `import torch` loads the NVIDIA wheels' cuDNN first; "
            "torch's own cuDNN sub-libraries then bind to it by name, another minor "
            f"({versions.lstrip('; ')}): every name they import is exported, so `import torch` "
            "loads, but two cuDNN minors are mixed in one process, a combination NVIDIA does not "
            "test"
        )
    else:
        return []
    return [
        Finding(
            code=Code.NEIGHBOUR_LOAD_ORDER,
            severity=WARNING,
            message=message,
            missing=failure.leaf if failure is not None else bound.name if bound else None,
            path=failure.path if failure is not None else bound.path if bound else None,
            package=neighbour.kind.package,
            hints=_hints(first, hints),
            rank=RANK,
        )
    ]


def _bound_gap(first: WheelsFirst) -> Failure | None:
    """The first symbol failure of torch's import whose copy is not torch's own (a module
    the preload loaded)."""
    for load in first.simulation.failed():
        for failure in load.failures:
            if failure.kind != FailureKind.SYMBOL or failure.delay or failure.path is None:
                continue
            if not same_path(ntpath.dirname(failure.path), first.torch_lib):
                return failure
    return None


def _root(first: WheelsFirst, failure: Failure) -> str:
    """The ``torch\\lib`` file whose load fails (what torch's error names)."""
    for load in first.simulation.failed():
        if failure in load.failures:
            return load.root
    return failure.chain[0]


def _mixed(first: WheelsFirst) -> Resolution | None:
    """The first cuDNN name one of torch's loads bound to the wheel's copy."""
    for load in first.simulation.loads:
        for name, resolution in load.modules.items():
            if not name.startswith("cudnn") or resolution.path is None:
                continue
            if resolution.via == "loaded" and same_path(
                ntpath.dirname(resolution.path), first.wheel_dir
            ):
                return resolution
    return None


def _versions(first: WheelsFirst) -> str:
    ours, theirs = first.torch_cudnn, first.wheel_cudnn
    if ours is None or theirs is None or ours[:3] == theirs[:3]:
        return ""
    return (
        f"; torch ships cuDNN {_dotted(ours)}, the NVIDIA wheel loaded first is {_dotted(theirs)}"
    )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version[:3])


def _hints(first: WheelsFirst, hints: HintContext) -> tuple[RepairHint, ...]:
    lib = first.torch_lib
    found = [
        RepairHint(
            "import torch before onnxruntime.preload_dlls(): torch's copies are then the "
            "modules every later load by name binds to (and preload_dlls() loads nothing when "
            "torch's version says a CUDA build of onnxruntime's major)",
            ("import torch  # then: import onnxruntime; onnxruntime.preload_dlls()",),
        ),
        RepairHint(
            "or preload torch's own copies instead of the wheels'",
            (f'onnxruntime.preload_dlls(directory=r"{lib}")',),
        ),
    ]
    if first.torch_cudnn is not None and len(first.torch_cudnn) == 4:
        pin = ".".join(str(p) for p in first.torch_cudnn)
        found.append(
            RepairHint(
                "or install the NVIDIA cuDNN wheel of torch's own cuDNN build, so both are one",
                (hints.pip("install", f'"nvidia-cudnn-cu{first.cuda_major}=={pin}"'),),
            )
        )
    return tuple(found)
