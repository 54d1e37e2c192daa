"""glibc's dynamic string tokens: ``$ORIGIN``, ``$LIB``, ``$PLATFORM`` (``dl-load.c``).

``is_dst`` accepts a token only as a whole word (``$ORIGINAL`` is none) or in braces;
``_dl_dst_substitute`` leaves an unknown one (``$FOO``) as written and drops an entry whose
``$ORIGIN`` is anywhere but at its start in secure mode (set-user-ID programs).
"""

from __future__ import annotations

from collections.abc import Callable


def _dst(text: str, start: int, name: str) -> int:
    """glibc's ``is_dst``: the length of ``name`` (braces included) at ``text[start:]``, 0 if
    it is not there as a whole token (``$ORIGINAL`` is no ``$ORIGIN``)."""
    if text.startswith("{", start):
        return len(name) + 2 if text.startswith(name + "}", start + 1) else 0
    if not text.startswith(name, start):
        return 0
    following = text[start + len(name) : start + len(name) + 1]
    return 0 if following and (following.isalnum() or following == "_") else len(name)


def expand(
    entry: str, origin: str, secure: bool, lib: str, platform: Callable[[], str]
) -> str | None:
    """``entry`` with glibc's dynamic string tokens replaced (``_dl_dst_substitute``); None
    when the entry cannot be used (``$ORIGIN`` in secure mode anywhere but at its start).
    An unknown token stays as written (a literal ``$``), as glibc leaves it."""
    if "$" not in entry:
        return entry
    if entry.startswith("$ORIGIN") and entry[7:8] in ("", "/") and "$" not in entry[7:]:
        return origin + entry[7:]  # the usual shape, valid in secure mode too
    out: list[str] = []
    done = 0
    index = entry.find("$")
    while index >= 0:
        out.append(entry[done:index])
        at = index + 1
        length = _dst(entry, at, "ORIGIN")
        if length:
            whole = index == 0 and entry[at + length : at + length + 1] in ("", "/")
            if secure and not whole:
                return None
            out.append(origin)
        elif (length := _dst(entry, at, "PLATFORM")) != 0:
            out.append(platform())
        elif (length := _dst(entry, at, "LIB")) != 0:
            out.append(lib)
        else:
            out.append("$")
        done = at + length
        index = entry.find("$", done)
    out.append(entry[done:])
    return "".join(out)
