"""What ``check`` learnt about source-only releases for one input, kept for a day.

A release published only as an sdist costs a pip resolution that fails on it before the one
that succeeds (kohya_ss's fairscale, ai-toolkit's lycoris-lora: minutes each). The arguments
pip finally resolved, with the lines said about each such release, are remembered per input
(arguments, Python version, indexes), so the next check of the same input starts from them.
A pinned release's files rarely change within a day; a damaged or stale memo is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from torchguard._frontends.requirement_input import Unchecked

SOURCE_TTL = 86400.0


@dataclass(frozen=True)
class Learnt:
    arguments: list[str]
    built: list[str]
    unchecked: list[Unchecked]


def memo_path(
    memo_dir: str | None, arguments: Sequence[str], python: str, index_urls: Sequence[str]
) -> str | None:
    if not memo_dir:
        return None
    digest = hashlib.sha256()
    for part in (python, *index_urls, "\1", *arguments):
        digest.update(part.encode() + b"\0")
    return os.path.join(memo_dir, ".sources", digest.hexdigest()[:32] + ".json")


def recall(path: str | None) -> Learnt | None:
    if path is None:
        return None
    try:
        if time.time() - os.stat(path).st_mtime > SOURCE_TTL:
            return None
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return Learnt(
            [str(a) for a in data["arguments"]],
            [str(b) for b in data["built"]],
            [Unchecked(str(u[0]), str(u[1]), str(u[2])) for u in data["unchecked"]],
        )
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None  # absent, stale or damaged: pip finds out again


def remember(path: str | None, learnt: Learnt) -> None:
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "arguments": learnt.arguments,
                    "built": learnt.built,
                    "unchecked": [[u.requirement, u.where, u.why] for u in learnt.unchecked],
                },
                handle,
            )
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only cache only costs the next run the failed resolutions again
