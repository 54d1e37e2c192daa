"""A release that publishes no wheel for the Python and platform asked about.

A free-threaded ``python3.13t``, a Python newer than the release, or Windows on ARM64: pip finds
no distribution, ``pip install`` fails, and people report it as a DLL error. This names it from
the index's own file list (the page pip read, one request after pip failed): the release, the
Windows wheels it does have, the nearest release that has a wheel for this target and the
nearest Python or platform the release itself has (the regular build of a free-threaded
version, an x64 Python on ARM64).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.version import Version

from torchguard._frontends.index_files import IndexFile
from torchguard._frontends.target import PLATFORMS, Target


@dataclass(frozen=True)
class NoWheel:
    """``project`` (as ``requirement`` asks for it) has no wheel pip can install on ``target``."""

    project: str
    requirement: str
    release: str
    """The newest release matching the requirement (the one the message is about)."""
    pinned: bool
    """The requirement names exactly that release (``torch==2.4.0``)."""
    target: Target
    windows: str
    """The release's Windows wheels, ``cp39..cp312 win_amd64`` (empty: none at all)."""
    nearest: str | None = None
    """The release nearest to ``release`` (the next newer first) that has a wheel for target."""
    newest: str | None = None
    """The newest release that has a wheel for the target."""
    alternatives: tuple[tuple[Target, str], ...] = ()
    """Other Pythons or platforms and the release of the project each has a wheel for
    (``release`` itself where it has one): the regular build of a free-threaded version, an
    x64 Python on ARM64, the nearest Python the release was built for."""
    source: str | None = None
    """The release's source distribution: pip would build it on the installing machine."""

    @property
    def verdict(self) -> str:
        """``no wheel of torch 2.4.0 for CPython 3.13 on win_amd64``."""
        if self.pinned:
            return f"no wheel of {self.project} {self.release} for {self.target.describe()}"
        return f"no release of {self.requirement} has a wheel for {self.target.describe()}"

    @property
    def message(self) -> str:
        """``torch 2.4.0 publishes no wheel for CPython 3.13 on win_amd64 (its Windows wheels:
        cp38..cp312 win_amd64) ...``."""
        where = self.target.describe()
        if self.pinned:
            has = f"its Windows wheels: {self.windows}" if self.windows else "no Windows wheel"
            text = f"{self.project} {self.release} publishes no wheel for {where} ({has})"
        else:
            has = f"has Windows wheels: {self.windows}" if self.windows else "has no Windows wheel"
            text = (
                f"no release of {self.requirement} publishes a wheel for {where} (the newest, "
                f"{self.project} {self.release}, {has})"
            )
        text += ": pip install finds no distribution to install"
        if self.source:
            text += (
                f" (pip without --only-binary would try to build {self.source} there, which "
                "needs the project's build tools and compilers)"
            )
        return text

    def hints(self, python_cmd: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(summary, commands) of the nearest things that exist, the first one a pip command
        for this target (``check`` verifies it), the others ``torchguard check`` commands for
        another Python or platform."""
        found: list[tuple[str, tuple[str, ...]]] = []
        target = self.target
        if self.nearest is not None:
            newest = (
                f" (the newest with one: {self.newest})"
                if self.newest and self.newest != self.nearest
                else ""
            )
            found.append(
                (
                    f"{self.project} {self.nearest} is the nearest release with a wheel for "
                    f"{target.describe()}{newest}: install it",
                    (f"{python_cmd} -m pip install {self.project}=={self.nearest}",),
                )
            )
        for other, version in self.alternatives:
            platform = "" if other.platform == PLATFORMS[0] else f" --platform {other.platform}"
            asides = []
            if target.free_threaded and not other.free_threaded:
                asides.append("the regular build, not free-threaded")
            if target.platform == "win_arm64" and other.platform == "win_amd64":
                asides.append("Windows on ARM64 runs an x64 Python emulated")
            aside = f" ({'; '.join(asides)})" if asides else ""
            has = (
                f"{self.project} {version} has a wheel for {other.describe()}"
                if version == self.release
                else f"{self.project} {version} is the newest release with a wheel for "
                f"{other.describe()}"
            )
            found.append(
                (
                    f"{has}{aside}: use that Python",
                    (
                        f"torchguard check {self.project}=={version} --python {other.build}"
                        f"{platform}",
                    ),
                )
            )
        return tuple(found)


def target_tags(target: Target) -> frozenset[Tag]:
    """Every wheel tag pip installs on ``target`` (:meth:`.Target.tags`)."""
    return frozenset(target.tags())


def no_wheel(requirement: str, files: Sequence[IndexFile] | None, target: Target) -> NoWheel | None:
    """The release ``requirement`` asks for, when the index has wheels of it but none for
    ``target``; None when one fits (pip failed for another reason), when no release matches
    (a version that does not exist) or when the release has no wheel at all (source only)."""
    try:
        wanted = Requirement(requirement.split(" (from ")[0].split(" ;")[0].strip())
    except InvalidRequirement:
        return None
    if not files:
        return None
    releases: dict[Version, list[IndexFile]] = {}
    for file in files:
        if file.version is not None:
            releases.setdefault(file.version, []).append(file)
    matching = sorted(wanted.specifier.filter(releases))
    with_wheels = [v for v in matching if any(f.wheel for f in releases[v])]
    if not with_wheels:
        return None
    tags = target_tags(target)

    def fits(version: Version) -> bool:
        return any(f.wheel and f.tags & tags for f in releases[version])

    if any(fits(v) for v in matching):
        return None
    release = with_wheels[-1]
    stable = [v for v in releases if not v.is_prerelease and fits(v)]
    newer = sorted(v for v in stable if v > release)
    older = sorted(v for v in stable if v < release)
    nearest = newer[0] if newer else (older[-1] if older else None)
    own = releases[release]
    sdist = next((f.filename for f in own if not f.wheel), None)
    return NoWheel(
        project=wanted.name,
        requirement=str(wanted),
        release=str(release),
        pinned=len(matching) == 1,
        target=target,
        windows=windows_wheels(own),
        nearest=str(nearest) if nearest is not None else None,
        newest=str(max(stable)) if stable else None,
        alternatives=_alternatives(releases, release, target),
        source=sdist,
    )


def windows_wheels(files: Sequence[IndexFile]) -> str:
    """``cp39..cp312 win_amd64; cp311, cp312 win_arm64``: the Windows tags of a release's
    wheels, by platform (``cp313t`` for a free-threaded build, ``cp39-abi3``, ``py3``)."""
    by_platform: dict[str, set[str]] = {}
    for file in files:
        for tag in file.tags:
            if tag.platform.startswith("win"):
                by_platform.setdefault(tag.platform, set()).add(_label(tag))
    order = {p: n for n, p in enumerate([*PLATFORMS, "win32"])}
    return "; ".join(
        f"{_ranges(labels)} {platform}"
        for platform, labels in sorted(by_platform.items(), key=lambda i: order.get(i[0], 9))
    )


def _label(tag: Tag) -> str:
    if tag.abi.startswith("cp"):
        return tag.abi
    if tag.abi == "abi3":
        return f"{tag.interpreter}-abi3"
    return tag.interpreter


def _minor(label: str) -> int | None:
    digits = label[3:] if label.startswith("cp3") else ""
    return int(digits) if digits.isdigit() else None


def _ranges(labels: set[str]) -> str:
    """``cp39, cp310, cp311, cp312, cp313t`` -> ``cp39..cp312, cp313t``."""
    minors = sorted(m for m in map(_minor, labels) if m is not None)
    parts: list[str] = []
    start = 0
    for position in range(1, len(minors) + 1):
        if position == len(minors) or minors[position] != minors[position - 1] + 1:
            low, high = minors[start], minors[position - 1]
            if high - low >= 2:
                parts.append(f"cp3{low}..cp3{high}")
            else:
                parts += [f"cp3{m}" for m in range(low, high + 1)]
            start = position
    others = sorted((x for x in labels if _minor(x) is None), key=_order)
    return ", ".join(parts + others)


def _order(label: str) -> tuple[int, str]:
    digits = "".join(c for c in label[3:].split("-")[0] if c.isdigit())
    return (int(digits) if digits else 0, label)


def _alternatives(
    releases: dict[Version, list[IndexFile]],
    release: Version,
    target: Target,
) -> tuple[tuple[Target, str], ...]:
    """At most two other targets and the release each has a wheel for: the regular build of
    a free-threaded version, then the same Python on x64 (ARM64 asked), then the Python
    nearest the target's that ``release`` itself was built for on the target's platform."""
    wanted: list[Target] = []
    if target.free_threaded:
        wanted.append(Target(target.version, False, target.platform))
    for platform in PLATFORMS:
        if platform != target.platform:
            wanted.append(Target(target.version, target.free_threaded, platform))
            if target.free_threaded:
                wanted.append(Target(target.version, False, platform))
    stable = [v for v in releases if not v.is_prerelease]
    found: list[tuple[Target, str]] = []
    for other in wanted:
        tags = target_tags(other)
        fitting = [v for v in stable if any(f.wheel and f.tags & tags for f in releases[v])]
        if release in fitting:
            found.append((other, str(release)))
        elif fitting:
            found.append((other, str(max(fitting))))
    if not any(version == str(release) for _, version in found):
        builds = _other_builds(releases[release], target)
        if builds:
            minor, threaded = builds[0]
            other = Target(f"3.{minor}", threaded, target.platform)
            found.append((other, str(release)))
    return tuple(found[:2])


def _other_builds(files: Sequence[IndexFile], target: Target) -> list[tuple[int, bool]]:
    """The CPython builds ((minor, free-threaded)) the release has wheels for on the target's
    platform, nearest to the target first (the same kind of build before the other)."""
    builds: set[tuple[int, bool]] = set()
    for file in files:
        for tag in file.tags:
            if tag.platform != target.platform or not tag.abi.startswith("cp3"):
                continue
            digits = tag.abi[3:].rstrip("t")
            if digits.isdigit():
                builds.add((int(digits), tag.abi.endswith("t")))
    minor = int(target.version.split(".")[1])
    return sorted(builds, key=lambda b: (b[1] != target.free_threaded, abs(b[0] - minor), -b[0]))


__all__ = ["NoWheel", "no_wheel", "target_tags", "windows_wheels"]
