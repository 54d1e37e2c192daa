"""torchvision and torchaudio releases made for each torch, and the Pythons torch has wheels for.

A command that changes torch's release must change torchvision's and torchaudio's with it (each
pins the torch it was built for), and it must name a release that has a wheel for the Python
that will run it. Both read from PyPI by ``tests/readings/read_siblings.py`` (2026-12-02): each
sibling wheel's ``Requires-Dist: torch`` (CPython 3.11 or ``py3-none`` win_amd64 wheel), and
the CPython tags of torch's win_amd64 wheels; ``tests/test_companions.py`` checks these tables
against the recorded output (``tests/readings/siblings_readings.jsonl``). From torchvision
0.29.1 and torchaudio 2.11.1 the wheels are ``py3-none`` and ask for ``torch>=``, not ``==``.
"""

from __future__ import annotations

Version = tuple[int, ...]

#: (project, release, operator, torch version) from the release's ``Requires-Dist: torch``.
SIBLING_PINS: tuple[tuple[str, str, str, str], ...] = (
    ("torchvision", "0.15.1", "==", "2.0.0"),
    ("torchvision", "0.15.2", "==", "2.0.1"),
    ("torchvision", "0.16.0", "==", "2.1.0"),
    ("torchvision", "0.16.1", "==", "2.1.1"),
    ("torchvision", "0.16.2", "==", "2.1.2"),
    ("torchvision", "0.17.0", "==", "2.2.0"),
    ("torchvision", "0.17.1", "==", "2.2.1"),
    ("torchvision", "0.17.2", "==", "2.2.2"),
    ("torchvision", "0.18.0", "==", "2.3.0"),
    ("torchvision", "0.18.1", "==", "2.3.1"),
    ("torchvision", "0.19.0", "==", "2.4.0"),
    ("torchvision", "0.19.1", "==", "2.4.1"),
    ("torchvision", "0.20.0", "==", "2.5.0"),
    ("torchvision", "0.20.1", "==", "2.5.1"),
    ("torchvision", "0.21.0", "==", "2.6.0"),
    ("torchvision", "0.22.0", "==", "2.7.0"),
    ("torchvision", "0.22.1", "==", "2.7.1"),
    ("torchvision", "0.23.0", "==", "2.8.0"),
    ("torchvision", "0.24.0", "==", "2.9.0"),
    ("torchvision", "0.24.1", "==", "2.9.1"),
    ("torchvision", "0.25.0", "==", "2.10.0"),
    ("torchvision", "0.26.0", "==", "2.11.0"),
    ("torchvision", "0.27.0", "==", "2.12.0"),
    ("torchvision", "0.27.1", "==", "2.12.1"),
    ("torchvision", "0.28.0", "==", "2.13.0"),
    ("torchvision", "0.29.0", "==", "2.14.0"),
    ("torchvision", "0.29.1", ">=", "2.14.0"),
    ("torchvision", "0.29.2", ">=", "2.14.0"),
    ("torchaudio", "2.0.1", "==", "2.0.0"),
    ("torchaudio", "2.0.2", "==", "2.0.1"),
    ("torchaudio", "2.1.0", "==", "2.1.0"),
    ("torchaudio", "2.1.1", "==", "2.1.1"),
    ("torchaudio", "2.1.2", "==", "2.1.2"),
    ("torchaudio", "2.2.0", "==", "2.2.0"),
    ("torchaudio", "2.2.1", "==", "2.2.1"),
    ("torchaudio", "2.2.2", "==", "2.2.2"),
    ("torchaudio", "2.3.0", "==", "2.3.0"),
    ("torchaudio", "2.3.1", "==", "2.3.1"),
    ("torchaudio", "2.4.0", "==", "2.4.0"),
    ("torchaudio", "2.4.1", "==", "2.4.1"),
    ("torchaudio", "2.5.0", "==", "2.5.0"),
    ("torchaudio", "2.5.1", "==", "2.5.1"),
    ("torchaudio", "2.6.0", "==", "2.6.0"),
    ("torchaudio", "2.7.0", "==", "2.7.0"),
    ("torchaudio", "2.7.1", "==", "2.7.1"),
    ("torchaudio", "2.8.0", "==", "2.8.0"),
    ("torchaudio", "2.9.0", "==", "2.9.0"),
    ("torchaudio", "2.9.1", "==", "2.9.1"),
    ("torchaudio", "2.10.0", "==", "2.10.0"),
    ("torchaudio", "2.11.1", ">=", "2.11"),
)

#: torch release -> (first, last) CPython 3 minor its win_amd64 wheels on PyPI cover (GIL builds;
#: every minor between is covered). Linux x86_64 wheels cover the same, except 2.5 (3.9 to 3.13).
WINDOWS_PYTHONS: dict[str, tuple[int, int]] = {
    "2.0.0": (8, 11),
    "2.0.1": (8, 11),
    "2.1.0": (8, 11),
    "2.1.1": (8, 11),
    "2.1.2": (8, 11),
    "2.2.0": (8, 12),
    "2.2.1": (8, 12),
    "2.2.2": (8, 12),
    "2.3.0": (8, 12),
    "2.3.1": (8, 12),
    "2.4.0": (8, 12),
    "2.4.1": (8, 12),
    "2.5.0": (9, 12),
    "2.5.1": (9, 12),
    "2.6.0": (9, 13),
    "2.7.0": (9, 13),
    "2.7.1": (9, 13),
    "2.8.0": (9, 13),
    "2.9.0": (10, 14),
    "2.9.1": (10, 14),
    "2.10.0": (10, 14),
    "2.11.0": (10, 14),
    "2.12.0": (10, 14),
    "2.12.1": (10, 14),
    "2.13.0": (10, 14),
    "2.14.0": (10, 14),
    "2.14.1": (10, 14),
    "2.15.0": (11, 15),
}
_LINUX_PYTHONS = {"2.5.0": (9, 13), "2.5.1": (9, 13)}


def _version(text: str) -> Version:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def matching_siblings(torch_version: str, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(project, release) for each of ``names`` (torchvision, torchaudio): the newest release
    whose torch requirement admits ``torch_version`` (``2.9.1``, ``2.9.1+cu126``); a project
    with none is left out (no pin is better than a wrong one)."""
    wanted = _version(torch_version.partition("+")[0])
    found: list[tuple[str, str]] = []
    for name in names:
        fitting = [
            release
            for project, release, operator, pin in SIBLING_PINS
            if project == name
            and (wanted == _version(pin) if operator == "==" else wanted >= _version(pin))
        ]
        if fitting:
            found.append((name, max(fitting, key=_version)))
    return tuple(found)


def has_python(torch_version: str, python: tuple[int, int], *, linux: bool = False) -> bool | None:
    """Whether torch ``torch_version`` has a wheel for CPython ``python``; None when unknown."""
    base = torch_version.partition("+")[0]
    span = (_LINUX_PYTHONS.get(base) if linux else None) or WINDOWS_PYTHONS.get(base)
    if span is None or python[0] != 3:
        return None
    return span[0] <= python[1] <= span[1]


__all__ = ["SIBLING_PINS", "WINDOWS_PYTHONS", "has_python", "matching_siblings"]
