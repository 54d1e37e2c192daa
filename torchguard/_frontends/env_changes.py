"""What an install changes for the user, and which of those changes break what works today.

Each distribution pip would install is new, an upgrade, a downgrade or a reinstall of an
installed one. torch's build is read from its ``torch/version.py`` (the ``cuda`` field, in the
installed folder or in the wheel), never guessed from its name. A break is a change that makes
something working stop working: torch's GPU build replaced by a CPU one, torch replaced though
the requirements do not name it, or an installed distribution left with a requirement the new
versions no longer meet (torchvision's ``torch==X`` pin, torch's own NVIDIA pins).
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchguard._frontends.env_resolve import Item, Resolution
from torchguard._frontends.env_target import Installed, TargetEnv, canonical

#: torch and what is built against it: pinned as a family, never installed ``--no-deps`` alone.
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "xformers", "flash-attn"})


_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.MULTILINE)
_NVIDIA_SUFFIX = re.compile(r"-cu(\d+)$")


@dataclass(frozen=True)
class Change:
    """One distribution pip would install, with what it replaces."""

    name: str
    kind: str
    """``new``, ``upgrade``, ``downgrade`` or ``reinstall``."""
    old: str | None
    new: str

    @property
    def line(self) -> str:
        if self.old is None:
            return f"{self.name} {self.new} (new)"
        if self.kind == "reinstall":
            return f"{self.name} {self.new} (reinstalled)"
        return f"{self.name} {self.old} -> {self.new} ({self.kind})"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "from": self.old, "to": self.new}


@dataclass(frozen=True)
class Break:
    """A change that would stop something working today."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class TorchBuild:
    version: str
    cuda: str | None
    """``torch.version.cuda``: ``"12.8"``, or None for a CPU (or ROCm/XPU) build."""

    @property
    def line(self) -> str:
        if self.cuda:
            return f"torch {self.version} (CUDA {self.cuda} build)"
        return f"torch {self.version} (no CUDA: a CPU build)"


def version_cuda(text: str) -> str | None:
    found = _CUDA.search(text)
    if found is None:
        return None
    return found.group(1) or found.group(2) or None


