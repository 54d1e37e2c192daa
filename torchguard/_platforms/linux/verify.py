"""What glibc's own checks say of a file before it maps it (``open_verify``, then the map).

torchguard's ELF reader is stricter than ld.so: it refuses a string table or a version table
that points outside the file, which ld.so may never look at. Only what ld.so itself checks may
prove that a load fails, so a file the reader refuses is judged here again, with glibc's rules
and glibc's words (measured against the real loader on damaged copies of a library):

- fewer bytes than an ELF header: ``file too short``;
- a bad magic, class byte, encoding, ident version, OS ABI or nonzero padding: ``invalid ELF
  header`` and its kin; another ELF class or machine: the candidate is skipped in a search;
- an ``e_type`` other than ``ET_DYN``/``ET_EXEC`` (an executable itself is not judged here: it
  is what the interpreter is), an odd ``e_phentsize``, program headers
  past the end of the file (``cannot read file data``), no loadable segment, no dynamic
  section, a segment whose address and offset differ by no whole number of pages (glibc 2.36's
  words);
- a loadable segment with pages wholly past the end of the file: ld.so maps it, and the first
  touch of such a page kills the process with SIGBUS (measured: ``Bus error``, exit 135).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_ET_DYN, _ET_EXEC = 3, 2
_OSABI_OK = (0, 3)  # ELFOSABI_SYSV, ELFOSABI_GNU
PAGE = 4096
SIGBUS = "the process is killed by SIGBUS (Bus error) when ld.so touches a page past its end"


@dataclass(frozen=True)
class Verdict:
    """``reject``: glibc's message when it refuses the file (a proof the load fails);
    ``foreign``: another ELF class or machine (a search skips it). Both empty: glibc maps it."""

    reject: str = ""
    foreign: bool = False


def verify(head: bytes, size: int, elf_class: int = 2, machine: int = 62) -> Verdict:
    """glibc's verdict on a file of ``size`` bytes whose first bytes are ``head`` (the ELF
    header and program headers: 64 + 56 * e_phnum bytes are enough)."""
    wide = elf_class == 2
    ehdr = 64 if wide else 52
    if size < ehdr or len(head) < min(size, ehdr):
        return Verdict("file too short")
    ident = head[:16]
    if ident[:4] != _MAGIC:
        return Verdict("invalid ELF header")
    if ident[4] not in (1, 2):
        return Verdict("invalid ELF header")
    if ident[4] != elf_class:
        return Verdict(f"wrong ELF class: ELFCLASS{32 if ident[4] == 1 else 64}", foreign=True)
    if ident[5] != 1:
        return Verdict("ELF file data encoding not little-endian")
    if ident[6] != 1:
        return Verdict("ELF file version ident does not match current one")
    if ident[7] not in _OSABI_OK:
        return Verdict("ELF file OS ABI invalid")
    if ident[7] == 0 and ident[8] != 0:
        return Verdict("ELF file ABI version invalid")
    if any(ident[9:16]):
        return Verdict("nonzero padding in e_ident")
    fields = "<HHIQQQIHHHHHH" if wide else "<HHIIIIIHHHHHH"
    (e_type, e_machine, e_version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum) = (
        struct.unpack_from(fields, head, 16)[:10]
    )
    if e_machine != machine:
        return Verdict("", foreign=True)
    if e_version != 1:
        return Verdict("ELF file version does not match current one")
    if e_type not in (_ET_DYN, _ET_EXEC):
        return Verdict("only ET_DYN and ET_EXEC can be loaded")
    if phentsize != (56 if wide else 32):
        return Verdict("ELF file's phentsize not the expected size")
    if phoff + phnum * phentsize > size:
        return Verdict("cannot read file data")
    if phoff + phnum * phentsize > len(head):
        return Verdict()  # not given enough to judge the segments: nothing proven
    # pages: x86-64 has 4 KiB pages; elsewhere a kernel may use up to 64 KiB, so a proof of
    # SIGBUS takes the largest page and one of misalignment the smallest
    bus_page = PAGE if machine == 62 else 1 << 16
    return _segments(head, size, wide, phoff, phnum, phentsize, bus_page)


def _segments(
    head: bytes, size: int, wide: bool, phoff: int, phnum: int, step: int, bus_page: int
) -> Verdict:
    layout = "<IIQQQQQQ" if wide else "<IIIIIIII"
    loads = dynamic = 0
    last_page = -(-size // bus_page)
    for index in range(phnum):
        values = struct.unpack_from(layout, head, phoff + index * step)
        if wide:
            kind, _flags, offset, vaddr, _paddr, filesz, _memsz, _align = values
        else:
            kind, offset, vaddr, _paddr, filesz, _memsz, _flags, _align = values
        if kind == _PT_DYNAMIC:
            dynamic += 1
        if kind != _PT_LOAD:
            continue
        loads += 1
        if (vaddr - offset) & (PAGE - 1):
            return Verdict("ELF load command address/offset not page-aligned")
        if filesz and -(-(offset + filesz) // bus_page) > last_page:
            return Verdict(SIGBUS)
    if not loads:
        return Verdict("object file has no loadable segments")
    if not dynamic:
        return Verdict("object file has no dynamic section")
    return Verdict()


def verify_file(path: str, elf_class: int = 2, machine: int = 62) -> Verdict | None:
    """:func:`verify` of the file at ``path``; None when it cannot be read now."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            size = handle.seek(0, 2)
            if len(head) >= 64 and head[:4] == _MAGIC and head[4] == 2:
                phoff, phentsize, phnum = (
                    struct.unpack_from("<Q", head, 32)[0],
                    *(struct.unpack_from("<HH", head, 54)),
                )
                if 0 < phentsize * phnum <= 1 << 20 and phoff < size:
                    handle.seek(phoff)
                    table = handle.read(phentsize * phnum)
                    head = head.ljust(phoff, b"\0")[:phoff] + table if phoff >= 64 else head
    except OSError:
        return None
    return verify(head, size, elf_class, machine)
