"""What torch's siblings load when imported, as data read off their own loaders.

torchvision 0.19 (``torchvision.extension``, ``torchvision.io``) and torchaudio 2.4
(``torchaudio._extension``, ``torio``'s FFmpeg backends): which binary each loads, how, what a
failure costs, and in what order. :func:`torchguard._platforms.windows.ecosystem.discover` turns a
table entry and a distribution's files into the loads to replay. A new sibling is one more entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchguard._facts.vocab import Loader, Role


@dataclass(frozen=True)
class KnownLoad:
    """One binary a sibling loads, named by its folder and its module stem."""

    folder: str
    """Site-relative folder, ``/``-separated (``torchaudio/lib``)."""
    stem: str
    """The file's module stem in lower case (``_c`` for ``_C.cp311-win_amd64.pyd``)."""
    role: Role
    loader: Loader
    feature: str
    """What fails when this load fails."""
    group: str | None = None
    """Alternatives: the first load of a group that succeeds wins."""
    after: str | None = None
    """The stem of a binary in the same folder loaded first, when it is there."""
    gate: str | None = None
    """Loaded only when a binary with this stem is in the same folder."""
    reaction: str | None = None
    """What the package's import says when this load (or its whole group) fails."""


@dataclass(frozen=True)
class KnownSibling:
    import_name: str
    loads: tuple[KnownLoad, ...]
    others: Role
    """What any other binary that imports torch's DLLs costs: a feature loaded on demand."""
    registers: tuple[str, ...] = ()
    """Site-relative folders the package passes to ``os.add_dll_directory`` first."""
    extensions_only: bool = False
    """Only extension modules (``.pyd``) are loaded from its folders."""
    checks_existence: bool = False
    """It checks that each file exists before loading it."""


def _ffmpeg(version: str) -> tuple[KnownLoad, KnownLoad]:
    """torio tries FFmpeg 6, 5, 4, then an unversioned build, and gives up quietly."""
    feature = f"FFmpeg {version}" if version else "FFmpeg"
    library, extension = f"libtorio_ffmpeg{version}", f"_torio_ffmpeg{version}"
    quiet, folder = Role.QUIET, "torio/lib"
    return (
        KnownLoad(folder, library, quiet, Loader.CTYPES, feature, "ffmpeg", gate=extension),
        KnownLoad(folder, extension, quiet, Loader.IMPORT, feature, "ffmpeg", after=library),
    )


_TORCHCODEC_FAILS = (
    'fails: RuntimeError "Could not load libtorchcodec. Likely causes: 1. FFmpeg is not '
    'properly installed in your environment ..."'
)


def _torchcodec(major: int) -> tuple[KnownLoad, ...]:
    """torchcodec's import tries FFmpeg 8 (9 ...) down to 4: for each, torch.ops.load_library
    of libtorchcodec_core<N> and custom_ops<N>, then the import of pybind_ops<N>; the first
    major whose three load wins, and none raises RuntimeError from ``import torchcodec``."""
    feature, folder, group = f"FFmpeg {major}", "torchcodec", "ffmpeg"
    core, ops = f"libtorchcodec_core{major}", f"libtorchcodec_custom_ops{major}"
    pybind = f"libtorchcodec_pybind_ops{major}"
    return tuple(
        KnownLoad(folder, stem, Role.CORE, loader, feature, group, after, None, _TORCHCODEC_FAILS)
        for stem, loader, after in (
            (core, Loader.CTYPES, None),
            (ops, Loader.CTYPES, core),
            (pybind, Loader.IMPORT, ops),
        )
    )


SIBLINGS: dict[str, KnownSibling] = {
    # add_dll_directory(torchvision), then torch.ops.load_library of _C; a failure is swallowed
    # and `import torchvision` fails in _meta_registrations ("operator torchvision::nms does
    # not exist"); torchvision.io loads image (a UserWarning) and, if present, video_reader and
    # the GPU decoder (silent).
    "torchvision": KnownSibling(
        "torchvision",
        (
            KnownLoad("torchvision", "_c", Role.CORE, Loader.CTYPES, "torchvision._C"),
            KnownLoad("torchvision", "image", Role.OPTIONAL, Loader.CTYPES, "torchvision.io image"),
            KnownLoad(
                "torchvision",
                "video_reader",
                Role.QUIET,
                Loader.CTYPES,
                "torchvision.io video_reader backend",
            ),
            KnownLoad(
                "torchvision", "decoder", Role.QUIET, Loader.CTYPES, "torchvision.io GPU decoder"
            ),
        ),
        others=Role.OPTIONAL,
        registers=("torchvision",),
        extensions_only=True,
    ),
    # torch.ops.load_library(lib\libtorchaudio) then the import of lib\_torchaudio, both only
    # when _torchaudio's spec is found (_IS_TORCHAUDIO_EXT_AVAILABLE); failures propagate.
    "torchaudio": KnownSibling(
        "torchaudio",
        (
            KnownLoad(
                "torchaudio/lib",
                "libtorchaudio",
                Role.CORE,
                Loader.CTYPES,
                "torchaudio._extension",
                gate="_torchaudio",
            ),
            KnownLoad(
                "torchaudio/lib",
                "_torchaudio",
                Role.CORE,
                Loader.IMPORT,
                "torchaudio.lib._torchaudio",
                after="libtorchaudio",
            ),
            *_ffmpeg("6"),
            *_ffmpeg("5"),
            *_ffmpeg("4"),
            *_ffmpeg(""),
        ),
        others=Role.QUIET,
        checks_existence=True,
    ),
    # torchcodec._core.ops at import: the first FFmpeg major (newest first) whose three
    # libraries load; its DLL folder is the one of the ffmpeg on PATH, if any.
    "torchcodec": KnownSibling(
        "torchcodec",
        tuple(load for major in range(9, 3, -1) for load in _torchcodec(major)),
        others=Role.OPTIONAL,
    ),
}
