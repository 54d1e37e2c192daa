"""The qualified name inside an MSVC-mangled C++ symbol, for people to read.

``?_generic_strides@TensorImpl@c10@@QEAA...`` is ``c10::TensorImpl::_generic_strides``. Only
the name and its scopes are decoded (argument types are not), which is what tells a user which
API changed between releases. Anything unusual is left as it is: a wrong demangling would be
worse than none.
"""

from __future__ import annotations

_SPECIAL = {"0": "{ctor}", "1": "{dtor}"}


def qualified_name(symbol: str) -> str | None:
    """``scope::name`` for an MSVC-mangled symbol, or None when it is not one we can read."""
    if not symbol.startswith("?") or symbol.startswith("??$") or symbol.startswith("??_"):
        return None
    rest = symbol[1:]
    special = None
    if rest.startswith("?"):
        special = _SPECIAL.get(rest[1:2])
        if special is None:
            return None  # operators and other special names
        rest = rest[2:]
    else:
        end = rest.find("@")
        if end <= 0:
            return None
        special, rest = rest[:end], rest[end + 1 :]
    scopes: list[str] = []
    remembered: list[str] = [] if special.startswith("{") else [special]
    while not rest.startswith("@"):
        if not rest:
            return None
        if rest[0].isdigit():  # a back-reference to a name met before
            index = int(rest[0])
            if index >= len(remembered):
                return None
            scopes.append(remembered[index])
            rest = rest[1:]
            continue
        if rest.startswith("?"):
            return None  # templates and anonymous namespaces: leave the symbol as it is
        end = rest.find("@")
        if end <= 0:
            return None
        scopes.append(rest[:end])
        remembered.append(rest[:end])
        rest = rest[end + 1 :]
    if not scopes and special.startswith("{"):
        return None
    scopes.reverse()
    if special == "{ctor}":
        return "::".join([*scopes, scopes[-1]])
    if special == "{dtor}":
        return "::".join([*scopes, "~" + scopes[-1]])
    return "::".join([*scopes, special])


def readable(symbol: str) -> str:
    """The symbol as a person reads it: ``c10::Foo::bar`` when it can be decoded."""
    name = qualified_name(symbol)
    return name if name is not None else symbol
