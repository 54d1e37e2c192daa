"""The command that installs the same requirements without breaking what works.

Tried in order, each resolved by the environment's own pip before it is proposed (a dry run:
nothing installed), and kept only when pip's report then breaks no pin and keeps torch:

1. torch pulled in by a dependency: a constraints file pinning the installed torch build
   (``torch==2.9.1+cu128``), so pip picks the releases that fit it;
2. torch asked for, with packages left built for the old one: the same command naming those
   packages too, so pip installs their releases for the new torch;
3. otherwise ``--no-deps`` for the requested packages that are not torch's family, with the
   requirements that then stay unmet (said, not resolved).

A torch whose CUDA build would be lost also gets the index of its build
(``--index-url https://download.pytorch.org/whl/cu128``), which this check cannot reach for
every user and says so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

from torchguard._frontends.env_changes import (
    TORCH_FAMILY,
    Alternative,
    Break,
    TorchBuild,
    quoted,
)
from torchguard._frontends.env_resolve import Resolution
from torchguard._frontends.env_target import TargetEnv

_TAKES_VALUE = frozenset(
    {
        "-r",
        "--requirement",
        "-c",
        "--constraint",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "-e",
        "--editable",
        "--upgrade-strategy",
        "--platform",
        "--python-version",
        "--implementation",
        "--abi",
        "--config-settings",
        "-C",
        "--src",
        "--cache-dir",
        "--log",
        "--proxy",
        "--retries",
        "--timeout",
        "--trusted-host",
        "--cert",
        "--client-cert",
        "--exists-action",
        "--progress-bar",
        "--only-binary",
        "--no-binary",
    }
)
_VARIANT = re.compile(r"^(cu\d+|cpu|rocm[\d.]+|xpu)$")


def constraints_file(cache: str, version: str) -> str:
    """A constraints file pinning torch ``version``, kept in the wheel cache (reused)."""
    folder = os.path.join(cache, "constraints")
    os.makedirs(folder, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", version)
    path = os.path.join(folder, f"torch-{safe}.txt")
    text = f"torch=={version}\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return path
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)
    return path


def unpinned_family(arguments: Sequence[str]) -> list[str]:
    """``arguments`` with every requirement on torch's family (not torch) left unversioned:
    ``torchvision==0.29.1`` becomes ``torchvision``; options and other requirements stay."""
    from packaging.requirements import InvalidRequirement, Requirement

    from torchguard._frontends.env_target import canonical

    out: list[str] = []
    value_next = False
    for argument in arguments:
        if value_next or argument.startswith("-"):
            value_next = argument in _TAKES_VALUE
            out.append(argument)
            continue
        try:
            parsed = Requirement(argument)
        except InvalidRequirement:
            out.append(argument)
            continue
        key = canonical(parsed.name)
        if key in TORCH_FAMILY and key != "torch" and parsed.url is None:
            extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
            out.append(parsed.name + extras + (f"; {parsed.marker}" if parsed.marker else ""))
        else:
            out.append(argument)
    return out


Attempt = Callable[[Sequence[str]], "list[Break] | str"]
"""Judges a candidate command: the breaks it would bring (none: safe), or why pip cannot
resolve it."""


def _unreachable(url: str) -> str | None:
    from torchguard._frontends.index_probe import probe_all

    problems = probe_all([(url, True)])
    return problems[0].reason if problems else None


def propose(
    env: TargetEnv,
    given: Sequence[str],
    breaks: Sequence[Break],
    before: TorchBuild | None,
    resolution: Resolution,
    cache: str,
    attempt: Attempt,
) -> tuple[list[Alternative], list[str]]:
    """The safer commands, judged ones first, and what was tried and why it was not kept."""
    codes = {b.code for b in breaks}
    items = resolution.items
    arguments = list(given)
    torch = next((i for i in items if i.key == "torch"), None)
    label = before.version.partition("+")[2] if before is not None else ""
    index = f"https://download.pytorch.org/whl/{label}" if _VARIANT.match(label) else None
    found: list[Alternative] = []
    tried: list[str] = []
    windows = env.platform == "win32"

    def judged(candidate: list[str], why: str, files: tuple[str, ...] = ()) -> bool:
        shown = f"`pip install {quoted(candidate, windows)}`"
        outcome = attempt(candidate)
        if isinstance(outcome, str):
            tried.append(f"{shown}: pip cannot resolve it ({outcome})")
            return False
        if outcome:
            tried.append(f"{shown} would still break: [{outcome[0].code}] {outcome[0].message}")
            return False
        found.append(Alternative(tuple(candidate), True, why, files, windows))
        return True

    def from_index(candidate: list[str], why: str, files: tuple[str, ...] = ()) -> None:
        assert index is not None
        candidate = [*candidate, "--extra-index-url", index]
        problem = _unreachable(index)
        if problem is None:
            judged(candidate, why, files)
        else:
            found.append(
                Alternative(
                    tuple(candidate),
                    False,
                    f"{why}; {index} cannot be reached from here ({problem}): not resolved",
                    files,
                    windows,
                )
            )

    if torch is not None and before is not None and not torch.requested:
        pinned = constraints_file(cache, before.version)
        keeps = f"keeps {before.line} ({pinned} pins it)"
        relaxed = unpinned_family(arguments)
        candidates = [[*arguments, "-c", pinned]]
        if relaxed != arguments:
            candidates.append([*relaxed, "-c", pinned])
        for candidate in candidates:
            if judged(candidate, f"{keeps}; pip picks the releases that fit it", (pinned,)):
                return found, tried
        if index is not None:
            from_index(
                [*relaxed, "-c", pinned],
                f"{keeps}; its {label} build's index has the torch family built for it",
                (pinned,),
            )
    left = [b for b in breaks if b.code == "left-behind"]
    if torch is not None and torch.requested and left:
        keep = {i.key for i in items}
        names = [
            dist.name
            for dist in env.dists.values()
            if dist.key not in keep and any(b.message.startswith(f"{dist.name} ") for b in left)
        ]
        if names:
            judged(
                [*arguments, *names],
                f"installs {', '.join(names)} built for torch {torch.version} in the same step",
            )
    if "gpu-build-lost" in codes and index is not None and not found:
        from_index(arguments, f"the {label} build of torch comes from its own index")
    if not any(a.resolved for a in found):
        found += _no_deps(env, resolution, arguments)
    return found, tried


_NAMES_REQUIREMENTS = frozenset({"-r", "--requirement", "-e", "--editable"})


def options_kept(arguments: Sequence[str]) -> list[str]:
    """The options of ``arguments`` without what names requirements (``-r FILE``, ``-e
    PATH`` and the requirements themselves): where pip finds packages (``--index-url``,
    ``--find-links``, ``--no-index``) stays the user's choice in a command that pins them."""
    out: list[str] = []
    words = list(arguments)
    index = 0
    while index < len(words):
        word = words[index]
        option = word.split("=", 1)[0]
        takes = word.startswith("-") and "=" not in word and option in _TAKES_VALUE
        if option in _NAMES_REQUIREMENTS or (
            word.startswith(("-r", "-e")) and not word.startswith("--") and len(word) > 2
        ):
            index += 2 if takes else 1
            continue
        if word.startswith("-"):
            if word != "--no-deps":
                out += words[index : index + 2] if takes else [word]
            index += 2 if takes else 1
            continue
        index += 1
    return out


