"""bitsandbytes' native library, chosen by name from torch's CUDA version.

``import bitsandbytes`` loads ``libbitsandbytes_cuda{XY}.dll`` (``.so`` on Linux) from its own
folder, where ``XY`` is ``torch.version.cuda`` without the dot (``cuda_specs.py``), or the
``BNB_CUDA_VERSION`` environment variable when set. Releases up to 0.49 take that exact name;
from 0.50 (``cextension.py``'s ``_find_cuda_libs``) a missing one falls back to the newest
shipped binary of the same CUDA major at most that version, else the oldest newer one of that
major, never another major. When nothing fits, the import still works and every CUDA function
fails at first use ("Could not find the bitsandbytes CUDA binary at ...", "Configured CUDA
binary not found at ..."). Windows builds start with 0.43.0; older wheels hold Linux ``.so``
files only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BINARY = re.compile(r"^libbitsandbytes_cuda(\d\d)(\d+)\.(dll|so)$", re.IGNORECASE)
#: What the installed ``cextension.py`` of a falling-back release defines.
FALLBACK_MARK = "_find_cuda_libs"


@dataclass(frozen=True)
class Series:
    """Consecutive releases shipping the same CUDA binaries on one platform."""

    first: str
    last: str
    platform: str
    """``windows`` (``win_amd64``) or ``linux`` (``x86_64``)."""
    cuda: tuple[tuple[int, int], ...]
    fallback: bool


def _v(*codes: int) -> tuple[tuple[int, int], ...]:
    return tuple((code // 10, code % 10) for code in codes)


_EXACT_43 = _v(117, 118, 120, 121, 122, 123)
_EXACT_44 = (*_EXACT_43, *_v(124, 125))
_EXACT_45 = (*_EXACT_44, *_v(126))
_EXACT_45_3 = (*_EXACT_45, *_v(128))
_EXACT_46 = _EXACT_45_3[1:]
_EXACT_46_1 = (*_EXACT_46, *_v(129))
_EXACT_48 = (*_EXACT_46_1, *_v(130))
_FALLBACK_50 = _v(118, 121, 124, 126, 128, 130, 132)

#: The libbitsandbytes_cuda* binaries each release's PyPI wheel holds (read from the wheels'
#: file lists: ``bitsandbytes-*-py3-none-win_amd64.whl`` and ``-manylinux_2_24_x86_64.whl``,
#: ``-py3-none-any.whl`` before 0.43; 2026-08).
SERIES: tuple[Series, ...] = (
    Series(
        "0.39.1",
        "0.39.1",
        "linux",
        _v(110, 111, 112, 113, 114, 115, 116, 117, 118, 120, 121),
        False,
    ),
    Series(
        "0.40.0", "0.41.3.post2", "linux", _v(110, 111, 114, 115, 117, 118, 120, 121, 122), False
    ),
    Series(
        "0.42.0", "0.42.0", "linux", _v(110, 111, 114, 115, 117, 118, 120, 121, 122, 123), False
    ),
    Series("0.43.0", "0.43.1", "windows", _EXACT_43, False),
    Series("0.43.0", "0.43.0", "linux", _EXACT_43, False),
    Series("0.43.1", "0.43.1", "linux", (*_EXACT_43, (12, 4)), False),
    *(
        Series(first, last, platform, cuda, False)
        for platform in ("windows", "linux")
        for first, last, cuda in (
            ("0.43.2", "0.44.1", _EXACT_44),
            ("0.45.0", "0.45.2", _EXACT_45),
            ("0.45.3", "0.45.5", _EXACT_45_3),
            ("0.46.0", "0.46.0", _EXACT_46),
            ("0.46.1", "0.47.0", _EXACT_46_1),
            ("0.48.0", "0.49.2", _EXACT_48),
        )
    ),
    Series("0.50.0", "0.50.2", "windows", _FALLBACK_50, True),
    Series("0.50.0", "0.50.2", "linux", _FALLBACK_50, True),
)


@dataclass(frozen=True)
class Install:
    """One installed bitsandbytes package folder."""

    version: str
    folder: str
    names: tuple[str, ...]
    """The file names in its folder."""
    source: str | None
    """Its ``cextension.py`` (None: unreadable, so its release's policy is unknown)."""
    separator: str = "\\"


#: The first release with a Windows build.
FIRST_WINDOWS = "0.43.0"


def shipped(names: list[str], platform: str) -> dict[tuple[int, int], str]:
    """The CUDA versions of the ``libbitsandbytes_cuda*`` binaries among ``names`` (this
    platform's suffix only; ``_nocublaslt`` variants are the same version's)."""
    suffix = "dll" if platform == "windows" else "so"
    found: dict[tuple[int, int], str] = {}
    for name in names:
        match = _BINARY.match(name)
        if match and match[3].lower() == suffix:
            found[(int(match[1]), int(match[2]))] = name
    return found


def binary_name(cuda: tuple[int, int], platform: str) -> str:
    suffix = "dll" if platform == "windows" else "so"
    return f"libbitsandbytes_cuda{cuda[0]}{cuda[1]}.{suffix}"


def chosen(
    cuda: tuple[int, int], present: set[tuple[int, int]], *, fallback: bool | None
) -> tuple[int, int] | None:
    """The shipped version bitsandbytes loads for torch's ``cuda``, or None when it finds
    none. ``fallback`` None (its source unread): the exact name, else any same-major binary
    counts, so doubt never creates a finding."""
    if cuda in present:
        return cuda
    if fallback is False:
        return None
    same = sorted(v for v in present if v[0] == cuda[0])
    lower = [v for v in same if v < cuda]
    if lower:
        return lower[-1]
    return same[0] if same else None


def releases_with(cuda: tuple[int, int], platform: str) -> tuple[str, str] | None:
    """(first release that loads a binary for ``cuda`` on ``platform``, newest known one)."""
    fits = [
        s
        for s in SERIES
        if s.platform == platform and chosen(cuda, set(s.cuda), fallback=s.fallback) is not None
    ]
    if not fits:
        return None
    return min(fits, key=lambda s: _order(s.first)).first, max(
        fits, key=lambda s: _order(s.last)
    ).last


def _order(version: str) -> tuple[int, ...]:
    """``0.41.3.post2`` -> (0, 41, 3, 2): enough for the releases of :data:`SERIES`."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def cuda_tuple(text: str | None) -> tuple[int, int] | None:
    """``(12, 8)`` for torch's ``"12.8"`` or ``BNB_CUDA_VERSION`` ``"128"``; None otherwise."""
    if not text:
        return None
    parts = text.strip().split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    digits = text.strip()
    if digits.isdigit() and len(digits) >= 3:
        return int(digits[:2]), int(digits[2:])
    return None
