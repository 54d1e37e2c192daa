"""GNU readelf as an independent judge of the own ELF reader (binutils; not a dependency).

``readelf -W -d -V --dyn-syms`` is parsed into the same shape as
:class:`~torchguard._binary.elf.ElfFacts` and :class:`~torchguard._binary.elf.ElfSymbols`,
applying the same definition rule (what ld.so's ``check_match`` can bind) to readelf's rows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

READELF = shutil.which("readelf")

_TYPES = {"NOTYPE": 0, "OBJECT": 1, "FUNC": 2, "COMMON": 5, "TLS": 6, "IFUNC": 10}
_BINDS = {"GLOBAL": False, "WEAK": True, "UNIQUE": False, "<OS specific>: 10": False}
_DYNAMIC = re.compile(r"^\s*0x[0-9a-f]+ \((\w+)\)\s+(.*)$")
# readelf names STB_GNU_UNIQUE only in GNU-OSABI files, else "<OS specific>: 10"
_SYMBOL = re.compile(
    r"^\s*(\d+): ([0-9a-f]+)\s+\S+\s+(\w+)\s+(\w+|<OS specific>: \d+)\s+\w+"
    r"(?:\s+\[[^\]]*\])?\s+(\w+)\s?(.*)$"
)
_NEED_FILE = re.compile(r"^\s*(?:0x)?[0-9a-f]+: Version: \d+\s+File: (\S+)\s+Cnt: \d+")
_NEED_NAME = re.compile(r"^\s*0x[0-9a-f]+:\s+Name: (\S+)\s+Flags: (.*?)\s+Version: (\d+)")
_DEF = re.compile(
    r"^\s*(?:0x)?[0-9a-f]+: Rev: \d+\s+Flags: (.*?)\s+Index: (\d+)\s+Cnt: \d+\s+Name: (\S+)"
)


@dataclass
class Judged:
    needed: list[str] = field(default_factory=list)
    soname: str | None = None
    rpath: str | None = None
    runpath: str | None = None
    flags: set[str] = field(default_factory=set)
    flags_1: set[str] = field(default_factory=set)
    verneed: list[tuple[str, str, int, bool]] = field(default_factory=list)
    verdef: list[tuple[str, int, bool]] = field(default_factory=list)
    count: int = 0
    defined: list[tuple[bytes, str | None, bool, bool, int]] = field(default_factory=list)
    undefined: list[tuple[bytes, str | None, bool]] = field(default_factory=list)


def judge(path: Path) -> Judged:
    assert READELF is not None
    out = subprocess.run(
        [READELF, "-W", "-d", "-V", "--dyn-syms", str(path)],
        capture_output=True,
        check=True,
        env={"LC_ALL": "C"},
    ).stdout.decode("utf-8", "surrogateescape")
    found = Judged()
    section = ""
    need_file = ""
    for line in out.splitlines():
        if line.startswith("Dynamic section"):
            section = "dynamic"
        elif line.startswith("Version needs section"):
            section = "verneed"
        elif line.startswith("Version definition section"):
            section = "verdef"
        elif line.startswith("Version symbols section"):
            section = "versym"
        elif line.startswith("Symbol table '.dynsym'"):
            section = "dynsym"
            found.count = int(re.search(r"contains (\d+) entr", line).group(1))  # type: ignore[union-attr]
        elif section == "dynamic" and (match := _DYNAMIC.match(line)):
            _dynamic(found, match.group(1), match.group(2))
        elif section == "verneed":
            if match := _NEED_FILE.match(line):
                need_file = match.group(1)
            elif match := _NEED_NAME.match(line):
                weak = "WEAK" in match.group(2)
                found.verneed.append((need_file, match.group(1), int(match.group(3)), weak))
        elif section == "verdef" and (match := _DEF.match(line)):
            found.verdef.append((match.group(3), int(match.group(2)), "BASE" in match.group(1)))
        elif section == "dynsym" and (match := _SYMBOL.match(line)):
            _symbol(found, match)
    return found


def _bracket(text: str) -> str:
    return text[text.index("[") + 1 : text.rindex("]")]


def _dynamic(found: Judged, tag: str, value: str) -> None:
    if tag == "NEEDED":
        found.needed.append(_bracket(value))
    elif tag == "SONAME":
        found.soname = _bracket(value)
    elif tag == "RPATH":
        found.rpath = _bracket(value)
    elif tag == "RUNPATH":
        found.runpath = _bracket(value)
    elif tag == "FLAGS":
        found.flags = set(value.split())
    elif tag == "FLAGS_1":
        found.flags_1 = set(value.replace("Flags:", "").split())


def _symbol(found: Judged, match: re.Match[str]) -> None:
    _num, value, kind, bind, ndx, name = match.groups()
    if bind not in _BINDS or not name:
        return
    weak = _BINDS[bind]
    version: str | None = None
    hidden = False
    name = re.sub(r" \(\d+\)$", "", name)
    if "@@" in name:
        name, version = name.split("@@", 1)
    elif "@" in name:
        name, version = name.split("@", 1)
        hidden = ndx != "UND"
    raw = name.encode("utf-8", "surrogateescape")
    if ndx == "UND":
        found.undefined.append((raw, version, weak))
    elif kind in _TYPES and (int(value, 16) or kind == "TLS"):
        found.defined.append((raw, version, hidden, weak, _TYPES[kind]))