def _no_deps(env: TargetEnv, resolution: Resolution, arguments: Sequence[str]) -> list[Alternative]:
    from packaging.requirements import InvalidRequirement, Requirement

    from torchguard._frontends.env_changes import _requirement_broken
    from torchguard._frontends.env_target import canonical

    asked = [i for i in resolution.items if i.requested and i.key not in TORCH_FAMILY]
    if not asked:
        return []
    versions = {key: dist.version for key, dist in env.dists.items()}
    # what pip would have added for them: left out, so said (the package may need it)
    absent = {i.key for i in resolution.items if not i.requested and i.key not in versions}
    unmet: list[str] = []
    for item in asked:
        for requirement in item.requires:
            broken = _requirement_broken(requirement, versions, resolution.environment)
            if broken is not None:
                unmet.append(f"{item.name} asks for {broken[0]}{broken[1]}")
                continue
            try:
                name = Requirement(requirement).name
            except InvalidRequirement:
                continue
            if canonical(name) in absent:
                unmet.append(f"{item.name} asks for {name} (not installed)")
    why = "installs only " + ", ".join(f"{i.name} {i.version}" for i in asked)
    why += ", none of their dependencies"
    if unmet:
        why += f"; left unmet: {'; '.join(unmet)}"
    pins = (f"{i.name}=={i.version}" for i in asked)
    arguments = ("--no-deps", *options_kept(arguments), *pins)
    return [Alternative(arguments, False, why, windows=env.platform == "win32")]
