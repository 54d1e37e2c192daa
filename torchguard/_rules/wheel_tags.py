"""wheel-tag-mismatch: a package with native code installed from a wheel built for another
interpreter (another CPython, the GIL build under a free-threaded one, another platform).

Read from each binary distribution's ``WHEEL`` tags (:mod:`torchguard._facts.wheel_tags`),
so the finding says "no wheel for this Python" where the loader would name a DLL or Python
would say "No module named 'torch._C'". A warning: what fails is Python's choice of
extension module, which the loader replay does not model. Both platforms use
:func:`tag_findings`; :func:`check` is the Windows rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from torchguard._facts.vocab import Code, Machine
from torchguard._facts.wheel_tags import Interpreter, misfit, platform_tag, wheel_tags
from torchguard._report.findings import WARNING, Finding, RepairHint

if TYPE_CHECKING:
    from torchguard._platforms.windows.dists import InstalledDist
    from torchguard._rules.context import CheckContext
from torchguard._rules.registry import WINDOWS, rule

#: Ranked after torch's own load failures, which a wrong-Python torch also gets.
RANK = 45

_WINDOWS_MACHINES: dict[int, str] = {
    Machine.X64: "amd64",
    Machine.ARM64: "arm64",
    Machine.X86: "x86",
}


@rule(WINDOWS)
def check(context: CheckContext) -> Iterator[Finding]:
    """Every distribution that lists a ``.pyd``/``.dll``, against the interpreter."""
    python = context.system.interpreter
    machine = _WINDOWS_MACHINES.get(python.machine, "amd64")
    interpreter = Interpreter(
        python.version, python.free_threaded, platform_tag("windows", machine)
    )
    binary = (
        (d.name, d.version, _wheel_text(context, d))
        for d in context.dists
        if d.name == "torch" or d.distribution.summary().lists_binaries
    )
    yield from tag_findings(binary, interpreter, context.hints.python_cmd)


def _wheel_text(context: CheckContext, dist: InstalledDist) -> str | None:
    """Its ``WHEEL`` text, remembered by its RECORD's digest (which holds WHEEL's hash), so a
    warm run reads no ``WHEEL`` at all. torch's RECORD is never summarised (it is large): its
    ``.dist-info`` folder's state stands in (one stat)."""
    from torchguard._platforms.windows.tree import join

    cache, distribution = context.cache, dist.distribution
    if dist.name == "torch":
        folder = join(dist.site_dir, distribution.dist_info)
        state = context.system.tree.folder_state(folder)
        identity = f"{folder}|{state}" if state else None
    else:
        identity = distribution.summary().digest
    remembered = cache.get_derived("wheel-tags", identity) if cache else None
    if isinstance(remembered, str):
        return remembered
    text = distribution.read_text("WHEEL")
    if cache is not None:  # "" for no WHEEL: nothing to judge, and nothing to read again
        cache.put_derived("wheel-tags", identity, "\n".join(f"Tag: {t}" for t in wheel_tags(text)))
    return text


def tag_findings(
    dists: Iterable[tuple[str, str, str | None]], interpreter: Interpreter, python_cmd: str
) -> Iterator[Finding]:
    """One warning per (name, version, WHEEL text) whose tags do not fit ``interpreter``."""
    for name, version, text in dists:
        tags = wheel_tags(text)
        reason = misfit(tags, interpreter)
        if reason is None:
            continue
        yield Finding(
            code=Code.WHEEL_TAG_MISMATCH,
            severity=WARNING,
            message=(
                f"{name} {version} was installed from a wheel {reason} (WHEEL tag "
                f"{', '.join(tags[:3])}): this interpreter, {interpreter.label}, cannot "
                f"import its extension modules, so importing {name} fails ('No module named "
                "...', or a DLL error that is not the cause)"
            ),
            package=None if name == "torch" else name,
            hints=_hints(name, interpreter, python_cmd),
            rank=RANK,
        )


def _hints(name: str, interpreter: Interpreter, python_cmd: str) -> tuple[RepairHint, ...]:
    reinstall = RepairHint(
        f"install {name} with this interpreter's own pip, which picks a {interpreter.cp} "
        f"wheel; if it finds none, {name} publishes no wheel for {interpreter.label}: use a "
        "Python it has wheels for",
        (f"{python_cmd} -m pip install --force-reinstall {name}",),
    )
    if not interpreter.free_threaded:
        return (reinstall,)
    major, minor = interpreter.version
    regular = RepairHint(
        f"or run the program with the regular CPython {major}.{minor} (with the GIL), whose "
        "wheels these are",
        (f"py -{major}.{minor} -m pip install {name}",)
        if interpreter.platform.startswith("win")
        else (f"python{major}.{minor} -m pip install {name}",),
    )
    return (reinstall, regular)
