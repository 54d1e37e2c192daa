"""wheel-tag-mismatch: a package with native code installed from a wheel built for another
interpreter (another CPython, the GIL build under a free-threaded one, another platform).

Read from each binary distribution's ``WHEEL`` tags (:mod:`torchguard._facts.wheel_tags`),
so the finding says "no wheel for this Python" where the loader would name a DLL or Python
would say "No module named 'torch._C'". A warning: what fails is Python's choice of
extension module, which the loader replay does not model. Shared wording: both platforms'
rules (:mod:`~torchguard._rules.windows_wheel_tags`, :mod:`~torchguard._rules.linux_wheel_tags`)
use :func:`tag_findings`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torchguard._facts.vocab import Code
from torchguard._facts.wheel_tags import Interpreter, misfit, wheel_tags
from torchguard._report.findings import WARNING, Finding, RepairHint

#: Ranked after torch's own load failures, which a wrong-Python torch also gets.
RANK = 45


def tag_findings(
    dists: Iterable[tuple[str, str, str | None]], interpreter: Interpreter, python_cmd: str
) -> Iterator[Finding]:
    """One warning per (name, version, WHEEL text) whose tags do not fit ``interpreter``."""
    judged: dict[str | None, tuple[tuple[str, ...], str | None]] = {}
    for name, version, text in dists:
        verdict = judged.get(text)
        if verdict is None:  # most binary distributions of one environment share their tags
            tags = wheel_tags(text)
            verdict = judged[text] = (tags, misfit(tags, interpreter))
        tags, reason = verdict
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
