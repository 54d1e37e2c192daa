"""What torch's own METADATA pins on Linux: the exact NVIDIA wheels a repair must install.

torch's CUDA wheels pin every NVIDIA wheel exactly (``nvidia-cudnn-cu12==9.10.2.21``); from
CUDA 13 most arrive through ``cuda-toolkit[cublas,cudart,...]==13.0.3``. A hint that
reinstalls an unpinned wheel takes the newest release, which may be built for another CUDA
minor than torch's other libraries, so the hints pin what torch pins. Read only when a finding
needs a repair command: a healthy warm run never opens these files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[(?P<extras>[^\]]*)\])?\s*"
    r"\(?\s*==\s*(?P<version>[A-Za-z0-9._+!-]+)\s*\)?\s*$"
)
_MAX_METADATA = 1 << 20


def canonical(name: str) -> str:
    """PEP 503's normalised project name (without importing packaging)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class TorchRequirements:
    """torch's exact Linux pins and which distributions the site-packages folder holds."""

    pins: Mapping[str, str] = field(default_factory=dict)
    """Canonical project -> the version torch pins with ``==``."""
    extras: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Canonical project -> the extras torch asks for (``cuda-toolkit``'s ``cublas`` ...)."""
    installed: frozenset[str] = frozenset()
    """Canonical names of the distributions installed beside torch."""


_MACHINE_CLAUSE = re.compile(r"""platform_machine\s*(==|!=)\s*["']([^"']*)["']""")


def _applies_on_linux(marker: str, machine: str = "x86_64") -> bool:
    """A marker torch's Linux install on ``machine`` follows: none, or one naming Linux, no
    extra, and ``platform_machine`` clauses that hold for ``machine``.

    torch's markers are conjunctions (``platform_system == "Linux" and platform_machine ==
    "x86_64"``): its x86-64-only pins (triton, the NVIDIA wheels of older releases) do not
    apply on aarch64. A marker with ``or`` is not split: its machine clauses are not judged.
    """
    text = marker.strip()
    if not text:
        return True
    if "extra" in text:
        return False
    if not re.search(r"""(platform_system|sys_platform)\s*==\s*["'](Linux|linux)["']""", text):
        return False
    if re.search(r"\bor\b", text):
        return True
    for operator, value in _MACHINE_CLAUSE.findall(text):
        same = value.lower() == machine.lower()
        if same != (operator == "=="):
            return False
    return True


def parse_pins(
    metadata: str, machine: str = "x86_64"
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The ``==`` pins (and their extras) of the ``Requires-Dist`` lines that apply on Linux
    on ``machine`` (``uname -m``: ``x86_64``, ``aarch64``)."""
    pins: dict[str, str] = {}
    extras: dict[str, tuple[str, ...]] = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec, _, marker = line.split(":", 1)[1].partition(";")
        if not _applies_on_linux(marker, machine):
            continue
        match = _REQUIREMENT.match(spec)
        if match is None:
            continue
        name = canonical(match.group("name"))
        pins[name] = match.group("version")
        if match.group("extras"):
            extras[name] = tuple(e.strip() for e in match.group("extras").split(",") if e.strip())
    return pins, extras


def torch_requirements(torch_dir: str, machine: str = "x86_64") -> TorchRequirements:
    """Read torch's ``METADATA`` beside ``torch_dir`` (its pins on ``machine``) and list the
    installed distributions; anything unreadable gives empty facts (the hints then fall back to
    unpinned names)."""
    site = os.path.dirname(os.path.abspath(torch_dir))
    try:
        names = os.listdir(site)
    except OSError:
        return TorchRequirements()
    installed = frozenset(
        canonical(entry[: -len(".dist-info")].partition("-")[0])
        for entry in names
        if entry.endswith(".dist-info")
    )
    pins: dict[str, str] = {}
    extras: dict[str, tuple[str, ...]] = {}
    for entry in sorted(names):
        if not (entry.startswith("torch-") and entry.endswith(".dist-info")):
            continue
        try:
            with open(os.path.join(site, entry, "METADATA"), encoding="utf-8") as handle:
                pins, extras = parse_pins(handle.read(_MAX_METADATA), machine)
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        break
    return TorchRequirements(pins, extras, installed)