def installed_build(env: TargetEnv) -> TorchBuild | None:
    dist = env.dists.get("torch")
    if dist is None:
        return None
    for folder in env.folders:
        try:
            with open(os.path.join(folder, "torch", "version.py"), encoding="utf-8") as handle:
                return TorchBuild(dist.version, version_cuda(handle.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return TorchBuild(dist.version, None)


def wheel_build(version: str, wheel: str | None) -> TorchBuild | None:
    """The build of a torch wheel from its ``torch/version.py``; None when unread."""
    if wheel is None:
        return None
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo("torch/version.py")
            if info.file_size > 1 << 20:
                return None
            return TorchBuild(version, version_cuda(archive.read(info).decode("utf-8")))
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError):
        return None


def classify(env: TargetEnv, items: Sequence[Item]) -> list[Change]:
    from packaging.version import InvalidVersion, Version

    changes: list[Change] = []
    for item in items:
        old = env.dists.get(item.key)
        if old is None:
            changes.append(Change(item.name, "new", None, item.version))
            continue
        try:
            before, after = Version(old.version), Version(item.version)
            kind = "upgrade" if after > before else "downgrade" if after < before else ""
        except InvalidVersion:
            kind = ""
        if not kind:
            kind = "reinstall" if old.version == item.version else "upgrade"
        changes.append(Change(item.name, kind, old.version, item.version))
    return changes


def _requirement_broken(
    requirement: str, versions: Mapping[str, str], environment: Mapping[str, str]
) -> tuple[str, str] | None:
    """(project, specifier) when ``requirement`` names a project whose new version misses it."""
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return None
    key = canonical(parsed.name)
    if key not in versions:
        return None
    if parsed.marker is not None:
        try:
            if not parsed.marker.evaluate({**environment, "extra": ""}):
                return None
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            return None
    try:
        ok = parsed.specifier.contains(Version(versions[key]), prereleases=True)
    except InvalidVersion:
        return None
    return None if ok else (parsed.name, str(parsed.specifier))


def left_behind(
    env: TargetEnv, items: Sequence[Item], environment: Mapping[str, str]
) -> list[Break]:
    """Installed distributions pip keeps whose requirements the new versions no longer meet."""
    versions = {item.key: item.version for item in items}
    replaced = set(versions)
    found: list[Break] = []
    for dist in env.dists.values():
        if dist.key in replaced:
            continue
        for requirement in dist.requires:
            broken = _requirement_broken(requirement, versions, environment)
            if broken is None:
                continue
            name, specifier = broken
            now = env.dists[canonical(name)].version if canonical(name) in env.dists else None
            found.append(
                Break(
                    "left-behind",
                    f"{dist.name} {dist.version} requires {name}{specifier}, but {name} would "
                    f"become {versions[canonical(name)]}"
                    + (f" (it is {now} today)" if now else "")
                    + f": {dist.name} is left built for what it replaces",
                )
            )
    return found


def who_requires(items: Sequence[Item], project: str, environment: Mapping[str, str]) -> list[str]:
    """The items whose requirements name ``project``, as ``name version (requirement)``."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: list[str] = []
    for item in items:
        for requirement in item.requires:
            try:
                parsed = Requirement(requirement)
            except InvalidRequirement:
                continue
            if canonical(parsed.name) != project:
                continue
            if parsed.marker is not None:
                try:
                    if not parsed.marker.evaluate({**environment, "extra": ""}):
                        continue
                except Exception:  # an odd marker: not ours to judge
                    continue
            found.append(f"{item.name} {item.version} requires {parsed.name}{parsed.specifier}")
    return found


def torch_breaks(
    before: TorchBuild | None,
    after: TorchBuild | None,
    items: Sequence[Item],
    environment: Mapping[str, str],
) -> list[Break]:
    """torch replaced: by a CPU build where a CUDA one works, or without being asked for."""
    torch = next((item for item in items if item.key == "torch"), None)
    if before is None or torch is None:
        return []
    found: list[Break] = []
    shown = after.line if after else f"torch {torch.version}"
    if before.cuda and after is not None and not after.cuda:
        found.append(
            Break(
                "gpu-build-lost",
                f"{before.line} would be replaced by {shown}: torch.cuda.is_available() "
                "becomes False and every model runs on the CPU",
            )
        )
    if not torch.requested:
        asked = who_requires([i for i in items if i.key != "torch"], "torch", environment)
        found.append(
            Break(
                "torch-replaced",
                f"{before.line} would be replaced by {shown}, though the requirements do not "
                "name torch"
                + (f": {'; '.join(asked)}" if asked else " (a dependency's requirement)"),
            )
        )
    return found


def nvidia_notes(env: TargetEnv, items: Sequence[Item]) -> list[str]:
    """NVIDIA libraries that would move to another distribution or CUDA major."""
    notes: list[str] = []
    installed = {_library(d.key): d for d in env.dists.values() if d.key.startswith("nvidia-")}
    for item in items:
        if not item.key.startswith("nvidia-"):
            continue
        old = installed.get(_library(item.key))
        if old is None or old.key == item.key:
            continue
        notes.append(
            f"{item.name} {item.version} joins {old.name} {old.version}: two copies of "
            f"{_library(item.key)} for two CUDA majors, each loaded by what links it"
        )
    return notes


def _library(key: str) -> str:
    return _NVIDIA_SUFFIX.sub("", key)


def replaced_dists(env: TargetEnv, items: Sequence[Item]) -> list[Installed]:
    return [env.dists[item.key] for item in items if item.key in env.dists]


@dataclass(frozen=True)
class Alternative:
    """A command that installs the same requirements without the breaks, and how far it was
    checked (``resolved``: this environment's pip resolved it and it breaks no pin)."""

    arguments: tuple[str, ...]
    resolved: bool
    why: str
    files: tuple[str, ...] = ()
    windows: bool = False
    """Quoted for Windows' shells: cmd.exe takes ``'C:\\x'`` literally, quotes and all."""

    def command(self, prefix: str = "pip install") -> str:
        return f"{prefix} {quoted(self.arguments, self.windows)}"

    def to_dict(self) -> dict[str, object]:
        return {
            "arguments": list(self.arguments),
            "command": self.command(),
            "resolved": self.resolved,
            "why": self.why,
        }


def quoted(arguments: Sequence[str], windows: bool) -> str:
    """A command line the user's shell splits back into ``arguments``."""
    if windows:
        import subprocess

        return subprocess.list2cmdline(arguments)
    import shlex

    return " ".join(shlex.quote(a) for a in arguments)


def metadata_breaks(
    target: TargetEnv, resolution: Resolution, after: TorchBuild | None
) -> list[Break]:
    """The breaks pip's report alone proves: torch replaced, pins left unmet."""
    items, environment = resolution.items, resolution.environment
    before = installed_build(target)
    return [
        *torch_breaks(before, after, items, environment),
        *left_behind(target, items, environment),
    ]
