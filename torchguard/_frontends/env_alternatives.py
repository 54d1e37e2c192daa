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
from collections.abc import Sequence

from torchguard._frontends.env_changes import (
    TORCH_FAMILY,
    Alternative,
    Break,
    TorchBuild,
    metadata_breaks,
)
from torchguard._frontends.env_resolve import Resolution
from torchguard._frontends.env_target import TargetEnv
from torchguard._frontends.pip_reasons import PipFailure

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


def _resolves(
    env: TargetEnv, before: TorchBuild | None, arguments: Sequence[str], timeout: float
) -> str | None:
    """None when pip resolves ``arguments`` here and breaks nothing; else why not."""
    from torchguard._frontends.env_changes import wheel_build
    from torchguard._frontends.env_resolve import resolve_in

    try:
        resolution = resolve_in(env.python, arguments, timeout=timeout)
    except PipFailure as exc:
        return exc.lines[1] if len(exc.lines) > 1 else exc.lines[0]
    torch = next((i for i in resolution.items if i.key == "torch"), None)
    after = before if torch is None else wheel_build(torch.version, torch.local_path)
    breaks = metadata_breaks(env, resolution, after)
    return "; ".join(b.message for b in breaks) if breaks else None


def propose(
    env: TargetEnv,
    given: Sequence[str],
    breaks: Sequence[Break],
    before: TorchBuild | None,
    resolution: Resolution,
    cache: str,
    timeout: float,
) -> list[Alternative]:
    """The safer commands, the resolved ones first (empty when none is found)."""
    codes = {b.code for b in breaks}
    items = resolution.items
    arguments = list(given)
    torch = next((i for i in items if i.key == "torch"), None)
    found: list[Alternative] = []
    tried: list[str] = []
    if torch is not None and before is not None and not torch.requested:
        pinned = constraints_file(cache, before.version)
        candidate = [*arguments, "-c", pinned]
        why = _resolves(env, before, candidate, timeout)
        if why is None:
            found.append(
                Alternative(
                    tuple(candidate),
                    True,
                    f"keeps {before.line}: {pinned} pins it, so pip picks releases built for it",
                    (pinned,),
                )
            )
            return found
        tried.append(f"pinning torch=={before.version} leaves pip no solution ({why})")
        relaxed = unpinned_family(arguments)
        if relaxed != arguments:
            candidate = [*relaxed, "-c", pinned]
            if _resolves(env, before, candidate, timeout) is None:
                found.append(
                    Alternative(
                        tuple(candidate),
                        True,
                        f"keeps {before.line}: the torch family is named without versions and "
                        f"{pinned} pins torch, so pip picks the releases built for it",
                        (pinned,),
                    )
                )
                return found
    left = [b for b in breaks if b.code == "left-behind"]
    if torch is not None and torch.requested and left:
        keep = {i.key for i in items}
        names = [
            dist.name
            for dist in env.dists.values()
            if dist.key not in keep and any(b.message.startswith(f"{dist.name} ") for b in left)
        ]
        candidate = [*arguments, *names]
        why = _resolves(env, before, candidate, timeout)
        if names and why is None:
            found.append(
                Alternative(
                    tuple(candidate),
                    True,
                    f"installs {', '.join(names)} built for torch {torch.version} in the same step",
                )
            )
        elif names:
            tried.append(f"adding {', '.join(names)} leaves pip no solution ({why})")
    if "gpu-build-lost" in codes and before is not None:
        label = before.version.partition("+")[2]
        if _VARIANT.match(label) and torch is not None:
            index = f"https://download.pytorch.org/whl/{label}"
            found.append(
                Alternative(
                    (*arguments, "--extra-index-url", index),
                    False,
                    f"the {label} build of torch {torch.version} comes from {index} (PyPI has "
                    "no such build); not resolved here",
                )
            )
    if not found:
        found += _no_deps(env, resolution, tried)
    return found


def _no_deps(env: TargetEnv, resolution: Resolution, tried: list[str]) -> list[Alternative]:
    from torchguard._frontends.env_changes import _requirement_broken

    asked = [i for i in resolution.items if i.requested and i.key not in TORCH_FAMILY]
    if not asked:
        return []
    versions = {key: dist.version for key, dist in env.dists.items()}
    unmet: list[str] = []
    for item in asked:
        for requirement in item.requires:
            broken = _requirement_broken(requirement, versions, resolution.environment)
            if broken is not None:
                unmet.append(f"{item.name} asks for {broken[0]}{broken[1]}")
    why = "installs only " + ", ".join(f"{i.name} {i.version}" for i in asked)
    why += ", none of their dependencies"
    if unmet:
        why += f"; left unmet: {'; '.join(unmet)}"
    if tried:
        why += f" ({'; '.join(tried)})"
    arguments = ("--no-deps", *(f"{i.name}=={i.version}" for i in asked))
    return [Alternative(arguments, False, why)]
