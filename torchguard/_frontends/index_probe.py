"""Each package index ``check`` is given, asked once before pip runs: does it answer?

pip skips an extra index it cannot reach or that answers 404 without a word, after minutes of
retries, and answers from the others: a CUDA question (``--extra-index-url .../whl/cu126``)
is then answered from PyPI's CPU wheels. Asked first, the problem is said at once, with what it
changes, and pip runs without the index instead of waiting on it.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse
from urllib.request import Request, url2pathname, urlopen

PROBE_TIMEOUT = 15.0
"""Seconds one index may take to answer the probe (pip's own default timeout is 15 s)."""
_CUDA_INDEX = re.compile(r"/whl/(?:nightly/)?(cu\d+|rocm[\d.]+|xpu)/?$", re.IGNORECASE)
_answers: dict[str, str | None] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class IndexProblem:
    """An index that did not answer as an index: its URL, how it was given, and why."""

    url: str
    extra: bool
    problem: str
    line: str = ""
    """What it changes, in one line (see :func:`what_it_changes`)."""

    @property
    def reason(self) -> str:
        """The problem without its verb: ``[Errno 111] Connection refused``."""
        text = self.problem
        if text.startswith("cannot be reached (") and text.endswith(")"):
            return text[len("cannot be reached (") : -1]
        return text

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "extra": self.extra, "problem": self.problem, "line": self.line}


def probe(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when ``url`` answers as an index; else what went wrong, in a few words."""
    with _lock:
        if url in _answers:
            return _answers[url]
    answer = _probe(url, timeout)
    with _lock:
        _answers[url] = answer
    return answer


def _probe(url: str, timeout: float) -> str | None:
    if url.startswith("file:"):
        folder = url2pathname(urlparse(url).path)
        return None if os.path.isdir(folder) else f"has no folder {folder}"
    target = url if url.endswith("/") else url + "/"
    try:
        for method in ("HEAD", "GET"):
            try:
                with urlopen(Request(target, method=method), timeout=timeout) as response:
                    if method == "GET":
                        response.read(1)  # an index root can be tens of MB: one byte will do
                    return None
            except HTTPError as exc:
                if method == "HEAD" and exc.code in (405, 501):
                    continue  # a server that only answers GET
                return f"answers HTTP {exc.code} {exc.reason}"
    except URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):
            return f"did not answer within {timeout:.0f} s"
        return f"cannot be reached ({reason})"
    except (socket.timeout, TimeoutError):
        return f"did not answer within {timeout:.0f} s"
    except (OSError, ValueError) as exc:
        return f"cannot be reached ({exc})"
    return None


def probe_all(
    urls: Sequence[tuple[str, bool]], timeout: float = PROBE_TIMEOUT
) -> list[IndexProblem]:
    """(URL, extra?) pairs asked in parallel; the problems, in the order given."""
    unique = list(dict.fromkeys(urls))
    if len({url for url, _ in unique}) == 1:
        probe(unique[0][0], timeout)  # in this thread: Ctrl-C reaches the wait directly
    threads = [
        threading.Thread(target=probe, args=(url, timeout), daemon=True)
        for url, _ in unique
        if url not in _answers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
    problems: list[IndexProblem] = []
    for url, extra in unique:
        with _lock:
            answer = _answers.get(url, f"did not answer within {timeout:.0f} s")
        if answer is not None:
            problems.append(IndexProblem(url, extra, answer))
    return problems


def what_it_changes(problem: IndexProblem, others: Sequence[str]) -> str:
    """One line: the index, its problem, and what the answer is then about."""
    rest = ", ".join(others) or "no other index"
    cuda = _CUDA_INDEX.search(problem.url.rstrip("/") + "/")
    if cuda is not None:
        tag = cuda.group(1)
        change = (
            f"torch's {tag} build comes from it; pip resolves from {rest} instead, so the "
            f"answer below is about the build found there (PyPI's Windows torch is the CPU "
            f"build), not the {tag} one"
        )
    else:
        change = f"pip resolves from {rest} instead; a package only it has is not found"
    kind = "extra index" if problem.extra else "index"
    return f"warning: the {kind} {problem.url} {problem.problem}: {change}"


def forget() -> None:
    """Drop the answers remembered in this process (tests)."""
    with _lock:
        _answers.clear()
