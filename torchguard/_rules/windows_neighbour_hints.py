"""The repair hints of torch's neighbours on Windows (:mod:`torchguard._rules.windows_neighbours`):
the order that works, ``onnxruntime.preload_dlls()`` as its replay found it, the release built
for torch's CUDA and NVIDIA's Windows wheels."""

from __future__ import annotations

from torchguard._facts.neighbours import (
    Kind,
    cudnn_major,
    windows_cuda_major,
    windows_wheel,
)
from torchguard._platforms.windows.neighbours import NeighbourReplay
from torchguard._report.findings import RepairHint
from torchguard._rules.hints import HintContext
from torchguard._rules.neighbour_text import cuda_pin_hint


def order_hints(
    replay: NeighbourReplay, needs: list[str], torch_major: str | None, hints: HintContext
) -> tuple[RepairHint, ...]:
    kind, version = replay.neighbour.kind, replay.neighbour.version
    found = [
        RepairHint(
            f"import torch before {kind.module} first uses CUDA (the order that works)",
            (f"import torch  # then: import {kind.module}",),
        )
    ]
    preload = "import onnxruntime; onnxruntime.preload_dlls()"
    preloaded = replay.preloaded
    if preloaded is not None and preloaded.ok:
        source = (
            f"torch's own copies in {replay.preload_dir} (this torch's version says a CUDA "
            "build of the provider's major)"
            if replay.preload_dir
            else "the NVIDIA wheels' copies installed here"
        )
        found.append(
            RepairHint(
                "or, without torch, call onnxruntime.preload_dlls() before the first session: "
                f"it loads {source} by full path, and the provider then loads (replayed)",
                (preload,),
            )
        )
        return tuple(found)
    if preloaded is not None:
        wheels = wheel_names(needs, torch_major)
        if wheels:
            found.append(
                RepairHint(
                    "or, without torch, install NVIDIA's wheels and call "
                    "onnxruntime.preload_dlls() before the first session (it loads their "
                    "nvidia\\<part>\\bin copies by full path; none is installed here now)",
                    (hints.pip("install", *wheels), preload),
                )
            )
            return tuple(found)
    elif kind.module == "onnxruntime" and at_least(version, (1, 21)):
        found.append(
            RepairHint(
                "or, without torch, let onnxruntime load the CUDA and cuDNN DLLs first "
                "(onnxruntime-gpu 1.21+: torch's lib folder when torch's CUDA major matches, "
                "else the NVIDIA wheels' bin folders)",
                (preload,),
            )
        )
    return (*found, *wheel_hints(needs, torch_major, hints, "or install"))


def wheel_names(names: list[str], torch_major: str | None) -> list[str]:
    """NVIDIA's Windows wheels that ship ``names``, for the CUDA major the names themselves
    give (a cuBLAS or runtime name among them), else torch's; a cuDNN wheel pinned to the
    cuDNN major its name asks for."""
    wanted = []
    for name in names:
        wheel = windows_wheel(name, major(name, names, torch_major))
        cudnn = cudnn_major(name)
        if wheel is not None:
            wanted.append(wheel if cudnn is None else f'"{wheel}=={cudnn}.*"')
    return list(dict.fromkeys(wanted))


def wheel_hints(
    names: list[str], torch_major: str | None, hints: HintContext, verb: str = "install"
) -> tuple[RepairHint, ...]:
    wheels = wheel_names(names, torch_major)
    if not wheels:
        return ()
    return (
        RepairHint(
            f"{verb} NVIDIA's wheels that ship {', '.join(names)} for Windows, and put their "
            "nvidia\\...\\bin folders on PATH before Python starts (its load does not search "
            "os.add_dll_directory folders)",
            (hints.pip("install", *wheels),),
        ),
    )


def built(names: list[str], torch_major: str | None) -> str:
    majors = {m for n in names if (m := windows_cuda_major(n)) is not None}
    if len(majors) != 1 or torch_major is None or str(next(iter(majors))) == torch_major:
        return ""
    built = next(iter(majors))
    return f"; it was built for CUDA {built}, and this torch is a CUDA {torch_major} build"


def pin(
    kind: Kind, names: list[str], torch_major: str | None, hints: HintContext
) -> tuple[RepairHint, ...]:
    majors = {m for n in names if (m := windows_cuda_major(n)) is not None}
    if not majors or torch_major is None or not torch_major.isdigit():
        return ()
    if majors == {int(torch_major)}:
        return ()
    return cuda_pin_hint(kind, torch_major, lambda pin: hints.pip("install", f'"{pin}"'))


def major(name: str, names: list[str], torch_major: str | None) -> str | None:
    """The CUDA major whose wheel ships ``name``: its own (``cublas64_11.dll``), else the one
    the other names a binary loads share (``cudnn64_8.dll`` beside ``cublas64_11.dll``: 11),
    else torch's."""
    own = windows_cuda_major(name)
    if own is not None:
        return str(own)
    siblings = {m for n in names if (m := windows_cuda_major(n)) is not None}
    return str(siblings.pop()) if len(siblings) == 1 else torch_major


def cuda_major_of(hints: HintContext) -> str | None:
    cuda = hints.cuda
    if not cuda:
        return None
    major = cuda.split(".", 1)[0]
    return major if major.isdigit() else None


def at_least(version: str, wanted: tuple[int, int]) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= wanted
    except (IndexError, ValueError):
        return False
